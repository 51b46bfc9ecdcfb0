"""``ghalistener whatif``: the whatif extra's command line where it is installed, one line
saying how to install it where it is not (the image; tests/integration/test_dockerfile.py
runs the image's install steps)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from listener import cli, signals
from tools.whatif_synth import SynthSpec, generate
from whatif.trace import write_lines


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(write_lines(generate(SynthSpec(minutes=20), 3))), encoding="utf-8")
    return path


def test_ghalistener_whatif_runs_the_extra_when_installed(
    trace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(signals, "install_early", lambda: None)
    monkeypatch.setattr(sys, "argv", ["ghalistener", "whatif", "optimum", str(trace)])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["lead_seconds"] == 60.0
    assert set(result["label_sets"]) == {"linux-cpu", "linux-gpu"}


@pytest.mark.parametrize("missing", ["whatif", "whatif.cli"])
def test_without_the_extra_one_line_says_how_to_install_it(
    missing: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # None in sys.modules makes the import fail as an absent module does.
    monkeypatch.delitem(sys.modules, "whatif.cli", raising=False)
    monkeypatch.setitem(sys.modules, missing, None)
    assert cli.whatif_command(["simulate", "jobs.jsonl"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == cli.WHATIF_MISSING + "\n"
    assert err.count("\n") == 1
    assert "pip install '.[whatif]'" in err


def test_a_broken_extra_is_not_reported_as_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The package is there but one of its own imports fails: that error, not the hint."""

    def import_module(name: str) -> ModuleType:
        raise ModuleNotFoundError("No module named 'numpy'", name="numpy")

    monkeypatch.setattr(importlib, "import_module", import_module)
    with pytest.raises(ModuleNotFoundError, match="numpy"):
        cli.whatif_command(["optimum", "jobs.jsonl"])
