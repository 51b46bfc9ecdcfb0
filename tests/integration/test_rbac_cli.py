"""``ghalistener rbac`` as a command (a child process): the manifests on stdout, a missing
argument named. The names and rules it prints: tests/unit/test_rbac.py."""

from __future__ import annotations

import os
import subprocess
import sys

import yaml


def test_cli_prints_the_manifests() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LISTENER_")}
    result = subprocess.run(
        [sys.executable, "-m", "listener", "rbac", "--name", "arc-cpu", "--namespace",
         "arc-runners", "--github-config-url", "https://github.com/acme"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    docs = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in docs] == ["Role", "RoleBinding"]
    assert docs[1]["subjects"][0]["name"] == "arc-cpu-85f786b5-listener"
    assert docs[1]["subjects"][0]["namespace"] == "arc-systems"


def test_cli_names_a_missing_argument() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "listener", "rbac", "--name", "arc-cpu"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--namespace" in result.stderr
