"""The Dockerfile's builder steps run in a fresh directory give a working /ghalistener (marked
`network`: needs PyPI; runs the built program), without the whatif extra. Its shape and
.dockerignore: the unit test of the same name; the image itself is built with buildah in
tests/image."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from listener.cli import WHATIF_MISSING
from tests.support.dockerfile import (
    parse_dockerfile,
    run_builder_stage,
)


@pytest.mark.network  # pip installs the lock from PyPI
def test_image_install_steps_give_a_working_ghalistener(tmp_path: Path) -> None:
    """The builder stage, step by step, in a fresh directory; then the runtime symlink."""
    _, (builder, _runtime) = parse_dockerfile()
    root = tmp_path / "root"
    env = run_builder_stage(builder, root)
    venv = Path(env["VENV"])
    assert venv == root / "venv"
    # The virtualenv has no pip (nothing to install with at run time) and is readable by the
    # non-root user the image runs as.
    assert not list((venv / "lib").glob("python3*/site-packages/pip"))
    for path in venv.rglob("*"):
        if not path.is_symlink():
            mode = path.stat().st_mode
            assert mode & 0o004, f"{path} is not world-readable"
            assert not path.is_dir() or mode & 0o001, f"{path} is not world-searchable"
    (root / "ghalistener").symlink_to(venv / "bin" / "ghalistener")

    clean_env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [str(root / "ghalistener")],
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr == "Error: LISTENER_CONFIG_PATH environment variable is not set\n"
    assert proc.stdout == ""

    # `python -m listener` is the same program.
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "listener"],
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr == "Error: LISTENER_CONFIG_PATH environment variable is not set\n"

    # The whatif extra is not in the image: no package, and its command says how to get it.
    assert not list((venv / "lib").glob("python3*/site-packages/whatif"))
    proc = subprocess.run(
        [str(root / "ghalistener"), "whatif", "simulate", "jobs.jsonl"],
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert proc.stderr == WHATIF_MISSING + "\n"
    assert proc.stdout == ""
