"""``python -m listener`` fails fast with one clear line and exit status 1."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.config_files import scale_set_config

SECRET = "ghp_thisIsNotARealTokenButLooksLikeOne"


def run_listener(env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LISTENER_", "CAPACITY_"))}
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, "-m", "listener"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def valid_config(**overrides: object) -> dict[str, object]:
    return scale_set_config(**{"github_token": SECRET, **overrides})


def test_missing_config_path() -> None:
    result = run_listener({})
    assert result.returncode == 1
    assert result.stderr == "Error: LISTENER_CONFIG_PATH environment variable is not set\n"
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param({"configure_url": ""}, "GitHubConfigUrl is not provided", id="no-url"),
        pytest.param(
            {"min_runners": 6},
            'MinRunners "6" cannot be greater than MaxRunners "5"',
            id="min-above-max",
        ),
        pytest.param({"log_format": "xml"}, "xml", id="log-format"),
    ],
)
def test_bad_config_is_one_line_without_secrets(
    tmp_path: Path, overrides: dict[str, object], expected: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(valid_config(**overrides)))
    result = run_listener({"LISTENER_CONFIG_PATH": str(path)})
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    # ARC's fatal line, word for word after Go's log timestamp: operators alert on it.
    assert re.match(
        r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d Failed to read config: "
        r"failed to validate configuration: ",
        lines[0],
    ), lines[0]
    assert expected in lines[0]
    assert SECRET not in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param(
            {"vault_type": "hashicorp", "vault_lookup_key": "k", "configure_url": ""},
            "Failed to read config: unsupported vault type: hashicorp",
            id="unknown-vault",
        ),
        pytest.param(
            {"max_runners": "5"},
            "Failed to read config: failed to decode config: max_runners must be an integer",
            id="decode",
        ),
    ],
)
def test_config_lines_are_arcs(tmp_path: Path, overrides: dict[str, object], expected: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(valid_config(**overrides)))
    result = run_listener({"LISTENER_CONFIG_PATH": str(path)})
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line[20:].startswith(expected), line


def test_unreadable_config_file_says_what_go_says(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    result = run_listener({"LISTENER_CONFIG_PATH": str(missing)})
    [line] = result.stderr.splitlines()
    assert line[20:] == f"Failed to read config: open {missing}: no such file or directory"


def test_bad_capacity_settings_are_all_named_with_their_source(tmp_path: Path) -> None:
    """One run shows every bad setting (a crash-looping pod needs one fix, not one restart
    per typo), each with where its value came from, then where every setting is described."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(valid_config()))
    settings = tmp_path / "capacity.yaml"
    settings.write_text("max_pending_pairs: 0\n")
    result = run_listener(
        {
            "LISTENER_CONFIG_PATH": str(path),
            "CAPACITY_CONFIG_FILE": str(settings),
            "CAPACITY_ENABLED": "true",
            "CAPACITY_PLACEHOLDER_READY_TIMEOUT": "5 minutes",
        }
    )
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 3, result.stderr
    assert lines[0] == (
        "Error: capacity setting placeholder_ready_timeout: invalid duration '5 minutes' "
        "(from environment CAPACITY_PLACEHOLDER_READY_TIMEOUT)"
    )
    assert lines[1].startswith("Error: capacity setting max_pending_pairs: ")
    assert lines[1].endswith(f"(from file {settings}, key max_pending_pairs)")
    assert lines[2] == "Error: every setting, its default and its variable: " + (
        "deploy/config/REFERENCE.md"
    )


def test_a_vault_that_cannot_be_used_is_one_arc_line(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("not a certificate")
    config = valid_config(
        github_token="",
        vault_type="azure_key_vault",
        vault_lookup_key="github-app",
        azure_key_vault={
            "tenant_id": "t",
            "client_id": "c",
            "url": "https://example.vault.azure.net/",
            "certificate_path": str(cert),
        },
    )
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = run_listener({"LISTENER_CONFIG_PATH": str(path)})
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line[20:].startswith(
        "Failed to read config: failed to create Azure Key Vault client: failed to create "
        "azsecrets client from config: failed to parse certificates: "
    ), line


# A SIGTERM that arrives while the program is still importing its dependencies: the process
# sends it to itself the moment the composition root (listener.app) starts to load, which is
# what the kubelet does when a pod is deleted within its first second.
_SIGTERM_WHILE_IMPORTING = """
import importlib.abc, os, signal, sys

class Trip(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "listener.app":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGTERM)
        return None

sys.meta_path.insert(0, Trip())
from listener.cli import main
main()
"""


def test_sigterm_during_start_up_stops_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(valid_config()))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LISTENER_", "CAPACITY_"))}
    # An unreachable cluster: a clean early stop must not touch it.
    env.update(LISTENER_CONFIG_PATH=str(path), KUBECONFIG=str(tmp_path / "missing"))
    result = subprocess.run(
        [sys.executable, "-c", _SIGTERM_WHILE_IMPORTING],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, (result.returncode, result.stderr)
    assert "stop requested during start-up" in result.stdout + result.stderr
    assert "Error" not in result.stderr
