"""base.deferred on a throwaway package written to tmp_path (in this process: no
subprocess; the listener's real import set is checked in a fresh interpreter by
tests/integration/test_import_footprint.py)."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from base.deferred import defer_init

PACKAGE = "deferred_probe_pkg"


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / PACKAGE
    (root / "inner").mkdir(parents=True)
    # Each __init__ records that it ran, as a big package's eager imports would show.
    (root / "__init__.py").write_text(
        textwrap.dedent(
            """
            import sys
            sys.deferred_probe_ran = getattr(sys, "deferred_probe_ran", []) + ["root"]
            from deferred_probe_pkg.light import Light
            HEAVY = "heavy"
            """
        )
    )
    (root / "light.py").write_text("class Light:\n    pass\n")
    (root / "inner" / "__init__.py").write_text(
        "import sys\nsys.deferred_probe_ran = getattr(sys, 'deferred_probe_ran', []) "
        "+ ['inner']\nTOTAL = 1\n"
    )
    (root / "inner" / "leaf.py").write_text(f"from {PACKAGE} import light\nLEAF = light.Light\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield root
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    if hasattr(sys, "deferred_probe_ran"):
        del sys.deferred_probe_ran


def _ran() -> list[str]:
    return list(getattr(sys, "deferred_probe_ran", []))


def test_submodules_import_without_running_the_package_init(package: Path) -> None:
    defer_init(PACKAGE, f"{PACKAGE}.inner")
    leaf = importlib.import_module(f"{PACKAGE}.inner.leaf")
    assert leaf.LEAF.__name__ == "Light"
    assert _ran() == []


def test_a_name_only_the_init_defines_runs_it_once_with_the_same_objects(
    package: Path,
) -> None:
    root = defer_init(PACKAGE)
    light = importlib.import_module(f"{PACKAGE}.light")
    assert root.HEAVY == "heavy"
    assert _ran() == ["root"]
    assert root.Light is light.Light  # the __init__ reused the submodule already loaded
    assert root.HEAVY == "heavy"
    assert _ran() == ["root"]  # not run again
    with pytest.raises(AttributeError, match="no attribute 'MISSING'"):
        _ = root.MISSING


def test_a_package_already_imported_is_left_alone(package: Path) -> None:
    real = importlib.import_module(PACKAGE)
    assert defer_init(PACKAGE) is real
    assert _ran() == ["root"]


def test_only_packages_can_be_deferred(package: Path) -> None:
    with pytest.raises(ImportError, match="not an importable package"):
        defer_init(PACKAGE, f"{PACKAGE}.light")
