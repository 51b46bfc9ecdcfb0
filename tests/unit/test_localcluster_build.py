"""The local control plane's build cache: what decides a rebuild of the Karpenter binary."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.localcluster import build


@pytest.fixture
def go_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = tmp_path / "go"
    shutil.copytree(build.GO_DIR, copy)
    monkeypatch.setattr(build, "GO_DIR", copy)
    return copy / build.KARPENTER_MODULE


def test_karpenter_key_follows_pins_and_our_main(go_dir: Path) -> None:
    key = build.karpenter_cache_key()
    assert key.startswith("karpenter-")
    assert build.karpenter_cache_key() == key  # stable
    main = go_dir / "main.go"
    main.write_text(main.read_text() + "\n// changed\n")
    changed = build.karpenter_cache_key()
    assert changed != key  # our main is in the binary: a change rebuilds it
    (go_dir / "go.sum").write_text((go_dir / "go.sum").read_text() + "\n")
    assert build.karpenter_cache_key() not in (key, changed)


def test_control_plane_key_ignores_karpenter(go_dir: Path) -> None:
    # Moving Karpenter's pin must not rebuild the control plane.
    before = build.cache_key()
    (go_dir / "main.go").write_text("package main\n")
    (go_dir / "go.sum").write_text("")
    assert build.cache_key() == before


def test_incomplete_karpenter_build_is_not_found(tmp_path: Path) -> None:
    root = tmp_path / "karpenter-x"
    (root / "bin").mkdir(parents=True)
    (root / "crds").mkdir()
    (root / "manifest.json").write_text(json.dumps({"versions": {"karpenter": "v1.8.0"}}))
    assert build.find_karpenter(root) is None
    (root / "bin" / "karpenter").write_bytes(b"")
    assert build.find_karpenter(root) is None  # CRDs missing
    for rel in build.KARPENTER_CRDS:
        (root / "crds" / Path(rel).name).write_text("{}")
    found = build.find_karpenter(root)
    assert found is not None
    assert found.version == "v1.8.0"
