"""The ``gha_capacity_*`` Prometheus series of the capacity monitor.

Every series carries ``name`` (the EphemeralRunnerSet) and ``namespace`` (its namespace), like
ARC's ``gha_*`` series. They live on the registry the listener passes in and are always
registered while the monitor runs: no ``listenerMetrics`` allow-list applies to them.

Like the listener's page, no ``_created`` series are written: the metrics are created
unregistered and exposed through one collector that drops those samples (per registry, so
prometheus_client's process-wide switch is left alone).

Size: every series family of the monitor is declared here, in one registry wrapper, so the
deploy/metrics.txt list, the dashboard and this file can be read against each other; the
optional readers (NodePools, node groups) record through it rather than own series.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from fractions import Fraction
from typing import TYPE_CHECKING, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from base.exposition import GoStyleCollector
from capacity.model import Demand, DemandResult, DemandSource, Observed, Plan, PodPhase, Role
from capacity.node_groups import NodeGroup
from capacity.nodepools import NodePool
from capacity.warm_pool import Estimate

if TYPE_CHECKING:
    from capacity.demand import Reading

NAME: Final = "name"
NAMESPACE: Final = "namespace"
CREATE_OK: Final = "ok"
CREATE_EXISTS: Final = "exists"
# The parts of the queue (demand sharding): every queued job, the aged ones (claimed by every
# peer), the fresh ones (split between peers), this peer's share of the fresh ones, and what
# this peer plans for (share + aged).
DEMAND_PARTS: Final = ("total", "aged", "fresh", "share", "claimed")
GITHUB_CALL_RESULTS: Final = ("ok", "not_modified", "rate_limited", "error")
NODEPOOL_STATES: Final = ("off", "starting", "watching", "forbidden", "absent")
WARM_POOL_MODES: Final = ("fixed", "scheduled", "adaptive")
WARM_POOL_ESTIMATES: Final = ("fast", "profile")
# The node-group reader: unreadable is a ConfigMap without CA's structured status.
NODE_GROUP_STATES: Final = ("off", "starting", "watching", "forbidden", "absent", "unreadable")

_RECONCILE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_HUD_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class CapacityMetrics:
    """Records one reconcile pass, HUD requests and pod operations."""

    def __init__(self, registry: CollectorRegistry, *, name: str, namespace: str) -> None:
        base = (NAME, NAMESPACE)
        self._base = {NAME: name, NAMESPACE: namespace}

        def gauge(metric: str, doc: str, *extra: str) -> Gauge:
            return Gauge(metric, doc, (*base, *extra), registry=None)

        def counter(metric: str, doc: str, *extra: str) -> Counter:
            return Counter(metric, doc, (*base, *extra), registry=None)

        self.advertised = gauge(
            "gha_capacity_advertised",
            "Capacity last passed to the listener (the X-ScaleSetMaxCapacity value).",
        )
        self.desired_pairs = gauge(
            "gha_capacity_desired_pairs",
            "Placeholder pairs wanted: proactive capacity plus queued jobs, within headroom.",
        )
        self.pairs = gauge(
            "gha_capacity_pairs",
            "Placeholder pairs by state (running: both halves Running; broken: lone halves).",
            "state",
        )
        self.placeholder_pods = gauge(
            "gha_capacity_placeholder_pods", "Placeholder pods by role and phase.", "role", "phase"
        )
        self.runner_side = gauge(
            "gha_capacity_runner_side",
            "Bound real runner pods plus Running placeholder-runners.",
        )
        self.workflow_side = gauge(
            "gha_capacity_workflow_side",
            "Bound real workflow pods plus Running placeholder-workflows.",
        )
        self.workflow_pods_unscheduled = gauge(
            "gha_capacity_workflow_pods_unscheduled",
            "Workflow pods of this scale set's running jobs that no node has taken yet: each is "
            "a job GitHub considers running that cannot progress (stranded if it lasts).",
        )
        self.queued_jobs = gauge(
            "gha_capacity_queued_jobs", "Queued jobs the monitor plans for (HUD or fallback)."
        )
        self.demand_source = gauge(
            "gha_capacity_demand_source",
            "Where the queued-jobs value comes from (1 for the active source).",
            "source",
        )
        self.demand_jobs = gauge(
            "gha_capacity_demand_jobs",
            "Queued jobs by part: total, aged (claimed by every peer cluster), fresh (split "
            "between peers), share (this cluster's part of fresh) and claimed (share + aged).",
            "part",
        )
        self.github_calls = counter(
            "gha_capacity_demand_github_calls",
            "GitHub REST calls of the demand source by result (not_modified: a 304, free of "
            "rate limit).",
            "result",
        )
        self.github_rate_remaining = gauge(
            "gha_capacity_demand_github_rate_limit_remaining",
            "The last X-RateLimit-Remaining GitHub sent the demand source.",
        )
        self.proactive_capacity = gauge(
            "gha_capacity_proactive_capacity", "Configured proactive (idle) capacity."
        )
        self.hud_requests = counter(
            "gha_capacity_hud_requests", "HUD queued-jobs requests by result.", "result"
        )
        self.hud_duration = Histogram(
            "gha_capacity_hud_request_duration_seconds",
            "Duration of HUD queued-jobs requests.",
            base,
            buckets=_HUD_BUCKETS,
            registry=None,
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
        self.kube_errors = counter(
            "gha_capacity_kube_errors",
            "Failed Kubernetes calls of the monitor, by operation and kind.",
            "operation",
            "kind",
        )
        self.reconcile_duration = Histogram(
            "gha_capacity_reconcile_duration_seconds",
            "Duration of reconcile passes (planning and applying).",
            base,
            buckets=_RECONCILE_BUCKETS,
            registry=None,
        )
        self.last_success = gauge(
            "gha_capacity_reconcile_last_success_timestamp_seconds",
            "Unix time of the last reconcile pass that completed without error.",
        )
        self.signal_changes = counter(
            "gha_capacity_signal_changes",
            "Times the advertised capacity changed.",
        )
        # NodePool limits (settings nodepools.enabled): the pools the placeholders can land
        # on. cpu in cores, memory and storage in bytes, as Kubernetes quantities mean them.
        self.nodepool_limit = gauge(
            "gha_capacity_nodepool_limit",
            "A NodePool's spec.limits, per resource (pools the placeholders can land on).",
            "nodepool",
            "resource",
        )
        self.nodepool_used = gauge(
            "gha_capacity_nodepool_used",
            "A NodePool's status.resources (capacity Karpenter has launched), per limited "
            "resource.",
            "nodepool",
            "resource",
        )
        self.nodepool_headroom = gauge(
            "gha_capacity_nodepool_headroom",
            "A NodePool's limit minus its usage (never below 0): room for new nodes.",
            "nodepool",
            "resource",
        )
        self.nodepool_pair_room = gauge(
            "gha_capacity_nodepool_pair_room",
            "New placeholder pairs the NodePools' limits still admit (absent while no limit "
            "applies).",
        )
        self.nodepool_held_pairs = gauge(
            "gha_capacity_nodepool_held_pairs",
            "Pairs wanted but not created at the last pass because the NodePools' limits "
            "(or full cluster-autoscaler node groups) cannot hold them (each would have waited "
            "Pending until its ready timeout).",
        )
        self.nodepool_state = gauge(
            "gha_capacity_nodepool_state",
            "The NodePool reader (1 for the current state): off, starting, watching, "
            "forbidden (no RBAC), absent (no Karpenter CRD).",
            "state",
        )
        # The warm pool (settings warm_pool): its mode, target and (adaptive) arrival estimate.
        self.warm_pool_mode = gauge(
            "gha_capacity_warm_pool_mode",
            "The warm pool's mode (1 for the configured one): fixed, scheduled, adaptive.",
            "mode",
        )
        self.warm_pool_target = gauge(
            "gha_capacity_warm_pool_target",
            "Pairs the warm pool holds beyond the queued jobs at the last pass (in place of "
            "proactive capacity).",
        )
        self.warm_pool_batch_rate = gauge(
            "gha_capacity_warm_pool_batch_rate",
            "Adaptive warm pool: estimated job batches (workflow runs' fan-outs) per second, "
            "by estimate (fast: recent minutes; profile: this hour of the week).",
            "estimate",
        )
        self.warm_pool_batch_size = gauge(
            "gha_capacity_warm_pool_batch_size",
            "Adaptive warm pool: estimated mean jobs per batch, by estimate (fast, profile).",
            "estimate",
        )
        # cluster-autoscaler (node checks on): nodes CA marked unneeded. Placeholders there
        # still count (the node still runs them; CA taints it ToBeDeleted before removing it).
        self.deletion_candidates = gauge(
            "gha_capacity_placeholders_on_deletion_candidates",
            "Running placeholders on nodes cluster-autoscaler has marked unneeded "
            "(DeletionCandidateOfClusterAutoscaler); still counted (node checks on).",
        )
        # cluster-autoscaler node groups (settings cluster_autoscaler.enabled).
        self.node_group_size = gauge(
            "gha_capacity_node_group_size",
            "A cluster-autoscaler node group's size by kind: min, max, target (the size CA "
            "asked the cloud for), registered, ready.",
            "node_group",
            "kind",
        )
        self.node_group_headroom = gauge(
            "gha_capacity_node_group_headroom",
            "Nodes a cluster-autoscaler node group may still add (max minus target; 0 while "
            "it backs off after a failed scale-up).",
            "node_group",
        )
        self.node_group_pair_room = gauge(
            "gha_capacity_node_group_pair_room",
            "New placeholder pairs full node groups still admit (absent while no group the "
            "placeholders land on is full).",
        )
        self.node_group_state = gauge(
            "gha_capacity_node_group_state",
            "The node-group reader (1 for the current state): off, starting, watching, "
            "forbidden (no RBAC), absent (no status ConfigMap), unreadable (not CA >= 1.30's "
            "structured status).",
            "state",
        )
        everything: list[MetricWrapperBase] = [
            self.advertised,
            self.desired_pairs,
            self.pairs,
            self.placeholder_pods,
            self.runner_side,
            self.workflow_side,
            self.workflow_pods_unscheduled,
            self.queued_jobs,
            self.demand_source,
            self.demand_jobs,
            self.github_calls,
            self.github_rate_remaining,
            self.proactive_capacity,
            self.hud_requests,
            self.hud_duration,
            self.pair_creates,
            self.pair_deletes,
            self.kube_errors,
            self.reconcile_duration,
            self.last_success,
            self.signal_changes,
            self.nodepool_limit,
            self.nodepool_used,
            self.nodepool_headroom,
            self.nodepool_pair_room,
            self.nodepool_held_pairs,
            self.nodepool_state,
            self.warm_pool_mode,
            self.warm_pool_target,
            self.warm_pool_batch_rate,
            self.warm_pool_batch_size,
            self.deletion_candidates,
            self.node_group_size,
            self.node_group_headroom,
            self.node_group_pair_room,
            self.node_group_state,
        ]
        self._pool_series: set[tuple[str, str]] = set()
        self._group_series: set[str] = set()
        self._prime()
        self._collector = GoStyleCollector(everything)
        self._registry = registry
        registry.register(self._collector)

    def unregister(self) -> None:
        self._registry.unregister(self._collector)

    def _prime(self) -> None:
        """Create every labelled series at zero, so dashboards and rate() see them from the
        start rather than after the first event."""
        b = self._base
        for metric in (
            self.advertised,
            self.desired_pairs,
            self.runner_side,
            self.workflow_side,
            self.workflow_pods_unscheduled,
            self.queued_jobs,
            self.proactive_capacity,
            self.hud_duration,
            self.reconcile_duration,
            self.last_success,
            self.signal_changes,
            self.warm_pool_target,
        ):
            metric.labels(**b)
        for state in ("running", "pending", "broken"):
            self.pairs.labels(**b, state=state)
        for role in Role:
            for phase in PodPhase:
                self.placeholder_pods.labels(**b, role=role.value, phase=phase.value)
        for source in DemandSource:
            self.demand_source.labels(**b, source=source.value)
        for part in DEMAND_PARTS:
            self.demand_jobs.labels(**b, part=part)
        for result in DemandResult:
            self.hud_requests.labels(**b, result=result.value)
        for outcome in (CREATE_OK, CREATE_EXISTS):
            self.pair_creates.labels(**b, result=outcome)

    # --- recording ------------------------------------------------------------------------

    def record_pass(
        self, plan: Plan, observed: Observed, demand: Demand, *, proactive: int
    ) -> None:
        b = self._base
        self.desired_pairs.labels(**b).set(plan.desired_pairs)
        self.pairs.labels(**b, state="running").set(plan.running_pairs)
        self.pairs.labels(**b, state="pending").set(plan.pending_pairs)
        self.pairs.labels(**b, state="broken").set(plan.broken)
        self.runner_side.labels(**b).set(plan.runner_side)
        self.workflow_side.labels(**b).set(plan.workflow_side)
        self.workflow_pods_unscheduled.labels(**b).set(
            sum(1 for w in observed.workflow_pods if not w.bound and not w.terminating)
        )
        self.queued_jobs.labels(**b).set(demand.queued)
        for source in DemandSource:
            self.demand_source.labels(**b, source=source.value).set(
                1 if source == demand.source else 0
            )
        claim = demand.claim
        parts = (
            (claim.total, claim.aged, claim.fresh, claim.share, claim.claimed)
            if claim is not None
            else (0, 0, 0, 0, demand.queued)  # floor or disabled: no figures from the source
        )
        for part, value in zip(DEMAND_PARTS, parts, strict=True):
            self.demand_jobs.labels(**b, part=part).set(value)
        self.proactive_capacity.labels(**b).set(proactive)
        counts: dict[tuple[str, str], int] = {}
        for p in observed.placeholders:
            key = (p.role.value, p.phase.value)
            counts[key] = counts.get(key, 0) + 1
        for role in Role:
            for phase in PodPhase:
                self.placeholder_pods.labels(**b, role=role.value, phase=phase.value).set(
                    counts.get((role.value, phase.value), 0)
                )

    def record_nodepool_state(self, state: str) -> None:
        """The NodePool reader's state (one of NODEPOOL_STATES)."""
        for each in NODEPOOL_STATES:
            self.nodepool_state.labels(**self._base, state=each).set(1 if each == state else 0)

    def record_nodepools(self, pools: Iterable[NodePool], pair_room: int | None) -> None:
        """Limit, usage and headroom of the pools the placeholders can land on; series of
        pools no longer among them are removed."""
        b = self._base
        seen: set[tuple[str, str]] = set()
        for pool in pools:
            for resource, limit in pool.limits.items():
                used = pool.used.get(resource, Fraction(0))
                self.nodepool_limit.labels(**b, nodepool=pool.name, resource=resource).set(
                    float(limit)
                )
                self.nodepool_used.labels(**b, nodepool=pool.name, resource=resource).set(
                    float(used)
                )
                self.nodepool_headroom.labels(**b, nodepool=pool.name, resource=resource).set(
                    float(max(Fraction(0), limit - used))
                )
                seen.add((pool.name, resource))
        for nodepool, resource in self._pool_series - seen:
            for gauge in (self.nodepool_limit, self.nodepool_used, self.nodepool_headroom):
                with contextlib.suppress(KeyError):
                    gauge.remove(b[NAME], b[NAMESPACE], nodepool, resource)
        self._pool_series = seen
        if pair_room is None:
            with contextlib.suppress(KeyError):
                self.nodepool_pair_room.remove(b[NAME], b[NAMESPACE])
        else:
            self.nodepool_pair_room.labels(**b).set(pair_room)

    def record_warm_pool_mode(self, mode: str) -> None:
        for each in WARM_POOL_MODES:
            self.warm_pool_mode.labels(**self._base, mode=each).set(1 if each == mode else 0)

    def record_warm_pool(self, target: int, estimates: tuple[Estimate, Estimate] | None) -> None:
        """The target, and (adaptive only) the fast and profile estimates."""
        b = self._base
        self.warm_pool_target.labels(**b).set(target)
        if estimates is None:
            return
        for name, estimate in zip(WARM_POOL_ESTIMATES, estimates, strict=True):
            self.warm_pool_batch_rate.labels(**b, estimate=name).set(estimate.rate)
            self.warm_pool_batch_size.labels(**b, estimate=name).set(estimate.mean_size)

    def record_node_group_state(self, state: str) -> None:
        """The node-group reader's state (one of NODE_GROUP_STATES)."""
        for each in NODE_GROUP_STATES:
            self.node_group_state.labels(**self._base, state=each).set(1 if each == state else 0)

    def record_node_groups(self, groups: Iterable[NodeGroup], pair_room: int | None) -> None:
        """Sizes and headroom of the node groups; series of groups gone are removed."""
        b = self._base
        seen: set[str] = set()
        for g in groups:
            sizes = {
                "min": g.min_size,
                "max": g.max_size,
                "target": g.target,
                "registered": g.registered,
                "ready": g.ready,
            }
            for kind, value in sizes.items():
                self.node_group_size.labels(**b, node_group=g.name, kind=kind).set(value)
            self.node_group_headroom.labels(**b, node_group=g.name).set(0 if g.full else g.headroom)
            seen.add(g.name)
        for gone in self._group_series - seen:
            for kind in ("min", "max", "target", "registered", "ready"):
                with contextlib.suppress(KeyError):
                    self.node_group_size.remove(b[NAME], b[NAMESPACE], gone, kind)
            with contextlib.suppress(KeyError):
                self.node_group_headroom.remove(b[NAME], b[NAMESPACE], gone)
        self._group_series = seen
        if pair_room is None:
            with contextlib.suppress(KeyError):
                self.node_group_pair_room.remove(b[NAME], b[NAMESPACE])
        else:
            self.node_group_pair_room.labels(**b).set(pair_room)

    def record_held(self, pairs: int) -> None:
        self.nodepool_held_pairs.labels(**self._base).set(pairs)

    def record_deletion_candidates(self, placeholders: int) -> None:
        self.deletion_candidates.labels(**self._base).set(placeholders)

    def record_advertised(self, value: int, *, changed: bool) -> None:
        self.advertised.labels(**self._base).set(value)
        if changed:
            self.signal_changes.labels(**self._base).inc()

    def record_demand(self, result: DemandResult, duration: float) -> None:
        self.hud_requests.labels(**self._base, result=result.value).inc()
        self.hud_duration.labels(**self._base).observe(duration)

    def record_reading(self, reading: Reading) -> None:
        """One read of the demand source: HUD requests, or GitHub calls. The GitHub series
        are created on the first GitHub read, so a HUD user's page does not carry them."""
        for request in reading.requests:
            self.record_demand(request.result, request.duration)
        for result, count in reading.calls.items():
            self.github_calls.labels(**self._base, result=result).inc(count)
        if reading.source == "github":
            for result in GITHUB_CALL_RESULTS:
                self.github_calls.labels(**self._base, result=result)
        if reading.rate_limit_remaining is not None:
            self.github_rate_remaining.labels(**self._base).set(reading.rate_limit_remaining)

    def record_create(self, result: str) -> None:
        self.pair_creates.labels(**self._base, result=result).inc()

    def record_delete(self, reason: str, count: int = 1) -> None:
        self.pair_deletes.labels(**self._base, reason=reason).inc(count)

    def record_kube_error(self, operation: str, kind: str) -> None:
        self.kube_errors.labels(**self._base, operation=operation, kind=kind).inc()

    def record_reconcile(self, duration: float, *, success_at: float | None) -> None:
        self.reconcile_duration.labels(**self._base).observe(duration)
        if success_at is not None:
            self.last_success.labels(**self._base).set(success_at)
