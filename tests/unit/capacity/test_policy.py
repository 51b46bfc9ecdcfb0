"""Example tables and multi-pass scenarios for the capacity policy."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

import pytest

from capacity.model import (
    DeleteReason,
    Demand,
    DemandOutcome,
    DemandResult,
    DemandSource,
    DemandState,
    Memory,
    Observed,
    Params,
    Placeholder,
    PodPhase,
    RealPod,
    Repair,
    Role,
)
from capacity.policy import (
    count_sides,
    demand_hold,
    forget_assigned,
    plan,
    record_demand,
    resolve_demand,
    stall_timeout,
    with_starts,
)

from .builders import P, R, apply_plan, pair, pairs, ph, runner, schedule_all, workflow

W = Role.WORKFLOW
RU = Role.RUNNER
NOW = 100.0


def params(**overrides: object) -> Params:
    base: dict[str, object] = {
        "max_runners": 10,
        "proactive_capacity": 0,
        "max_pending_pairs": 30,
        "ready_timeout": 300.0,
        "downscale_delay": 300.0,
        "ttl": 900.0,
        "renew_before": 300.0,
    }
    base.update(overrides)
    return Params(**base)  # type: ignore[arg-type]


def demand(queued: int) -> Demand:
    return Demand(queued=queued, source=DemandSource.HUD)


@dataclass(frozen=True)
class Case:
    placeholders: tuple[Placeholder, ...] = ()
    runners: tuple[RealPod, ...] = ()
    workflows: tuple[RealPod, ...] = ()
    active: int = 0
    queued: int = 0
    knobs: dict[str, object] = field(default_factory=dict)
    # expectations
    advertised: int = 0
    creates: int = 0
    repairs: tuple[Repair, ...] = ()
    deletes: dict[str, DeleteReason] = field(default_factory=dict)


# ARC's runner pod name (<scale set>-<id>-runner-<id>) for a 40-character scale-set name.
LONG_RUNNER = "pytorch-linux-jammy-cuda12-8-gpu-a10g-4x-x7k2p-runner-abcde"

CASES = {
    "empty-and-no-demand": Case(),
    "proactive-capacity-creates-pairs": Case(knobs={"proactive_capacity": 2}, creates=2),
    "queued-jobs-add-to-proactive": Case(knobs={"proactive_capacity": 1}, queued=3, creates=4),
    "ready-pairs-are-advertised": Case(placeholders=(*pairs(2),), queued=2, advertised=2),
    "pending-pair-never-advertised": Case(
        placeholders=(*pair(0), *pair(1, R, P, created=50)), queued=2, advertised=1
    ),
    "terminating-placeholder-not-counted": Case(
        placeholders=(*pair(0), ph(1, RU), ph(1, W, terminating=True)),
        runners=(runner("r1"),),
        queued=1,
        active=1,
        knobs={"downscale_delay": 0.0},
        # slot 1's runner half is a lone half; the survivor is not there (terminating), so
        # nothing reserves it and nothing pairs with it
        advertised=1,
        deletes={"ph-1-r": DeleteReason.BROKEN},
    ),
    "unknown-phase-pair-is-dropped": Case(
        placeholders=(*pair(0), *pair(1, R, PodPhase.UNKNOWN)),
        queued=2,
        advertised=1,
        creates=1,
        deletes={"ph-1-r": DeleteReason.UNUSABLE, "ph-1-w": DeleteReason.UNUSABLE},
    ),
    # The preemption hand-off: a real runner (priority 0) took slot 1's placeholder-runner;
    # its workflow pod does not exist yet. The lone placeholder-workflow is kept for it and the
    # advertised value does not move.
    "preemption-hand-off-runner-took-its-half": Case(
        placeholders=(*pair(0), ph(1, W)),
        runners=(runner("arc-r1"),),
        active=1,
        queued=1,
        advertised=2,
    ),
    "hand-off-runner-still-pending": Case(
        placeholders=(*pair(0), ph(1, W)),
        runners=(runner("arc-r1", P, bound=False),),
        active=1,
        queued=1,
        # the runner is not bound yet, so the runner side lost one
        advertised=1,
    ),
    "hand-off-done-both-real-pods-bound": Case(
        placeholders=(*pair(0),),
        runners=(runner("arc-r1"),),
        workflows=(workflow("arc-r1"),),
        active=1,
        queued=1,
        advertised=2,
    ),
    "workflow-pod-pending-keeps-the-survivor": Case(
        placeholders=(*pair(0), ph(1, W)),
        runners=(runner("arc-r1"),),
        workflows=(workflow("arc-r1", P, bound=False),),
        active=1,
        queued=1,
        advertised=2,
    ),
    # A runner pod name too long for "-workflow" to fit in 63 characters: the hooks cut it,
    # and the runner is served all the same, so nothing holds slot 1's lone half for it.
    "long-runner-name-is-served-by-its-cut-job-pod": Case(
        placeholders=(*pair(0), ph(1, W)),
        runners=(runner(LONG_RUNNER),),
        workflows=(workflow(LONG_RUNNER),),
        active=1,
        queued=1,
        knobs={"downscale_delay": 0.0},
        advertised=2,
        deletes={"ph-1-w": DeleteReason.BROKEN},
    ),
    # The workflow pod preempted slot 0's placeholder-workflow instead of its own (slot 1):
    # slot 0's runner half and slot 1's workflow half still make one spare pair.
    "workflow-pod-took-another-slots-half": Case(
        placeholders=(ph(0, RU), ph(1, W)),
        runners=(runner("arc-r1"),),
        workflows=(workflow("arc-r1"),),
        active=1,
        queued=1,
        advertised=2,
    ),
    "survivor-nobody-needs-is-removed-without-damping": Case(
        placeholders=(*pair(0), ph(1, W)),
        queued=1,
        knobs={"downscale_delay": 0.0},
        advertised=1,
        deletes={"ph-1-w": DeleteReason.BROKEN},
    ),
    "survivor-nobody-needs-waits-for-the-downscale-delay": Case(
        placeholders=(*pair(0), ph(1, W)), queued=1, advertised=1
    ),
    # The EphemeralRunner is counted before the watch shows its runner pod: the survivor is
    # kept for it even with no damping at all.
    "survivor-kept-while-the-runner-pod-is-not-seen-yet": Case(
        placeholders=(*pair(0), ph(1, W)),
        active=1,
        queued=1,
        knobs={"downscale_delay": 0.0},
        advertised=1,
    ),
    # A left-over lone half and a pair wanted: the half gets its missing half back (one
    # pod, one node to launch), no new slot.
    "lone-runner-half-is-repaired-for-a-wanted-pair": Case(
        placeholders=(ph(0, RU),),
        queued=1,
        repairs=(Repair("0", W),),
    ),
    "lone-workflow-half-is-repaired-for-a-wanted-pair": Case(
        placeholders=(ph(0, W),),
        queued=1,
        repairs=(Repair("0", RU),),
    ),
    "lone-half-nobody-wants-is-not-repaired": Case(placeholders=(ph(0, RU),)),
    # Aged out (downscale_delay 0): deleted, and the wanted pair is a new one.
    "lone-half-past-the-downscale-delay-goes-instead": Case(
        placeholders=(ph(0, RU),),
        queued=1,
        knobs={"downscale_delay": 0.0},
        creates=1,
        deletes={"ph-0-r": DeleteReason.BROKEN},
    ),
    # Its missing half still terminating: that name is not free, so no repair yet.
    "lone-half-whose-other-half-is-terminating-waits": Case(
        placeholders=(ph(0, RU), ph(0, W, terminating=True)),
        queued=1,
    ),
    # Within renew_before of its expiry the repaired pair would be renewing: a new pair.
    "lone-half-about-to-expire-is-not-repaired": Case(
        placeholders=(ph(0, RU, created=-700),),
        queued=1,
        creates=1,
    ),
    # Repairing a runner half adds no runner: the headroom (3) holds the repaired pair and
    # two new ones.
    "lone-runner-half-counts-against-the-headroom": Case(
        placeholders=(ph(0, RU),),
        queued=5,
        knobs={"max_runners": 3},
        advertised=0,
        creates=2,
        repairs=(Repair("0", W),),
    ),
    # Repairing a workflow half adds a runner, like a new pair: within the headroom too.
    "lone-workflow-half-repair-counts-a-runner": Case(
        placeholders=(ph(0, W),),
        queued=5,
        knobs={"max_runners": 2},
        creates=1,
        repairs=(Repair("0", RU),),
    ),
    "lone-runner-halves-above-max-runners-go-at-once": Case(
        placeholders=(*pairs(2), ph(5, RU), ph(6, RU, created=5)),
        queued=2,
        knobs={"max_runners": 3},
        advertised=2,
        deletes={"ph-6-r": DeleteReason.EXCESS},
    ),
    "either-half-pending-past-timeout-deletes-the-pair": Case(
        placeholders=(*pair(0, R, P, created=-250),),
        queued=1,
        advertised=0,
        creates=1,
        deletes={"ph-0-r": DeleteReason.TIMEOUT, "ph-0-w": DeleteReason.TIMEOUT},
    ),
    "pending-within-timeout-is-left-alone": Case(
        placeholders=(*pair(0, P, P, created=-199),), queued=1
    ),
    "succeeded-placeholders-are-deleted": Case(
        placeholders=(ph(0, RU, PodPhase.SUCCEEDED), ph(0, W, PodPhase.SUCCEEDED)),
        queued=1,
        creates=1,
        deletes={"ph-0-r": DeleteReason.FINISHED, "ph-0-w": DeleteReason.FINISHED},
    ),
    "orphans-are-deleted": Case(
        placeholders=(ph(0, RU, owned=False), ph(0, W, owned=False)),
        deletes={"ph-0-r": DeleteReason.ORPHAN, "ph-0-w": DeleteReason.ORPHAN},
    ),
    "unusable-node-with-node-checks": Case(
        placeholders=(*pair(0), ph(1, RU), ph(1, W, usable=False)),
        queued=2,
        knobs={"node_checks": True},
        advertised=1,
        creates=1,
        deletes={"ph-1-r": DeleteReason.UNUSABLE, "ph-1-w": DeleteReason.UNUSABLE},
    ),
    "node-usable-ignored-without-node-checks": Case(
        placeholders=(*pair(0), ph(1, RU), ph(1, W, usable=False)), queued=2, advertised=2
    ),
    # ci-infra #528: the headroom subtracts real runners.
    "headroom-subtracts-active-runners": Case(active=8, queued=5, creates=2),
    "no-headroom-no-creates": Case(active=10, queued=5),
    # ci-infra #921: an operator lowers max_runners; the advertised value follows at once and
    # the surplus pairs go (the newest first).
    "operator-cap-applies-at-once": Case(
        placeholders=(*pairs(3, created=0), *pairs(2, start=3, created=10)),
        queued=5,
        knobs={"max_runners": 3},
        advertised=3,
        deletes={
            "ph-3-r": DeleteReason.EXCESS,
            "ph-3-w": DeleteReason.EXCESS,
            "ph-4-r": DeleteReason.EXCESS,
            "ph-4-w": DeleteReason.EXCESS,
        },
    ),
    "drain-to-zero": Case(
        placeholders=(*pairs(2),),
        runners=(runner("arc-a"),),
        workflows=(workflow("arc-a"),),
        active=1,
        queued=5,
        knobs={"max_runners": 0},
        advertised=0,
        deletes={n: DeleteReason.EXCESS for n in ("ph-0-r", "ph-0-w", "ph-1-r", "ph-1-w")},
    ),
    "in-flight-cap-limits-creates": Case(queued=100, knobs={"max_pending_pairs": 7}, creates=7),
    "in-flight-cap-counts-existing-pending": Case(
        placeholders=(*pair(0, P, P, created=50), *pair(1, P, R, created=50), *pairs(3, start=2)),
        queued=100,
        knobs={"max_pending_pairs": 5},
        advertised=3,
        creates=3,
    ),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_plan_examples(case: Case) -> None:
    observed = Observed(
        placeholders=case.placeholders,
        runner_pods=case.runners,
        workflow_pods=case.workflows,
        active_runners=case.active,
    )
    result, _ = plan(observed, demand(case.queued), params(**case.knobs), Memory(), NOW)
    assert result.advertised == case.advertised
    assert len(result.creates) == case.creates
    assert result.repairs == case.repairs
    assert {d.name: d.reason for d in result.deletes} == case.deletes


def test_left_over_halves_go_after_the_downscale_delay() -> None:
    knobs = params(downscale_delay=60.0)
    observed = Observed(placeholders=(*pair(0), ph(1, W), ph(2, W, P, created=90)))
    memory = Memory()
    for t in (100.0, 130.0, 159.0):
        result, memory = plan(observed, demand(1), knobs, memory, t)
        assert result.deletes == (), t
    result, memory = plan(observed, demand(1), knobs, memory, 160.0)
    assert {d.name: d.reason for d in result.deletes} == {
        "ph-1-w": DeleteReason.BROKEN,
        "ph-2-w": DeleteReason.BROKEN,
    }
    assert memory.lone_since == ()


def test_a_left_over_half_that_finds_a_partner_is_not_deleted() -> None:
    """The workflow pod's preemption shows up before the workflow pod is bound: slot 0's
    runner half looks left over for a moment, then pairs with slot 1's survivor."""
    knobs = params(downscale_delay=60.0)
    runner_pod = runner("arc-1")
    early = Observed(
        placeholders=(ph(0, RU), ph(1, W)),
        runner_pods=(runner_pod,),
        workflow_pods=(workflow("arc-1", P, bound=False),),
        active_runners=1,
    )
    result, memory = plan(early, demand(1), knobs, Memory(), 100.0)
    assert result.deletes == ()
    later = replace(early, workflow_pods=(workflow("arc-1"),))
    result, memory = plan(later, demand(1), knobs, memory, 200.0)
    assert result.deletes == ()
    assert result.advertised == 2
    assert memory.lone_since == ()


def test_unsynced_view_takes_no_action() -> None:
    observed = Observed(placeholders=(*pairs(2),), synced=False)
    memory = Memory(next_slot=4)
    result, after = plan(observed, demand(9), params(), memory, NOW)
    assert (result.creates, result.deletes) == ((), ())
    assert result.advertised == 2
    assert after is memory


def test_slot_ids_never_collide_or_repeat() -> None:
    observed = Observed(placeholders=(ph("7", RU, terminating=True), ph("abc", W)))
    first, memory = plan(observed, demand(2), params(), Memory(next_slot=3), NOW)
    assert first.repairs == (Repair("abc", RU),)  # the lone half's slot keeps its id
    assert first.creates == ("8",)
    second, _ = plan(Observed(), demand(2), params(), memory, NOW)
    assert second.creates == ("9", "10")


def test_sides_and_advertised_clamp() -> None:
    observed = Observed(
        placeholders=(*pairs(4), ph(9, W, P)),
        runner_pods=(runner("a"), runner("b", PodPhase.SUCCEEDED), runner("c", bound=False)),
        workflow_pods=(
            workflow("a"),
            RealPod(name="x-workflow", phase=R, bound=True, terminating=True),
            workflow("y", bound=False),
        ),
    )
    sides = count_sides(observed, params(max_runners=3))
    assert (sides.runner_side, sides.workflow_side, sides.advertised) == (5, 5, 3)


def step(
    observed: Observed,
    memory: Memory,
    knobs: Params,
    queued: int,
    now: float,
) -> tuple[Observed, Memory, int]:
    result, memory = plan(observed, demand(queued), knobs, memory, now)
    return apply_plan(observed, result, knobs, now), memory, result.advertised


def test_downscale_is_damped_and_removes_pending_then_newest() -> None:
    knobs = params(downscale_delay=60.0, max_pending_pairs=30)
    placeholders = (
        *pairs(2, created=0),
        *pairs(1, start=2, created=20),
        *pair(3, P, P, created=90),
    )
    observed = Observed(placeholders=placeholders)
    memory = Memory()
    # demand was 4 and stays 4 at t=100
    result, memory = plan(observed, demand(4), knobs, memory, 100.0)
    assert result.deletes == ()
    # demand drops to 2: nothing is deleted inside the delay
    for t in (110.0, 130.0, 159.0):
        result, memory = plan(observed, demand(2), knobs, memory, t)
        assert result.deletes == (), t
        assert result.target_pairs == 4
    # after the delay: the Pending pair first, then the newest Running one (slot 2)
    result, memory = plan(observed, demand(2), knobs, memory, 161.0)
    assert result.target_pairs == 2
    assert {d.name for d in result.deletes} == {"ph-3-r", "ph-3-w", "ph-2-r", "ph-2-w"}
    assert {d.reason for d in result.deletes} == {DeleteReason.EXCESS}
    assert result.advertised == 2


def test_scale_up_is_immediate_even_inside_the_downscale_window() -> None:
    knobs = params(downscale_delay=600.0)
    memory = Memory(desired_window=((50.0, 1),))
    result, _ = plan(Observed(placeholders=(*pairs(1),)), demand(6), knobs, memory, NOW)
    assert len(result.creates) == 5


def test_consumed_pairs_are_not_recreated_by_the_damping() -> None:
    """Runners took all pairs and the queue emptied: the downscale window must not bring the
    consumed capacity back."""
    knobs = params(downscale_delay=600.0)
    _, memory = plan(Observed(placeholders=(*pairs(3),)), demand(3), knobs, Memory(), 10.0)
    taken = Observed(
        runner_pods=tuple(runner(f"r{i}") for i in range(3)),
        workflow_pods=tuple(workflow(f"r{i}") for i in range(3)),
        active_runners=3,
    )
    result, _ = plan(taken, demand(0), knobs, memory, 20.0)
    assert result.creates == ()
    assert result.advertised == 3


def test_ttl_renewal_is_make_before_break() -> None:
    knobs = params(max_runners=10, ttl=900.0, renew_before=300.0)
    observed = Observed(placeholders=(*pairs(3, created=0),))
    memory = Memory()
    advertised: list[int] = []
    # before the renewal window: steady
    observed, memory, adv = step(observed, memory, knobs, 3, 500.0)
    advertised.append(adv)
    assert {p.slot for p in observed.placeholders} == {"0", "1", "2"}
    # inside the window: replacements are created, the old pairs stay
    observed, memory, adv = step(observed, memory, knobs, 3, 650.0)
    advertised.append(adv)
    assert len(observed.placeholders) == 12
    # replacements still Pending: nothing is deleted
    observed, memory, adv = step(observed, memory, knobs, 3, 660.0)
    advertised.append(adv)
    assert len(observed.placeholders) == 12
    # replacements Running: the old pairs go
    observed = schedule_all(observed)
    result, memory = plan(observed, demand(3), knobs, memory, 670.0)
    assert {d.reason for d in result.deletes} == {DeleteReason.EXPIRED}
    assert {d.name for d in result.deletes} == {f"ph-{s}-{r}" for s in "012" for r in "rw"}
    advertised.append(result.advertised)
    observed = apply_plan(observed, result, knobs, 670.0)
    assert advertised == [3, 3, 3, 3]
    assert count_sides(observed, knobs).advertised == 3


def test_renewal_whose_replacement_never_runs_expires_the_old_pair() -> None:
    knobs = params(max_runners=10)
    observed = Observed(placeholders=(*pairs(1, created=0),))
    observed, memory, _ = step(observed, Memory(), knobs, 1, 650.0)
    assert len(observed.placeholders) == 4
    result, _ = plan(observed, demand(1), knobs, memory, 900.0)
    reasons = {d.name: d.reason for d in result.deletes}
    assert reasons["ph-0-r"] == reasons["ph-0-w"] == DeleteReason.EXPIRED


def test_pool_at_the_cap_renews_without_exceeding_it() -> None:
    knobs = params(max_runners=2)
    observed = Observed(placeholders=(*pairs(2, created=0),))
    result, _ = plan(observed, demand(2), knobs, Memory(), 650.0)
    assert result.creates == ()
    assert result.deletes == ()


def test_runners_being_created_take_the_room_of_runner_halves_not_more() -> None:
    """8 ready pairs at max_runners 8, then ARC creates 7 EphemeralRunners whose pods do
    not exist yet: 8 placeholder-runners + 7 runners would hold 15 runner slots. The pass
    deletes 7 runner halves (the newest), so the runner pods find room without exceeding
    the cap, and keeps their workflow halves reserved for the jobs' workflow pods."""
    knobs = params(max_runners=8, proactive_capacity=8)
    observed = Observed(
        placeholders=tuple(p for i in range(8) for p in pair(i, created=float(i))),
        active_runners=7,
    )
    # The damping remembers wanting 8 pairs a moment ago, as in a running listener.
    memory = Memory(desired_window=((NOW - 10, 8),))
    result, memory = plan(observed, demand(0), knobs, memory, NOW)
    assert result.creates == ()
    assert {d.name: d.reason for d in result.deletes} == {
        f"ph-{i}-r": DeleteReason.EXCESS for i in range(1, 8)
    }
    applied = apply_plan(observed, result, knobs, NOW)
    assert sum(1 for p in applied.placeholders if p.role == RU) + 7 == 8
    assert sum(1 for p in applied.placeholders if p.role == W) == 8  # 1 pair + 7 reserved
    again, _ = plan(applied, demand(0), knobs, memory, NOW)
    assert (again.creates, again.deletes) == ((), ())
    # The runner pods appear and bind into the freed room: capacity is back, nothing moves.
    started = replace(
        applied,
        runner_pods=tuple(runner(f"r{i}") for i in range(7)),
        workflow_pods=tuple(workflow(f"r{i}", P, bound=False) for i in range(7)),
    )
    later, _ = plan(started, demand(0), knobs, memory, NOW + 1)
    assert (later.creates, later.deletes) == ((), ())
    assert later.advertised == 8


def test_a_pending_pair_over_the_runner_cap_goes_whole() -> None:
    # A Pending pair protects nothing yet: its workflow half is not kept as a reservation.
    knobs = params(max_runners=2)
    observed = Observed(placeholders=(*pair(0), *pair(1, P, P, created=5.0)), active_runners=1)
    result, _ = plan(observed, demand(2), knobs, Memory(), NOW)
    assert {d.name for d in result.deletes} == {"ph-1-r", "ph-1-w"}
    assert result.creates == ()


def test_long_queue_drains_with_an_in_flight_cap() -> None:
    """ci-infra #606: 795 queued jobs, at most 30 pairs in flight. Capacity must keep growing
    past 30 pairs in existence and the queue must drain."""
    knobs = params(max_runners=1000, max_pending_pairs=30, downscale_delay=60.0)
    queue = 795
    jobs: list[tuple[str, int]] = []  # (runner pod, rounds left)
    observed = Observed()
    memory = Memory()
    now = 0.0
    peak_pairs = 0
    seq = 0
    for _ in range(200):
        now += 10.0
        observed = replace(observed, active_runners=len(jobs))
        result, memory = plan(observed, demand(queue), knobs, memory, now)
        assert result.advertised <= knobs.max_runners
        # GitHub assigns up to the advertised capacity; each job lands on a spare pair
        spare = result.advertised - len(jobs)
        observed = apply_plan(observed, result, knobs, now)
        peak_pairs = max(peak_pairs, sum(1 for p in observed.placeholders if p.role == RU))
        assigned = max(0, min(queue, spare))
        queue -= assigned
        placeholders = list(observed.placeholders)
        for _ in range(assigned):
            slot = next(p.slot for p in placeholders if p.role == RU and p.phase == R)
            placeholders = [p for p in placeholders if p.slot != slot]
            jobs.append((f"run-{seq}", 3))
            seq += 1
        jobs = [(name, left - 1) for name, left in jobs if left > 1]
        observed = schedule_all(
            replace(
                observed,
                placeholders=tuple(placeholders),
                runner_pods=tuple(runner(name) for name, _ in jobs),
                workflow_pods=tuple(workflow(name) for name, _ in jobs),
            )
        )
        if queue == 0 and not jobs:
            break
    assert queue == 0
    assert peak_pairs > 30


def test_operator_cap_change_mid_flight() -> None:
    """ci-infra #921: max_runners goes to 0 while runners are busy; the advertised value must
    be 0 on the very next pass and no new pairs may appear."""
    observed = Observed(
        placeholders=(*pairs(5),),
        runner_pods=(runner("a"), runner("b")),
        workflow_pods=(workflow("a"), workflow("b")),
        active_runners=2,
    )
    result, memory = plan(observed, demand(50), params(max_runners=60), Memory(), NOW)
    assert result.advertised == 7
    result, _ = plan(observed, demand(50), params(max_runners=0), memory, NOW + 1)
    assert result.advertised == 0
    assert result.creates == ()


# --- HUD fallback ---------------------------------------------------------------------------


def hud_params(**kw: object) -> Params:
    return params(
        demand_enabled=True, demand_stale_after=120.0, demand_failure_base_capacity=4, **kw
    )


def ok(queued: int) -> DemandOutcome:
    return DemandOutcome(result=DemandResult.OK, duration=0.1, queued=queued)


def failed(result: DemandResult = DemandResult.TIMEOUT) -> DemandOutcome:
    return DemandOutcome(result=result, duration=10.0)


def test_hud_disabled_means_zero_queued() -> None:
    got = resolve_demand(DemandState(), NOW, params())
    assert (got.queued, got.source) == (0, DemandSource.DISABLED)


def test_hud_never_answered_uses_the_floor() -> None:
    got = resolve_demand(DemandState(), NOW, hud_params())
    assert (got.queued, got.source) == (4, DemandSource.FLOOR)


@pytest.mark.parametrize(
    ("failure_at", "expected"),
    [
        pytest.param(10.0, (17, DemandSource.HUD), id="fresh"),
        pytest.param(60.0, (17, DemandSource.STALE), id="stale-within-window"),
        pytest.param(130.0, (17, DemandSource.STALE), id="stale-at-the-edge"),
        pytest.param(131.0, (4, DemandSource.FLOOR), id="floor-after-window"),
    ],
)
def test_hud_holds_last_good_then_falls_to_the_floor(
    failure_at: float, expected: tuple[int, DemandSource]
) -> None:
    state = record_demand(DemandState(), ok(17), 10.0)
    if failure_at > 10.0:
        state = record_demand(state, failed(), failure_at)
    got = resolve_demand(state, failure_at, hud_params())
    assert (got.queued, got.source) == expected


def test_hud_outage_never_reads_as_zero() -> None:
    """ci-infra #577: an outage must not shrink capacity the way "0 queued" would."""
    state = record_demand(DemandState(), ok(0), 0.0)
    state = record_demand(state, failed(DemandResult.HTTP_ERROR), 500.0)
    got = resolve_demand(state, 500.0, hud_params(proactive_capacity=1))
    assert got.queued == 4
    result, _ = plan(Observed(), got, hud_params(proactive_capacity=1), Memory(), 500.0)
    assert result.desired_pairs == 5


def test_hud_recovers_after_a_failure() -> None:
    state = record_demand(DemandState(), failed(DemandResult.BAD_RESPONSE), 0.0)
    state = record_demand(state, ok(2), 5.0)
    got = resolve_demand(state, 6.0, hud_params())
    assert (got.queued, got.source, got.age) == (2, DemandSource.HUD, 1.0)


def test_hud_value_not_refreshed_in_time_is_not_trusted() -> None:
    state = record_demand(DemandState(), ok(9), 0.0)
    got = resolve_demand(state, 1000.0, hud_params())
    assert got.source == DemandSource.FLOOR


# --- queued jobs held for the launch time, the warm pool for downscale_delay -----------------


def test_pairs_for_queued_jobs_go_after_the_hold_the_warm_pool_after_downscale_delay() -> None:
    knobs = params(proactive_capacity=1, downscale_delay=300.0, demand_hold=60.0)
    _, memory = plan(Observed(placeholders=(*pairs(4),)), demand(3), knobs, Memory(), 10.0)
    # The queue empties: the 3 pairs made for it stay for the hold (their nodes may still be
    # coming up), then go; the warm pair stays for downscale_delay.
    held, memory = plan(Observed(placeholders=(*pairs(4),)), demand(0), knobs, memory, 60.0)
    assert held.deletes == ()
    assert held.target_pairs == 4
    after, _ = plan(Observed(placeholders=(*pairs(4),)), demand(0), knobs, memory, 71.0)
    assert after.target_pairs == 1
    assert len({d.name for d in after.deletes}) == 6  # three pairs, the newest first
    assert {d.reason for d in after.deletes} == {DeleteReason.EXCESS}


def test_without_a_hold_queued_and_warm_pairs_share_downscale_delay() -> None:
    knobs = params(proactive_capacity=1, downscale_delay=300.0)
    _, memory = plan(Observed(placeholders=(*pairs(4),)), demand(3), knobs, Memory(), 10.0)
    kept, _ = plan(Observed(placeholders=(*pairs(4),)), demand(0), knobs, memory, 300.0)
    assert kept.target_pairs == 4
    assert kept.deletes == ()


def test_a_hold_longer_than_downscale_delay_is_cut_to_it() -> None:
    knobs = params(downscale_delay=100.0, demand_hold=1000.0)
    _, memory = plan(Observed(placeholders=(*pairs(2),)), demand(2), knobs, Memory(), 10.0)
    later, _ = plan(Observed(placeholders=(*pairs(2),)), demand(0), knobs, memory, 111.0)
    assert later.target_pairs == 0


@pytest.mark.parametrize(
    ("launches", "ceiling", "hold"),
    [
        ([50.0] * 7, 300.0, None),  # too few launches seen: downscale_delay
        ([5.0] * 8, 300.0, 30.0),  # launches on nodes with room: the floor
        ([10.0] * 8 + [80.0, 90.0], 300.0, 80.0),  # the p90, not the median
        ([400.0] * 10, 300.0, 300.0),  # never beyond downscale_delay
        ([5.0] * 10, 20.0, 20.0),  # nor the floor beyond a shorter downscale_delay
    ],
)
def test_the_auto_hold_is_the_p90_launch_time(
    launches: list[float], ceiling: float, hold: float | None
) -> None:
    assert demand_hold(launches, ceiling) == hold


@pytest.mark.parametrize(
    ("launches", "ceiling", "timeout"),
    [
        ([50.0] * 7, 300.0, None),  # too few launches seen: ready_timeout alone
        ([5.0] * 8, 300.0, 180.0),  # launches on nodes with room: the floor
        ([10.0] * 8 + [80.0, 100.0], 300.0, 200.0),  # twice the longest, not the p90
        ([10.0] * 9 + [120.0], 300.0, 240.0),  # one slow new-node launch among quick ones
        ([200.0] * 10, 300.0, 300.0),  # never beyond ready_timeout
        ([5.0] * 8, 120.0, 120.0),  # nor the floor beyond a shorter ready_timeout
    ],
)
def test_the_stall_timeout_is_twice_the_longest_recent_launch(
    launches: list[float], ceiling: float, timeout: float | None
) -> None:
    assert stall_timeout(launches, ceiling) == timeout


# --- a half the cloud cannot give -----------------------------------------------------------


def _stalled_pair(slot: int, created: float) -> tuple[Placeholder, Placeholder]:
    """The runner half on its node, the workflow half still waiting for one."""
    return pair(slot, R, P, created=created)


def test_a_pair_whose_workflow_half_cannot_launch_is_released_and_backs_off() -> None:
    """Site A's workflow type has run out: its runner halves sit on nodes for pairs that
    cannot become capacity. Past twice the launch time the pair goes whole (STALLED), and no
    pair is made for the queue during the back-off, though jobs still wait."""
    knobs = params(stall_timeout=120.0, ready_timeout=300.0)
    observed = Observed(placeholders=(*_stalled_pair(1, 0.0), *pair(2, P, P, created=0.0)))
    early, memory = plan(observed, demand(3), knobs, Memory(), 100.0)
    assert early.deletes == ()  # within the stall timeout: a slow launch
    result, memory = plan(observed, demand(3), knobs, memory, 121.0)
    assert {d.name: d.reason for d in result.deletes} == {
        "ph-1-r": DeleteReason.STALLED,
        "ph-1-w": DeleteReason.STALLED,
    }  # the pair with both halves Pending is left to ready_timeout
    assert result.creates == ()
    assert result.stall_backoff == 120.0
    after = apply_plan(observed, result, knobs, 121.0)
    during, memory = plan(after, demand(3), knobs, memory, 200.0)
    assert during.creates == ()
    assert during.stall_backoff == pytest.approx(41.0)
    resumed, memory = plan(after, demand(3), knobs, memory, 242.0)
    # The back-off is over: the type is tried again, one pair first (the slow start).
    assert (len(resumed.creates), resumed.slow_start) == (1, 1)
    # Those stall too: the back-off doubles.
    again = Observed(
        placeholders=tuple(p for slot in resumed.creates for p in _stalled_pair(int(slot), 242.0))
    )
    second, memory = plan(again, demand(3), knobs, memory, 363.0)
    assert {d.reason for d in second.deletes} == {DeleteReason.STALLED}
    assert second.stall_backoff == 240.0
    # The cloud has the type again: a pair made after the stall runs, and the back-off ends.
    recovered = Observed(placeholders=tuple(pair(9, created=700.0)))
    cleared, memory = plan(recovered, demand(3), knobs, memory, 710.0)
    assert (memory.stalled_at, cleared.stall_backoff) == (None, 0.0)
    # Ramped again, the back-off's length kept until the ramp is over (one more stall now
    # backs off twice as long).
    assert (len(cleared.creates), cleared.slow_start, memory.backoff) == (1, 1, 240.0)


def test_without_observed_launches_only_the_ready_timeout_applies() -> None:
    observed = Observed(placeholders=_stalled_pair(1, 0.0))
    result, memory = plan(observed, demand(1), params(), Memory(), 250.0)
    assert result.deletes == ()
    result, _ = plan(observed, demand(1), params(), memory, 301.0)
    assert {d.reason for d in result.deletes} == {DeleteReason.TIMEOUT}
    assert len(result.creates) == 1  # a timeout is not a stall: no back-off


# --- the as-of correction ------------------------------------------------------------------


def test_jobs_started_since_the_reading_are_not_counted_again() -> None:
    """A reading as of t=40 counted 3 queued jobs. Since then three jobs were assigned here:
    two queued before t=40 (in the reading), one queued at 45 (not in it). One pair is still
    wanted for the reading's jobs; the third job's pair came with a later reading."""
    read = Demand(queued=3, source=DemandSource.HUD, as_of=40.0)
    assigned = [(50.0, 10.0), (60.0, 30.0), (70.0, 45.0), (35.0, 5.0)]  # last: before the read
    corrected = with_starts(read, assigned)
    assert corrected.started_since == 2
    result, _ = plan(Observed(active_runners=3), corrected, params(), Memory(), NOW)
    assert result.desired_pairs == 1
    assert len(result.creates) == 1
    # Without an as-of time (the floor, no source) nothing is taken off.
    assert with_starts(demand(3), assigned).started_since == 0
    result, _ = plan(Observed(active_runners=3), demand(3), params(), Memory(), NOW)
    assert result.desired_pairs == 3


def test_a_reading_keeps_its_as_of_time_while_held() -> None:
    ok = DemandOutcome(result=DemandResult.OK, duration=0.1, queued=4)
    state = record_demand(DemandState(), ok, 100.0, as_of=70.0)
    knobs = params(demand_enabled=True)
    assert resolve_demand(state, 110.0, knobs).as_of == 70.0
    failed = DemandOutcome(result=DemandResult.TIMEOUT, duration=10.0)
    state = record_demand(state, failed, 130.0)
    held = resolve_demand(state, 140.0, knobs)
    assert (held.source, held.queued, held.as_of) == (DemandSource.STALE, 4, 70.0)
    assert record_demand(DemandState(), ok, 100.0).last_good_as_of == 100.0


def test_a_warm_pool_that_shrinks_is_damped_by_downscale_delay_not_the_hold() -> None:
    """A schedule window ends (warm pool 2 → 0): its pairs go after downscale_delay, as
    before, even though queued jobs' pairs are held for a shorter time."""
    knobs = params(proactive_capacity=2, downscale_delay=300.0, demand_hold=60.0)
    _, memory = plan(Observed(placeholders=(*pairs(2),)), demand(0), knobs, Memory(), 10.0)
    ended = replace(knobs, proactive_capacity=0)
    kept, memory = plan(Observed(placeholders=(*pairs(2),)), demand(0), ended, memory, 100.0)
    assert kept.target_pairs == 2
    assert kept.deletes == ()
    gone, _ = plan(Observed(placeholders=(*pairs(2),)), demand(0), ended, memory, 311.0)
    assert gone.target_pairs == 0


def test_assignments_before_a_reading_are_forgotten_and_count_the_same() -> None:
    assigned = deque([(30.0, 5.0), (40.0, 10.0), (50.0, 20.0), (60.0, 45.0)])
    read = Demand(queued=3, source=DemandSource.HUD, as_of=40.0)
    before = with_starts(read, list(assigned)).started_since
    forget_assigned(assigned, read.as_of)
    assert list(assigned) == [(50.0, 20.0), (60.0, 45.0)]
    assert with_starts(read, assigned).started_since == before == 1
    forget_assigned(assigned, None)  # no reading (the floor): nothing is dropped
    assert len(assigned) == 2
