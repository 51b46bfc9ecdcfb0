"""The ``gha_capacity_*`` gauges that mirror a capacity monitor's current state.

The recorders of :class:`capacity.metrics.CapacityMetrics` replace the fields of a small
:class:`State`; :class:`StateSeries`, a custom collector, writes the gauges from it when the
page is scraped, so a gauge never lags the state it mirrors.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from capacity import policy
from capacity.model import Demand, DemandSource, Plan, PodPhase, Role
from capacity.node_groups import NodeGroup
from capacity.nodepools import NodePool

NAME: Final = "name"
NAMESPACE: Final = "namespace"
# The parts of the queue (demand sharding): every queued job, the aged ones (claimed by every
# peer), the fresh ones (split between peers), this peer's share of the fresh ones, its claim
# (share + aged), the reading's jobs GitHub has handed it since, and what the plan makes pairs
# for (policy.net_of_starts: the claim less those, or the whole queue left once it has been
# handed more than its share).
DEMAND_PARTS: Final = ("total", "aged", "fresh", "share", "claimed", "started", "planned")
NODEPOOL_STATES: Final = ("off", "starting", "watching", "forbidden", "absent")
WARM_POOL_MODES: Final = ("fixed", "scheduled")
# The node-group reader: unreadable is a ConfigMap without CA's structured status.
NODE_GROUP_STATES: Final = ("off", "starting", "watching", "forbidden", "absent", "unreadable")
# The reader of Karpenter's insufficient-capacity Events (capacity.launch_failures).
LAUNCH_FAILURE_STATES: Final = ("off", "starting", "watching", "forbidden", "absent")
# The reader of Karpenter's scheduling failures of placeholders (capacity.pod_refusals).
POD_REFUSAL_STATES: Final = ("off", "starting", "watching", "forbidden", "absent")


@dataclass(slots=True)
class State:
    """What the state series mirror: replaced by the recorders, read at each scrape. A None
    is not known yet (its series is absent, as a Go vector without a child)."""

    advertised: int = 0
    plan: Plan = field(default_factory=Plan)  # the last reconcile pass
    placeholders: Mapping[tuple[Role, PodPhase], int] = field(default_factory=dict)
    unscheduled: int = 0  # workflow pods no node has taken yet
    demand: Demand | None = None
    proactive: int = 0
    rate_limit_remaining: int | None = None
    last_success: float = 0.0
    held: int | None = None
    deletion_candidates: int | None = None
    nodepool_state: str | None = None
    nodepools: tuple[NodePool, ...] = ()
    nodepool_room: int | None = None
    warm_pool_mode: str | None = None
    warm_pool_target: int = 0
    predictive_pairs: int | None = None  # None: the predictive pool is off
    predictive_expected: dict[str, float] = field(default_factory=dict)  # per workflow
    node_group_state: str | None = None
    node_groups: tuple[NodeGroup, ...] = ()
    node_group_room: int | None = None
    launch_failure_state: str | None = None
    pod_refusal_state: str | None = None


def _one_hot(choices: Iterable[str], current: str | None) -> dict[tuple[str, ...], float]:
    """1 for the current choice, 0 for the others; no series while nothing is current."""
    return {} if current is None else {(c,): float(c == current) for c in choices}


class StateSeries:
    """The series that mirror a monitor's :class:`State`, built from it at each scrape.

    Every family is yielded (describe() lists them all); one with no samples is left off
    the page by :class:`GoStyleCollector`.
    """

    def __init__(self, state: State, key: tuple[str, str]) -> None:
        self._state = state
        self._key = key

    def describe(self) -> list[Metric]:
        return list(self.collect())

    def _family(
        self, metric: str, doc: str, values: Mapping[tuple[str, ...], float], *labels: str
    ) -> Metric:
        family = GaugeMetricFamily(metric, doc, labels=(NAME, NAMESPACE, *labels))
        for extra, value in values.items():
            family.add_metric((*self._key, *extra), float(value))
        return family

    def _one(self, metric: str, doc: str, value: float | None) -> Metric:
        return self._family(metric, doc, {} if value is None else {(): value})

    def collect(self) -> Iterator[Metric]:
        s = self._state
        yield from self._pass(s)
        yield self._one(
            "gha_capacity_advertised",
            "Capacity last passed to the listener (the X-ScaleSetMaxCapacity value).",
            s.advertised,
        )
        yield self._one(
            "gha_capacity_demand_github_rate_limit_remaining",
            "The last X-RateLimit-Remaining GitHub sent the demand source.",
            s.rate_limit_remaining,
        )
        yield self._one(
            "gha_capacity_reconcile_last_success_timestamp_seconds",
            "Unix time of the last reconcile pass that completed without error.",
            s.last_success,
        )
        yield from self._nodepools(s)
        yield from self._warm_pool(s)
        yield from self._predictive(s)
        # cluster-autoscaler (node checks on): nodes CA marked unneeded. Placeholders there
        # still count (the node still runs them; CA taints it ToBeDeleted before removing it).
        yield self._one(
            "gha_capacity_placeholders_on_deletion_candidates",
            "Running placeholders on nodes cluster-autoscaler has marked unneeded "
            "(DeletionCandidateOfClusterAutoscaler); still counted (node checks on).",
            s.deletion_candidates,
        )
        yield from self._node_groups(s)

    def _pass(self, s: State) -> Iterator[Metric]:
        """What the last reconcile pass saw and planned."""
        plan, demand = s.plan, s.demand
        yield self._one(
            "gha_capacity_desired_pairs",
            "Placeholder pairs wanted: proactive capacity plus queued jobs, within headroom.",
            plan.desired_pairs,
        )
        yield self._one(
            "gha_capacity_shortage_held_pairs",
            "Pairs wanted but not created because a half's pools are short, confirmed: they "
            "said they cannot launch a node and a half they refused is still Pending a minute "
            "on (a new pair would only launch its other half's node); 0 otherwise.",
            plan.held_by_shortage,
        )
        yield self._one(
            "gha_capacity_stall_backoff_seconds",
            "Seconds left before new pairs are created again after a stalled pair (one half "
            "Pending for two launch times while the other ran); 0 when not backing off.",
            plan.stall_backoff,
        )
        yield self._one(
            "gha_capacity_slow_start_pairs",
            "After a stall's back-off or a confirmed shortage: the new pairs that may be in "
            "flight with their short half Pending (one, doubled per pair made since whose "
            "half ran); 0 when not ramping.",
            plan.slow_start,
        )
        yield self._family(
            "gha_capacity_pairs",
            "Placeholder pairs by state (running: both halves Running; broken: lone halves).",
            {
                ("running",): plan.running_pairs,
                ("pending",): plan.pending_pairs,
                ("broken",): plan.broken,
            },
            "state",
        )
        yield self._family(
            "gha_capacity_placeholder_pods",
            "Placeholder pods by role and phase.",
            {
                (role.value, phase.value): s.placeholders.get((role, phase), 0)
                for role in Role
                for phase in PodPhase
            },
            "role",
            "phase",
        )
        yield self._one(
            "gha_capacity_runner_side",
            "Bound real runner pods plus Running placeholder-runners.",
            plan.runner_side,
        )
        yield self._one(
            "gha_capacity_workflow_side",
            "Bound real workflow pods plus Running placeholder-workflows.",
            plan.workflow_side,
        )
        yield self._one(
            "gha_capacity_workflow_pods_unscheduled",
            "Workflow pods of this scale set's running jobs that no node has taken yet: each is "
            "a job GitHub considers running that cannot progress (stranded if it lasts).",
            s.unscheduled,
        )
        yield self._one(
            "gha_capacity_queued_jobs",
            "Queued jobs the monitor plans for (HUD or fallback).",
            demand.queued if demand is not None else 0,
        )
        yield self._family(
            "gha_capacity_demand_source",
            "Where the queued-jobs value comes from (1 for the active source).",
            {
                (source.value,): float(demand is not None and source == demand.source)
                for source in DemandSource
            },
            "source",
        )
        claim = demand.claim if demand is not None else None
        started = demand.started_since if demand is not None else 0
        planned = policy.net_of_starts(demand).queued if demand is not None else 0
        parts = (
            (claim.total, claim.aged, claim.fresh, claim.share, claim.claimed, started, planned)
            if claim is not None
            # Before the first pass, on the floor or disabled: no figures from the source.
            else (0, 0, 0, 0, demand.queued if demand is not None else 0, started, planned)
        )
        yield self._family(
            "gha_capacity_demand_jobs",
            "Queued jobs by part: total, aged (claimed by every peer cluster), fresh (split "
            "between peers), share (this cluster's part of fresh), claimed (share + aged), "
            "started (the reading's jobs handed to this scale set since) and planned (what "
            "pairs are made for: claimed less started, or total less started once started "
            "exceeds share).",
            {(part,): value for part, value in zip(DEMAND_PARTS, parts, strict=True)},
            "part",
        )
        yield self._one(
            "gha_capacity_proactive_capacity", "Configured proactive (idle) capacity.", s.proactive
        )

    def _nodepools(self, s: State) -> Iterator[Metric]:
        """NodePool limits (settings nodepools.enabled): the pools the placeholders can land
        on. cpu in cores, memory and storage in bytes, as Kubernetes quantities mean them."""
        limit: dict[tuple[str, ...], float] = {}
        used: dict[tuple[str, ...], float] = {}
        headroom: dict[tuple[str, ...], float] = {}
        for pool in s.nodepools:
            for resource, cap in pool.limits.items():
                taken = pool.used.get(resource, Fraction(0))
                limit[pool.name, resource] = float(cap)
                used[pool.name, resource] = float(taken)
                headroom[pool.name, resource] = float(max(Fraction(0), cap - taken))
        per_pool = ("nodepool", "resource")
        yield self._family(
            "gha_capacity_nodepool_limit",
            "A NodePool's spec.limits, per resource (pools the placeholders can land on).",
            limit,
            *per_pool,
        )
        yield self._family(
            "gha_capacity_nodepool_used",
            "A NodePool's status.resources (capacity Karpenter has launched), per limited "
            "resource.",
            used,
            *per_pool,
        )
        yield self._family(
            "gha_capacity_nodepool_headroom",
            "A NodePool's limit minus its usage (never below 0): room for new nodes.",
            headroom,
            *per_pool,
        )
        yield self._one(
            "gha_capacity_nodepool_pair_room",
            "New placeholder pairs the NodePools' limits still admit (absent while no limit "
            "applies).",
            s.nodepool_room,
        )
        yield self._one(
            "gha_capacity_nodepool_held_pairs",
            "Pairs wanted but not created at the last pass because the NodePools' limits "
            "(or full cluster-autoscaler node groups) cannot hold them (each would have waited "
            "Pending until its ready timeout).",
            s.held,
        )
        yield self._family(
            "gha_capacity_nodepool_state",
            "The NodePool reader (1 for the current state): off, starting, watching, "
            "forbidden (no RBAC), absent (no Karpenter CRD).",
            _one_hot(NODEPOOL_STATES, s.nodepool_state),
            "state",
        )
        yield self._family(
            "gha_capacity_launch_failure_state",
            "The reader of Karpenter's insufficient-capacity Events (1 for the current state): "
            "off, starting, watching, forbidden (no RBAC), absent (no such namespace).",
            _one_hot(LAUNCH_FAILURE_STATES, s.launch_failure_state),
            "state",
        )
        yield self._family(
            "gha_capacity_pod_refusal_state",
            "The reader of Karpenter's scheduling failures of placeholders (1 for the current "
            "state): off, starting, watching, forbidden (no RBAC), absent (no such namespace).",
            _one_hot(POD_REFUSAL_STATES, s.pod_refusal_state),
            "state",
        )

    def _warm_pool(self, s: State) -> Iterator[Metric]:
        """The warm pool (settings warm_pool): its mode and target."""
        yield self._family(
            "gha_capacity_warm_pool_mode",
            "The warm pool's mode (1 for the configured one): fixed, scheduled.",
            _one_hot(WARM_POOL_MODES, s.warm_pool_mode),
            "mode",
        )
        yield self._one(
            "gha_capacity_warm_pool_target",
            "Pairs the warm pool holds beyond the queued jobs at the last pass (in place of "
            "proactive capacity).",
            s.warm_pool_target,
        )

    def _predictive(self, s: State) -> Iterator[Metric]:
        """The predictive warm pool (settings warm_pool.predictive.enabled)."""
        yield self._one(
            "gha_capacity_predictive_pairs",
            "Predictive warm pool: pairs held at the last pass for the children the running "
            "parent jobs are expected to queue within the horizon (on top of the base pool; "
            "included in gha_capacity_warm_pool_target).",
            s.predictive_pairs,
        )
        yield self._family(
            "gha_capacity_predictive_children_expected",
            "Predictive warm pool: children expected on this scale set within the horizon at "
            "the last pass (a mean over the running parents), by the parents' workflow.",
            {(workflow,): count for workflow, count in sorted(s.predictive_expected.items())},
            "workflow",
        )

    def _node_groups(self, s: State) -> Iterator[Metric]:
        """cluster-autoscaler node groups (settings cluster_autoscaler.enabled)."""
        sizes: dict[tuple[str, ...], float] = {}
        headroom: dict[tuple[str, ...], float] = {}
        for g in s.node_groups:
            for kind, value in (
                ("min", g.min_size),
                ("max", g.max_size),
                ("target", g.target),
                ("registered", g.registered),
                ("ready", g.ready),
            ):
                sizes[g.name, kind] = value
            headroom[(g.name,)] = 0 if g.full else g.headroom
        yield self._family(
            "gha_capacity_node_group_size",
            "A cluster-autoscaler node group's size by kind: min, max, target (the size CA "
            "asked the cloud for), registered, ready.",
            sizes,
            "node_group",
            "kind",
        )
        yield self._family(
            "gha_capacity_node_group_headroom",
            "Nodes a cluster-autoscaler node group may still add (max minus target; 0 while "
            "it backs off after a failed scale-up).",
            headroom,
            "node_group",
        )
        yield self._one(
            "gha_capacity_node_group_pair_room",
            "New placeholder pairs full node groups still admit (absent while no group the "
            "placeholders land on is full).",
            s.node_group_room,
        )
        yield self._family(
            "gha_capacity_node_group_state",
            "The node-group reader (1 for the current state): off, starting, watching, "
            "forbidden (no RBAC), absent (no status ConfigMap), unreadable (not CA >= 1.30's "
            "structured status).",
            _one_hot(NODE_GROUP_STATES, s.node_group_state),
            "state",
        )
