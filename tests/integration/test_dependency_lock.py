"""deploy/requirements.lock (marked `network`: needs PyPI): every pin available as a wheel for
the image's Python, asked of pip. That every dependency is pinned: the unit test of the same
name."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from tests.support.deploy_files import LOCK
from tests.support.dockerfile import parse_dockerfile
from tests.unit.test_dependency_lock import locked_versions


@pytest.mark.network  # pip downloads every locked wheel from PyPI
@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_lock_installs_from_wheels_on_the_image_python(tmp_path: Path, arch: str) -> None:
    """The image's interpreter (python:3.13) is not on this machine, so resolve the lock for
    it: every package must have a wheel for CPython 3.13 on glibc Linux, with a listed hash."""
    args, _ = parse_dockerfile()
    version = re.fullmatch(r"python:(3\.\d+)-slim", args["PYTHON_IMAGE"])
    assert version
    abi = "cp" + version.group(1).replace(".", "")
    platforms = [f"manylinux_2_{minor}_{arch}" for minor in (17, 28, 34, 36)]
    platforms += [f"manylinux2014_{arch}"]
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
        "--python-version", version.group(1), "--implementation", "cp", "--abi", abi,
        *(arg for p in platforms for arg in ("--platform", p)),
        "--require-hashes", "--requirement", str(LOCK), "--dest", str(tmp_path),
    ]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    wheels = {canonicalize_name(p.name.split("-")[0]) for p in tmp_path.glob("*.whl")}
    assert wheels == set(locked_versions())
