"""The build cache's build-once contract (tools/build_cache.py): a target is built
under its lock into a staging path and renamed, never half there."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tools.build_cache import build_once


def _make_dir(calls: list[Path]) -> Callable[[Path], None]:
    def build(staging: Path) -> None:
        calls.append(staging)
        staging.mkdir()
        (staging / "bin").write_text("built")

    return build


def _complete(root: Path) -> bool:
    return (root / "bin").is_file()


def test_builds_once_then_finds_it(tmp_path: Path) -> None:
    calls: list[Path] = []
    target = tmp_path / "0123abcd"
    build_once(target, _complete, _make_dir(calls))
    build_once(target, _complete, _make_dir(calls))
    assert (target / "bin").read_text() == "built"
    assert calls == [tmp_path / "0123abcd.partial"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0123abcd", "0123abcd.lock"]


def test_a_failed_build_leaves_no_target_and_no_staging(tmp_path: Path) -> None:
    target = tmp_path / "key"

    def fail(staging: Path) -> None:
        staging.mkdir()
        raise RuntimeError("compiler said no")

    with pytest.raises(RuntimeError, match="compiler said no"):
        build_once(target, _complete, fail)
    assert not target.exists()
    assert not (tmp_path / "key.partial").exists()


def test_a_killed_build_is_cleared_and_an_incomplete_target_replaced(tmp_path: Path) -> None:
    target = tmp_path / "key"
    (tmp_path / "key.partial").mkdir()  # a build killed half way
    (tmp_path / "key.partial" / "junk").write_text("")
    target.mkdir()  # an earlier attempt without its binary
    build_once(target, _complete, _make_dir([]))
    assert sorted(p.name for p in target.iterdir()) == ["bin"]


def test_a_file_target_keeps_its_suffix_while_staged(tmp_path: Path) -> None:
    target = tmp_path / "base.tar"
    seen: list[str] = []

    def write(staging: Path) -> None:
        seen.append(staging.name)
        staging.write_text("tarball")

    build_once(target, Path.exists, write)
    assert seen == ["base.partial.tar"]
    assert target.read_text() == "tarball"
