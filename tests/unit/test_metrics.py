"""The gha_* series (listener/metrics.py): ARC's page, label and time rules; the allow-list is
test_metrics_allow_list.py."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from listener.config import MetricsConfig
from listener.github_target import parse_github_target
from listener.metrics import (
    DEFAULT_RUNTIME_BUCKETS,
    ListenerMetrics,
    parse_workflow_ref,
)
from listener.server import Health, build_app
from listener.wire import JobMessage, Statistics

GOLDEN = Path(__file__).parent / "golden" / "listener_metrics.prom"
ORG_TARGET = parse_github_target("https://github.com/acme")
ENTERPRISE_TARGET = parse_github_target("https://github.com/enterprises/big")


def at(second: float) -> datetime:
    """A moment ``second`` seconds after 2026-05-01T10:00:00Z (microsecond precision)."""
    return datetime(2026, 5, 1, 10, 0, tzinfo=UTC) + timedelta(
        microseconds=round(second * 1_000_000)
    )


def stats(**overrides: int) -> Statistics:
    values = {
        "total_available_jobs": 2,
        "total_acquired_jobs": 1,
        "total_assigned_jobs": 5,
        "total_running_jobs": 3,
        "total_registered_runners": 4,
        "total_busy_runners": 3,
        "total_idle_runners": 1,
    }
    values.update(overrides)
    return Statistics(**values)


def job(kind: str, **fields: object) -> JobMessage:
    base: dict[str, object] = {
        "repository_name": "app",
        "owner_name": "acme",
        "job_display_name": "build",
        "event_name": "push",
        "job_workflow_ref": "acme/app/.github/workflows/ci.yml@refs/heads/main",
    }
    base.update(fields)
    return JobMessage(message_type=kind, **base)  # type: ignore[arg-type]


def new_metrics(
    config: MetricsConfig | None = None, target: object = ORG_TARGET
) -> tuple[CollectorRegistry, ListenerMetrics]:
    # auto_describe=True as in the composition root: name clashes are caught at registration.
    registry = CollectorRegistry(auto_describe=True)
    metrics = ListenerMetrics(
        registry,
        config,
        target=target,  # type: ignore[arg-type]
        scale_set_name="linux-abcde",
        scale_set_namespace="arc-runners",
    )
    return registry, metrics


def page(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def families(registry: CollectorRegistry) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(page(registry))}


def samples(registry: CollectorRegistry, name: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for family in text_string_to_metric_families(page(registry)):
        for s in family.samples:
            if s.name == name:
                out.append((dict(s.labels), s.value))
    return out


def feed_known_sequence(metrics: ListenerMetrics) -> None:
    metrics.record_static(1, 2147483647)
    metrics.record_statistics(stats())
    metrics.record_desired_runners(6)
    # Startup 7 s; sub-second parts are dropped per timestamp, as Go's Unix() does.
    metrics.record_job_started(
        job("JobStarted", scale_set_assign_time=at(0.9), runner_assign_time=at(7.2))
    )
    metrics.record_job_started(
        job(
            "JobStarted",
            job_display_name="test (linux)",
            event_name="pull_request",
            scale_set_assign_time=at(1),
            runner_assign_time=at(31),
        )
    )
    metrics.record_job_completed(
        job("JobCompleted", result="succeeded", runner_assign_time=at(7.2), finish_time=at(50.1))
    )
    # Cancelled before any runner took it: neither counted nor timed (ARC >= 0.14.2).
    metrics.record_job_completed(job("JobCompleted", result="canceled", finish_time=at(40)))
    metrics.record_job_completed(
        job(
            "JobCompleted",
            job_display_name="test (linux)",
            event_name="pull_request",
            result="failed",
            runner_assign_time=at(31),
            finish_time=at(1231),
        )
    )
    metrics.record_statistics(stats(total_assigned_jobs=4, total_running_jobs=2))


# --------------------------------------------------------------------------- the whole page


def test_whole_page_matches_golden() -> None:
    registry, metrics = new_metrics()
    # The metrics app registers promhttp's handler-error counter, as promhttp.HandlerFor does.
    build_app(registry=registry, metrics_endpoint="/metrics", health=Health())
    feed_known_sequence(metrics)
    text = page(registry)
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_page_has_no_created_or_runtime_series_and_has_handler_errors() -> None:
    registry, metrics = new_metrics()
    build_app(registry=registry, metrics_endpoint="/metrics", health=Health())
    feed_known_sequence(metrics)
    lines = page(registry).splitlines()
    assert not [line for line in lines if "_created" in line]
    names = {line.split()[2] if line.startswith("#") else line for line in lines}
    assert not [n for n in names if n.startswith(("go_", "process_", "python_"))]
    assert all(n.startswith(("gha_", "promhttp_")) for n in names)
    assert 'promhttp_metric_handler_errors_total{cause="encoding"} 0.0' in lines
    assert 'promhttp_metric_handler_errors_total{cause="gathering"} 0.0' in lines
    assert (
        "# HELP promhttp_metric_handler_errors_total Total number of internal errors "
        "encountered by the promhttp metric handler." in lines
    )


ARC_SERIES = [
    ("gha_assigned_jobs", "gauge", "Number of jobs assigned to this scale set."),
    ("gha_running_jobs", "gauge", "Number of jobs running (or about to be run)."),
    ("gha_registered_runners", "gauge", "Number of runners registered by the scale set."),
    ("gha_busy_runners", "gauge", "Number of registered runners running a job."),
    ("gha_idle_runners", "gauge", "Number of registered runners not running a job."),
    ("gha_min_runners", "gauge", "Minimum number of runners."),
    ("gha_max_runners", "gauge", "Maximum number of runners."),
    ("gha_desired_runners", "gauge", "Number of runners desired by the scale set."),
    ("gha_started_jobs_total", "counter", "Total number of jobs started."),
    ("gha_completed_jobs_total", "counter", "Total number of jobs completed."),
    (
        "gha_job_startup_duration_seconds",
        "histogram",
        "Time spent waiting for workflow job to get started on the runner owned by the scale "
        "set (in seconds).",
    ),
    (
        "gha_job_execution_duration_seconds",
        "histogram",
        "Time spent executing workflow jobs by the scale set (in seconds).",
    ),
]


@pytest.mark.parametrize(("name", "kind", "help_text"), ARC_SERIES)
def test_arc_names_types_and_help_texts(name: str, kind: str, help_text: str) -> None:
    registry, metrics = new_metrics()
    feed_known_sequence(metrics)
    lines = page(registry).splitlines()
    assert f"# HELP {name} {help_text}" in lines
    assert f"# TYPE {name} {kind}" in lines


def test_default_labels_and_sources() -> None:
    registry, metrics = new_metrics(target=ENTERPRISE_TARGET)
    feed_known_sequence(metrics)
    gauge_labels = {
        "enterprise": "big",
        "organization": "",
        "repository": "",
        "name": "linux-abcde",
        "namespace": "arc-runners",
    }
    for gauge in (
        "gha_assigned_jobs",
        "gha_running_jobs",
        "gha_registered_runners",
        "gha_busy_runners",
        "gha_idle_runners",
        "gha_min_runners",
        "gha_max_runners",
        "gha_desired_runners",
        "gha_available_jobs",
        "gha_acquired_jobs",
    ):
        assert [labels for labels, _ in samples(registry, gauge)] == [gauge_labels], gauge
    job_labels = {
        "enterprise": "big",
        "organization": "acme",
        "repository": "app",
        "job_name": "build",
        "event_name": "push",
    }
    started = samples(registry, "gha_started_jobs_total")
    assert (job_labels, 1.0) in started
    assert len(started) == 2
    completed = samples(registry, "gha_completed_jobs_total")
    assert ({**job_labels, "job_result": "succeeded"}, 1.0) in completed
    assert {labels["job_result"] for labels, _ in completed} == {"succeeded", "failed"}


def test_statistics_values_including_the_two_additions() -> None:
    registry, metrics = new_metrics()
    metrics.record_statistics(stats())
    values = {
        name: samples(registry, name)[0][1]
        for name in (
            "gha_available_jobs",
            "gha_acquired_jobs",
            "gha_assigned_jobs",
            "gha_running_jobs",
            "gha_registered_runners",
            "gha_busy_runners",
            "gha_idle_runners",
        )
    }
    assert values == {
        "gha_available_jobs": 2,
        "gha_acquired_jobs": 1,
        "gha_assigned_jobs": 5,
        "gha_running_jobs": 3,
        "gha_registered_runners": 4,
        "gha_busy_runners": 3,
        "gha_idle_runners": 1,
    }


def test_nothing_is_written_before_first_use() -> None:
    # Go writes no family for a vector without children.
    registry, _ = new_metrics()
    assert page(registry) == ""


def test_default_buckets_are_arcs() -> None:
    registry, metrics = new_metrics()
    metrics.record_job_started(
        job("JobStarted", scale_set_assign_time=at(0), runner_assign_time=at(1))
    )
    bounds = [
        float(labels["le"])
        for labels, _ in samples(registry, "gha_job_startup_duration_seconds_bucket")
    ]
    assert bounds == [*DEFAULT_RUNTIME_BUCKETS, float("inf")]
    assert len(DEFAULT_RUNTIME_BUCKETS) == 45
    assert (DEFAULT_RUNTIME_BUCKETS[0], DEFAULT_RUNTIME_BUCKETS[-1]) == (0.01, 3600)


# --------------------------------------------------------------------------- durations


def histogram_sum(registry: CollectorRegistry, name: str) -> list[float]:
    return [value for _, value in samples(registry, f"{name}_sum")]


def test_durations_are_unix_second_differences() -> None:
    registry, metrics = new_metrics()
    # 10:00:00.999 → 10:00:01.001 is 2 ms, but Go's Unix() difference is 1 s.
    metrics.record_job_started(
        job("JobStarted", scale_set_assign_time=at(0.999), runner_assign_time=at(1.001))
    )
    metrics.record_job_completed(
        job("JobCompleted", result="ok", runner_assign_time=at(1.9), finish_time=at(3.1))
    )
    assert histogram_sum(registry, "gha_job_startup_duration_seconds") == [1.0]
    assert histogram_sum(registry, "gha_job_execution_duration_seconds") == [2.0]


def test_startup_duration_has_no_zero_time_guard_like_arc() -> None:
    registry, metrics = new_metrics()
    metrics.record_job_started(job("JobStarted", runner_assign_time=at(0)))
    go_zero_unix = -62135596800
    assert histogram_sum(registry, "gha_job_startup_duration_seconds") == [
        float(int(at(0).timestamp()) - go_zero_unix)
    ]
    assert samples(registry, "gha_started_jobs_total")[0][1] == 1.0


@pytest.mark.parametrize(
    "runner_assign_time", [None, datetime(1, 1, 1, tzinfo=UTC)], ids=["none", "go-zero"]
)
def test_completed_without_runner_assign_time_is_skipped(
    runner_assign_time: datetime | None,
) -> None:
    registry, metrics = new_metrics()
    metrics.record_job_completed(
        job(
            "JobCompleted",
            result="canceled",
            runner_assign_time=runner_assign_time,
            finish_time=at(5),
        )
    )
    assert samples(registry, "gha_completed_jobs_total") == []
    assert histogram_sum(registry, "gha_job_execution_duration_seconds") == []


# --------------------------------------------------------------------------- workflow ref


@pytest.mark.parametrize(
    ("ref", "name", "target"),
    [
        (
            "actions-runner-controller-sandbox/mumoshu-orgrunner-test-01/.github/workflows/"
            "blank.yml@refs/heads/main",
            "blank",
            "heads/main",
        ),
        (
            "owner/repo/.github/workflows/ci-cd.yml@refs/heads/feature/new",
            "ci-cd",
            "heads/feature/new",
        ),
        ("owner/repo/.github/workflows/deploy.yaml@refs/heads/develop", "deploy", "heads/develop"),
        ("owner/repo/.github/workflows/release.yml@refs/tags/v1.0.0", "release", "tags/v1.0.0"),
        ("owner/repo/.github/workflows/test.yml@refs/pull/123/merge", "test", "pull/123"),
        ("owner/repo/.github/workflows/test.yml@refs/pull/123", "test", ""),
        ("owner/repo/.github/workflows/test.yml@0123abcd", "test", ""),
        ("", "", ""),
        ("owner/repo/.github/workflows/test.yml", "", ""),
        ("a/b.yml@refs/heads/x@y", "", ""),
        ("owner/repo/.github/workflows/build.test.yml@refs/heads/main", "build.test", "heads/main"),
        ("owner/repo/.github/workflows/x.yaml.yml@refs/heads/main", "x", "heads/main"),
        ("@refs/heads/main", ".", "heads/main"),
    ],
)
def test_parse_workflow_ref(ref: str, name: str, target: str) -> None:
    assert parse_workflow_ref(ref) == (name, target)
