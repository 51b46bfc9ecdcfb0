"""The Dockerfile: its shape, what .dockerignore keeps out of the context, and (marked
`network`: needs PyPI) its builder steps run in a fresh directory giving a working
/ghalistener. The image itself is built with buildah in tests/image."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.dockerfile import (
    dockerignore_patterns,
    dockerignored,
    parse_dockerfile,
    parse_env,
    run_builder_stage,
)


def test_dockerfile_shape() -> None:
    args, stages = parse_dockerfile()
    assert len(stages) == 2
    builder, runtime = stages
    assert builder.name == "builder"
    assert "slim" in builder.base
    assert builder.base == runtime.base
    assert re.fullmatch(r"python:3\.1[1-9]-slim", args["PYTHON_IMAGE"])
    steps = dict(runtime.instructions[::-1])  # first occurrence wins
    assert steps["COPY"] == "--from=builder /venv /venv"
    assert steps["USER"] == "65532:65532"
    assert json.loads(steps["ENTRYPOINT"]) == ["/ghalistener"]
    assert "ln -s /venv/bin/ghalistener /ghalistener" in steps["RUN"]
    env = parse_env(steps["ENV"])
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PATH"].startswith("/venv/bin:")
    # Nothing in the runtime stage installs or compiles anything.
    assert not re.search(r"\b(apt-get|apk|gcc|pip install)\b", steps["RUN"])


def test_dockerignore_keeps_the_context_small() -> None:
    patterns = dockerignore_patterns()
    assert not dockerignored("listener/cli.py", patterns)
    assert not dockerignored("base/kube.py", patterns)
    assert not dockerignored("deploy/requirements.lock", patterns)
    assert dockerignored("listener/__pycache__/cli.cpython-311.pyc", patterns)
    assert dockerignored(".venv/bin/python", patterns)
    assert dockerignored("tests/unit/test_dockerfile.py", patterns)
    assert dockerignored("deploy/grafana/capacity-listener.json", patterns)


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
