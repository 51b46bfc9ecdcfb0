"""After a stalled pair, a probe: one placeholder of the half the cloud could not give,
alone, keeps asking for its node during the back-off (capacity/policy.py step 2 and 9),
holding no node for the other half; once it runs the back-off is over and it is repaired
into a pair. The policy on its own, then through the reconciler on the in-memory cluster."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from capacity.model import DeleteReason, Memory, Observed, PodPhase, Repair, Role, StallCause
from capacity.policy import plan
from tests.support.memory_cluster import MemoryCluster
from tests.unit.capacity.test_launch_failures import (
    EVENTS,
    _at,
    _first_pair_with_the_word_read,
    ice_event,
)
from tests.unit.capacity.test_policy import demand, params

from .builders import P, R, apply_plan, pair, ph

KNOBS = params(stall_timeout=120.0, ready_timeout=300.0)


def _stall(short: Role) -> tuple[Observed, Memory, Repair]:
    """A pair whose ``short`` half waits for a node while the other runs, released at 121 s
    with three pairs wanted; returns the cluster after that pass, its memory and the probe."""
    runner, workflow = (P, R) if short == Role.RUNNER else (R, P)
    observed = Observed(placeholders=pair(1, runner, workflow, created=0.0))
    _, memory = plan(observed, demand(3), KNOBS, Memory(), 100.0)
    result, memory = plan(observed, demand(3), KNOBS, memory, 121.0)
    assert {d.reason for d in result.deletes} == {DeleteReason.STALLED}
    assert result.creates == ()  # no pair during the back-off
    (probe,) = result.probes
    assert probe.role == short
    assert probe.slot not in {"1"}  # a new slot, after every one seen
    return apply_plan(observed, result, KNOBS, 121.0), memory, probe


@pytest.mark.parametrize("short", [Role.WORKFLOW, Role.RUNNER])
def test_a_stall_makes_one_probe_of_the_half_the_cloud_could_not_give(short: Role) -> None:
    after, memory, probe = _stall(short)
    assert [(p.slot, p.role, p.phase) for p in after.placeholders] == [(probe.slot, short, P)]
    # While it waits: no second probe, no pair, and it is not aged as a left-over half.
    again, memory = plan(after, demand(3), KNOBS, memory, 200.0)
    assert (again.creates, again.repairs, again.probes, again.deletes) == ((), (), (), ())
    assert again.stall_backoff == pytest.approx(41.0)
    # Idempotent: the same view at the same time plans nothing more.
    same, _ = plan(after, demand(3), KNOBS, memory, 200.0)
    assert (same.creates, same.probes) == ((), ())


def test_a_running_probe_ends_the_back_off_and_is_repaired_then_pairs_ramp_up() -> None:
    """The back-off is over, but the probe may have run in room an old node had (a finished
    job's): the pairs still wanted start one at a time, and each pair made since whose
    stalled half runs doubles what may be in flight (a slow start)."""
    _, memory, probe = _stall(Role.WORKFLOW)
    ran = Observed(placeholders=(ph(probe.slot, Role.WORKFLOW, R, created=121.0),))
    result, memory = plan(ran, demand(5), KNOBS, memory, 180.0)  # within the back-off
    assert result.stall_backoff == 0.0
    assert memory.stalled_at is None
    assert memory.stalled_role is None
    assert result.repairs == (Repair(probe.slot, Role.RUNNER),)
    assert result.slow_start == 1
    (first,) = result.creates  # one new pair of the four still wanted
    assert result.deletes == ()
    later = apply_plan(ran, result, KNOBS, 180.0)
    # Its workflow half still waits for its node: nothing more, however many are wanted.
    waiting, memory = plan(later, demand(5), KNOBS, memory, 200.0)
    assert (waiting.creates, waiting.repairs, waiting.slow_start) == ((), (), 1)
    # It runs: two may be in flight now.
    ran_too = _set_phase(later, first, R)
    grown, memory = plan(ran_too, demand(5), KNOBS, memory, 230.0)
    assert grown.slow_start == 2
    assert len(grown.creates) == 2
    same, _ = plan(apply_plan(ran_too, grown, KNOBS, 230.0), demand(5), KNOBS, memory, 230.0)
    assert (same.creates, same.repairs, same.deletes) == ((), (), ())


def _set_phase(observed: Observed, slot: str, phase: PodPhase) -> Observed:
    return Observed(
        placeholders=tuple(
            replace(p, phase=phase, node_name="node-a") if p.slot == slot else p
            for p in observed.placeholders
        )
    )


def test_a_slow_start_pair_refused_again_costs_one_node_and_backs_off_longer() -> None:
    """The capped-8 case: the probe ran in a finished job's room while the type was still
    out. One pair is made, not a batch; its workflow half is refused, it stalls, and the
    back-off is doubled: no ramp while backing off."""
    _, memory, probe = _stall(Role.WORKFLOW)
    ran = Observed(placeholders=(ph(probe.slot, Role.WORKFLOW, R, created=121.0),))
    result, memory = plan(ran, demand(8), KNOBS, memory, 180.0)
    (made,) = result.creates
    after = apply_plan(ran, result, KNOBS, 180.0)
    stuck = _set_phase(after, probe.slot, R)  # the repaired runner half runs
    stuck = Observed(
        placeholders=tuple(
            replace(p, phase=R, node_name="node-b")
            if p.slot == made and p.role == Role.RUNNER
            else p
            for p in stuck.placeholders
        )
    )
    stalled, memory = plan(stuck, demand(8), KNOBS, memory, 301.0)  # 121 s Pending
    assert stalled.stalls == (StallCause.TIME,)
    assert stalled.creates == ()
    assert stalled.slow_start == 0
    assert memory.slow_start is None
    assert memory.backoff == pytest.approx(240.0)  # doubled


def test_a_slow_start_ends_at_the_in_flight_cap_or_after_the_ready_timeout() -> None:
    knobs = params(stall_timeout=120.0, ready_timeout=300.0, max_pending_pairs=4)
    observed = Observed(placeholders=pair(1, R, P, created=0.0))
    _, memory = plan(observed, demand(6), knobs, Memory(), 100.0)
    result, memory = plan(observed, demand(6), knobs, memory, 121.0)
    (probe,) = result.probes
    ran = Observed(placeholders=(ph(probe.slot, Role.WORKFLOW, R, created=121.0),))
    result, ramping = plan(ran, demand(6), knobs, memory, 150.0)
    assert ramping.slow_start is not None
    # Nothing ran since and no pair was wanted: the ramp is forgotten after ready_timeout.
    idle, forgotten = plan(ran, demand(0), knobs, ramping, 451.0)
    assert (idle.slow_start, forgotten.slow_start) == (0, None)
    # Two of its pairs run: 2 ** 2 = 4 = max_pending_pairs, the ramp is over.
    made = apply_plan(ran, result, knobs, 150.0)
    (slot,) = result.creates
    both = Observed(
        placeholders=(
            *_set_phase(made, slot, R).placeholders,
            *pair(int(slot) + 1, R, R, created=160.0),
        )
    )
    done, over = plan(both, demand(6), knobs, ramping, 200.0)
    assert (done.slow_start, over.slow_start) == (0, None)


def test_no_probe_when_no_pair_is_wanted_or_one_is_already_asking() -> None:
    knobs = params(stall_timeout=120.0, proactive_capacity=1)
    observed = Observed(placeholders=pair(1, R, P, created=0.0))
    _, memory = plan(observed, demand(0), knobs, Memory(), 100.0)
    gone, _ = plan(observed, demand(0), params(stall_timeout=120.0), memory, 121.0)
    assert gone.stalls == (StallCause.TIME,)
    assert gone.probes == ()  # nothing wanted any more: nothing asks
    # A pair still Pending (made before the stall) already asks the cloud for that half.
    waiting = Observed(placeholders=(*pair(1, R, P, created=0.0), *pair(2, P, P, created=90.0)))
    _, memory = plan(waiting, demand(1), knobs, Memory(), 100.0)
    asking, _ = plan(waiting, demand(1), knobs, memory, 121.0)
    assert asking.stalls == (StallCause.TIME,)
    assert asking.probes == ()


async def test_through_the_reconciler_a_probe_is_made_counted_and_not_a_launch_sample(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The pair stalls on the pools' word; in the same pass one workflow placeholder alone
    is made in a new slot, counted and logged, and no pair. Once the probe runs, the
    back-off is over: it gets its runner half (a repair), and its wait through the shortage
    is not a launch sample (the slot is timed from the repair)."""
    from tests.unit.capacity.test_monitor_logic import NOW, NS, RUNNER_SET

    caplog.set_level(logging.INFO, logger="capacity.reconciler")
    cluster = MemoryCluster()
    async with _first_pair_with_the_word_read(cluster) as scene:
        (runner,) = scene.placeholders(Role.RUNNER)
        cluster.set_phase(NS, runner, "Running")
        cluster.add(EVENTS, ice_event("any-b8c9d", last=_at(NOW + 5)))
        await scene.settle()
        scene.clock.now = NOW + 61
        stalled = await scene.reconciler.reconcile_once()
        assert stalled.stalls == (StallCause.CLOUD,)
        assert stalled.creates == ()
        (made,) = stalled.probes
        assert made.role == Role.WORKFLOW
        await scene.settle()
        assert scene.placeholders(Role.RUNNER) == []
        (probe,) = scene.placeholders(Role.WORKFLOW)
        assert f"-{made.slot}-" in probe
        scene.clock.now = NOW + 100  # still short: it waits, no second one beside it
        waiting = await scene.reconciler.reconcile_once()
        assert (waiting.creates, waiting.probes, waiting.deletes) == ((), (), ())
        assert waiting.stall_backoff > 0
        scene.clock.now = NOW + 150  # the cloud has the type again
        cluster.set_phase(NS, probe, "Running")
        await scene.settle()
        cleared = await scene.reconciler.reconcile_once()
        assert cleared.stall_backoff == 0.0
        assert cleared.repairs == (Repair(made.slot, Role.RUNNER),)
        assert cleared.slow_start == 1
        ramp = {"name": RUNNER_SET, "namespace": NS}
        assert scene.registry.get_sample_value("gha_capacity_slow_start_pairs", ramp) == 1
        await scene.settle()
        (repaired,) = scene.placeholders(Role.RUNNER)
        scene.clock.now = NOW + 170
        cluster.set_phase(NS, repaired, "Running")
        await scene.settle()
        await scene.reconciler.reconcile_once()
        assert list(scene.reconciler.launch_times) == [20.0] * 9  # the repair's 20 s
    sample = scene.registry.get_sample_value
    labels = {"name": RUNNER_SET, "namespace": NS, "role": Role.WORKFLOW.value}
    assert sample("gha_capacity_probes_total", labels) == 1
    lines = [r for r in caplog.records if r.getMessage() == "placeholder probe created"]
    assert [r.__dict__["role"] for r in lines] == [Role.WORKFLOW.value]
    ramps = [r for r in caplog.records if r.getMessage() == "slow start"]
    assert [r.__dict__["in_flight"] for r in ramps] == [1]


def test_a_probe_clears_the_back_off_though_its_timestamp_is_older_than_the_stall() -> None:
    """creationTimestamp has whole seconds: a probe made in the stall's pass at 121.6 s reads
    as made at 121 s, before the stall. It is known by its slot, not its age."""
    observed = Observed(placeholders=pair(1, R, P, created=0.0))
    _, memory = plan(observed, demand(2), KNOBS, Memory(), 100.0)
    result, memory = plan(observed, demand(2), KNOBS, memory, 121.6)
    (probe,) = result.probes
    assert memory.probe_slots == (probe.slot,)
    ran = Observed(placeholders=(ph(probe.slot, Role.WORKFLOW, R, created=121.0),))
    cleared, memory = plan(ran, demand(2), KNOBS, memory, 150.0)
    assert cleared.stall_backoff == 0.0
    assert memory.probe_slots == ()
    assert cleared.repairs == (Repair(probe.slot, Role.RUNNER),)


def test_a_probe_is_no_partner_for_another_slots_lone_half() -> None:
    """A lone runner half left from slot 2 and a workflow probe are not a (virtual) pair:
    the probe is to be repaired in its own slot once it runs, the runner half aged as
    before."""
    after, memory, _ = _stall(Role.WORKFLOW)
    lone = ph(2, Role.RUNNER, R, created=50.0)
    with_lone = Observed(placeholders=(*after.placeholders, lone))
    result, _ = plan(with_lone, demand(3), KNOBS, memory, 130.0)
    assert result.running_pairs == 0
    assert result.pending_pairs == 0  # no virtual pair of the two
    assert result.probes == ()  # the probe still asks


def test_a_pending_probe_stays_alone_while_the_other_half_is_short() -> None:
    """A runner probe made while workflow halves are short is not given its workflow half
    before it runs: the pass after the one that made it plans nothing more (the plan stays
    idempotent), although a lone runner half is otherwise repaired in a shortage of workflow
    halves."""
    knobs = params(
        max_runners=2,
        proactive_capacity=1,
        max_pending_pairs=1,
        ready_timeout=1.0,
        downscale_delay=0.0,
        ttl=60.0,
        renew_before=0.0,
        stall_timeout=0.0,
        cannot_launch_at={Role.RUNNER: 8800.0, Role.WORKFLOW: 10_000.0},
    )
    now = 10_000.0
    runner, workflow = pair(0, P, R, created=now, ttl=60.0)
    observed = Observed(
        placeholders=(
            replace(runner, created_at=now - 1.0, expires_at=now + 59.0),
            replace(workflow, node_name="n1"),
            ph(4, Role.WORKFLOW, P, created=now - 1.0, ttl=60.0),
        ),
        active_runners=1,
    )
    first, memory = plan(observed, demand(0), knobs, Memory(), now)
    (probe,) = first.probes
    assert probe.role == Role.RUNNER
    again, _ = plan(apply_plan(observed, first, knobs, now), demand(0), knobs, memory, now)
    assert (again.creates, again.repairs, again.probes, again.deletes) == ((), (), (), ())
