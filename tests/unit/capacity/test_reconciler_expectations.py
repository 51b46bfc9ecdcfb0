"""Expectations: what the reconciler has sent but the watch has not shown yet."""

from __future__ import annotations

from dataclasses import replace

from capacity import policy
from capacity.expectations import Expectations
from capacity.model import Demand, DemandSource, Memory, Observed, Params, PodPhase, Role
from tests.unit.capacity.builders import pairs, ph

PARAMS = Params(max_runners=10, proactive_capacity=3, ready_timeout=60, downscale_delay=0)
NO_DEMAND = Demand(queued=0, source=DemandSource.DISABLED)


def test_expected_creates_count_as_pending_and_are_not_repeated() -> None:
    observed = Observed()
    plan, memory = policy.plan(observed, NO_DEMAND, PARAMS, Memory(), now=100.0)
    assert len(plan.creates) == 3

    exp = Expectations(ttl=30)
    for slot in plan.creates:
        for role in Role:
            exp.expect_create(f"ph-{slot}-{role.value}", slot, role, 100.0, 100.0 + 900)
    # The watch has shown nothing yet: planning again on the overlay creates nothing more.
    again, _ = policy.plan(exp.overlay(observed), NO_DEMAND, PARAMS, memory, now=101.0)
    assert again.creates == ()
    assert again.deletes == ()
    assert again.pending_pairs == 3
    assert again.advertised == 0  # expected (Pending) pods are never capacity

    # Without expectations the same pass would have created them again.
    naive, _ = policy.plan(observed, NO_DEMAND, PARAMS, memory, now=101.0)
    assert len(naive.creates) == 3


def test_expected_deletes_stop_counting_at_once_and_are_not_repeated() -> None:
    running = Observed(placeholders=tuple(pairs(3)))
    lower = replace(PARAMS, proactive_capacity=1)
    plan, memory = policy.plan(running, NO_DEMAND, lower, Memory(), now=100.0)
    assert plan.advertised == 1
    assert len(plan.deletes) == 4

    exp = Expectations(ttl=30)
    for d in plan.deletes:
        exp.expect_delete(d.name, 100.0)
    overlaid = exp.overlay(running)
    assert policy.count_sides(overlaid, lower).advertised == 1
    again, _ = policy.plan(overlaid, NO_DEMAND, lower, memory, now=101.0)
    assert again.deletes == ()
    assert again.creates == ()


def test_settle_drops_what_the_watch_shows_and_expires_the_rest() -> None:
    exp = Expectations(ttl=30)
    exp.expect_create("seen", "1", Role.RUNNER, 100.0, 1000.0)
    exp.expect_create("never-seen", "2", Role.RUNNER, 100.0, 1000.0)
    exp.expect_delete("gone", 100.0)
    exp.expect_delete("terminating", 100.0)
    exp.expect_delete("still-there", 100.0)
    seen = {
        "seen": ph(1, Role.RUNNER, PodPhase.PENDING),
        "terminating": ph(3, Role.RUNNER, terminating=True),
        "still-there": ph(4, Role.RUNNER),
    }
    exp.settle(seen, now=110.0)
    assert set(exp.creates) == {"never-seen"}
    assert set(exp.deletes) == {"still-there"}
    exp.settle(seen, now=131.0)  # past the TTL: trust the watch again
    assert exp.creates == {}
    assert exp.deletes == {}


def test_overlay_marks_deletes_terminating_and_adds_unseen_creates() -> None:
    exp = Expectations()
    a = ph(1, Role.RUNNER)
    exp.expect_delete(a.name, 5.0)
    exp.expect_create(a.name + "-new", "9", Role.WORKFLOW, 5.0, 905.0)
    out = exp.overlay(Observed(placeholders=(a,)))
    by_name = {p.name: p for p in out.placeholders}
    assert by_name[a.name].terminating is True
    new = by_name[a.name + "-new"]
    assert (new.phase, new.role, new.slot, new.owned) == (
        PodPhase.PENDING,
        Role.WORKFLOW,
        "9",
        True,
    )
    # A create of a name the watch already shows is not added twice.
    exp.expect_create(a.name, "1", Role.RUNNER, 5.0, 905.0)
    assert len(exp.overlay(Observed(placeholders=(a,))).placeholders) == 2
    assert Expectations().overlay(Observed(placeholders=(a,))).placeholders == (a,)
