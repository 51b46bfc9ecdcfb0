"""deploy/requirements.lock: every dependency of pyproject.toml pinned with hashes, and (marked
`network`: needs PyPI) every pin available as a wheel for the image's Python."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.deploy_files import LOCK, ROOT
from tests.support.dockerfile import parse_dockerfile


def locked_versions() -> dict[str, str]:
    text = LOCK.read_text(encoding="utf-8")
    pins = dict(re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)", text, flags=re.MULTILINE))
    return {canonicalize_name(name): version for name, version in pins.items()}


def test_lock_pins_every_dependency_with_hashes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = locked_versions()
    for line in project["dependencies"]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in deploy/requirements.lock: run sh deploy/lock.sh"
        assert requirement.specifier.contains(pins[name]), (name, pins[name], line)
    # Every pinned requirement carries at least one sha256.
    entries = re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text(encoding="utf-8").split("\n", 2)[2])
    for entry in entries:
        assert "--hash=sha256:" in entry, entry.splitlines()[0]
    assert "capacity-listener" not in pins  # the project itself is installed from source


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
