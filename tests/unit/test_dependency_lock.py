"""deploy/requirements.lock: every dependency of pyproject.toml pinned with hashes. Every pin
available as a wheel for the image's Python: tests/integration/test_dependency_lock.py."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.deploy_files import LOCK, ROOT


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
