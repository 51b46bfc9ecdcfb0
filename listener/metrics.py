"""The listener's ``gha_*`` Prometheus series, as ARC's listener exports them.

Names, types, help texts, default labels, label sources and default buckets are ARC's
(``cmd/ghalistener/metrics``). The ``metrics`` key of config.json (``listenerMetrics`` on the
AutoscalingRunnerSet) is honoured as ARC does: absent/null → the default set; present → only
the metrics it lists, with the labels it lists; unknown names are logged and skipped; empty
``buckets`` → the default buckets.

Additions: ``gha_available_jobs`` and ``gha_acquired_jobs`` (the two statistics ARC does not
export). They are registered even when an allow-list leaves them out, so an allow-list cannot
silently drop them; listing them sets their labels.

The page is made to read like client_golang's: no ``_created`` series (filtered per registry,
so the process-wide prometheus_client switch is left alone), no family without samples
(a Go vector with no children is not written at all), families sorted by name and series by
label values, and bucket bounds spelled as Go spells them (``le="1"``, not ``le="1.0"``).

ARC's series, help texts, labels and buckets are a compatibility surface.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from base.exposition import GoStyleCollector
from listener.config import ConfigError, GitHubTarget, MetricsConfig, MetricSpec
from listener.wire import JobMessage, Statistics

log = logging.getLogger("listener.metrics")

# Label keys (ARC's names).
NAME: Final = "name"
NAMESPACE: Final = "namespace"
ENTERPRISE: Final = "enterprise"
ORGANIZATION: Final = "organization"
REPOSITORY: Final = "repository"
JOB_NAME: Final = "job_name"
JOB_WORKFLOW_REF: Final = "job_workflow_ref"
JOB_WORKFLOW_NAME: Final = "job_workflow_name"
JOB_WORKFLOW_TARGET: Final = "job_workflow_target"
EVENT_NAME: Final = "event_name"
JOB_RESULT: Final = "job_result"

# Metric names.
ASSIGNED_JOBS: Final = "gha_assigned_jobs"
RUNNING_JOBS: Final = "gha_running_jobs"
REGISTERED_RUNNERS: Final = "gha_registered_runners"
BUSY_RUNNERS: Final = "gha_busy_runners"
MIN_RUNNERS: Final = "gha_min_runners"
MAX_RUNNERS: Final = "gha_max_runners"
DESIRED_RUNNERS: Final = "gha_desired_runners"
IDLE_RUNNERS: Final = "gha_idle_runners"
STARTED_JOBS_TOTAL: Final = "gha_started_jobs_total"
COMPLETED_JOBS_TOTAL: Final = "gha_completed_jobs_total"
JOB_STARTUP_DURATION_SECONDS: Final = "gha_job_startup_duration_seconds"
JOB_EXECUTION_DURATION_SECONDS: Final = "gha_job_execution_duration_seconds"
AVAILABLE_JOBS: Final = "gha_available_jobs"
ACQUIRED_JOBS: Final = "gha_acquired_jobs"

DEFAULT_RUNTIME_BUCKETS: Final[tuple[float, ...]] = (
    0.01, 0.05, 0.1, 0.5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 18, 20, 25, 30, 40, 50, 60,
    70, 80, 90, 100, 110, 120, 150, 180, 210, 240, 300, 360, 420, 480, 540, 600, 900, 1200,
    1800, 2400, 3000, 3600,
)  # fmt: skip

GAUGE_HELP: Final[Mapping[str, str]] = {
    ASSIGNED_JOBS: "Number of jobs assigned to this scale set.",
    RUNNING_JOBS: "Number of jobs running (or about to be run).",
    REGISTERED_RUNNERS: "Number of runners registered by the scale set.",
    BUSY_RUNNERS: "Number of registered runners running a job.",
    MIN_RUNNERS: "Minimum number of runners.",
    MAX_RUNNERS: "Maximum number of runners.",
    DESIRED_RUNNERS: "Number of runners desired by the scale set.",
    IDLE_RUNNERS: "Number of registered runners not running a job.",
}
COUNTER_HELP: Final[Mapping[str, str]] = {
    STARTED_JOBS_TOTAL: "Total number of jobs started.",
    COMPLETED_JOBS_TOTAL: "Total number of jobs completed.",
}
HISTOGRAM_HELP: Final[Mapping[str, str]] = {
    JOB_STARTUP_DURATION_SECONDS: (
        "Time spent waiting for workflow job to get started on the runner owned by the scale "
        "set (in seconds)."
    ),
    JOB_EXECUTION_DURATION_SECONDS: (
        "Time spent executing workflow jobs by the scale set (in seconds)."
    ),
}
# Ours, not ARC's: always registered.
EXTRA_GAUGE_HELP: Final[Mapping[str, str]] = {
    AVAILABLE_JOBS: "Number of jobs available to this scale set and not yet acquired.",
    ACQUIRED_JOBS: "Number of jobs acquired by this scale set and not yet assigned.",
}

_SCALE_SET_LABELS: Final = (ENTERPRISE, ORGANIZATION, REPOSITORY, NAME, NAMESPACE)
_JOB_LABELS: Final = (ENTERPRISE, ORGANIZATION, REPOSITORY, JOB_NAME, EVENT_NAME)

DEFAULT_METRICS: Final = MetricsConfig(
    counters={
        STARTED_JOBS_TOTAL: MetricSpec(labels=_JOB_LABELS),
        COMPLETED_JOBS_TOTAL: MetricSpec(labels=(*_JOB_LABELS, JOB_RESULT)),
    },
    gauges={name: MetricSpec(labels=_SCALE_SET_LABELS) for name in GAUGE_HELP},
    histograms={
        JOB_STARTUP_DURATION_SECONDS: MetricSpec(
            labels=_JOB_LABELS, buckets=DEFAULT_RUNTIME_BUCKETS
        ),
        JOB_EXECUTION_DURATION_SECONDS: MetricSpec(
            labels=(*_JOB_LABELS, JOB_RESULT), buckets=DEFAULT_RUNTIME_BUCKETS
        ),
    },
)

# Go's time.Time{}.Unix(): what ARC subtracts when a timestamp is missing.
_GO_ZERO_UNIX: Final = -62_135_596_800
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_LABEL_NAME: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def base_labels(target: GitHubTarget, name: str, namespace: str) -> dict[str, str]:
    """The scale-set labels every ARC gauge carries; shared with the capacity metrics."""
    return {
        ENTERPRISE: target.enterprise,
        ORGANIZATION: target.organization,
        REPOSITORY: target.repository,
        NAME: name,
        NAMESPACE: namespace,
    }


def _go_path_base(path: str) -> str:
    """Go's ``path.Base``."""
    if path == "":
        return "."
    path = path.rstrip("/")
    if path == "":
        return "/"
    return path.rsplit("/", 1)[-1]


def parse_workflow_ref(ref: str) -> tuple[str, str]:
    """``owner/repo/.github/workflows/ci.yml@refs/heads/main`` → ``("ci", "heads/main")``.

    ARC's ``ParseWorkflowRef``: both parts empty unless the ref has exactly one ``@``; the
    target is ``heads/<branch>``, ``tags/<tag>``, ``pull/<n>`` or empty.
    """
    parts = ref.split("@")
    if ref == "" or len(parts) != 2:
        return "", ""
    workflow_path, git_ref = parts
    name = _go_path_base(workflow_path).removesuffix(".yml").removesuffix(".yaml")
    target = ""
    if git_ref.startswith("refs/heads/"):
        target = "heads/" + git_ref.removeprefix("refs/heads/")
    elif git_ref.startswith("refs/tags/"):
        target = "tags/" + git_ref.removeprefix("refs/tags/")
    elif git_ref.startswith("refs/pull/"):
        number, slash, _ = git_ref.removeprefix("refs/pull/").partition("/")
        if slash and number:
            target = "pull/" + number
    return name, target


def _unix(moment: datetime | None) -> int:
    """Go's ``Time.Unix()``: whole seconds, floored; a missing time is Go's zero time."""
    if moment is None:
        return _GO_ZERO_UNIX
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(seconds=1)


def _is_zero(moment: datetime | None) -> bool:
    return moment is None or _unix(moment) == _GO_ZERO_UNIX


# --------------------------------------------------------------------------- the recorder


@dataclass(frozen=True)
class _Series:
    metric: Counter | Gauge | Histogram
    labels: tuple[str, ...]


def _check_labels(kind: str, name: str, labels: Sequence[str]) -> tuple[str, ...]:
    """The label names, or a ConfigError where client_golang would have panicked."""
    where = f"metrics.{kind}[{name!r}].labels"
    seen: set[str] = set()
    for label in labels:
        if not _LABEL_NAME.fullmatch(label) or label.startswith("__"):
            raise ConfigError(f"{where}: {label!r} is not a valid label name", field=where)
        if kind == "histograms" and label == "le":
            raise ConfigError(f"{where}: 'le' is reserved in histograms", field=where)
        if label in seen:
            raise ConfigError(f"{where}: label {label!r} is listed twice", field=where)
        seen.add(label)
    return tuple(labels)


def _check_buckets(name: str, buckets: Sequence[float]) -> tuple[float, ...]:
    if not buckets:
        return DEFAULT_RUNTIME_BUCKETS
    if any(b >= c for b, c in pairwise(buckets)):
        where = f"metrics.histograms[{name!r}].buckets"
        raise ConfigError(f"{where}: buckets must be in strictly increasing order", field=where)
    return tuple(buckets)


def _known(
    kind: str, specs: Mapping[str, MetricSpec], help_texts: Mapping[str, str]
) -> dict[str, MetricSpec]:
    known: dict[str, MetricSpec] = {}
    for name, spec in specs.items():
        if name in help_texts:
            known[name] = spec
        else:
            log.error("unknown metric name, skipped", extra={"metric": name, "kind": kind})
    return known


class ListenerMetrics:
    """Records ARC's listener metrics (plus the two additions) into ``registry``.

    Raises :class:`~listener.config.ConfigError` for label names or buckets that
    client_golang would refuse.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        config: MetricsConfig | None,
        *,
        target: GitHubTarget,
        scale_set_name: str,
        scale_set_namespace: str,
    ) -> None:
        chosen = DEFAULT_METRICS if config is None else config
        self._scale_set_labels = base_labels(target, scale_set_name, scale_set_namespace)
        self._enterprise = target.enterprise

        gauges = _known("gauges", chosen.gauges, {**GAUGE_HELP, **EXTRA_GAUGE_HELP})
        for extra in EXTRA_GAUGE_HELP:
            gauges.setdefault(extra, MetricSpec(labels=_SCALE_SET_LABELS))
        counters = _known("counters", chosen.counters, COUNTER_HELP)
        histograms = _known("histograms", chosen.histograms, HISTOGRAM_HELP)

        self._series: dict[str, _Series] = {}
        for name, spec in gauges.items():
            labels = _check_labels("gauges", name, spec.labels)
            help_text = GAUGE_HELP.get(name) or EXTRA_GAUGE_HELP[name]
            self._add(name, Gauge(name, help_text, labels, registry=None), labels)
        for name, spec in counters.items():
            labels = _check_labels("counters", name, spec.labels)
            # prometheus_client appends "_total" itself; giving it the stem keeps the
            # exposed name exactly ARC's.
            stem = name.removesuffix("_total")
            self._add(name, Counter(stem, COUNTER_HELP[name], labels, registry=None), labels)
        for name, spec in histograms.items():
            labels = _check_labels("histograms", name, spec.labels)
            buckets = _check_buckets(name, spec.buckets)
            histogram = Histogram(
                name, HISTOGRAM_HELP[name], labels, registry=None, buckets=buckets
            )
            self._add(name, histogram, labels)

        self._collector = GoStyleCollector(
            (s.metric for s in self._series.values()),
            hidden_until_touched=(s.metric for s in self._series.values() if not s.labels),
        )
        registry.register(self._collector)

    def _add(self, name: str, metric: Counter | Gauge | Histogram, labels: tuple[str, ...]) -> None:
        self._series[name] = _Series(metric=metric, labels=labels)

    def _child(self, name: str, values: Mapping[str, str]) -> Counter | Gauge | Histogram | None:
        series = self._series.get(name)
        if series is None:
            return None
        self._collector.touch(series.metric)
        if not series.labels:
            return series.metric
        # A configured label with no source for this metric is exported as "" (as ARC).
        return series.metric.labels(*(values.get(label, "") for label in series.labels))

    def _set(self, name: str, value: float) -> None:
        child = self._child(name, self._scale_set_labels)
        if isinstance(child, Gauge):
            child.set(value)

    def _inc(self, name: str, values: Mapping[str, str]) -> None:
        child = self._child(name, values)
        if isinstance(child, Counter):
            child.inc()

    def _observe(self, name: str, values: Mapping[str, str], value: float) -> None:
        child = self._child(name, values)
        if isinstance(child, Histogram):
            child.observe(value)

    def _job_labels(self, job: JobMessage) -> dict[str, str]:
        workflow_name, workflow_target = parse_workflow_ref(job.job_workflow_ref)
        return {
            ENTERPRISE: self._enterprise,
            ORGANIZATION: job.owner_name,
            REPOSITORY: job.repository_name,
            JOB_NAME: job.job_display_name,
            JOB_WORKFLOW_REF: job.job_workflow_ref,
            JOB_WORKFLOW_NAME: workflow_name,
            JOB_WORKFLOW_TARGET: workflow_target,
            EVENT_NAME: job.event_name,
        }

    def record_static(self, min_runners: int, max_runners: int) -> None:
        self._set(MAX_RUNNERS, max_runners)
        self._set(MIN_RUNNERS, min_runners)

    def record_statistics(self, stats: Statistics) -> None:
        self._set(ASSIGNED_JOBS, stats.total_assigned_jobs)
        self._set(RUNNING_JOBS, stats.total_running_jobs)
        self._set(REGISTERED_RUNNERS, stats.total_registered_runners)
        self._set(BUSY_RUNNERS, stats.total_busy_runners)
        self._set(IDLE_RUNNERS, stats.total_idle_runners)
        self._set(AVAILABLE_JOBS, stats.total_available_jobs)
        self._set(ACQUIRED_JOBS, stats.total_acquired_jobs)

    def record_desired_runners(self, count: int) -> None:
        self._set(DESIRED_RUNNERS, count)

    def record_job_started(self, job: JobMessage) -> None:
        labels = self._job_labels(job)
        self._inc(STARTED_JOBS_TOTAL, labels)
        # As ARC: whole seconds, and no guard against a missing time.
        startup = _unix(job.runner_assign_time) - _unix(job.scale_set_assign_time)
        self._observe(JOB_STARTUP_DURATION_SECONDS, labels, startup)

    def record_job_completed(self, job: JobMessage) -> None:
        # ARC >= 0.14.2: a job no runner ever picked up (cancelled while queued) counts
        # neither as completed nor towards execution time.
        if _is_zero(job.runner_assign_time):
            return
        labels = self._job_labels(job)
        labels[JOB_RESULT] = job.result
        self._inc(COMPLETED_JOBS_TOTAL, labels)
        execution = _unix(job.finish_time) - _unix(job.runner_assign_time)
        self._observe(JOB_EXECUTION_DURATION_SECONDS, labels, execution)


class PatchMetrics:
    """The listener's own Kubernetes patch health (not ARC's): failed patch attempts and
    whether a desired runner count is waiting to reach the runner set (apiserver outage)."""

    def __init__(self, registry: CollectorRegistry, *, name: str, namespace: str) -> None:
        labels = (NAME, NAMESPACE)
        failures = Counter(
            "gha_listener_kube_patch_failures",
            "Kubernetes patches by the listener that failed (each is retried until a budget).",
            labels,
            registry=None,
        )
        pending = Gauge(
            "gha_listener_kube_patch_pending",
            "1 while a desired runner count waits for the apiserver (patch being retried).",
            labels,
            registry=None,
        )
        self._failures = failures.labels(name, namespace)
        self._pending = pending.labels(name, namespace)
        self._pending.set(0)
        registry.register(GoStyleCollector([failures, pending]))

    def patch_failed(self) -> None:
        self._failures.inc()

    def patch_pending(self, pending: bool) -> None:
        self._pending.set(1 if pending else 0)


class RunnerGroupMetrics:
    """Whether the scale set's runner group lets public repositories' jobs through
    (listener/runner_group.py). No series until the group has been read."""

    def __init__(self, registry: CollectorRegistry, *, name: str, namespace: str) -> None:
        self._gauge = Gauge(
            "gha_listener_runner_group_public_repositories",
            "1 if the scale set's runner group allows public repositories' jobs, 0 if it "
            "keeps them out (read once at start-up).",
            (NAME, NAMESPACE),
            registry=None,
        )
        self._labels = (name, namespace)
        registry.register(GoStyleCollector([self._gauge]))

    def report(self, allowed: bool) -> None:
        self._gauge.labels(*self._labels).set(1 if allowed else 0)
