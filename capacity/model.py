"""The capacity monitor's shared vocabulary: frozen values passed between the pure policy and
the I/O modules (kube, view, hud, reconciler). The placeholder pods' labels and annotations
are in ``capacity.contract``.

PURE: no I/O, no clock, no asyncio. Times are epoch seconds (floats) supplied by the caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

# --- observed state -----------------------------------------------------------------------


class Role(StrEnum):
    """Which half of a pair a placeholder is. The values are also the PriorityClass names."""

    RUNNER = "placeholder-runner"
    WORKFLOW = "placeholder-workflow"


class PodPhase(StrEnum):
    """Kubernetes pod phases (a StrEnum, so it compares equal to the API's strings)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


FINISHED_PHASES = frozenset({PodPhase.SUCCEEDED, PodPhase.FAILED})


@dataclass(frozen=True, kw_only=True)
class Placeholder:
    """One placeholder pod of this scale set, as the watch cache last saw it."""

    name: str
    slot: str
    role: Role
    phase: PodPhase
    terminating: bool = False  # metadata.deletionTimestamp is set
    node_name: str | None = None
    # False when node checks are on and the node is cordoned or being disrupted. The view
    # leaves it True when node checks are off; the policy also ignores it then.
    node_usable: bool = True
    created_at: float = 0.0
    expires_at: float = 0.0
    # False when the pod's owner is not this listener's owner (a leftover of an earlier
    # listener that the garbage collector has not removed). The policy deletes those.
    owned: bool = True


@dataclass(frozen=True, kw_only=True)
class RealPod:
    """A real runner pod or workflow pod of this scale set."""

    name: str
    phase: PodPhase
    bound: bool  # spec.nodeName is set
    terminating: bool = False


@dataclass(frozen=True, kw_only=True)
class Observed:
    """One consistent snapshot from the view. `active_runners` is the number of running plus
    pending real runners of this scale set (from the EphemeralRunners), computed by the view.
    `synced` is False until every watch has listed once; the policy takes no action before."""

    placeholders: tuple[Placeholder, ...] = ()
    runner_pods: tuple[RealPod, ...] = ()
    workflow_pods: tuple[RealPod, ...] = ()
    active_runners: int = 0
    synced: bool = True


# --- demand (HUD or GitHub's REST API) ----------------------------------------------------


class DemandResult(StrEnum):
    """Outcome of one demand read: one HUD request, or one pass over GitHub's REST API
    (a metrics label)."""

    OK = "ok"
    TIMEOUT = "timeout"
    HTTP_ERROR = "http_error"  # a non-2xx status or a transport failure
    BAD_RESPONSE = "bad_response"  # not JSON, or not the expected rows
    TOO_LARGE = "too_large"  # body exceeded max_response_bytes
    RATE_LIMITED = "rate_limited"  # the API asked us to wait (GitHub's REST API only)


@dataclass(frozen=True, kw_only=True)
class DemandOutcome:
    """What one demand read produced. `queued` (every queued job of the scale set's labels)
    is set only when `result` is OK; `aged` (those queued longer than the sharding age
    threshold) only when the read asked for it. `detail` is a one-line, secret-free
    description for logs."""

    result: DemandResult
    duration: float
    queued: int | None = None
    aged: int | None = None
    rows: int = 0
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class DemandState:
    """What the demand fallback remembers between reads of the demand source (HUD or GitHub)."""

    last_good: int | None = None
    last_good_aged: int | None = None  # the aged part of `last_good`, when it was read
    last_good_at: float | None = None
    # When the queue looked as `last_good` says: the read's start, less the source's lag.
    last_good_as_of: float | None = None
    last_result: DemandResult | None = None  # None: no request has finished yet


class DemandSource(StrEnum):
    """Where `Demand.queued` came from (a metrics label)."""

    HUD = "hud"  # the latest HUD request succeeded
    GITHUB = "github"  # the latest pass over GitHub's REST API succeeded
    WEBHOOK = "webhook"  # the latest read of the cluster's webhook receiver succeeded
    STALE = "stale"  # the source is failing; holding the last good value
    FLOOR = "floor"  # failing for too long (or never answered): the failure floor
    DISABLED = "disabled"  # no demand source configured: queued is 0


@dataclass(frozen=True, kw_only=True)
class Claim:
    """This cluster's part of a queue shared with peer clusters (demand sharding).

    `fresh` = `total` − `aged` jobs are split between the peers; `share` is this peer's
    part of them. Aged jobs are claimed whole by every peer. With one peer, `share` is
    `fresh` and `claimed` is `total`."""

    total: int
    aged: int
    fresh: int
    share: int

    @property
    def claimed(self) -> int:
        return self.share + self.aged


@dataclass(frozen=True, kw_only=True)
class Demand:
    """Queued jobs the policy should provision for, on top of proactive capacity. `claim`
    is how `queued` was derived from the source's figures (None on the floor or when
    disabled: then there are no figures)."""

    queued: int
    source: DemandSource
    age: float | None = None  # seconds since the value in use was fetched
    claim: Claim | None = None
    # When the queue looked like this (epoch seconds; None: not from a reading), and how many
    # of the jobs it counted GitHub has handed to this scale set since (policy.with_starts).
    as_of: float | None = None
    started_since: int = 0


# --- policy knobs, plan and memory --------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Params:
    """The policy's knobs in plain values (durations in seconds). Built from the settings by
    `capacity.settings.to_params`; `max_runners` comes from ARC's config and may change at
    any time (build a new Params with `dataclasses.replace`)."""

    max_runners: int
    # Pairs held beyond the queued jobs: the setting, replaced on every pass by the warm
    # pool's target (capacity.warm_pool; fixed mode: the setting itself).
    proactive_capacity: int = 0
    max_pending_pairs: int = 30
    ready_timeout: float = 300.0
    downscale_delay: float = 300.0
    ttl: float = 900.0
    renew_before: float = 300.0
    node_checks: bool = False
    # The demand source (HUD or GitHub's REST API; the hud_ names predate the second one).
    demand_enabled: bool = False
    demand_stale_after: float = 300.0
    demand_failure_base_capacity: int = 1
    demand_live: DemandSource = DemandSource.HUD  # the label of a fresh value
    # Demand sharding between peer clusters serving the same labels.
    cluster_index: int = 0
    cluster_count: int = 1
    # How long pairs made for queued jobs are held once the queue stops asking for them
    # (None: `downscale_delay`, like the warm pool). The monitor sets it from the launch
    # times it observes (`demand.hold: auto`).
    demand_hold: float | None = None
    # How long one half may stay Pending while the other is Running before the pair is
    # released as stalled (None: only `ready_timeout`). The monitor sets it from the launch
    # times it observes (policy.stall_timeout).
    stall_timeout: float | None = None
    # The shorter stall timeout for a half its pools said they cannot launch a node for (one
    # longest launch, policy.signal_stall_timeout; half of ready_timeout before enough launches).
    signal_stall_timeout: float | None = None
    # Per half: when its pools last said they cannot launch a node (epoch seconds): Karpenter's
    # insufficient-capacity Event for a NodePool the half lands on, or every
    # cluster-autoscaler node group of the half full or backed off. A half not in it, or a
    # word older than `stall_timeout`: the stall is decided from time alone.
    cannot_launch_at: Mapping[Role, float] = field(default_factory=dict)
    # Per placeholder name: when Karpenter last said it has no node for that pod (its
    # FailedScheduling Event, capacity.pod_refusals): no retry on another type is under way
    # for it. A time before the pod's creation is about an earlier pod of the same name.
    refused_at: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("max_runners", "proactive_capacity", "max_pending_pairs", "cluster_index"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.cluster_index < self.cluster_count:
            raise ValueError(
                f"cluster_index ({self.cluster_index}) must be less than cluster_count "
                f"({self.cluster_count})"
            )
        if self.demand_failure_base_capacity < 0:
            raise ValueError("demand_failure_base_capacity must be >= 0")
        for name in ("ready_timeout", "downscale_delay", "demand_stale_after", "renew_before"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 seconds, got {getattr(self, name)}")
        if self.ttl <= 0:
            raise ValueError(f"ttl must be > 0 seconds, got {self.ttl}")
        if self.renew_before >= self.ttl:
            raise ValueError(
                f"renew_before ({self.renew_before}s) must be shorter than ttl ({self.ttl}s)"
            )


class StallCause(StrEnum):
    """Why a pair was released as stalled (a metrics label and a log field)."""

    # its Pending half's pools said they cannot launch a node (Karpenter's insufficient
    # capacity, a full or backed-off node group): released after one longest launch
    CLOUD = "cloud"
    TIME = "time"  # Pending for twice the longest launch, with no word from the pools


class DeleteReason(StrEnum):
    """Why the plan deletes a placeholder (a metrics label)."""

    TIMEOUT = "timeout"  # a half still Pending after ready_timeout: the whole pair goes
    # a half still Pending after stall_timeout while the other is Running: the whole pair
    # goes, and new pairs wait out a back-off (the cloud cannot give that half's node)
    STALLED = "stalled"
    EXCESS = "excess"  # more pairs than the (damped) target, or above the max_runners headroom
    # a lone half that no real runner needs and no other half can pair with, left over for
    # downscale_delay
    BROKEN = "broken"
    EXPIRED = "expired"  # reached its TTL, or replaced by a Running pair (make-before-break)
    FINISHED = "finished"  # Succeeded/Failed: the sleep ended or the pod was evicted
    ORPHAN = "orphan"  # not owned by this listener's owner
    UNUSABLE = "unusable"  # phase Unknown, or Running on a cordoned/disrupted node


@dataclass(frozen=True)
class Deletion:
    name: str
    reason: DeleteReason


@dataclass(frozen=True)
class Repair:
    """A lone half's slot given back its missing half: one pod, ``role``, in ``slot``."""

    slot: str
    role: Role


@dataclass(frozen=True, kw_only=True)
class Sides:
    """The capacity count of one snapshot (docs/capacity-model.md §3)."""

    runner_side: int
    workflow_side: int
    advertised: int


@dataclass(frozen=True, kw_only=True)
class Plan:
    """One reconcile pass's decision.

    `creates` are slot ids for new pairs; each id means two pods (one per Role). The policy
    chooses the ids (decimal strings, never reused within a process and never equal to any
    observed slot) so the caller does not need to. `repairs` are slots of lone halves that
    get their missing half back (one pod each). `probes` are new slots (ids after the
    creates') of one half alone, the half a stall's back-off is about (one pod each: it asks
    the cloud again, holding no node for the other half). `deletes` are pod names.
    `advertised` is the capacity of the snapshot *after* the deletes (creates are Pending and
    never count). The counts describe the snapshot as observed, for metrics."""

    creates: tuple[str, ...] = ()
    repairs: tuple[Repair, ...] = ()
    probes: tuple[Repair, ...] = ()
    deletes: tuple[Deletion, ...] = ()
    advertised: int = 0
    runner_side: int = 0
    workflow_side: int = 0
    desired_pairs: int = 0  # docs/capacity-model.md §4, undamped
    target_pairs: int = 0  # desired after the downscale damping and the headroom clamp
    running_pairs: int = 0  # pairs with both halves Running (and usable)
    pending_pairs: int = 0  # pairs with a half still Pending
    broken: int = 0  # lone halves (the other half is gone)
    held_by_nodepools: int = 0  # pairs not created: the NodePools' limits cannot hold them
    # seconds left of the back-off after a stalled pair (no new pairs meanwhile, a probe)
    stall_backoff: float = 0.0
    # one entry per pair released as stalled this pass: why (the signal or time alone)
    stalls: tuple[StallCause, ...] = ()
    # the halves whose pools are short, confirmed (policy._short_roles): no new pairs
    short_roles: tuple[Role, ...] = ()
    held_by_shortage: int = 0  # pairs wanted and otherwise admitted, not created meanwhile
    # after a back-off or a confirmed shortage, the new pairs that may be in flight (slow
    # start); 0: not ramping
    slow_start: int = 0


@dataclass(frozen=True, kw_only=True)
class SlowStart:
    """The ramp after a stall's back-off or a confirmed shortage ends (policy `_slow_start`):
    since when, the half the cloud could not give, the first slot id made during it, and
    the slots made since whose half of that role has run (each doubles the pairs allowed in
    flight)."""

    since: float
    role: Role
    first_slot: int
    confirmed: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Memory:
    """State the policy carries from one pass to the next (returned by the policy; the caller
    only stores it). `desired_window` is a sliding-window maximum of recent desired values,
    newest last, used to damp scale-down. `next_slot` is the next slot id to hand out.
    `lone_since` maps each left-over lone half (pod name) to when it was first seen so, to
    damp its removal like any other scale-down."""

    desired_window: tuple[tuple[float, int], ...] = field(default=())
    next_slot: int = 0
    lone_since: tuple[tuple[str, float], ...] = field(default=())
    # The warm part of `desired` over `downscale_delay`, when queued jobs are held for a
    # shorter `demand_hold` (then `desired_window` spans that hold).
    warm_window: tuple[tuple[float, int], ...] = field(default=())
    # After a stalled pair (`stalled_at`): no new pairs before `stalled_at + backoff`;
    # `backoff` doubles on the next stall and is cleared once a half of the stalled role
    # made since the last stall (a probe's, or a pair's) is Running.
    backoff: float = 0.0
    stalled_at: float | None = None
    # The half the last stall was Pending on (the one the cloud could not give): during the
    # back-off one placeholder of it alone asks again (a probe); one Running clears it.
    stalled_role: Role | None = None
    # The probes' slots since the last stall, while they live (a pod's creationTimestamp has
    # whole seconds, so a probe made in the stall's pass cannot be told by its age).
    probe_slots: tuple[str, ...] = ()
    # After the back-off or a confirmed shortage ends: new pairs in flight are ramped up,
    # not made all at once; the halves short in the last pass, to see a shortage end.
    slow_start: SlowStart | None = None
    short_roles: tuple[Role, ...] = ()
