"""The capacity policy: what to advertise and which placeholder pods to create or delete.

PURE: no I/O, no clock, no asyncio, no logging. `now` (epoch seconds) is passed in, and the
little state the policy needs between passes travels in `Memory`, which it returns.

Counting (docs/capacity-model.md §3, §4)::

    desired_pairs = clamp(proactive_capacity + queued_now, 0, max_runners − active_runners)
    queued_now    = queued − jobs queued before the reading's as-of time, assigned here since
    runner_side   = bound real runner pods   + ready placeholder-runners
    workflow_side = bound real workflow pods + ready placeholder-workflows
    advertised    = max(0, min(max_runners, runner_side, workflow_side))

"Bound" real pods are those with a node, not terminating, in phase Pending or Running (a
finished pod no longer holds a job). A placeholder is "ready" when Running, not terminating
and (with node checks on) on a usable node. Pending capacity is never advertised.

Pairs. Pairs are created and deleted whole (both halves share a slot id). Halves disappear on
their own when real pods preempt them; a slot with one half left is *broken*. Lone halves are
treated as a pool:

- a lone placeholder-workflow whose runner half was taken by a real runner keeps protecting
  workflow capacity while some real runner still lacks a bound workflow pod ("reserved");
- the remaining lone halves are paired up runner-with-workflow across slots ("virtual
  pairs", which count like complete ones: the advertised sides already see them);
- whatever is left is *repaired* when a pair is wanted (step 9: its missing half is created
  in its slot, one pod and one node launch instead of two), else deleted (reason BROKEN) once
  it has been left over for `downscale_delay` (it may still be taken by a real pod
  meanwhile).

The plan, in order:

1. not owned → ORPHAN; Succeeded/Failed → FINISHED; past `expires_at` → EXPIRED (per pod);
2. a slot with a half in phase Unknown or Running on an unusable node → the whole slot
   UNUSABLE; a slot with a half Pending longer than `ready_timeout` → the whole slot TIMEOUT;
   a slot with one half Running and the other Pending longer than `stall_timeout` (twice
   the longest recent launch; one launch, `signal_stall_timeout`, when the half's pools said
   within the last `stall_timeout` that they cannot launch a node) → the whole slot
   STALLED, and step 9 creates no pair for a back-off (`stall_timeout`, doubled per stall
   up to `ready_timeout`, cleared once a half of the stalled role created after the stall
   is Running): the cloud cannot give that half's node, and a new pair would only hold
   another node for the half it can give. While pairs are wanted, one placeholder of the
   stalled half alone (a *probe*) keeps asking, so the back-off ends when the cloud gives
   the node again, not only when it runs out;
3. runner room: placeholder-runners beyond ``max_runners − real runners`` go at once
   (EXCESS), real runners being the active EphemeralRunners (also those whose pod is still
   being created) or the runner pods alive, whichever is more: those not ready first, then
   lone ones, then the newest. A ready pair loses only its runner half while real runners
   still need workflow room (its workflow half is then a lone half, reserved below); else
   it goes whole. So runner halves and the runner pods about to take their room are never
   both held (docs/capacity-model.md §5);
3b. pairing of lone halves as above;
4. pairs within `renew_before` of expiry are *renewing*; the rest are *fresh*;
5. fresh pairs above the damped target are deleted (EXCESS): Pending ones first, then the
   newest Running ones. The damped target is the maximum `desired_pairs` seen during the
   last `demand_hold` seconds (pairs for queued jobs: about one launch time), or of its warm
   part during the last `downscale_delay` if that is larger, capped by the current
   `max_runners` (an operator's cap applies at once, ci-infra #921). Scale-up is immediate;
6. renewing pairs are kept only while Running fresh pairs do not yet cover the target
   (make-before-break); the others go (EXPIRED, or EXCESS when the target itself fell);
7. more than `max_pending_pairs` pairs Pending → the newest Pending ones go (EXCESS);
8. left-over lone halves older than `downscale_delay` go (BROKEN); lone placeholder-runners
   beyond max_runners go at once (EXCESS);
9. pairs wanted up to `desired_pairs` are made first by repairing left-over lone halves
   (runner halves within the wanted and in-flight counts alone, since they add no runner;
   workflow halves like new pairs; not a half within `renew_before` of its expiry; a slot
   whose missing half's name is not free yet waits for a later pass), then as new pairs,
   limited so that (a) pairs Pending stay within
   `max_pending_pairs` — the cap is on pairs *in flight*, not in existence, so a long queue
   drains (ci-infra #606) — and (b) placeholder-runners plus real runners never
   exceed `max_runners` (ci-infra #528). Consequence of (b): a pool sized exactly at the cap
   renews by letting a pair expire first (a short dip) rather than going over the cap;
   and (c), with NodePool limits read, within the pairs the pools can still hold
   (`nodepool_room`): a pair that no node may be launched for would only wait Pending until
   its ready timeout; likewise with cluster-autoscaler node groups read, within the room a
   full group's nodes still have for the halves (`node_group_room`); and (d) none during a
   stall back-off (step 2), only a probe when no half of the stalled role is Pending. Once
   the probe runs it is a lone half, repaired like any other; and (e) none during a
   confirmed shortage (`_short_roles`: the pools of a half said they cannot launch a node,
   and a half they refused is still Pending `SIGNAL_STALL_FLOOR` after its creation);
   and (f) after either of those holds ends, in a slow start (`_slow_start`): one new pair
   in flight with that half Pending, doubled per pair made since whose half ran.

Slot ids are decimal strings chosen by the policy: above every numeric slot observed and above
`Memory.next_slot`, so ids are not reused while a process lives and never collide with a pod
that still exists. The plan is idempotent: applying it and planning again at the same `now`
with the returned memory yields no creates and no deletes.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

from capacity.model import (
    FINISHED_PHASES,
    Claim,
    DeleteReason,
    Deletion,
    Demand,
    DemandOutcome,
    DemandResult,
    DemandSource,
    DemandState,
    Memory,
    Observed,
    Params,
    Placeholder,
    Plan,
    PodPhase,
    RealPod,
    Repair,
    Role,
    Sides,
    SlowStart,
    StallCause,
)
from capacity.nodepools import NodePool, PoolMemory
from capacity.pods import job_pod_name

_HOLDING_PHASES = frozenset({PodPhase.PENDING, PodPhase.RUNNING})

# --- counting -----------------------------------------------------------------------------


def is_ready(p: Placeholder, params: Params) -> bool:
    """Whether a placeholder counts as confirmed capacity."""
    return (
        p.phase == PodPhase.RUNNING
        and not p.terminating
        and (p.node_usable or not params.node_checks)
    )


def _holds_capacity(pod: RealPod) -> bool:
    return pod.bound and not pod.terminating and pod.phase in _HOLDING_PHASES


def count_sides(observed: Observed, params: Params, *, excluding: Iterable[str] = ()) -> Sides:
    """runner side, workflow side and the advertised value of a snapshot, optionally as if
    the placeholders named in `excluding` were already gone."""
    gone = frozenset(excluding)
    ready = [p for p in observed.placeholders if p.name not in gone and is_ready(p, params)]
    runner_side = sum(1 for p in observed.runner_pods if _holds_capacity(p)) + sum(
        1 for p in ready if p.role == Role.RUNNER
    )
    workflow_side = sum(1 for p in observed.workflow_pods if _holds_capacity(p)) + sum(
        1 for p in ready if p.role == Role.WORKFLOW
    )
    advertised = max(0, min(params.max_runners, runner_side, workflow_side))
    return Sides(runner_side=runner_side, workflow_side=workflow_side, advertised=advertised)


def real_runners(observed: Observed) -> int:
    """Real runners that hold runner room or are about to take some: the active
    EphemeralRunners (also those whose pod is still being created), or the runner pods alive
    (bound or not, not finished or terminating) when the pod watch is ahead."""
    alive = sum(1 for r in observed.runner_pods if not r.terminating and r.phase in _HOLDING_PHASES)
    return max(observed.active_runners, alive)


def headroom(params: Params, active_runners: int) -> int:
    """How many more runners (real or placeholder) fit under max_runners."""
    return max(0, params.max_runners - active_runners)


def desired_pairs(params: Params, demand: Demand, active_runners: int) -> int:
    """Proactive capacity plus queued jobs, within the headroom (docs/capacity-model.md §4)."""
    wanted = params.proactive_capacity + demand.queued
    return max(0, min(wanted, headroom(params, active_runners)))


# --- the hold of pairs made for queued jobs -------------------------------------------------

HOLD_FLOOR = 30.0  # seconds: below this a hold only churns pairs between two readings
HOLD_MIN_LAUNCHES = 8  # launches seen before the observed launch time is trusted
LAUNCHES_KEPT = 32  # the recent launch times the hold is taken from


def demand_hold(launches: Sequence[float], ceiling: float) -> float | None:
    """The auto hold of pairs made for queued jobs: the p90 of the recent pair launch times
    (create → both halves Running), within [HOLD_FLOOR, ``ceiling``]; None (use the ceiling,
    `downscale_delay`) until HOLD_MIN_LAUNCHES have been seen.

    Rent or buy: a pair released while its job might still come costs a launch again, one
    held idle costs its idle time; holding it for one launch time and then letting go never
    costs more than twice the better choice. The p90 and not the median, because a hold
    shorter than the launch it hedges deletes pairs whose nodes are still coming up."""
    if len(launches) < HOLD_MIN_LAUNCHES:
        return None
    ordered = sorted(launches)
    p90 = ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]
    return max(min(HOLD_FLOOR, ceiling), min(p90, ceiling))


# Seconds: never call a half stalled sooner than this. Above any ordinary node launch
# (a minute or two on the clouds): when the recent pairs all landed on nodes with room,
# their launch times say nothing of a new node's, and a lower floor released pairs whose
# node was still coming up (seen in the outcome benchmark).
STALL_FLOOR = 180.0
STALL_LAUNCHES = 2.0  # a half is stalled once Pending this many of the longest launches
# Seconds: the floor when the half's pools said they cannot launch a node. Lower than
# STALL_FLOOR because the word, not the wait, tells the shortage from a slow launch; still a
# minute, so a launch retried on another instance type after one refusal can finish.
SIGNAL_STALL_FLOOR = 60.0


def stall_timeout(launches: Sequence[float], ceiling: float) -> float | None:
    """How long one half of a pair may stay Pending while the other holds a node before the
    pair is released as stalled: twice the longest of the recent launch times, within
    [STALL_FLOOR, ``ceiling``] (`placeholder_ready_timeout`); None (the ceiling alone) until
    HOLD_MIN_LAUNCHES have been seen.

    A workflow half Pending for twice as long as any recent launch took, while its runner
    half sits on a node, is not a slow launch but a type the cloud cannot give (Karpenter's
    insufficient capacity, a backed-off node group): holding the runner half pays for its
    node until `placeholder_ready_timeout` for a pair that cannot become capacity. The
    longest launch and not the p90: the recent launches mix pairs that landed on nodes with
    room (seconds) with pairs that needed new nodes (minutes), and a p90 of that mix called
    ordinary new-node launches on a loaded control plane stalled."""
    if len(launches) < HOLD_MIN_LAUNCHES:
        return None
    return max(min(STALL_FLOOR, ceiling), min(STALL_LAUNCHES * max(launches), ceiling))


def signal_stall_timeout(launches: Sequence[float], ceiling: float) -> float:
    """How long a half may stay Pending, while the other holds a node, once its pools have
    said they cannot launch a node for it: the longest of the recent launch times, within
    [SIGNAL_STALL_FLOOR, ``ceiling``].

    Half of `stall_timeout`: that one waits two launches because, from time alone, a slow
    launch on a loaded cluster looks the same as a type the cloud cannot give. Karpenter's
    insufficient-capacity error or a backed-off node group says which it is, so one launch
    (any launch the pools still try, on another type, would be done by then) is enough.

    Before HOLD_MIN_LAUNCHES have been seen: half of ``ceiling`` (at least the floor). The
    word needs no sample to be believed, only a bound on a launch still being retried; a
    shortage early in a listener's life (in the outcome benchmark, before a site's eighth
    launch) otherwise held every runner half to the ready timeout."""
    floor = min(SIGNAL_STALL_FLOOR, ceiling)
    if len(launches) < HOLD_MIN_LAUNCHES:
        return max(floor, ceiling / 2)
    return max(floor, min(max(launches), ceiling))


# --- demand sharding ----------------------------------------------------------------------


def claim(total: int, aged: int | None, *, index: int = 0, count: int = 1) -> Claim:
    """This peer's part of a queue shared by `count` clusters serving the same labels.

    Fresh jobs (`total` − `aged`) are split: each peer takes `fresh // count`, and the
    remainder goes one each to the lowest indexes, so the shares always add up to the fresh
    total and no peer knows of the others. Aged jobs (queued longer than the age threshold)
    are claimed whole by every peer: if the peer whose share they were is down or full, the
    others pick them up after the threshold, with no traffic between clusters. `aged` is
    None when the source did not report it (counted as 0) and is clamped to `total`: the
    two figures may come from two requests that saw slightly different queues."""
    total = max(0, total)
    aged_jobs = 0 if aged is None else max(0, min(aged, total))
    fresh = total - aged_jobs
    count = max(1, count)
    share = fresh // count + (1 if index < fresh % count else 0)
    return Claim(total=total, aged=aged_jobs, fresh=fresh, share=share)


# --- demand fallback (HUD or GitHub) --------------------------------------------------------


def record_demand(
    state: DemandState, outcome: DemandOutcome, now: float, *, as_of: float | None = None
) -> DemandState:
    """Fold one demand read's outcome into the fallback state. ``as_of`` is when the queue
    looked as the read says (its start, less the source's lag; default ``now``)."""
    if outcome.result == DemandResult.OK and outcome.queued is not None:
        return DemandState(
            last_good=outcome.queued,
            last_good_aged=outcome.aged,
            last_good_at=now,
            last_good_as_of=now if as_of is None else as_of,
            last_result=DemandResult.OK,
        )
    return replace(state, last_result=outcome.result)


ASSIGNMENTS_KEPT = 1000  # assignments remembered: far more than one reading can count


def with_starts(demand: Demand, assigned: Iterable[tuple[float, float]]) -> Demand:
    """``demand`` with the jobs it counted that GitHub has given this scale set since:
    ``assigned`` holds (assigned at, queued at) per job; those assigned after the reading's
    as-of time and queued before it were in the reading and are running here now."""
    if demand.as_of is None:
        return demand
    as_of = demand.as_of
    started = sum(1 for at, queued in assigned if at > as_of and queued <= as_of)
    return replace(demand, started_since=started)


def forget_assigned(assigned: deque[tuple[float, float]], as_of: float | None) -> None:
    """Drop the assignments made at or before ``as_of`` from the front of ``assigned`` (kept
    in time order): a reading's as-of time never goes back, so they can never count again,
    and ``with_starts`` then reads only the jobs assigned since the latest reading."""
    if as_of is None:
        return
    while assigned and assigned[0][0] <= as_of:
        assigned.popleft()


def net_of_starts(demand: Demand) -> Demand:
    """``demand`` without the jobs that have started here since its reading (the as-of
    correction): a reading 30 s behind the queue would otherwise ask for pairs for jobs whose
    runners already exist, and keep them for as long as pairs are held.

    With peers, a scale set given more of the reading's jobs than its share plans for the
    whole queue left (the reading's total less its starts), not for its share less its
    starts. GitHub hands a job to whichever scale set has room; a peer whose pairs cannot
    launch (a shortage) advertises none, so every job comes here, and the share less the
    starts reaches zero while the peer's half of the queue still waits, each job for a slot
    here to free up (the outcome benchmark: half of the waiting in a shortage). Starting
    more than the share is the evidence, and it needs no traffic between clusters; below it
    the peers are taken to be serving their shares, as before."""
    started = demand.started_since
    if started <= 0:
        return demand
    part = demand.claim
    if part is not None and part.claimed < part.total and started > part.share:
        return replace(demand, queued=max(0, part.total - started))
    return replace(demand, queued=max(0, demand.queued - started))


def resolve_demand(state: DemandState, now: float, params: Params) -> Demand:
    """Queued jobs to plan for. While the source fails, hold the last good value for
    `demand_stale_after` seconds, then use the failure floor (`demand_failure_base_capacity`, on
    top of proactive capacity). An outage never reads as "zero queued" (ci-infra #577). A
    "good" value that has not been refreshed within the window (the loop is stuck) is
    treated like a failure.

    With peers (`cluster_count` > 1) a held value is this peer's claim on it, recomputed from
    the held figures; the floor is not split: during an outage no peer can know whether the
    others are up, so each keeps its own floor."""
    if not params.demand_enabled:
        return Demand(queued=0, source=DemandSource.DISABLED)
    if state.last_good is not None and state.last_good_at is not None:
        age = max(0.0, now - state.last_good_at)
        if age <= params.demand_stale_after:
            live = state.last_result == DemandResult.OK
            part = claim(
                state.last_good,
                state.last_good_aged,
                index=params.cluster_index,
                count=params.cluster_count,
            )
            return Demand(
                queued=part.claimed,
                source=params.demand_live if live else DemandSource.STALE,
                age=age,
                claim=part,
                as_of=state.last_good_as_of,
            )
        return Demand(
            queued=params.demand_failure_base_capacity, source=DemandSource.FLOOR, age=age
        )
    return Demand(queued=params.demand_failure_base_capacity, source=DemandSource.FLOOR)


# --- planning -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Pair:
    runner: Placeholder
    workflow: Placeholder

    @property
    def names(self) -> tuple[str, str]:
        return (self.runner.name, self.workflow.name)

    @property
    def created_at(self) -> float:
        return max(self.runner.created_at, self.workflow.created_at)

    @property
    def expires_at(self) -> float:
        return min(self.runner.expires_at, self.workflow.expires_at)

    def ready(self, params: Params) -> bool:
        return is_ready(self.runner, params) and is_ready(self.workflow, params)


def _unusable(p: Placeholder, params: Params) -> bool:
    if p.phase == PodPhase.UNKNOWN:
        return True
    return params.node_checks and p.phase == PodPhase.RUNNING and not p.node_usable


def _timed_out(p: Placeholder, params: Params, now: float) -> bool:
    # Strictly greater: a pair created at `now` must not time out at the same `now`.
    return p.phase == PodPhase.PENDING and now - p.created_at > params.ready_timeout


def _word_window(params: Params) -> float:
    """How long a pool's word that it cannot launch a node applies: the longest a half would
    wait on time alone (`stall_timeout`, `ready_timeout` while unknown)."""
    return params.stall_timeout if params.stall_timeout is not None else params.ready_timeout


def refused_during(params: Params, created: float) -> bool:
    """Whether some half's pools (or Karpenter, of a pod) said they cannot launch a node
    while a pair created at ``created`` was launching, or recently enough before that the
    word applies to it (the same window `_stalled` uses): its launch time measured a
    shortage, not a launch."""
    window = _word_window(params)
    said = [*params.cannot_launch_at.values(), *params.refused_at.values()]
    return any(at >= created - window for at in said)


def _own_refusal(half: Placeholder, params: Params) -> float | None:
    """When Karpenter last said it has no node for this very half (`refused_at`); None if
    never, or only for an earlier pod of the same name (whole seconds on both sides: a
    refusal in the second the pod was made counts)."""
    at = params.refused_at.get(half.name)
    return at if at is not None and at >= int(half.created_at) else None


def _word(half: Placeholder, params: Params) -> float | None:
    """The latest word that no node is coming for ``half``: its pools' (for its role) or
    Karpenter's of the half itself."""
    said = [t for t in (params.cannot_launch_at.get(half.role), _own_refusal(half, params)) if t]
    return max(said) if said else None


def _stalled(members: Sequence[Placeholder], params: Params, now: float) -> StallCause | None:
    """One half Running, the other Pending for longer than ``signal_stall_timeout`` when its
    pools said recently that they cannot launch a node (CLOUD), else than ``stall_timeout``
    (TIME); None: not stalled.

    Recently: within the last ``stall_timeout`` (``ready_timeout`` while unknown), the
    longest the half would wait on time alone. The word may predate the half: a provider
    stops offering a type it could not launch for a few minutes (Karpenter's AWS provider
    for 3), so a half made just after the refusal gets no word of its own. An older word is
    about a shortage that may be over."""
    if len(members) != 2 or PodPhase.RUNNING not in {p.phase for p in members}:
        return None
    pending = [p for p in members if p.phase == PodPhase.PENDING]
    if len(pending) != 1:
        return None
    half = pending[0]
    waited = now - half.created_at
    said = _word(half, params)
    recent = _word_window(params)
    if (
        params.signal_stall_timeout is not None
        and said is not None
        and now - said <= recent
        and waited > params.signal_stall_timeout
    ):
        return StallCause.CLOUD
    if params.stall_timeout is not None and waited > params.stall_timeout:
        return StallCause.TIME
    return None


def _lone_keep_order(p: Placeholder, params: Params) -> tuple[bool, float, str]:
    """Lone halves most worth keeping first: Running before Pending, then oldest."""
    return (not is_ready(p, params), p.created_at, p.name)


def _delete_order(pair: _Pair, params: Params) -> tuple[bool, float, str]:
    """Pairs to delete first on scale-down: Pending ones, then the newest Running ones."""
    return (pair.ready(params), -pair.created_at, pair.runner.name)


def _renew_keep_order(pair: _Pair, params: Params) -> tuple[bool, float, str]:
    """Renewing pairs most worth keeping first: Running, then the latest to expire."""
    return (not pair.ready(params), -pair.expires_at, pair.runner.name)


def _cap_runner_halves(
    complete: list[_Pair],
    lone_runners: list[Placeholder],
    lone_workflows: list[Placeholder],
    observed: Observed,
    params: Params,
    delete: Callable[[Iterable[Placeholder], DeleteReason], None],
) -> None:
    """Delete runner halves beyond ``max_runners − real runners`` (EXCESS): those not ready
    first, then lone ones, then the newest. A ready pair keeps its workflow half while real
    runners still need workflow room (it joins the lone halves and is reserved in step 3b);
    otherwise the pair goes whole. Updates the three lists in place."""
    over = len(complete) + len(lone_runners) - headroom(params, real_runners(observed))
    if over <= 0:
        return
    reservable = _runners_needing_workflow_room(observed) - len(lone_workflows)
    candidates: list[tuple[Placeholder, _Pair | None]] = [(p, None) for p in lone_runners]
    candidates += [(pair.runner, pair) for pair in complete]

    def order(candidate: tuple[Placeholder, _Pair | None]) -> tuple[bool, bool, float, str]:
        half, pair = candidate
        ready = pair.ready(params) if pair is not None else is_ready(half, params)
        return (ready, pair is not None, -half.created_at, half.name)

    for half, pair in sorted(candidates, key=order)[:over]:
        if pair is None:
            lone_runners.remove(half)
            delete([half], DeleteReason.EXCESS)
        elif pair.ready(params) and reservable > 0:
            complete.remove(pair)
            delete([half], DeleteReason.EXCESS)
            lone_workflows.append(pair.workflow)
            reservable -= 1
        else:
            complete.remove(pair)
            delete([pair.runner, pair.workflow], DeleteReason.EXCESS)


def _runners_needing_workflow_room(observed: Observed) -> int:
    """Real runners that may still need workflow capacity: alive runner pods without a bound
    workflow pod, or — if more — active EphemeralRunners without one. The EphemeralRunner
    count leads the pod watch, so a survivor is not mistaken for an orphan when the watch
    shows its runner half preempted before it shows the runner pod. Over-counting only keeps
    a lone placeholder-workflow a little longer."""
    with_workflow = {w.name for w in observed.workflow_pods if _holds_capacity(w)}
    alive = [r for r in observed.runner_pods if not r.terminating and r.phase in _HOLDING_PHASES]
    served = sum(1 for r in alive if job_pod_name(r.name) in with_workflow)
    return max(0, len(alive) - served, observed.active_runners - served)


def _slide(
    window: tuple[tuple[float, int], ...], now: float, value: int, span: float
) -> tuple[tuple[float, int], ...]:
    """Sliding-window maximum: keep samples from the last `span` seconds whose value is above
    every newer one (a dominated sample can never be the maximum again)."""
    kept = [(t, v) for t, v in window if now - span <= t <= now and v > value]
    kept.append((now, value))
    return tuple(kept)


def _slot_number(slot: str) -> int | None:
    """A slot id as the number the policy gave it; None for one it did not (not decimal)."""
    return int(slot) if slot.isascii() and slot.isdigit() else None


def _next_slot(observed: Observed, memory: Memory) -> int:
    numeric = [n for p in observed.placeholders if (n := _slot_number(p.slot)) is not None]
    return max([memory.next_slot, *(n + 1 for n in numeric)])


class _Deletes:
    """The pods a pass deletes, each with the first reason it was given."""

    def __init__(self) -> None:
        self.reasons: dict[str, DeleteReason] = {}

    def __call__(self, pods: Iterable[Placeholder], reason: DeleteReason) -> None:
        for p in pods:
            self.reasons.setdefault(p.name, reason)

    def pair(self, pair: _Pair, reason: DeleteReason) -> None:
        self((pair.runner, pair.workflow), reason)


@dataclass
class _Slots:
    """Live placeholders grouped by slot: whole pairs and the halves left alone."""

    complete: list[_Pair]
    lone_runners: list[Placeholder]
    lone_workflows: list[Placeholder]
    stalls: list[StallCause] = field(default_factory=list)  # pairs released as stalled
    stalled_roles: list[Role] = field(default_factory=list)  # their Pending halves


@dataclass(frozen=True)
class _Kept:
    """What steps 4–7 keep: pairs in all, fresh ones among them, and those still Pending."""

    total: int
    fresh: int
    pending: int


def plan(
    observed: Observed,
    demand: Demand,
    params: Params,
    memory: Memory,
    now: float,
    *,
    pool_room: int | None = None,
) -> tuple[Plan, Memory]:
    """One reconcile pass (see the module docstring; each step below is one function). Before
    the view has synced, only the counts are computed: no creates, no deletes, memory
    unchanged. ``pool_room`` caps the new pairs by what the NodePools' limits still admit
    (``nodepool_room``; None: no cap)."""
    sides = count_sides(observed, params)
    real = real_runners(observed)
    desired = desired_pairs(params, net_of_starts(demand), real)
    if not observed.synced:
        return (
            Plan(
                advertised=sides.advertised,
                runner_side=sides.runner_side,
                workflow_side=sides.workflow_side,
                desired_pairs=desired,
            ),
            memory,
        )
    delete = _Deletes()
    live = _sweep(observed.placeholders, now, delete)  # 1
    slots = _group_slots(live, params, now, delete)  # 2
    backoff, stalled_at, stalled_role = _stall_backoff(  # 2
        memory, slots.stalled_roles, live, params, now
    )
    backing_off = 0.0 if stalled_at is None else max(0.0, stalled_at + backoff - now)
    first = _next_slot(observed, memory)
    _cap_runner_halves(  # 3
        slots.complete, slots.lone_runners, slots.lone_workflows, observed, params, delete
    )
    broken = len(slots.lone_runners) + len(slots.lone_workflows)
    # The probes alive (the memory's, since the last stall): each is alone on purpose until
    # the stall is over, not a partner for another slot's half (3b) nor aged (8); in the
    # pass that sees one run (it cleared the memory's stall) it is repaired in its own slot.
    slots_alive = {p.slot for p in live}
    probe_slots = tuple(s for s in memory.probe_slots if s in slots_alive)
    probing = frozenset(probe_slots)
    pairs, leftovers = _pair_lone_halves(slots, observed, params, probing)  # 3b
    running_pairs = sum(1 for pair in pairs if pair.ready(params))
    fresh, renewing = _split_renewing(pairs, params, now)  # 4
    window, warm_window, target = _damped_target(memory, desired, params, real, now)
    fresh = _trim_fresh(fresh, target, params, delete)  # 5
    kept = _keep_renewing(fresh, renewing, target, params, delete)  # 6
    counts = _cap_pending(kept, fresh, params, delete)  # 7
    lone_runners_kept, lone_since = _age_lone_halves(  # 8
        leftovers, memory, counts.total, params, now, delete, probes=probing
    )
    # After every deletion of this pass: a half it deletes asks the cloud for nothing more.
    short = _short_roles((p for p in live if p.name not in delete.reasons), params, now)
    short_roles = tuple(sorted(short, key=lambda r: r.value))
    ramp = _slow_start(memory, (stalled_at, backoff, stalled_role), short, live, params, now, first)
    if stalled_at is None and ramp is None:
        backoff = 0.0  # over, and so is its ramp: the next stall starts afresh
    # A probe still Pending is alone on purpose: it is repaired only once it runs.
    repairable = [p for p in leftovers if p.slot not in probing or is_ready(p, params)]
    repairs, count, held, blocked = _new_halves_and_pairs(  # 9
        desired,
        counts,
        headroom(params, real) - lone_runners_kept,
        repairable,
        observed,
        params,
        now,
        delete,
        pool_room=pool_room,
        backing_off=backing_off > 0,
        short=short,
        ramp_room=_ramp_room(ramp, live, delete, params),
    )
    if repairs:  # a repaired half is in a pair again: no longer aged as left over
        slots_repaired = {r.slot for r in repairs}
        repaired = {p.name for p in leftovers if p.slot in slots_repaired}
        lone_since = tuple(entry for entry in lone_since if entry[0] not in repaired)
    # A confirmed shortage has a half of its role Pending: that one asks the cloud, no probe.
    probes = _probe(stalled_role, live, blocked, str(first + count), delete)
    after = count_sides(observed, params, excluding=delete.reasons)
    result = Plan(
        creates=tuple(str(first + i) for i in range(count)),
        repairs=tuple(repairs),
        probes=probes,
        deletes=tuple(Deletion(name, reason) for name, reason in delete.reasons.items()),
        advertised=after.advertised,
        runner_side=after.runner_side,
        workflow_side=after.workflow_side,
        desired_pairs=desired,
        target_pairs=target,
        running_pairs=running_pairs,
        pending_pairs=len(pairs) - running_pairs,
        broken=broken,
        held_by_nodepools=held,
        stall_backoff=backing_off,
        stalls=tuple(slots.stalls),
        short_roles=short_roles,
        held_by_shortage=blocked if short else 0,
        slow_start=0 if ramp is None else _ramp_allowance(ramp, params),
    )
    return result, Memory(
        desired_window=window,
        next_slot=first + count + len(probes),
        lone_since=lone_since,
        warm_window=warm_window,
        backoff=backoff,
        stalled_at=stalled_at,
        stalled_role=stalled_role,
        probe_slots=() if stalled_at is None else probe_slots + tuple(p.slot for p in probes),
        slow_start=ramp,
        short_roles=short_roles,
    )


def _short_roles(live: Iterable[Placeholder], params: Params, now: float) -> frozenset[Role]:
    """Step 9's hold: the halves whose pools are short, confirmed: the pools said they cannot
    launch a node (`cannot_launch_at`, within the window `_stalled` uses), and a half of
    that role Pending when they said it is still Pending `SIGNAL_STALL_FLOOR` after it was
    created. Step 9 then makes no new pair, as in a stall back-off.

    A pair made while its workflow type is out launches its runner half's node, which then
    waits for a workflow node that does not come until the pair is released as stalled, a
    launch later: in the outcome benchmark, the pairs a site kept making through its
    shortage were most of the node-seconds it spent beyond stock ARC. The word alone is not
    enough, since a provider may refuse one instance type and launch another a few seconds
    later; a half still Pending a minute after the refusal is, since by then a retry on
    another type would have run. The hold ends once no half refused is still Pending: the
    cloud gave the node (or the half was released, and the stall's back-off takes over).

    Karpenter says so sooner: after the refusal, its next scheduling run either places the
    Pending pod another way or publishes that it cannot (`refused_at`, seconds later). That
    word on a half still Pending confirms the shortage at once, with or without a refusal
    of the half's own pools (a provider that stopped offering the type after another
    NodePool's refusal refuses no launch of this one): in the first minute of a shortage a
    site otherwise makes a pair per queued job, each holding a runner node for a workflow
    node that cannot come. It is also the pools' word for that half's stall (`_word`)."""
    window = _word_window(params)
    floor = min(SIGNAL_STALL_FLOOR, params.ready_timeout)
    pending = [p for p in live if p.phase == PodPhase.PENDING]
    # Karpenter said it has no node for the half itself: confirmed at once.
    short = {
        p.role
        for p in pending
        if (own := _own_refusal(p, params)) is not None and now - own <= window
    }
    # A half made this very instant has not waited at all, whatever the floor (0 with a
    # ready timeout of 0): it must not confirm a shortage in the pass after the one that
    # made it at the same time, or planning twice would not give the same memory.
    for role, said in params.cannot_launch_at.items():
        if now - said <= window and any(
            p.role == role
            and p.created_at <= said
            and now - p.created_at >= floor
            and now > p.created_at
            for p in pending
        ):
            short.add(role)
    return frozenset(short)


def _stall_backoff(
    memory: Memory,
    stalled: Sequence[Role],
    live: Iterable[Placeholder],
    params: Params,
    now: float,
) -> tuple[float, float | None, Role | None]:
    """Step 2's back-off: (its length, the last stall, the half it was Pending on). A stall
    starts one of `stall_timeout` (about two launches: Karpenter, too, stops offering a type
    it could not launch for a few minutes), doubled per stall that follows, up to
    `ready_timeout`; a half of the stalled role created after the last stall reaching
    Running (a probe, or a pair's) shows the type launches again and ends it (its length is
    kept through the slow start that follows, so a stall then backs off twice as long). A
    stall on
    the pools' word backs off as long as one on time alone: the word says the type is short
    now, not when it comes back. A probe (``memory.probe_slots``) clears it however old its
    creationTimestamp (whole seconds) says it is."""
    first = params.stall_timeout
    if first is None:
        first = params.signal_stall_timeout
    if stalled and first is not None:
        longest = max(first, params.ready_timeout)
        backoff = first if memory.backoff <= 0 else 2 * memory.backoff
        return min(backoff, longest), now, _scarcer(stalled)
    since = memory.stalled_at
    # Strictly after: a half already there when the stall was seen says nothing new (and
    # a pass repeated on the same view must not clear what the first one set).
    if since is not None and any(
        is_ready(p, params)
        and (p.created_at > since or p.slot in memory.probe_slots)
        and (memory.stalled_role is None or p.role == memory.stalled_role)
        for p in live
    ):
        return memory.backoff, None, None  # the length stays while the slow start lasts
    return memory.backoff, since, memory.stalled_role


def _scarcer(roles: Iterable[Role]) -> Role:
    """The half a hold is about, of those short: with both pools out, the workflow half is
    the scarce one."""
    return Role.WORKFLOW if Role.WORKFLOW in roles else Role.RUNNER


def _slow_start(
    memory: Memory,
    stall: tuple[float | None, float, Role | None],
    short: frozenset[Role],
    live: Iterable[Placeholder],
    params: Params,
    now: float,
    first: int,
) -> SlowStart | None:
    """The ramp once new pairs are no longer held for a half the cloud could not give (a
    stall's back-off ended: a half of the stalled role ran, or its time ran out; or a
    confirmed shortage is over: no half refused is still Pending): the new pairs in flight
    whose half of that role is still Pending start at one and double for each pair made
    since whose half of that role has run, until `max_pending_pairs` allows no more or
    `ready_timeout` has passed. ``stall``: step 2's (last stall, back-off length, role).

    Both holds end on one half of the role running or leaving, and that half may have found
    room on a node that was already there (a finished job's workflow pod's, say) while the
    cloud still has no node of the type. Ended at once, the next pass made a pair per
    queued job, and each held a node for the half the cloud can give until it was released
    as stalled again, a launch later (seen in the outcome benchmark: eight pairs made and
    refused two seconds later). Ramped, a wrong end costs one pair; a real one a launch or
    two before the full rate, while the pairs already wanted are repaired."""
    stalled_at, backoff, stalled_role = stall
    if short or (stalled_at is not None and now < stalled_at + backoff):
        return None  # held (or stalled this pass): no pair is made anyway
    ramp = memory.slow_start
    if ramp is None:
        # A back-off run out (or none at all), or one ended by this pass.
        role = stalled_role if stalled_at is not None else None
        if role is None and memory.stalled_at is not None:
            role = memory.stalled_role
        if role is None and memory.short_roles:
            role = _scarcer(memory.short_roles)
        if role is None:
            return None
        ramp = SlowStart(since=now, role=role, first_slot=first)
    elif now - ramp.since > params.ready_timeout:
        return None
    ran = {
        p.slot
        for p in live
        if p.role == ramp.role and is_ready(p, params) and _slot_from(p.slot, ramp.first_slot)
    }
    confirmed = ramp.confirmed + tuple(sorted(ran - set(ramp.confirmed)))
    ramp = replace(ramp, confirmed=confirmed)
    return None if _ramp_allowance(ramp, params) >= params.max_pending_pairs else ramp


def _slot_from(slot: str, first: int) -> bool:
    return (n := _slot_number(slot)) is not None and n >= first


def _ramp_allowance(ramp: SlowStart, params: Params) -> int:
    """The pairs a slow start lets be in flight with their stalled half Pending."""
    return min(params.max_pending_pairs, 1 << min(len(ramp.confirmed), 30))


def _ramp_room(
    ramp: SlowStart | None, live: Iterable[Placeholder], delete: _Deletes, params: Params
) -> int | None:
    """New pairs a slow start still admits: its allowance less the pairs made during it
    whose stalled half is Pending (kept by this pass). None: not ramping."""
    if ramp is None:
        return None
    waiting = {
        p.slot
        for p in live
        if p.role == ramp.role
        and p.phase == PodPhase.PENDING
        and p.name not in delete.reasons
        and _slot_from(p.slot, ramp.first_slot)
    }
    return max(0, _ramp_allowance(ramp, params) - len(waiting))


def _probe(
    role: Role | None,
    live: Iterable[Placeholder],
    blocked: int,
    slot: str,
    delete: _Deletes,
) -> tuple[Repair, ...]:
    """Step 9 during a back-off: one placeholder of the stalled half alone, in a new slot,
    while the back-off holds back pairs that are wanted and otherwise admitted (``blocked``:
    within max_runners, the in-flight cap and the pools' room, as a pair) and no half of
    that role is Pending (kept, not deleted by this pass; one that is already asks the
    cloud). It holds no node while the cloud says no, and once it runs it clears the
    back-off and is repaired into a pair like any lone half."""
    if role is None or blocked <= 0:
        return ()
    asking = any(
        p.role == role and p.phase == PodPhase.PENDING and p.name not in delete.reasons
        for p in live
    )
    return () if asking else (Repair(slot, role),)


def _damped_target(
    memory: Memory, desired: int, params: Params, real: int, now: float
) -> tuple[tuple[tuple[float, int], ...], tuple[tuple[float, int], ...], int]:
    """Step 5's target and the two windows behind it. Pairs for queued jobs are held for
    `demand_hold` after the queue stops asking for them; the warm pool's part of the target
    for `downscale_delay`. With `demand_hold` unset (or not shorter) both are one window of
    `downscale_delay` over the whole desired value."""
    hold = params.downscale_delay
    if params.demand_hold is not None:
        hold = min(hold, params.demand_hold)
    window = _slide(memory.desired_window, now, desired, hold)
    top = max(v for _, v in window)
    warm_window: tuple[tuple[float, int], ...] = ()
    if hold < params.downscale_delay:
        warm = min(params.proactive_capacity, headroom(params, real))
        warm_window = _slide(memory.warm_window, now, warm, params.downscale_delay)
        top = max(top, max(v for _, v in warm_window))
    return window, warm_window, min(top, params.max_runners)


def _sweep(placeholders: Iterable[Placeholder], now: float, delete: _Deletes) -> list[Placeholder]:
    """Step 1, per pod: not owned → ORPHAN, finished → FINISHED, past expiry → EXPIRED.
    Terminating pods are already going: left alone, and not live."""
    live: list[Placeholder] = []
    for p in placeholders:
        if p.terminating:
            continue
        if not p.owned:
            delete([p], DeleteReason.ORPHAN)
        elif p.phase in FINISHED_PHASES:
            delete([p], DeleteReason.FINISHED)
        elif now >= p.expires_at:
            delete([p], DeleteReason.EXPIRED)
        else:
            live.append(p)
    return live


def _group_slots(
    live: Iterable[Placeholder], params: Params, now: float, delete: _Deletes
) -> _Slots:
    """Step 2: group by slot (two pods claiming the same half: the older one stays); a slot
    with a half unusable (UNUSABLE) or Pending too long (TIMEOUT) goes whole."""
    by_slot: dict[str, dict[Role, Placeholder]] = {}
    for p in sorted(live, key=lambda p: (p.created_at, p.name)):
        halves = by_slot.setdefault(p.slot, {})
        if p.role in halves:
            delete([p], DeleteReason.EXCESS)
        else:
            halves[p.role] = p
    slots = _Slots([], [], [])
    for halves in by_slot.values():
        members = list(halves.values())
        if any(_unusable(p, params) for p in members):
            delete(members, DeleteReason.UNUSABLE)
        elif any(_timed_out(p, params, now) for p in members):
            delete(members, DeleteReason.TIMEOUT)
        elif (cause := _stalled(members, params, now)) is not None:
            delete(members, DeleteReason.STALLED)
            slots.stalls.append(cause)
            slots.stalled_roles.extend(p.role for p in members if p.phase == PodPhase.PENDING)
        elif Role.RUNNER in halves and Role.WORKFLOW in halves:
            slots.complete.append(_Pair(halves[Role.RUNNER], halves[Role.WORKFLOW]))
        elif Role.RUNNER in halves:
            slots.lone_runners.append(halves[Role.RUNNER])
        else:
            slots.lone_workflows.append(halves[Role.WORKFLOW])
    return slots


def _pair_lone_halves(
    slots: _Slots, observed: Observed, params: Params, probes: frozenset[str]
) -> tuple[list[_Pair], list[Placeholder]]:
    """Step 3b: lone workflow halves real runners still need are reserved; the other lone
    halves pair up runner-with-workflow across slots (virtual pairs, Running and oldest
    first). A probe (its slot in ``probes``) pairs with nothing: it is left over, to be
    repaired in its own slot. Returns every pair (complete, then virtual) and the halves
    left over."""
    probing = [p for p in (*slots.lone_runners, *slots.lone_workflows) if p.slot in probes]
    runners = sorted(
        (p for p in slots.lone_runners if p.slot not in probes),
        key=lambda p: _lone_keep_order(p, params),
    )
    workflows = sorted(
        (p for p in slots.lone_workflows if p.slot not in probes),
        key=lambda p: _lone_keep_order(p, params),
    )
    reserved = min(len(workflows), _runners_needing_workflow_room(observed))
    spare_workflows = workflows[reserved:]
    virtual = [_Pair(r, w) for r, w in zip(runners, spare_workflows, strict=False)]
    leftovers = runners[len(virtual) :] + spare_workflows[len(virtual) :] + probing
    return slots.complete + virtual, leftovers


def _split_renewing(
    pairs: Iterable[_Pair], params: Params, now: float
) -> tuple[list[_Pair], list[_Pair]]:
    """Step 4: (fresh, renewing): renewing pairs expire within ``renew_before``."""
    fresh: list[_Pair] = []
    renewing: list[_Pair] = []
    for pair in pairs:
        (fresh if pair.expires_at - now > params.renew_before else renewing).append(pair)
    return fresh, renewing


def _trim_fresh(fresh: list[_Pair], target: int, params: Params, delete: _Deletes) -> list[_Pair]:
    """Step 5: fresh pairs above the damped target go (EXCESS), Pending then newest first;
    returns the fresh pairs kept."""
    fresh = sorted(fresh, key=lambda pair: _delete_order(pair, params))
    surplus = max(0, len(fresh) - target)
    for pair in fresh[:surplus]:
        delete.pair(pair, DeleteReason.EXCESS)
    return fresh[surplus:]


def _keep_renewing(
    fresh: list[_Pair], renewing: list[_Pair], target: int, params: Params, delete: _Deletes
) -> list[_Pair]:
    """Step 6, make-before-break: renewing pairs stay while Running fresh pairs do not yet
    cover the target, never above max_runners pairs even mid-renewal. Those that go are
    EXPIRED, or EXCESS when the target itself no longer needs them. Returns every pair kept."""
    ready_fresh = sum(1 for pair in fresh if pair.ready(params))
    renewing = sorted(renewing, key=lambda pair: _renew_keep_order(pair, params))
    limit = params.max_runners - len(fresh)
    keep = max(0, min(len(renewing), target - ready_fresh, limit))
    keep_without_replacements = max(0, min(len(renewing), target, limit))
    for i, pair in enumerate(renewing[keep:], start=keep):
        reason = DeleteReason.EXPIRED if i < keep_without_replacements else DeleteReason.EXCESS
        delete.pair(pair, reason)
    return fresh + renewing[:keep]


def _cap_pending(kept: list[_Pair], fresh: list[_Pair], params: Params, delete: _Deletes) -> _Kept:
    """Step 7: the in-flight cap also bounds pairs already Pending (e.g. after a config
    change): the newest Pending pairs beyond ``max_pending_pairs`` go (EXCESS)."""
    pending = sorted(
        (pair for pair in kept if not pair.ready(params)), key=lambda pair: -pair.created_at
    )
    over = max(0, len(pending) - params.max_pending_pairs)
    for pair in pending[:over]:
        delete.pair(pair, DeleteReason.EXCESS)
    trimmed = {pair.runner.name for pair in pending[:over]}
    return _Kept(
        total=len(kept) - over,
        fresh=sum(1 for pair in fresh if pair.runner.name not in trimmed),
        pending=len(pending) - over,
    )


def _age_lone_halves(
    leftovers: Iterable[Placeholder],
    memory: Memory,
    kept_pairs: int,
    params: Params,
    now: float,
    delete: _Deletes,
    *,
    probes: frozenset[str],
) -> tuple[int, tuple[tuple[str, float], ...]]:
    """Step 8: halves nothing can use go after the downscale delay (BROKEN; they still
    protect room a real pod may take meanwhile), lone runner halves at once (EXCESS) if they
    would exceed max_runners. A probe (its slot in ``probes``) is alone on purpose: it is not
    aged until the stall is over, and from then on like any other lone half. Returns the
    lone runner halves kept and when each kept half was first left over."""
    seen_since = dict(memory.lone_since)
    lone_since: list[tuple[str, float]] = []
    runner_room = max(0, params.max_runners - kept_pairs)
    kept_runners = 0
    for p in leftovers:
        probe = p.slot in probes  # its age is not kept either: it starts when the stall ends
        since = min(seen_since.get(p.name, now), now)
        if not probe and now - since >= params.downscale_delay:
            delete([p], DeleteReason.BROKEN)
        elif p.role == Role.RUNNER and kept_runners >= runner_room:
            delete([p], DeleteReason.EXCESS)
        else:
            kept_runners += p.role == Role.RUNNER
            if not probe:
                lone_since.append((p.name, since))
    return kept_runners, tuple(lone_since)


def _new_halves_and_pairs(
    desired: int,
    kept: _Kept,
    room: int,
    leftovers: Sequence[Placeholder],
    observed: Observed,
    params: Params,
    now: float,
    delete: _Deletes,
    *,
    pool_room: int | None,
    backing_off: bool,
    short: frozenset[Role] = frozenset(),
    ramp_room: int | None = None,
) -> tuple[list[Repair], int, int, int]:
    """Step 9: (repairs, new pairs, pairs held back by the pools' room, pairs held back by a
    stall's back-off or a confirmed shortage: wanted and admitted otherwise). Lone runner
    halves are repaired first, within the pairs wanted and the in-flight cap only: a repair
    adds a workflow half, no runner, so it leaves the max_runners headroom ``room`` as it
    was. What is still wanted then goes to lone workflow halves (a repair adds a runner half,
    as a new pair does) and to new pairs (`_new_pairs`). Nothing during a stall back-off.
    During a confirmed shortage (``short``) only the repairs that launch no node for a half
    the cloud can give: a lone runner half gets its workflow half unless runner halves are
    short (if workflow halves are, the new one waits Pending for the node, costing none).
    During a slow start (``ramp_room``: the new pairs it still admits) fewer new pairs; the
    repairs are not held back, since each completes a half that already has its node or
    adds the stalled half to one that has."""
    repairs: list[Repair] = []
    if not backing_off and Role.RUNNER not in short:
        want = max(0, min(desired - kept.fresh, params.max_pending_pairs - kept.pending))
        if pool_room is not None:
            want = min(want, max(0, pool_room))
        runners = [p for p in leftovers if p.role == Role.RUNNER]
        repairs, waiting = _repairs(runners, observed, want, params, now, delete)
        done = len(repairs) + waiting
        kept = _Kept(total=kept.total + done, fresh=kept.fresh + done, pending=kept.pending + done)
        room += done  # the repaired runner halves are in pairs now, no longer lone
        if pool_room is not None:
            pool_room -= done
    count, held = _new_pairs(desired, kept, room, params, pool_room)
    if backing_off or short:
        return repairs, 0, held, count
    workflows = [p for p in leftovers if p.role == Role.WORKFLOW]
    more, waiting = _repairs(workflows, observed, count, params, now, delete)
    new = count - len(more) - waiting
    if ramp_room is not None:
        new = min(new, ramp_room)
    return repairs + more, new, held, 0


def _repairs(
    leftovers: Iterable[Placeholder],
    observed: Observed,
    count: int,
    params: Params,
    now: float,
    delete: _Deletes,
) -> tuple[list[Repair], int]:
    """Step 9, first: of the ``count`` pairs wanted, those a left-over lone half can make
    are made by giving it its missing half (one pod, one launch) rather than a new slot
    (two pods, two nodes, the lone half left to wait out `downscale_delay`). Running halves
    first, then the oldest. Left alone: a half within `renew_before` of its expiry (the pair
    would be renewing, not fresh, and count for nothing). A slot whose missing half is still
    there (terminating, or deleted by this pass: its name is not free yet) is repaired by a
    later pass; it is counted as waiting, so no new pair is made in its place meanwhile.
    Returns (repairs, halves waiting for a free name)."""
    taken = {(p.slot, p.role) for p in observed.placeholders}
    spare = sorted(
        (
            p
            for p in leftovers
            if p.name not in delete.reasons and p.expires_at - now > params.renew_before
        ),
        key=lambda p: _lone_keep_order(p, params),
    )
    repairs: list[Repair] = []
    waiting = 0
    for half in spare:
        if len(repairs) + waiting >= count:
            break
        missing = Role.WORKFLOW if half.role == Role.RUNNER else Role.RUNNER
        if (half.slot, missing) in taken:
            waiting += 1
        else:
            repairs.append(Repair(half.slot, missing))
    return repairs, waiting


def _new_pairs(
    desired: int, kept: _Kept, room: int, params: Params, pool_room: int | None
) -> tuple[int, int]:
    """Step 9: new pairs up to ``desired``, at once, within the in-flight cap and the
    max_runners headroom ``room``, then within ``pool_room``. Returns (to create, held back by
    the pools' room)."""
    count = max(
        0,
        min(desired - kept.fresh, room - kept.total, params.max_pending_pairs - kept.pending),
    )
    if pool_room is None:
        return count, 0
    held = max(0, count - max(0, pool_room))
    return count - held, held


# --- NodePool limits ----------------------------------------------------------------------


def _halves_holding_room(observed: Observed) -> tuple[dict[Role, int], dict[Role, int]]:
    """Per role: halves that hold room on a node (placeholders with a node, bound real pods
    of that half) and placeholders still waiting for one."""
    bound = {
        Role.RUNNER: sum(1 for p in observed.runner_pods if _holds_capacity(p)),
        Role.WORKFLOW: sum(1 for p in observed.workflow_pods if _holds_capacity(p)),
    }
    waiting = {Role.RUNNER: 0, Role.WORKFLOW: 0}
    for p in observed.placeholders:
        if p.terminating or p.phase not in _HOLDING_PHASES:
            continue
        if p.node_name:
            bound[p.role] += 1
        else:
            waiting[p.role] += 1
    return bound, waiting


def _usage(placement: Mapping[Role, tuple[NodePool, ...]]) -> tuple[tuple[str, str, Fraction], ...]:
    pools = {pool.name: pool for found in placement.values() for pool in found}
    return tuple(
        sorted(
            (name, resource, amount)
            for name, p in pools.items()
            for resource, amount in p.used.items()
        )
    )


def _only_grew(
    before: tuple[tuple[str, str, Fraction], ...], after: tuple[tuple[str, str, Fraction], ...]
) -> bool:
    """The same pools and resources, none used less: nodes were only added."""
    old = {(name, resource): amount for name, resource, amount in before}
    new = {(name, resource): amount for name, resource, amount in after}
    return old.keys() == new.keys() and all(new[k] >= v for k, v in old.items())


def nodepool_room(
    placement: Mapping[Role, tuple[NodePool, ...]],
    requests: Mapping[Role, Mapping[str, Fraction]],
    observed: Observed,
    memory: PoolMemory,
) -> tuple[int | None, PoolMemory]:
    """How many more pairs the NodePools' limits admit (None: no limit applies), and the
    memory for the next pass (docs/capacity-model.md §9).

    ``placement`` maps each half to the NodePools it can land on, ``requests`` to its
    requests. For the pools of a half (the two halves' pools taken together when they
    share one), on every resource the pools all limit and the pair requests::

        free   = Σ (limit − used)                 room for new nodes
               + Σ (peak − holding) × request     room freed on existing nodes
               − Σ waiting × request              taken by placeholders still Pending
        ours   = Σ limit − Σ (holding + waiting) × request
        pairs  = ⌊ min(free, ours) / pair's request ⌋, the smallest over those resources

    ``used`` is the pools' ``status.resources`` (node capacity Karpenter has launched); it
    sees other workloads in the pools, but trails Karpenter's launches by a second or two.
    ``ours`` needs no status (every half takes its request out of some node's capacity,
    and all the nodes together stay within the limit), so it holds while the status
    trails. Room on existing nodes is not visible without reading every node, so it is
    estimated from the halves themselves: ``peak`` is the most halves seen holding room
    since the pools last lost capacity (a node removed), and the room a half freed when it
    went (its TTL, a job that finished) is taken as still there. The count is an upper
    bound on what can be placed: a pair it admits may still wait (a node type larger than
    what is left, another pod took the room), as before; a pair it refuses could not have
    been given a node. A half that no known pool admits is not limited here.
    """
    bound, waiting = _halves_holding_room(observed)
    usage = _usage(placement)
    last_peak = dict(memory.peak)
    keep = memory.used == usage or (bool(memory.used) and _only_grew(memory.used, usage))
    peak = {role: max(bound[role], last_peak.get(role.value, 0) if keep else 0) for role in Role}
    new_memory = PoolMemory(
        used=usage, peak=tuple(sorted((role.value, n) for role, n in peak.items()))
    )

    groups: list[tuple[set[Role], dict[str, NodePool]]] = []
    for role in Role:
        pools = {p.name: p for p in placement.get(role, ())}
        if not pools:
            continue
        for roles, members in groups:
            if members.keys() & pools.keys():
                roles.add(role)
                members.update(pools)
                break
        else:
            groups.append(({role}, pools))

    room: int | None = None
    for roles, members in groups:
        per_pair: dict[str, Fraction] = {}
        for role in roles:
            for resource, amount in requests.get(role, {}).items():
                if amount > 0:
                    per_pair[resource] = per_pair.get(resource, Fraction(0)) + amount
        for resource, need in per_pair.items():
            left = [p.remaining(resource) for p in members.values()]
            if any(amount is None for amount in left):
                continue  # some pool does not limit it: no bound from this resource
            limit = sum((p.limits[resource] for p in members.values()), Fraction(0))
            free = sum((a for a in left if a is not None), Fraction(0))
            for role in roles:
                each = requests.get(role, {}).get(resource, Fraction(0))
                limit -= (bound[role] + waiting[role]) * each
                free += (peak[role] - bound[role]) * each - waiting[role] * each
            pairs = max(0, math.floor(min(limit, free) / need))
            room = pairs if room is None else min(room, pairs)
    return room, new_memory


def node_group_room(
    full: Mapping[Role, bool], observed: Observed, peak: Mapping[Role, int]
) -> tuple[int | None, dict[Role, int]]:
    """How many more pairs full cluster-autoscaler node groups admit (None: no cap), and the
    peak to carry to the next pass (docs/capacity-model.md, "On cluster-autoscaler").

    ``full`` says, per half, whether every node group it lands on is full (at its max size,
    or backing off after a failed scale-up): no new node can come for it. CA's status does
    not describe the nodes, so the room left on existing nodes is counted in halves: the
    most halves of that role seen holding room since its groups filled (``peak``), minus
    those holding room now and those still waiting for a node. Beyond that, one pair at a
    time (a probe, only while none of that half waits): it lands if an existing node still
    has room, and otherwise waits Pending alone until its ready timeout instead of a burst
    of ``max_pending_pairs``. A half whose groups are not full is not capped (CA adds a node
    for a Pending pair), and its peak is forgotten.
    """
    bound, waiting = _halves_holding_room(observed)
    room: int | None = None
    kept: dict[Role, int] = {}
    for role in Role:
        if not full.get(role, False):
            continue
        kept[role] = max(bound[role], peak.get(role, 0))
        left = max(0, kept[role] - bound[role] - waiting[role])
        if left == 0 and waiting[role] == 0:
            left = 1  # the probe
        room = left if room is None else min(room, left)
    return room, kept
