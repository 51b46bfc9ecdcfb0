"""README's first command: the demo (`make demo` = `python -m tools.demo`) runs its whole
story on a fresh control plane and Karpenter and exits 0 only when every job ran and none was
stranded. Run as the user runs it: a child process from the checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)  # about 2.5 minutes on 2 cores; more under load
def test_the_demo_runs_every_job_and_strands_none(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tools.demo", "--workdir", str(tmp_path / "demo")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    shown = f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"
    assert result.returncode == 0, shown
    assert "result: OK" in result.stdout, shown
    assert ", 0 stranded" in result.stdout, shown
    assert "all demo processes stopped" in result.stdout, shown
