"""Pieces of the e2e support that tests and benchmarks read results through."""

from __future__ import annotations

from tests.support.listener_process import metric_value

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
