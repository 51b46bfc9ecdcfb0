"""The ``gha_capacity_*`` Prometheus series of the capacity monitor.

Every series carries ``name`` (the EphemeralRunnerSet) and ``namespace`` (its namespace), like
ARC's ``gha_*`` series. They live on the registry the listener passes in and are always
registered while the monitor runs: no ``listenerMetrics`` allow-list applies to them.

Two kinds of series: events (requests, creations, deletions, errors, pass durations, signal
changes) are counters and histograms counted as they happen (:class:`_Events`); everything else
mirrors the monitor's current state, kept in a small ``State`` the recorders replace and
written from it when the page is scraped (``capacity.metrics_state``). Several monitors (one
per runner set) may share a registry: their series are written as one page (:class:`_Page`).

Like the listener's page, no ``_created`` series are written: the metrics are created
unregistered and exposed through one collector that drops those samples (per registry, so
prometheus_client's process-wide switch is left alone).

The optional readers (NodePools, node groups) record through this module rather than own
series.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Final

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.metrics_core import Metric

from base.exposition import GoStyleCollector, Source
from capacity.metrics_state import (
    NAME,
    NAMESPACE,
    State,
    StateSeries,
)
from capacity.model import Demand, DemandResult, DemandSource, Observed, Plan, PodPhase, Role
from capacity.node_groups import NodeGroup
from capacity.nodepools import NodePool

if TYPE_CHECKING:
    from capacity.demand import Reading

CREATE_OK: Final = "ok"
CREATE_EXISTS: Final = "exists"
GITHUB_CALL_RESULTS: Final = ("ok", "not_modified", "rate_limited", "error")
# Why a pair was released as stalled (capacity.model.StallCause).
STALL_CAUSES: Final = ("cloud", "time")
# A rise of the advertised value checked against the pods read at one revision: confirmed
# as the watches had it, lowered (the watches were ahead of the apiserver's order), or not
# checked (the read failed; the rise waits).
RISE_CHECKS: Final = ("confirmed", "lowered", "failed")

_RECONCILE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_HUD_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# The critical path of a job (demand read → pair → header → assignment): seconds to minutes.
_AGE_BUCKETS = (1, 2.5, 5, 10, 20, 30, 45, 60, 90, 120, 300, 600)
_LAUNCH_BUCKETS = (1, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600)
_ASSIGN_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# Where the demand value a pass plans with came from a read (the floor and "off" did not).
_READ_SOURCES: Final = frozenset(
    {DemandSource.HUD, DemandSource.GITHUB, DemandSource.WEBHOOK, DemandSource.STALE}
)


class CapacityMetrics:
    """Records one reconcile pass, HUD requests and pod operations."""

    def __init__(self, registry: CollectorRegistry, *, name: str, namespace: str) -> None:
        self.state = State()
        self._events = _Events(name, namespace)
        self._key = (name, namespace)
        self._registry = registry
        # The critical path: how long the read behind the last good demand value took, the
        # header last sent, and when it last rose (None: no rise waits for an assignment).
        self._fetch_seconds = 0.0
        self._header: int | None = None
        self._rise_at: float | None = None
        for cause in STALL_CAUSES:  # both series from the start: a rate() over 0, not absent
            self._events.stalls.labels(*self._key, cause)
        for role in Role:
            self._events.probes.labels(*self._key, role.value)
        self._collector = _Page.join(
            registry, self._key, [*self._events.all, StateSeries(self.state, self._key)]
        )

    def unregister(self) -> None:
        _Page.leave(self._registry, self._key)

    # --- state ----------------------------------------------------------------------------

    def record_pass(
        self, plan: Plan, observed: Observed, demand: Demand, *, proactive: int
    ) -> None:
        counts: dict[tuple[Role, PodPhase], int] = {}
        for p in observed.placeholders:
            counts[p.role, p.phase] = counts.get((p.role, p.phase), 0) + 1
        s = self.state
        s.plan, s.placeholders, s.demand, s.proactive = plan, counts, demand, proactive
        s.unscheduled = sum(1 for w in observed.workflow_pods if not w.bound and not w.terminating)
        if demand.age is not None and demand.source in _READ_SOURCES:
            # As of the start of its read: the value is that old when the pass plans with it.
            self._events.demand_age.labels(*self._key).observe(demand.age + self._fetch_seconds)

    def record_nodepool_state(self, state: str) -> None:
        """The NodePool reader's state (one of NODEPOOL_STATES)."""
        self.state.nodepool_state = state

    def record_nodepools(self, pools: Iterable[NodePool], pair_room: int | None) -> None:
        """The pools the placeholders can land on (the series of others are gone)."""
        self.state.nodepools, self.state.nodepool_room = tuple(pools), pair_room

    def record_warm_pool_mode(self, mode: str) -> None:
        self.state.warm_pool_mode = mode

    def record_warm_pool(self, target: int) -> None:
        self.state.warm_pool_target = target

    def record_predictive_pairs(self, pairs: int, expected: Mapping[str, float]) -> None:
        """The predictive pool (settings warm_pool.predictive): the pairs it holds for
        predicted children at this pass, and those children per parent workflow."""
        self.state.predictive_pairs = pairs
        self.state.predictive_expected = dict(expected)

    def record_predicted_arrivals(self, children: Mapping[str, int]) -> None:
        """Children queued for parents the predictive pool counted, per parent workflow."""
        for workflow, count in children.items():
            self._events.predictive_arrived.labels(*self._key, workflow).inc(count)

    def record_node_group_state(self, state: str) -> None:
        """The node-group reader's state (one of NODE_GROUP_STATES)."""
        self.state.node_group_state = state

    def record_launch_failure_state(self, state: str) -> None:
        """The insufficient-capacity Event reader's state (one of LAUNCH_FAILURE_STATES)."""
        self.state.launch_failure_state = state

    def record_pod_refusal_state(self, state: str) -> None:
        """The scheduling-failure Event reader's state (one of POD_REFUSAL_STATES)."""
        self.state.pod_refusal_state = state

    def record_stall(self, cause: str) -> None:
        """A pair was released as stalled, for this cause (one of STALL_CAUSES)."""
        self._events.stalls.labels(*self._key, cause).inc()

    def record_probe(self, role: str) -> None:
        """A probe was created (one half alone, during a stall's back-off)."""
        self._events.probes.labels(*self._key, role).inc()

    def record_node_groups(self, groups: Iterable[NodeGroup], pair_room: int | None) -> None:
        """The node groups (the series of groups gone are gone)."""
        self.state.node_groups, self.state.node_group_room = tuple(groups), pair_room

    def record_held(self, pairs: int) -> None:
        self.state.held = pairs

    def record_deletion_candidates(self, placeholders: int) -> None:
        self.state.deletion_candidates = placeholders

    # --- events (and the state that comes with them) --------------------------------------

    def record_advertised(self, value: int, *, changed: bool) -> None:
        self.state.advertised = value
        if changed:
            self._events.signal_changes.labels(*self._key).inc()

    def record_demand(self, result: DemandResult, duration: float) -> None:
        self._events.hud_requests.labels(*self._key, result.value).inc()
        self._events.hud_duration.labels(*self._key).observe(duration)

    def record_reading(self, reading: Reading) -> None:
        """One read of the demand source: HUD requests, or GitHub calls. The GitHub series
        are created on the first GitHub read, so a HUD user's page does not carry them."""
        for request in reading.requests:
            self.record_demand(request.result, request.duration)
        if reading.outcome.queued is not None:  # a good value: the one passes now plan with
            self._fetch_seconds = reading.outcome.duration
        calls = self._events.github_calls
        for result, count in reading.calls.items():
            calls.labels(*self._key, result).inc(count)
        if reading.source == "github":
            for result in GITHUB_CALL_RESULTS:
                calls.labels(*self._key, result)
        if reading.rate_limit_remaining is not None:
            self.state.rate_limit_remaining = reading.rate_limit_remaining

    def record_create(self, result: str) -> None:
        self._events.pair_creates.labels(*self._key, result).inc()

    def record_delete(self, reason: str, count: int = 1) -> None:
        self._events.pair_deletes.labels(*self._key, reason).inc(count)

    def record_rise_check(self, result: str) -> None:
        self._events.rise_checks.labels(*self._key, result).inc()

    def record_pair_launch(self, seconds: float) -> None:
        """A pair this listener created turned whole Running ``seconds`` after its create."""
        self._events.pair_launch.labels(*self._key).observe(max(0.0, seconds))

    def record_header_sent(self, value: int, now: float) -> None:
        """The listener built a poll with this X-ScaleSetMaxCapacity: a value above the one
        before is a rise, timed until the next job assigned (the latest rise counts)."""
        if self._header is not None and value > self._header:
            self._rise_at = now
        self._header = value

    def record_job_assigned(self, now: float) -> None:
        """GitHub assigned a job to this scale set (a JobAssigned message): the first one
        after a rise ends that rise's timing."""
        if self._rise_at is not None:
            self._events.rise_to_assignment.labels(*self._key).observe(
                max(0.0, now - self._rise_at)
            )
            self._rise_at = None

    def record_kube_error(self, operation: str, kind: str) -> None:
        self._events.kube_errors.labels(*self._key, operation, kind).inc()

    def record_reconcile(self, duration: float, *, success_at: float | None) -> None:
        self._events.reconcile_duration.labels(*self._key).observe(duration)
        if success_at is not None:
            self.state.last_success = success_at


class _Events:
    """The counters and histograms of one monitor, their fixed children created at zero so
    dashboards and rate() see them from the start rather than after the first event."""

    def __init__(self, name: str, namespace: str) -> None:
        base = (NAME, NAMESPACE)

        def counter(metric: str, doc: str, *extra: str) -> Counter:
            return Counter(metric, doc, (*base, *extra), registry=None)

        def histogram(metric: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(metric, doc, base, buckets=buckets, registry=None)

        self.github_calls = counter(
            "gha_capacity_demand_github_calls",
            "GitHub REST calls of the demand source by result (not_modified: a 304, free of "
            "rate limit).",
            "result",
        )
        self.hud_requests = counter(
            "gha_capacity_hud_requests", "HUD queued-jobs requests by result.", "result"
        )
        self.hud_duration = histogram(
            "gha_capacity_hud_request_duration_seconds",
            "Duration of HUD queued-jobs requests.",
            _HUD_BUCKETS,
        )
        self.pair_creates = counter(
            "gha_capacity_pair_creates",
            "Placeholder pair creations by result (ok, exists, or the failure kind).",
            "result",
        )
        self.pair_deletes = counter(
            "gha_capacity_pair_deletes",
            "Placeholder pairs (or lone halves) deleted, by reason.",
            "reason",
        )
        self.stalls = counter(
            "gha_capacity_stalls",
            "Pairs released as stalled (one half Running, the other Pending), by cause: cloud "
            "(the Pending half's NodePools or node groups said they cannot launch a node; after "
            "one launch time), time (no such word; after twice the launch time).",
            "cause",
        )
        self.probes = counter(
            "gha_capacity_probes",
            "Probes created during a stall's back-off: one placeholder of the stalled half "
            "alone, asking the cloud again for its node, by role.",
            "role",
        )
        self.kube_errors = counter(
            "gha_capacity_kube_errors",
            "Failed Kubernetes calls of the monitor, by operation and kind.",
            "operation",
            "kind",
        )
        self.reconcile_duration = histogram(
            "gha_capacity_reconcile_duration_seconds",
            "Duration of reconcile passes (planning and applying).",
            _RECONCILE_BUCKETS,
        )
        self.signal_changes = counter(
            "gha_capacity_signal_changes", "Times the advertised capacity changed."
        )
        self.rise_checks = counter(
            "gha_capacity_rise_checks",
            "Rises of the advertised capacity checked against the pods read at one revision, "
            "by result (lowered: the watches counted capacity the apiserver no longer had).",
            "result",
        )
        self.demand_age = histogram(
            "gha_capacity_demand_age_seconds",
            "Age of the demand value a reconcile pass planned with: seconds since the read "
            "that fetched it began (a source's own lag behind GitHub, such as HUD's, comes on "
            "top). Passes on the failure floor are not counted.",
            _AGE_BUCKETS,
        )
        self.pair_launch = histogram(
            "gha_capacity_pair_launch_seconds",
            "Placeholder pairs this listener created: seconds from the create to both halves "
            "Running as the monitor saw them (a node launch when no node had room).",
            _LAUNCH_BUCKETS,
        )
        self.rise_to_assignment = histogram(
            "gha_capacity_rise_to_assignment_seconds",
            "Seconds from a poll whose X-ScaleSetMaxCapacity rose above the poll before to "
            "the next job GitHub assigned to this scale set (JobAssigned; the latest rise "
            "before it counts).",
            _ASSIGN_BUCKETS,
        )
        self.predictive_arrived = counter(
            "gha_capacity_predictive_children_arrived",
            "Predictive warm pool: jobs queued on this scale set as children of a running "
            "parent job the pool had counted (its predicted children that came), by the "
            "parent's workflow.",
            "workflow",
        )
        self.all: list[Source] = [
            self.predictive_arrived,
            self.demand_age,
            self.pair_launch,
            self.rise_to_assignment,
            self.rise_checks,
            self.github_calls,
            self.hud_requests,
            self.hud_duration,
            self.pair_creates,
            self.pair_deletes,
            self.stalls,
            self.probes,
            self.kube_errors,
            self.reconcile_duration,
            self.signal_changes,
        ]
        for metric in (
            self.hud_duration,
            self.reconcile_duration,
            self.signal_changes,
            self.demand_age,
            self.pair_launch,
            self.rise_to_assignment,
        ):
            metric.labels(name, namespace)
        for result in DemandResult:
            self.hud_requests.labels(name, namespace, result.value)
        for outcome in (CREATE_OK, CREATE_EXISTS):
            self.pair_creates.labels(name, namespace, outcome)
        for check in RISE_CHECKS:
            self.rise_checks.labels(name, namespace, check)


class _Page:
    """Every monitor's series on one registry. Several monitors (one per runner set) may
    share a registry; their families are written as one (a name registered twice would
    clash). Registered with the first monitor, unregistered with the last."""

    def __init__(self) -> None:
        self._members: dict[tuple[str, str], list[Source]] = {}

    @classmethod
    def join(
        cls, registry: CollectorRegistry, key: tuple[str, str], sources: list[Source]
    ) -> _Page:
        page = _PAGES.get(registry)
        if page is not None:
            if key in page._members:
                raise ValueError(f"capacity metrics of {key[1]}/{key[0]} are already registered")
            page._members[key] = sources
            return page
        page = cls()
        page._members[key] = sources
        registry.register(page)  # raises on a name another collector holds: nothing stored
        _PAGES[registry] = page
        return page

    @classmethod
    def leave(cls, registry: CollectorRegistry, key: tuple[str, str]) -> None:
        page = _PAGES[registry]
        del page._members[key]
        if not page._members:
            registry.unregister(page)
            del _PAGES[registry]

    def _collector(self) -> GoStyleCollector:
        return GoStyleCollector(s for sources in self._members.values() for s in sources)

    def describe(self) -> list[Metric]:
        return list({f.name: f for f in self._collector().describe()}.values())

    def collect(self) -> Iterator[Metric]:
        return self._collector().collect()


# One page per registry. A page does not hold its registry: the entry would never be dropped.
_PAGES: weakref.WeakKeyDictionary[CollectorRegistry, _Page] = weakref.WeakKeyDictionary()
