"""Replay a job trace against the monitor's own policy, in virtual time.

Every reconcile pass calls ``capacity.policy.plan`` — the code the listener runs — with the
simulated placeholders, the demand as the demand source would have reported it, and the
virtual time; its creates and deletes are applied to a simulated cluster. The warm pool on
top of demand (``proactive_capacity``) comes from a ``WarmPool`` object each pass, driven by
``warm_pool.drive`` as the monitor drives it (the same arrival counter, on every reconcile
pass), so a fixed pool, no pool (reactive), the scheduled pool the settings build, and any
other pool are compared on the same trace.

What is simulated, per label set (one scale set each; label sets do not share nodes):

* **Jobs** arrive at their ``queued_at`` and run for their traced duration once a Running
  pair admits them (FIFO). A job never starts without one: the listener advertises only
  Running pairs (and its busy runners), so GitHub keeps the job queued. The job's pods go
  to free room on a ready node when there is some (the scheduler preempts only when
  nothing fits: an empty node not yet consolidated, the other half of a two-pair node),
  and the pair stays to admit the next job; else they preempt the pair's pods and take
  their room. Each of the job's two pods does this in its own pool, so a job whose runner
  pod finds free room and whose workflow pod does not leaves the pair's runner half alone.
  The job holds its room in both pools until it ends.
* **Demand**: the source is read every ``demand_interval`` seconds; a read sees the jobs
  queued at that moment and its value is used ``demand_lag`` seconds later (the read's own
  duration); in between the policy holds the last value (``policy.resolve_demand``). The pool
  is told what each reconcile pass sees, as in the monitor: the demand in use and the runner
  pods of the jobs running (``warm_pool.ArrivalCounter`` turns them into arrivals). With
  ``lookahead`` > 0 a read also counts the jobs of runs already under way that will be
  queued within ``lookahead`` seconds (the later stages of a workflow run, which a source
  reading a run's job graph could see coming).
* **Passes**: ``coalesce`` seconds after a change the view would see (a pair Running, a job
  starting or ending, a new demand value; changes meanwhile join that pass), and
  ``recalculate_interval`` after the last pass when nothing happened, as the reconcile loop
  does.
* **Nodes: two pools, ``pairs_per_node`` halves per node.** Runner halves land on runner
  nodes and workflow halves on workflow nodes, each half on its own (a ready node of its
  pool with room, the fullest first, or with ``spread`` the emptiest, as the kube-scheduler
  scores nodes by default; else a node of its pool already launching with room; else a new
  node of its pool). The nodes one create or repair launches come up together, after the
  next provisioning delay (drawn in order from ``delays``, cycled): a pair's launch is one
  delay, as both its nodes launch side by side.
  A half deleted while Pending leaves its node launching: the node may come up empty. An
  empty node is removed after ``node_idle`` seconds (Karpenter's consolidateAfter), unless
  a half lands on it first. With ``consolidation`` (Karpenter's WhenEmptyOrUnderutilized),
  a ready node holding placeholder halves and no job (a job's pods are do-not-disrupt) whose
  halves fit in the room of its pool's other ready nodes goes too: ``consolidation``
  seconds after they fit (Karpenter finds the move on a poll and validates it), and not
  before ``node_idle`` after its pods last changed, as an empty node. Its halves are
  evicted: the policy repairs or recreates them, and they land in that room. A Pending
  half moves to a ready node of its pool that has room (the scheduler binds it wherever it
  fits). Each half has its own phase, so the policy sees what the cluster shows (and the
  jobs' own pods, a runner pod and its workflow pod each): a pair is Running when both
  halves are; a half can be left alone (a job took the other's room) and be repaired or
  released by the policy, and a pair whose one half waits on a pool that cannot launch is
  released as stalled after the policy's stall timeout (from the launch times seen, as in
  the monitor).
* **Hand-over** (``handover``, off by default): the header counts busy runners, and the
  service learns of a job's end before the listener's next poll lowers the header, so it
  hands the finished runner's slot to the oldest queued job at once (the completion and the
  new assignment arrive in one message batch), whose pods take the room the finished job
  leaves. Off, a waiting job needs a Running pair, as the header's round trip is left out.
* **Peers** (``simulate_clusters``): several clusters serving one label set, each with its
  own listener (config, warm pool, demand reads, passes), nodes and pairs; every listener
  reads the whole queue and plans for its claim of it (``params.cluster_index`` and
  ``cluster_count``, as the monitor shards demand). A waiting job goes to a cluster with a
  Running pair, asking the clusters in its own order (GitHub hands a job to whichever
  listener's header has room): ``preference`` gives each job's order where the caller knows
  the service's choice (a fake that draws it from a seed), else job i asks cluster i mod n
  first, then the next ones (a rotation standing for an arbitrary choice). A finished job's
  room (hand-over) goes to the oldest waiting job: a job that would rather go elsewhere
  finds no other cluster with a Running pair, as it would have taken that pair already.
  With ``aged_after`` a read also counts the jobs queued longer than that, which every
  peer claims whole (``policy.claim``), so a peer that cannot launch holds its share of
  the queue only that long.
* **The window**: by default the listener starts at the first arrival and everything is
  counted up to the last job's end. ``simulate(..., begin=, until=)`` starts the listener
  earlier (a warm pool fills before the first job, as on a cluster started ahead) and
  counts node- and pair-seconds up to a fixed time (also after the last job: what a pool
  holds in a quiet tail is paid for), as a benchmark's window does.

* **Outages** (``outages``): a launch asked for while the cloud is out of capacity is
  retried and comes up one provisioning delay after the outage ends; the node is counted
  from the try that gets an instance (the outage's end), not from the first: Karpenter
  deletes a NodeClaim the cloud refused and asks again, and a refusal costs nothing.
  ``outage_roles`` names the pools that run out (both by default; the workflow pool alone
  leaves runner halves Running beside Pending workflow halves); with ``word`` their pools
  say so, as Karpenter's insufficient-capacity Events do (``Params.cannot_launch_at``),
  while a launch waits, and ``KARPENTER_RETRY`` after a refusal Karpenter says it has no
  node for each half waiting on it (``Params.refused_at``).

Simplified away, on purpose: pod start and image pull times (0), the header's round trip
to GitHub (a Running pair takes a waiting job at once; see hand-over), consolidation of
nodes that are not empty unless ``consolidation`` is set, and then onto ready nodes only
(not onto room a launching node will have), spot interruptions,
NodePool limits, failed launches outside an outage. Every node costs the same; busy and
spare room are counted in pairs, a pair's room being one half's room in each pool, so
``node_seconds`` is the mean of the two pools' node-seconds (a simulated node stands for
one node of each holding ``pairs_per_node`` pods; ``runner_node_seconds`` and
``workflow_node_seconds`` are each pool's own). As long as nothing treats the pools
differently (no outage of one pool alone), they mirror each other and every half of a
pair shares its twin's fate.

Measured per policy: spare node-seconds (every node-second not spent running a job:
launching, holding a placeholder, or empty before consolidation; counted in the window)
and their ratio to OPT₀, placeholder pair-seconds, queue time p50/p90/p99/max, launches,
pairs created. Busy and spare are counted in a pair's room (with ``pairs_per_node`` k, a
node-second is k of them), so they stay comparable with OPT₀; ``node_seconds`` is the
nodes' own.

PURE: no I/O, no clock, no randomness (the delays are drawn by the caller).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import zip_longest

from capacity import policy, warm_pool
from capacity.model import (
    DemandOutcome,
    DemandResult,
    DemandState,
    Memory,
    Observed,
    Params,
    Placeholder,
    PodPhase,
    RealPod,
    Role,
)
from capacity.pods import job_pod_name
from capacity.warm_pool import WarmPool
from whatif.trace import TraceJob


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """The simulated cluster and demand source (seconds)."""

    params: Params  # the policy's knobs (proactive_capacity is replaced by the pool's target)
    delays: tuple[float, ...] = (60.0,)  # node provisioning delays, used in order, cycled
    demand_interval: float = 30.0  # recalculate_interval of the demand source
    demand_lag: float = 2.0  # a read's value is used this long after the read
    recalculate_interval: float = 30.0
    coalesce: float = 0.15  # a change leads to a pass this much later (the view's trigger)
    node_idle: float = 30.0  # an empty node is removed after this (consolidateAfter)
    # Seconds from a node's placeholder halves fitting in its pool's other ready nodes to the
    # node's removal (WhenEmptyOrUnderutilized; see the module's docstring); None: only
    # empty nodes go (WhenEmpty).
    consolidation: float | None = None
    # A pod goes to the ready node of its pool with the most room (the kube-scheduler's
    # default scoring, LeastAllocated); False: the fullest, as if the scheduler packed them.
    spread: bool = False
    lookahead: float = 0.0  # count later stages of runs under way due within this
    pairs_per_node: int = 1  # room of a node, in pairs (a job keeps its pair's room)
    handover: bool = False  # a finishing job's room goes to the oldest waiting job
    # [from, to) spans when launches fail (the cloud is out of the instance type): a launch
    # asked for then is retried and comes up one delay after the span ends.
    outages: tuple[tuple[float, float], ...] = ()
    outage_roles: frozenset[Role] = frozenset(Role)  # the pools the outages refuse
    word: bool = False  # the refused pools say so while a launch waits (Karpenter's Events)
    # With peers: a read also counts the jobs queued longer than this (`demand.aged_after`),
    # which every peer claims whole; None: the source reports no such count.
    aged_after: float | None = None

    def __post_init__(self) -> None:
        if not self.delays or any(d < 0 for d in self.delays):
            raise ValueError("delays: at least one, none negative")
        for name in ("demand_interval", "recalculate_interval"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        if self.aged_after is not None and not self.aged_after > 0:
            raise ValueError(f"aged_after: must be > 0, got {self.aged_after}")
        for name in ("demand_lag", "node_idle", "lookahead", "coalesce"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.consolidation is not None and self.consolidation < 0:
            raise ValueError(f"consolidation: must be >= 0, got {self.consolidation}")
        if self.pairs_per_node < 1:
            raise ValueError(f"pairs_per_node: must be >= 1, got {self.pairs_per_node}")
        if any(not low < high for low, high in self.outages):
            raise ValueError(f"outages: each a [from, to) span with from < to, got {self.outages}")


READY_WAIT = 1.0  # a job that waited less than this found a pair ready
# Seconds from a refused launch to Karpenter's next scheduling run saying it has no node for
# the Pending pod (7.8 s on the outcome benchmark's cluster; its batching waits up to 10 s).
KARPENTER_RETRY = 10.0


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What one policy cost and bought on one label set's jobs."""

    jobs: int
    busy: float  # room-seconds running jobs (a node's room is pairs_per_node pairs)
    spare: float  # room-seconds held without a job
    pair_seconds: float  # placeholder pairs in existence (Pending or Running), summed
    waits: tuple[float, ...]  # queue time of each job, sorted
    launches: int
    pairs_created: int
    passes: int
    node_seconds: float = 0.0  # nodes alive, the mean of the two pools (a node: one of each)
    runner_node_seconds: float = 0.0
    workflow_node_seconds: float = 0.0
    pool_launches: int = 0  # nodes launched, both pools (``launches``: the launch draws)
    stalls: int = 0  # pairs the policy released as stalled
    repairs: int = 0  # lone halves given their missing half back
    probes: int = 0  # halves made alone during a stall's back-off
    cluster_jobs: tuple[int, ...] = ()  # jobs started per cluster (simulate_clusters' order)

    def percentile(self, p: float) -> float:
        return percentile(self.waits, p)

    @property
    def ready_share(self) -> float:
        """The share of jobs that found a pair ready (waited under a second)."""
        if not self.waits:
            return 1.0
        return bisect.bisect_left(self.waits, READY_WAIT) / len(self.waits)

    def describe(self, opt_spare: float | None = None) -> dict[str, object]:
        result: dict[str, object] = {
            "jobs": self.jobs,
            "busy_node_seconds": round(self.busy, 1),
            "spare_node_seconds": round(self.spare, 1),
            "spare_pct_of_busy": round(100 * self.spare / self.busy, 2) if self.busy else 0.0,
            "node_seconds": round(self.node_seconds, 1),
            "placeholder_pair_seconds": round(self.pair_seconds, 1),
            "queue_seconds": {
                "p50": round(self.percentile(50), 2),
                "p90": round(self.percentile(90), 2),
                "p99": round(self.percentile(99), 2),
                "max": round(self.waits[-1], 2) if self.waits else 0.0,
            },
            "ready_share": round(self.ready_share, 3),
            "launches": self.launches,
            "pairs_created": self.pairs_created,
            "passes": self.passes,
            "stalls": self.stalls,
            "repairs": self.repairs,
            "probes": self.probes,
        }
        if opt_spare is not None:
            result["spare_over_opt0"] = round(self.spare / opt_spare, 2) if opt_spare else None
        return result


def percentile(ordered: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of an ascending sequence (0 when empty)."""
    if not ordered:
        return 0.0
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def merge(outcomes: Iterable[Outcome]) -> Outcome:
    """Several label sets' outcomes as one (sums; the waits pooled)."""
    items = list(outcomes)
    return Outcome(
        jobs=sum(o.jobs for o in items),
        busy=sum(o.busy for o in items),
        spare=sum(o.spare for o in items),
        pair_seconds=sum(o.pair_seconds for o in items),
        waits=tuple(sorted(w for o in items for w in o.waits)),
        launches=sum(o.launches for o in items),
        pairs_created=sum(o.pairs_created for o in items),
        passes=sum(o.passes for o in items),
        node_seconds=sum(o.node_seconds for o in items),
        runner_node_seconds=sum(o.runner_node_seconds for o in items),
        workflow_node_seconds=sum(o.workflow_node_seconds for o in items),
        pool_launches=sum(o.pool_launches for o in items),
        stalls=sum(o.stalls for o in items),
        repairs=sum(o.repairs for o in items),
        probes=sum(o.probes for o in items),
        cluster_jobs=tuple(
            sum(counts) for counts in zip_longest(*(o.cluster_jobs for o in items), fillvalue=0)
        ),
    )


# --- the simulated cluster ----------------------------------------------------------------

# Event kinds, in the order they are handled at one instant: jobs end (freeing nodes)
# before nodes come up, before nodes go, before jobs arrive, before demand values and passes.
(
    _JOB_END,
    _NODE_READY,
    _NODE_EXPIRE,
    _NODE_CONSOLIDATE,
    _ARRIVAL,
    _DEMAND_READ,
    _DEMAND_SEEN,
    _PASS,
) = range(8)
_POKED = -1  # a _PASS event's argument when a change asked for it (else: the pass count)


@dataclass
class _Node:
    role: Role  # its pool
    launched_at: float  # paid for from (after an outage: its end)
    refused_at: float | None = None  # asked for during an outage: when the cloud refused it
    ready: bool = False
    halves: set[str] = field(default_factory=set)  # the halves on (or waiting for) it
    jobs: int = 0  # running jobs (one pod each)
    expires_at: float = math.inf  # when an empty node goes (inf: not empty)
    # Karpenter's clock for consolidating it: its pods' last change (bound, gone, a job's
    # start or end, the node coming up), since when its halves fit elsewhere (None: they do
    # not, or it is not a candidate), and when the consolidation is due (inf: none).
    changed_at: float = -math.inf
    fits_since: float | None = None
    consolidate_at: float = math.inf

    def used(self) -> int:
        return len(self.halves) + self.jobs


@dataclass
class _Half:
    pod: Placeholder
    node: int = -1

    @property
    def running(self) -> bool:
        return self.pod.phase == PodPhase.RUNNING


@dataclass
class _Queue:
    """What the clusters of one simulation share: the jobs, GitHub's queue, the clock's
    events (time, kind, sequence, cluster, argument) and the window."""

    jobs: Sequence[TraceJob]
    window: tuple[float, float] = (-math.inf, math.inf)  # node- and pair-seconds counted in
    # Per job, the clusters it asks in turn (empty: the rotation, see ``order``).
    preference: Sequence[tuple[int, ...]] = ()
    events: list[tuple[float, int, int, int, int]] = field(default_factory=list)
    seq: int = 0
    waiting: list[int] = field(default_factory=list)  # jobs queued, FIFO (a deque by index)
    waiting_head: int = 0
    waits: list[float] = field(default_factory=list)

    def push(self, t: float, kind: int, cluster: int, arg: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, cluster, arg))

    def queued(self) -> int:
        return len(self.waiting) - self.waiting_head

    def aged(self, queued_before: float) -> int:
        """Jobs waiting that were queued at or before ``queued_before`` (the queue is in
        arrival order, so they are the first ones)."""
        waiting = self.waiting[self.waiting_head :]
        return bisect.bisect_right([self.jobs[i].queued_at for i in waiting], queued_before)

    def order(self, index: int, count: int) -> Sequence[int]:
        """The clusters job ``index`` asks in turn: its preference where one was given,
        else cluster index mod ``count`` first, then the next ones, so that no cluster is
        always first."""
        if self.preference:
            return self.preference[index]
        return [(index + k) % count for k in range(count)]

    def assign(self, clusters: Sequence[_Run], now: float) -> set[int]:
        """Waiting jobs, oldest first, each to the first cluster in its order that has a
        Running pair (GitHub hands a job to a listener whose header has room). Returns the
        clusters that got one."""
        got: set[int] = set()
        count = len(clusters)
        while self.waiting_head < len(self.waiting):
            index = self.waiting[self.waiting_head]
            order = self.order(index, count)
            chosen = next((c for c in order if clusters[c].admitting() is not None), None)
            if chosen is None:
                break
            self.waiting_head += 1
            clusters[chosen].admit(index, now)
            got.add(chosen)
        return got


@dataclass
class _Run:
    """One cluster of one simulation (one policy, one label set)."""

    queue: _Queue
    index: int  # this cluster's place among the simulation's clusters
    config: SimConfig
    pool: WarmPool
    arrivals: warm_pool.ArrivalCounter = field(default_factory=warm_pool.ArrivalCounter)
    # job → its runner pod and its workflow pod, as the view shows them
    job_pods: dict[int, tuple[RealPod, RealPod]] = field(default_factory=dict)
    # (assigned at, queued at) of the jobs started here, the latest: the as-of correction
    assigned: deque[tuple[float, float]] = field(
        default_factory=lambda: deque(maxlen=policy.ASSIGNMENTS_KEPT)
    )
    launch_times: list[float] = field(default_factory=list)  # pair create → Running, latest
    # running job → its nodes (runner, workflow)
    job_nodes: dict[int, tuple[int, int]] = field(default_factory=dict)
    nodes: dict[int, _Node] = field(default_factory=dict)  # both pools'
    halves: dict[str, _Half] = field(default_factory=dict)  # by pod name
    slots: dict[str, dict[Role, str]] = field(default_factory=dict)  # slot → its halves' names
    launching: dict[str, float] = field(default_factory=dict)  # slot → timed from (create, repair)
    refused: dict[Role, list[tuple[float, float]]] = field(default_factory=dict)  # launch waits
    running_jobs: int = 0
    started: int = 0  # jobs started here
    memory: Memory = field(default_factory=Memory)
    hud: DemandState = field(default_factory=DemandState)
    node_seconds: dict[Role, float] = field(default_factory=lambda: dict.fromkeys(Role, 0.0))
    pair_seconds: float = 0.0
    busy: float = 0.0
    launches: int = 0  # launch draws: the nodes one create or repair launches, together
    pool_launches: int = 0
    pairs_created: int = 0
    repairs: int = 0
    probes: int = 0
    stalls: int = 0
    passes: int = 0
    next_delay: int = 0
    next_node: int = 0
    params_cache: dict[tuple[object, ...], Params] = field(default_factory=dict)
    # The reconcile loop and the demand reads of this cluster's listener.
    poked: bool = False  # a pass is scheduled for a change
    reads: int = 0
    seen: dict[int, int] = field(default_factory=dict)  # read number → the jobs queued it saw
    aged: dict[int, int] = field(default_factory=dict)  # read number → those of them aged
    read_at: dict[int, float] = field(default_factory=dict)  # read number → when it was made

    # --- events ---------------------------------------------------------------------------

    def push(self, t: float, kind: int, arg: int = 0) -> None:
        self.queue.push(t, kind, self.index, arg)

    # --- nodes ----------------------------------------------------------------------------

    def draw(self) -> float:
        """The next provisioning delay: one per create or repair that launches nodes."""
        delays = self.config.delays
        delay = delays[self.next_delay % len(delays)]
        self.next_delay += 1
        self.launches += 1
        return delay

    def launch(self, role: Role, delay: float, now: float) -> int:
        paid_from = now
        if role in self.config.outage_roles:
            for low, high in self.config.outages:
                if low <= now < high:
                    delay += high - now  # retried until the capacity is back
                    # A refused launch has no instance (Karpenter deletes its NodeClaim and
                    # asks again later): the node is paid for from the try that gets one.
                    paid_from = max(paid_from, high)
                    self.refused.setdefault(role, []).append((now, high))
        node_id = self.next_node
        self.next_node += 1
        self.nodes[node_id] = _Node(
            role=role, launched_at=paid_from, refused_at=now if paid_from > now else None
        )
        self.pool_launches += 1
        self.push(now + delay, _NODE_READY, node_id)
        return node_id

    def settle(self, node_id: int, now: float) -> None:
        """A ready node with room: Pending halves of its pool move there, else, empty, it
        waits to go."""
        node = self.nodes[node_id]
        if not node.ready:
            return
        room = self.config.pairs_per_node - node.used()
        for name, half in self.halves.items():
            if room <= 0:
                break
            if half.pod.role == node.role and not half.running and half.node != node_id:
                self.nodes[half.node].halves.discard(name)  # its node launches for less
                self.bind(half, node_id, now)
                room -= 1
        if node.used() == 0:
            node.expires_at = now + self.config.node_idle
            self.push(node.expires_at, _NODE_EXPIRE, node_id)

    def bind(self, half: _Half, node_id: int, now: float) -> None:
        node = self.nodes[node_id]
        node.halves.add(half.pod.name)
        node.expires_at = math.inf
        node.changed_at = now
        half.node = node_id
        if node.ready:
            self.set_running(half, now)

    def set_running(self, half: _Half, now: float) -> None:
        half.pod = replace(half.pod, phase=PodPhase.RUNNING)
        slot = half.pod.slot
        if slot not in self.launching:
            return
        members = [self.halves[n] for n in self.slots[slot].values()]
        if len(members) < len(Role) or not all(m.running for m in members):
            return
        # The monitor times each pair it made (or repaired) from then to both halves
        # Running, and leaves out a launch that waited out the pools' word and took longer
        # than every launch in the sample (Reconciler.record_launches): the latest
        # LAUNCHES_KEPT, as there.
        created = self.launching.pop(slot)
        took = now - created
        if policy.refused_during(self.params(0, now), created) and took > max(
            self.launch_times, default=0.0
        ):
            return
        kept = self.launch_times[-(policy.LAUNCHES_KEPT - 1) :]
        self.launch_times = [*kept, took]

    def clipped(self, start: float, end: float) -> float:
        """The part of [start, end] inside the window."""
        low, high = self.queue.window
        return max(0.0, min(end, high) - max(start, low))

    def remove_node(self, node_id: int, now: float) -> None:
        node = self.nodes.pop(node_id)
        self.node_seconds[node.role] += self.clipped(node.launched_at, now)

    def movable(self, node_id: int) -> bool:
        """Karpenter could consolidate the node now: ready, holding placeholder halves and
        no job, and they fit in the room of its pool's other ready nodes (each half takes one
        pair's room, so counting the room is packing it)."""
        node = self.nodes[node_id]
        if not node.ready or node.jobs or not node.halves:
            return False
        per_node = self.config.pairs_per_node
        room = sum(
            per_node - other.used()
            for i, other in self.nodes.items()
            if i != node_id and other.role == node.role and other.ready
        )
        return room >= len(node.halves)

    def plan_consolidation(self, now: float) -> None:
        """After every change: when each node that could be consolidated will be, from its
        clock (see ``_Node``); a node that no longer could is not."""
        delay = self.config.consolidation
        assert delay is not None
        for node_id, node in self.nodes.items():
            if not self.movable(node_id):
                node.fits_since = None
                node.consolidate_at = math.inf
                continue
            if node.fits_since is None:
                node.fits_since = now
            due = max(node.fits_since + delay, node.changed_at + self.config.node_idle, now)
            if due != node.consolidate_at:
                node.consolidate_at = due
                self.push(due, _NODE_CONSOLIDATE, node_id)

    def consolidate(self, node_id: int, now: float) -> bool:
        """Karpenter deletes the node and evicts its halves (the listener sees them gone),
        if it still could; one node at a time, as its room may be what another counted on.
        Returns whether it did."""
        if not self.movable(node_id):
            return False
        for name in list(self.nodes[node_id].halves):
            self.drop_half(name, now)
        self.remove_node(node_id, now)
        return True

    def pool_room(self, role: Role, ready: bool) -> list[int]:
        per_node = self.config.pairs_per_node
        return [
            i
            for i, n in self.nodes.items()
            if n.role == role and n.used() < per_node and (n.ready or not ready)
        ]

    # --- halves ---------------------------------------------------------------------------

    def add_half(self, slot: str, role: Role, now: float, delay: list[float]) -> None:
        """A new half of ``slot``: on a ready node of its pool with room (``free_room``),
        else one launching with room, else a new node; ``delay`` holds the draw
        shared by the nodes this create or repair launches (drawn on first need)."""
        ttl = self.config.params.ttl
        name = f"{slot}{'r' if role is Role.RUNNER else 'w'}"
        half = _Half(
            Placeholder(
                name=name,
                slot=slot,
                role=role,
                phase=PodPhase.PENDING,
                created_at=now,
                expires_at=now + ttl,
            )
        )
        self.halves[name] = half
        self.slots.setdefault(slot, {})[role] = name
        node_id = self.free_room(role)
        if node_id is None:
            roomy = self.pool_room(role, ready=False)
            if roomy:
                node_id = roomy[0]
            else:
                if not delay:
                    delay.append(self.draw())
                node_id = self.launch(role, delay[0], now)
        self.bind(half, node_id, now)

    def create_pair(self, slot: str, now: float) -> None:
        self.pairs_created += 1
        self.launching[slot] = now
        delay: list[float] = []
        for role in (Role.RUNNER, Role.WORKFLOW):
            self.add_half(slot, role, now, delay)

    def repair(self, slot: str, role: Role, now: float) -> None:
        if slot not in self.slots or role in self.slots[slot]:
            return
        self.repairs += 1
        self.launching[slot] = now  # the monitor times a repaired slot from the repair
        self.add_half(slot, role, now, [])

    def probe(self, slot: str, role: Role, now: float) -> None:
        """One half alone in a new slot, as the monitor makes during a stall's back-off (not
        timed: its slot is timed from its repair)."""
        self.probes += 1
        self.add_half(slot, role, now, [])

    def drop_half(self, name: str, now: float) -> int:
        """The half goes (deleted, or preempted by a job's pod); returns its node."""
        half = self.halves.pop(name)
        slot, role = half.pod.slot, half.pod.role
        self.pair_seconds += self.clipped(half.pod.created_at, now) / 2
        members = self.slots[slot]
        del members[role]
        if not members:
            del self.slots[slot]
            self.launching.pop(slot, None)
        node = self.nodes.get(half.node)  # gone only at the end of the run
        if node is not None:
            node.halves.discard(name)  # a launching node launches for less
            node.changed_at = now
        return half.node

    # --- jobs -----------------------------------------------------------------------------

    def free_room(self, role: Role) -> int | None:
        """A ready node of the pool with room beyond its halves and jobs, if any: the
        fullest first, or with ``spread`` the emptiest (the oldest of equals)."""
        roomy = self.pool_room(role, ready=True)
        if not roomy:
            return None
        if self.config.spread:
            return min(roomy, key=lambda i: (self.nodes[i].used(), i))
        return max(roomy, key=lambda i: self.nodes[i].used())

    def admitting(self) -> str | None:
        """A Running pair's slot: the header has room for one more job."""
        for slot, members in self.slots.items():
            if len(members) == len(Role) and all(self.halves[n].running for n in members.values()):
                return slot
        return None

    def admit(self, index: int, now: float) -> None:
        """Job ``index``, admitted by a Running pair (the header counts them), starts: each
        of its pods goes to free room on a ready node of its pool if there is some (the
        scheduler preempts only when nothing fits), else preempts the pair's half there and
        takes its room. The pair stays whole only when both pods found free room."""
        slot = self.admitting()
        assert slot is not None
        placed: dict[Role, int] = {}
        for role in (Role.RUNNER, Role.WORKFLOW):
            free = self.free_room(role)
            if free is None:
                free = self.drop_half(self.slots[slot][role], now)
            placed[role] = free
        self.start(index, placed[Role.RUNNER], placed[Role.WORKFLOW], now)

    def start(self, index: int, runner_node: int, workflow_node: int, now: float) -> None:
        """Job ``index`` runs on ``runner_node`` and ``workflow_node`` from ``now``."""
        for node_id in (runner_node, workflow_node):
            node = self.nodes[node_id]
            node.jobs += 1
            node.expires_at = math.inf
            node.changed_at = now
        job = self.queue.jobs[index]
        self.queue.waits.append(now - job.queued_at)
        self.running_jobs += 1
        self.started += 1
        runner = job.job or f"job-{index}"
        self.job_pods[index] = (
            RealPod(name=runner, phase=PodPhase.RUNNING, bound=True),
            RealPod(name=job_pod_name(runner), phase=PodPhase.RUNNING, bound=True),
        )
        self.assigned.append((now, job.queued_at))
        self.job_nodes[index] = (runner_node, workflow_node)
        self.busy += self.clipped(now, now + (job.duration or 0.0))
        self.push(now + (job.duration or 0.0), _JOB_END, index)

    # --- the policy -----------------------------------------------------------------------

    def cannot_launch_at(self, now: float) -> dict[Role, float]:
        """With ``word``: per pool, the last moment a launch of it was refused (now, while
        one still waits): what the monitor reads from Karpenter's Events."""
        if not self.config.word:
            return {}
        said: dict[Role, float] = {}
        for role, waits in self.refused.items():
            started = [min(now, end) for begin, end in waits if begin <= now]
            if started:
                said[role] = max(started)
        return said

    def refused_pods(self, now: float) -> dict[str, float]:
        """With ``word``: per Pending half waiting for a node the cloud refused, when
        Karpenter's next scheduling run said it has no node for it (``KARPENTER_RETRY``
        after the refusal, or after the half's creation if it came later): what the monitor
        reads from Karpenter's FailedScheduling Events on the pods."""
        if not self.config.word:
            return {}
        found: dict[str, float] = {}
        for name, half in self.halves.items():
            node = self.nodes.get(half.node)
            if half.running or node is None or node.refused_at is None:
                continue
            at = max(node.refused_at, half.pod.created_at) + KARPENTER_RETRY
            if at <= now:
                found[name] = at
        return found

    def params(self, size: int, now: float) -> Params:
        """The knobs as the monitor sets them each pass: the pool's size, and from the
        launch times seen, the auto hold and the stall timeouts."""
        base = self.config.params
        hold = base.demand_hold
        if hold is None:  # auto, as the monitor: from the launch times seen so far
            hold = policy.demand_hold(self.launch_times, base.downscale_delay)
        stall = policy.stall_timeout(self.launch_times, base.ready_timeout)
        signal = policy.signal_stall_timeout(self.launch_times, base.ready_timeout)
        said = self.cannot_launch_at(now)
        refused = self.refused_pods(now)
        key = (
            size,
            hold,
            stall,
            signal,
            tuple(sorted(said.items())),
            tuple(sorted(refused.items())),
        )
        cached = self.params_cache.get(key)
        if cached is None:
            cached = replace(
                base,
                proactive_capacity=size,
                demand_enabled=True,
                demand_hold=hold,
                stall_timeout=stall,
                signal_stall_timeout=signal,
                cannot_launch_at=said,
                refused_at=refused,
            )
            self.params_cache[key] = cached
        return cached

    def reconcile(self, now: float) -> None:
        self.passes += 1
        demand = policy.resolve_demand(self.hud, now, self.params(0, now))
        pods = self.job_pods.values()
        size = warm_pool.drive(
            self.pool,
            self.arrivals,
            now,
            queued=demand.queued,
            read_at=warm_pool.read_at(demand, now),
            runners=[runner.name for runner, _ in pods],
            commit=True,
        )
        params = self.params(max(0, size), now)
        # The jobs' own pods, as the view shows them: a runner pod and its workflow pod,
        # both bound and Running (without them every lone placeholder-workflow would look
        # reserved for a runner still waiting for its workflow pod).
        observed = Observed(
            placeholders=tuple(half.pod for half in self.halves.values()),
            runner_pods=tuple(runner for runner, _ in pods),
            workflow_pods=tuple(workflow for _, workflow in pods),
            active_runners=self.running_jobs,
        )
        # The as-of correction, as the monitor: a job starts here when it is assigned.
        policy.forget_assigned(self.assigned, demand.as_of)
        demand = policy.with_starts(demand, self.assigned)
        plan, self.memory = policy.plan(observed, demand, params, self.memory, now)
        self.stalls += len(plan.stalls)
        # In the plan's order: a set's order of strings changes from one process to the next.
        for deletion in plan.deletes:
            if deletion.name in self.halves:
                self.settle(self.drop_half(deletion.name, now), now)
        for repair in plan.repairs:
            self.repair(repair.slot, repair.role, now)
        for slot in plan.creates:
            self.create_pair(slot, now)
        for probe in plan.probes:
            self.probe(probe.slot, probe.role, now)


def simulate(
    jobs: Sequence[TraceJob],
    config: SimConfig,
    pool: WarmPool,
    *,
    begin: float | None = None,
    until: float | None = None,
) -> Outcome:
    """Run one label set's ``jobs`` (sorted by queue time) under ``pool``. The listener
    starts at ``begin`` (default: the first arrival; not later than it); node-, pair- and
    busy seconds are counted from then up to ``until`` (default: the last job's end; the
    run goes on until then even when every job has ended, and past it until they have)."""
    return simulate_clusters(jobs, [config], [pool], begin=begin, until=until)


def simulate_clusters(
    jobs: Sequence[TraceJob],
    configs: Sequence[SimConfig],
    pools: Sequence[WarmPool],
    *,
    begin: float | None = None,
    until: float | None = None,
    preference: Sequence[Sequence[int]] | None = None,
) -> Outcome:
    """``simulate`` with several clusters serving one queue (peers sharing a label set):
    one listener each, with its own config (``params.cluster_index``/``cluster_count``
    shard the demand as in the monitor), warm pool, nodes and pairs; every listener reads
    the whole queue; a job goes to a cluster with a Running pair (see ``_Queue.assign``).
    ``preference``: one order of the clusters per job of ``jobs`` (each cluster index once),
    the clusters it asks in turn; None: a rotation. The outcome is the clusters' sum."""
    if len(configs) != len(pools) or not configs:
        raise ValueError(f"pools: one per cluster ({len(configs)} configs, {len(pools)} pools)")
    orders = _preference(jobs, len(configs), preference)
    ran = [j for j in jobs if j.duration is not None]
    if not ran:
        return merge(())
    start = ran[0].queued_at if begin is None else begin
    if start > ran[0].queued_at:
        raise ValueError(f"begin: {begin} is after the first arrival ({ran[0].queued_at})")
    stop = -math.inf if until is None else until
    queue = _Queue(
        jobs=ran, window=(start, math.inf if until is None else until), preference=orders
    )
    clusters = [
        _Run(queue=queue, index=i, config=config, pool=pool)
        for i, (config, pool) in enumerate(zip(configs, pools, strict=True))
    ]
    for index, job in enumerate(ran):
        queue.push(job.queued_at, _ARRIVAL, -1, index)
    for run in clusters:
        run.push(start, _DEMAND_READ)
        run.push(start, _PASS, _POKED)
        run.poked = True
    ahead = _Lookahead(ran) if any(c.lookahead > 0 for c in configs) else None
    end: float | None = None
    remaining = len(ran)
    while queue.events:
        now = queue.events[0][0]
        changed = [False] * len(clusters)
        due = [False] * len(clusters)
        while queue.events and queue.events[0][0] == now:
            _, kind, _, cluster, arg = heapq.heappop(queue.events)
            if kind == _ARRIVAL:
                queue.waiting.append(arg)
                continue
            run = clusters[cluster]
            config = run.config
            if kind == _JOB_END:
                run.running_jobs -= 1
                del run.job_pods[arg]
                runner_node, workflow_node = run.job_nodes.pop(arg)
                for node_id in (runner_node, workflow_node):
                    run.nodes[node_id].jobs -= 1
                    run.nodes[node_id].changed_at = now
                remaining -= 1
                if config.handover and queue.queued():
                    queue.waiting_head += 1  # the oldest waiting job takes the room
                    next_job = queue.waiting[queue.waiting_head - 1]
                    run.start(next_job, runner_node, workflow_node, now)
                else:
                    run.settle(runner_node, now)
                    run.settle(workflow_node, now)
                changed[cluster] = True
            elif kind == _NODE_READY:
                node = run.nodes.get(arg)
                if node is None:
                    continue
                node.ready = True
                node.changed_at = now
                for name in list(node.halves):
                    run.set_running(run.halves[name], now)
                    changed[cluster] = True
                run.settle(arg, now)
            elif kind == _NODE_EXPIRE:
                node = run.nodes.get(arg)
                if node is not None and node.expires_at == now:
                    run.remove_node(arg, now)
            elif kind == _NODE_CONSOLIDATE:
                node = run.nodes.get(arg)
                if node is not None and node.consolidate_at == now and run.consolidate(arg, now):
                    changed[cluster] = True
            elif kind == _DEMAND_READ:
                seen = queue.queued()
                if ahead is not None and config.lookahead > 0:
                    seen += ahead.count(now, config.lookahead)
                run.reads += 1
                run.seen[run.reads] = seen
                if config.aged_after is not None:
                    run.aged[run.reads] = queue.aged(now - config.aged_after)
                run.read_at[run.reads] = now
                run.push(now + config.demand_lag, _DEMAND_SEEN, run.reads)
                if remaining or now < stop:
                    run.push(now + config.demand_interval, _DEMAND_READ)
            elif kind == _DEMAND_SEEN:
                seen = run.seen.pop(arg)
                before = policy.resolve_demand(run.hud, now, run.params(0, now)).queued
                outcome = DemandOutcome(
                    result=DemandResult.OK, duration=0.0, queued=seen, aged=run.aged.pop(arg, None)
                )
                # The queue as of the read: jobs started since are not counted again.
                as_of = run.read_at.pop(arg)
                run.hud = policy.record_demand(run.hud, outcome, now, as_of=as_of)
                after = policy.resolve_demand(run.hud, now, run.params(0, now)).queued
                changed[cluster] = changed[cluster] or after != before
            elif arg == _POKED:  # _PASS for a change
                run.poked = False
                due[cluster] = True
            else:  # _PASS every interval when nothing else caused one
                due[cluster] = due[cluster] or arg == run.passes
        for cluster in queue.assign(clusters, now):
            changed[cluster] = True
        if remaining == 0 and now >= stop:
            end = now
            break
        for cluster, run in enumerate(clusters):
            if due[cluster]:
                run.reconcile(now)
                got = queue.assign(clusters, now)
                # The pass saw what changed before it; what it starts is a new change.
                changed[cluster] = cluster in got
                for other in got - {cluster}:
                    changed[other] = True
                run.push(now + run.config.recalculate_interval, _PASS, run.passes)
        for run in clusters:
            if run.config.consolidation is not None:
                run.plan_consolidation(now)
        for cluster, run in enumerate(clusters):
            if changed[cluster] and not run.poked:
                # The reconcile trigger coalesces a burst of changes into one pass.
                run.push(now + run.config.coalesce, _PASS, _POKED)
                run.poked = True
    assert end is not None
    for run in clusters:
        for node_id in list(run.nodes):
            run.remove_node(node_id, max(end, run.nodes[node_id].launched_at))
        for name in list(run.halves):
            run.drop_half(name, max(end, run.halves[name].pod.created_at))
    busy = sum(run.busy for run in clusters)
    per_role = {role: sum(run.node_seconds[role] for run in clusters) for role in Role}
    node_seconds = sum(per_role.values()) / 2  # a simulated node: one of each pool
    room_seconds = sum(
        sum(run.node_seconds.values()) / 2 * run.config.pairs_per_node for run in clusters
    )
    return Outcome(
        jobs=len(ran),
        busy=busy,
        spare=room_seconds - busy,
        pair_seconds=sum(run.pair_seconds for run in clusters),
        waits=tuple(sorted(queue.waits)),
        launches=sum(run.launches for run in clusters),
        pairs_created=sum(run.pairs_created for run in clusters),
        passes=sum(run.passes for run in clusters),
        node_seconds=node_seconds,
        runner_node_seconds=per_role[Role.RUNNER],
        workflow_node_seconds=per_role[Role.WORKFLOW],
        pool_launches=sum(run.pool_launches for run in clusters),
        stalls=sum(run.stalls for run in clusters),
        repairs=sum(run.repairs for run in clusters),
        probes=sum(run.probes for run in clusters),
        cluster_jobs=tuple(run.started for run in clusters),
    )


def _preference(
    jobs: Sequence[TraceJob], count: int, preference: Sequence[Sequence[int]] | None
) -> tuple[tuple[int, ...], ...]:
    """The given per-job orders, checked, for the jobs that ran (those the simulation
    queues); () for none."""
    if preference is None:
        return ()
    if len(preference) != len(jobs):
        raise ValueError(f"preference: one order per job ({len(jobs)} jobs, {len(preference)})")
    clusters = list(range(count))
    for order in preference:
        if sorted(order) != clusters:
            raise ValueError(f"preference: each order has every cluster once, got {list(order)}")
    return tuple(tuple(o) for j, o in zip(jobs, preference, strict=True) if j.duration is not None)


class _Lookahead:
    """Jobs of runs already under way (a job of the run was queued) that will be queued
    within a horizon: what a source reading each run's job graph could count ahead."""

    def __init__(self, jobs: Sequence[TraceJob]) -> None:
        first: dict[str, float] = {}
        for job in jobs:
            first[job.run] = min(first.get(job.run, job.queued_at), job.queued_at)
        later = sorted(
            (job.queued_at, first[job.run]) for job in jobs if job.queued_at > first[job.run]
        )
        self._times = [t for t, _ in later]
        self._first = [f for _, f in later]

    def count(self, now: float, horizon: float) -> int:
        lo = bisect.bisect_right(self._times, now)
        hi = bisect.bisect_right(self._times, now + horizon)
        return sum(1 for i in range(lo, hi) if self._first[i] <= now)
