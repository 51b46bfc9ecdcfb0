"""The gha_* series (listener/metrics.py): ARC's page, the allow-list, label and time rules."""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from listener.config import ConfigError, MetricsConfig, MetricSpec, parse_github_target
from listener.metrics import (
    DEFAULT_RUNTIME_BUCKETS,
    ListenerMetrics,
    base_labels,
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


# --------------------------------------------------------------------------- allow-list


def test_allow_list_registers_only_listed_metrics_plus_additions(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = MetricsConfig(
        counters={
            "gha_started_jobs_total": MetricSpec(
                labels=("job_workflow_name", "job_workflow_target", "job_workflow_ref", "name")
            ),
            "gha_assigned_jobs": MetricSpec(labels=("name",)),  # a gauge listed as a counter
        },
        gauges={
            "gha_assigned_jobs": MetricSpec(labels=("name", "job_name")),
            "gha_does_not_exist": MetricSpec(labels=()),
        },
    )
    with caplog.at_level(logging.ERROR, logger="listener.metrics"):
        registry, metrics = new_metrics(config)
    feed_known_sequence(metrics)

    unknown = sorted(
        (r.__dict__["kind"], r.__dict__["metric"])
        for r in caplog.records
        if r.getMessage() == "unknown metric name, skipped"
    )
    assert unknown == [("counters", "gha_assigned_jobs"), ("gauges", "gha_does_not_exist")]
    assert all(r.levelno == logging.ERROR for r in caplog.records)

    assert set(families(registry)) == {
        "gha_started_jobs",
        "gha_assigned_jobs",
        "gha_available_jobs",
        "gha_acquired_jobs",
    }
    # A configured label without a source on this metric is "" (job_name on a gauge).
    assert samples(registry, "gha_assigned_jobs") == [
        ({"name": "linux-abcde", "job_name": ""}, 4.0)
    ]
    started = samples(registry, "gha_started_jobs_total")
    assert (
        {
            "job_workflow_name": "ci",
            "job_workflow_target": "heads/main",
            "job_workflow_ref": "acme/app/.github/workflows/ci.yml@refs/heads/main",
            "name": "",
        },
        2.0,
    ) in started
    # The additions keep the default gauge labels when not listed.
    assert samples(registry, "gha_available_jobs")[0][0] == base_labels(
        ORG_TARGET, "linux-abcde", "arc-runners"
    )


def test_empty_allow_list_still_exports_the_additions() -> None:
    registry, metrics = new_metrics(MetricsConfig())
    feed_known_sequence(metrics)
    assert set(families(registry)) == {"gha_available_jobs", "gha_acquired_jobs"}


def test_listing_an_addition_sets_its_labels() -> None:
    config = MetricsConfig(gauges={"gha_available_jobs": MetricSpec(labels=("namespace",))})
    registry, metrics = new_metrics(config)
    metrics.record_statistics(stats())
    assert samples(registry, "gha_available_jobs") == [({"namespace": "arc-runners"}, 2.0)]
    assert samples(registry, "gha_acquired_jobs")[0][0]["name"] == "linux-abcde"


def test_histogram_buckets_from_config_and_empty_means_default() -> None:
    config = MetricsConfig(
        histograms={
            "gha_job_startup_duration_seconds": MetricSpec(labels=(), buckets=(5, 60)),
            "gha_job_execution_duration_seconds": MetricSpec(labels=("job_result",)),
        }
    )
    registry, metrics = new_metrics(config)
    feed_known_sequence(metrics)
    startup = samples(registry, "gha_job_startup_duration_seconds_bucket")
    assert startup == [({"le": "5"}, 0.0), ({"le": "60"}, 2.0), ({"le": "+Inf"}, 2.0)]
    execution = samples(registry, "gha_job_execution_duration_seconds_bucket")
    assert len(execution) == 2 * (len(DEFAULT_RUNTIME_BUCKETS) + 1)


def test_bucket_bounds_are_written_as_client_golang_writes_them() -> None:
    # client_golang writes ``le`` with strconv's shortest 'g' format ("1", "60", "1e+06");
    # prometheus_client would write "1.0", "60.0", "1000000.0". Prometheus 2 stores the label
    # value as written, so a query on le="60" only finds the series spelled Go's way.
    bounds = (0.005, 0.5, 1, 2.5, 60, 3600, 123456.5, 1e6, 1.5e7)
    config = MetricsConfig(
        histograms={"gha_job_startup_duration_seconds": MetricSpec(labels=(), buckets=bounds)}
    )
    registry, metrics = new_metrics(config)
    metrics.record_job_started(
        job("JobStarted", scale_set_assign_time=at(0), runner_assign_time=at(1))
    )
    written = [
        line.split('le="')[1].split('"')[0]
        for line in page(registry).splitlines()
        if line.startswith("gha_job_startup_duration_seconds_bucket")
    ]
    assert written == [
        "0.005", "0.5", "1", "2.5", "60", "3600", "123456.5", "1e+06", "1.5e+07", "+Inf",
    ]  # fmt: skip


def test_label_less_metric_appears_only_once_set() -> None:
    config = MetricsConfig(gauges={"gha_busy_runners": MetricSpec(labels=())})
    registry, metrics = new_metrics(config)
    assert "gha_busy_runners" not in page(registry)
    metrics.record_statistics(stats(total_busy_runners=9))
    assert samples(registry, "gha_busy_runners") == [({}, 9.0)]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            MetricsConfig(gauges={"gha_busy_runners": MetricSpec(labels=("bad-name",))}),
            "metrics.gauges['gha_busy_runners'].labels: 'bad-name' is not a valid label name",
        ),
        (
            MetricsConfig(gauges={"gha_busy_runners": MetricSpec(labels=("__x",))}),
            "metrics.gauges['gha_busy_runners'].labels: '__x' is not a valid label name",
        ),
        (
            MetricsConfig(
                counters={"gha_started_jobs_total": MetricSpec(labels=("job_name", "job_name"))}
            ),
            "metrics.counters['gha_started_jobs_total'].labels: label 'job_name' is listed twice",
        ),
        (
            MetricsConfig(
                histograms={"gha_job_startup_duration_seconds": MetricSpec(labels=("le",))}
            ),
            "metrics.histograms['gha_job_startup_duration_seconds'].labels: 'le' is reserved "
            "in histograms",
        ),
        (
            MetricsConfig(
                histograms={
                    "gha_job_startup_duration_seconds": MetricSpec(labels=(), buckets=(5, 1))
                }
            ),
            "metrics.histograms['gha_job_startup_duration_seconds'].buckets: buckets must be in "
            "strictly increasing order",
        ),
    ],
)
def test_labels_and_buckets_go_would_refuse(config: MetricsConfig, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        new_metrics(config)
    assert str(info.value) == message


def test_bad_labels_on_an_unknown_metric_are_only_logged() -> None:
    # ARC skips unknown names before looking at their labels.
    config = MetricsConfig(gauges={"gha_nope": MetricSpec(labels=("bad-name",))})
    registry, metrics = new_metrics(config)
    metrics.record_statistics(stats())
    assert set(families(registry)) == {"gha_available_jobs", "gha_acquired_jobs"}


def test_two_recorders_on_two_registries_are_independent() -> None:
    first, m1 = new_metrics()
    second, _ = new_metrics()
    m1.record_desired_runners(3)
    assert "gha_desired_runners" in page(first)
    assert page(second) == ""


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
