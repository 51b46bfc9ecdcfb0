"""Pieces of the e2e support: reading results (metrics pages) and the listener process's
environment."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tools.listener_process import ListenerProcess, metric_value

PAGE = """\
# HELP gha_job_startup_duration_seconds Time spent waiting for workflow job to get started.
# TYPE gha_job_startup_duration_seconds histogram
gha_job_startup_duration_seconds_bucket{job_name="build, test",le="1"} 2
gha_job_startup_duration_seconds_bucket{job_name="build, test",le="+Inf"} 3
gha_job_startup_duration_seconds_sum{job_name="build, test"} 4.5
gha_job_startup_duration_seconds_count{job_name="build, test"} 3
# HELP gha_capacity_pairs Placeholder pairs by state.
# TYPE gha_capacity_pairs gauge
gha_capacity_pairs{name="arc",namespace="ns",state="running"} 2
gha_capacity_pairs{name="arc",namespace="ns",state="pending"} 1
# HELP gha_started_jobs_total Total number of jobs started.
# TYPE gha_started_jobs_total counter
gha_started_jobs_total{job_name="say \\"hi\\""} 7
"""


def test_metric_value_reads_samples_by_name_and_labels() -> None:
    assert metric_value(PAGE, "gha_capacity_pairs", {"state": "pending"}) == 1
    assert metric_value(PAGE, "gha_capacity_pairs", {"state": "running", "name": "arc"}) == 2
    assert metric_value(PAGE, "gha_job_startup_duration_seconds_count") == 3
    assert metric_value(PAGE, "gha_job_startup_duration_seconds_sum") == 4.5
    # Label values with commas and escaped quotes (a job named "build, test").
    assert (
        metric_value(
            PAGE, "gha_job_startup_duration_seconds_bucket", {"job_name": "build, test", "le": "1"}
        )
        == 2
    )
    assert metric_value(PAGE, "gha_started_jobs_total", {"job_name": 'say "hi"'}) == 7


def test_metric_value_is_none_when_nothing_matches() -> None:
    assert metric_value(PAGE, "gha_capacity_pairs", {"state": "broken"}) is None
    assert metric_value(PAGE, "gha_capacity_pair") is None  # a prefix is not a name
    assert metric_value("", "gha_capacity_pairs") is None


def _process(tmp_path: Path, **kwargs: Any) -> ListenerProcess:
    return ListenerProcess(
        "l", tmp_path, {"log_level": "debug"}, kubeconfig=tmp_path / "kubeconfig", **kwargs
    )


def test_listener_environment_drops_the_callers_listener_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAPACITY_ENABLED", "true")
    monkeypatch.setenv("LISTENER_LOG_LEVEL", "error")
    monkeypatch.setenv("HUD_API_TOKEN", "someone-elses")
    env = _process(tmp_path).environment()
    assert "CAPACITY_ENABLED" not in env
    assert "LISTENER_LOG_LEVEL" not in env
    assert "HUD_API_TOKEN" not in env  # no capacity settings: no HUD token either
    assert env["PATH"] == os.environ["PATH"]
    assert json.loads(Path(env["LISTENER_CONFIG_PATH"]).read_text()) == {"log_level": "debug"}


def test_listener_environment_from_a_given_base(tmp_path: Path) -> None:
    """The conformance harness runs both listeners on the same small environment."""
    env = _process(
        tmp_path, base_env={"PATH": "/bin"}, env={"LISTENER_PROBE_ADDR": "127.0.0.1:0"}
    ).environment()
    assert env["PATH"] == "/bin"
    assert "HOME" not in env
    assert env["LISTENER_PROBE_ADDR"] == "127.0.0.1:0"  # env is laid over the defaults
    assert env["KUBECONFIG"] == str(tmp_path / "kubeconfig")
