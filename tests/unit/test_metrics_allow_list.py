"""The gha_* series' allow-list (ARS ``spec.listenerMetrics``): which series are registered,
with which labels and buckets, and what a bad list does."""

from __future__ import annotations

import logging

import pytest

from listener.config import ConfigError, MetricsConfig, MetricSpec
from listener.metrics import (
    DEFAULT_RUNTIME_BUCKETS,
    base_labels,
)
from tests.unit.test_metrics import (
    ORG_TARGET,
    at,
    families,
    feed_known_sequence,
    job,
    new_metrics,
    page,
    samples,
    stats,
)


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
