"""Where a job's wait goes (tools/critical_path.py): pairs from placeholder pod events, header
rises, the attribution of pairs to jobs by order, the steps that add up to a job's wait, and
the figures and table built from them."""

from __future__ import annotations

from typing import Any

import pytest

from tools.critical_path import (
    JobPath,
    Pair,
    attribute,
    delete_reasons,
    figures,
    pair_seconds,
    pairs_from_events,
    rises,
    steps,
    table,
)
from tools.e2e_site import PodEvent

RUNNER, WORKFLOW = "placeholder-runner", "placeholder-workflow"


def _event(
    wall: float, kind: str, slot: str, role: str, phase: str, terminating: bool = False
) -> PodEvent:
    return PodEvent(wall, kind, f"ph-{slot}-{role[12]}", role, phase, terminating, slot)


def test_a_pair_is_running_once_both_halves_are_and_until_one_goes() -> None:
    events = [
        _event(100.0, "ADDED", "1", RUNNER, "Pending"),
        _event(100.5, "ADDED", "1", WORKFLOW, "Pending"),
        _event(130.0, "MODIFIED", "1", RUNNER, "Running"),
        _event(160.0, "MODIFIED", "1", WORKFLOW, "Running"),
        _event(170.0, "MODIFIED", "1", RUNNER, "Running"),  # a later event changes nothing
        _event(200.0, "MODIFIED", "1", RUNNER, "Running", terminating=True),  # preempted
        _event(201.0, "DELETED", "1", RUNNER, "Running"),
        # Slot 2: its runner half went before the workflow half ran: never whole.
        _event(110.0, "ADDED", "2", RUNNER, "Running"),
        _event(110.0, "ADDED", "2", WORKFLOW, "Pending"),
        _event(120.0, "DELETED", "2", RUNNER, "Running"),
        _event(150.0, "MODIFIED", "2", WORKFLOW, "Running"),
        _event(90.0, "LISTED", "", RUNNER, "Running"),  # no slot label: not a pair
    ]
    pairs = sorted(pairs_from_events(events, offset=100.0), key=lambda p: p.slot)
    assert pairs == [Pair("1", 0.0, 60.0, 100.0), Pair("2", 10.0, None, 20.0)]


def test_a_rise_is_a_poll_above_the_one_before() -> None:
    records: list[tuple[float, int | None]] = [
        (1.0, 2),  # the first poll: no rise
        (2.0, 2),
        (3.0, 4),
        (4.0, 1),
        (5.0, 3),
        (6.0, None),  # no header: no limit, above any value
        (7.0, 5),
    ]
    assert rises(records) == [3.0, 5.0, 6.0]


def test_pairs_go_to_jobs_in_the_order_they_turned_running_and_were_assigned() -> None:
    pairs = [
        Pair("b", created=20.0, running=80.0, ended=None),
        Pair("a", created=10.0, running=60.0, ended=None),
        Pair("gone", created=5.0, running=50.0, ended=55.0),  # deleted before any job
        Pair("late", created=30.0, running=500.0, ended=None),  # after every assignment
        Pair("never", created=30.0, running=None, ended=90.0),
    ]
    paths = [
        JobPath(queued=40.0, assigned=100.0),  # second assigned
        JobPath(queued=30.0, assigned=70.0),  # first assigned
        JobPath(queued=41.0, assigned=110.0),  # third: no pair left that was Running
        JobPath(queued=42.0),  # never assigned
    ]
    result = attribute(paths, pairs, rise_times=[61.0, 65.0, 85.0, 200.0])
    assert (result[1].pair_created, result[1].pair_running, result[1].header_rise) == (
        10.0,
        60.0,
        61.0,  # the first rise after its pair turned Running
    )
    assert (result[0].pair_created, result[0].pair_running, result[0].header_rise) == (
        20.0,
        80.0,
        85.0,
    )
    assert result[2].pair_running is None
    assert result[2].header_rise is None
    assert result[3] == paths[3]


def test_a_rise_after_the_assignment_is_not_the_jobs() -> None:
    (path,) = attribute(
        [JobPath(queued=0.0, assigned=50.0)], [Pair("a", 0.0, 40.0, None)], rise_times=[60.0]
    )
    assert path.pair_running == 40.0
    assert path.header_rise is None


def test_a_jobs_steps_follow_its_critical_path_and_add_up_to_its_wait() -> None:
    ours = JobPath(
        queued=100.0,
        demand_seen=135.0,
        pair_created=140.0,
        pair_running=200.0,
        header_rise=203.0,
        assigned=204.0,
        runner_running=207.0,
        workflow_running=208.0,
    )
    found = steps(ours)
    assert found == {
        "demand_seen": 35.0,
        "pair_created": 5.0,
        "pair_running": 60.0,
        "header_rise": 3.0,
        "assigned": 1.0,
        "runner_running": 3.0,
        "workflow_running": 1.0,
    }
    assert list(found) == ["demand_seen", *list(found)[1:]]  # in path order
    # A warm pair and an idle runner from before the job; a reading that counted the job
    # after it was assigned: none of them is what it waited for.
    warm = JobPath(
        queued=100.0,
        demand_seen=135.0,
        pair_created=20.0,
        pair_running=80.0,
        assigned=101.0,
        runner_running=50.0,
        workflow_running=110.0,
    )
    assert steps(warm) == {"assigned": 1.0, "workflow_running": 9.0}
    # A runner that became ready while the job still waited to be assigned: the assignment
    # came later, so that is the step.
    late = JobPath(queued=0.0, runner_running=5.0, assigned=10.0, workflow_running=20.0)
    assert steps(late) == {"assigned": 10.0, "workflow_running": 10.0}
    # Stock: two launches in a row, the second one failed by the prepare-job timeout.
    stock = steps(JobPath(queued=0.0, assigned=2.0, runner_running=62.0, failed=182.0))
    assert stock == {"assigned": 2.0, "runner_running": 60.0, "failed": 120.0}
    assert steps(JobPath(queued=0.0, assigned=2.0)) == {}  # unfinished


def test_figures_count_finished_jobs_per_step_and_each_steps_share() -> None:
    paths = [
        JobPath(queued=0.0, assigned=10.0, runner_running=70.0, workflow_running=130.0),
        JobPath(queued=0.0, assigned=30.0, runner_running=40.0, workflow_running=50.0),
        JobPath(queued=5.0, assigned=6.0),  # unfinished: in no step
    ]
    pairs = [
        Pair("1", 0.0, 40.0, None),
        Pair("2", 0.0, 100.0, None),
        Pair("3", 0.0, None, 9.0),
        Pair("4", 0.0, None, 9.0, "excess"),
        Pair("5", 0.0, None, None),
    ]
    found = figures(paths, pairs)
    assert found["steps_s"] == {
        "assigned": {"n": 2, "p50": 10.0, "p90": 30.0, "share": pytest.approx(40 / 180, 1e-3)},
        "runner_running": {
            "n": 2,
            "p50": 10.0,
            "p90": 60.0,
            "share": pytest.approx(70 / 180, 1e-3),
        },
        "workflow_running": {
            "n": 2,
            "p50": 10.0,
            "p90": 60.0,
            "share": pytest.approx(70 / 180, 1e-3),
        },
    }
    assert found["pair_launch_s"] == {
        "n": 2,
        "p50": 40.0,
        "p90": 100.0,
        "never_running": 3,
        "never_running_by": {
            "alive at the end": 1,
            "excess": 1,
            "not deleted by the policy": 1,
        },
    }
    assert found["columns"][:2] == ["queued", "demand_seen"]
    assert found["jobs"][0] == [0.0, None, None, None, None, 10.0, 70.0, 130.0, None]
    assert len(found["jobs"]) == 3


def test_the_table_has_each_steps_median_over_seeds_and_skips_old_runs() -> None:
    def seed(p50: float, p90: float) -> dict[str, Any]:
        path = {"critical_path": figures([JobPath(0.0, assigned=p50, workflow_running=p90)], [])}
        return {"variants": {"stock_min0": path, "ours_demand": {"jobs": 3}}}

    text = table(
        {"1": seed(2.0, 50.0), "2": seed(4.0, 80.0), "3": seed(6.0, 60.0)},
        ("stock_min0", "ours_demand"),
        {"stock_min0": "stock"},
    )
    lines = text.splitlines()
    assert "| step | stock |" in lines  # the variant without the steps has no column
    assert "| → assigned to the scale set | 4 / 4 (5%) |" in lines  # shares 4, 5 and 10 %
    assert "| → workflow pod Running | 54 / 54 (95%) |" in lines  # 48, 76 and 54 s
    assert not any(line.startswith("| → pair") for line in lines)  # no pair in any seed
    assert table({"1": {"variants": {"stock_min0": {"jobs": 1}}}}, ("stock_min0",), {}) == ""


def test_the_listeners_delete_reasons_are_read_back_per_slot() -> None:
    log = "\n".join(
        [
            "time=t level=INFO logger=capacity.reconciler msg=reconcile creates=1 deletes=2",
            'time=t level=INFO logger=capacity.reconciler msg="placeholders deleted" '
            "reason=excess slots=3,12",
            'time=t level=INFO logger=capacity.reconciler msg="placeholders deleted" '
            'reason=timeout slots="12,40"',
        ]
    )
    assert delete_reasons(log) == {"3": "excess", "12": "excess", "40": "timeout"}
    events = [
        _event(10.0, "ADDED", "3", RUNNER, "Pending"),
        _event(50.0, "DELETED", "3", RUNNER, "Pending"),
        _event(10.0, "ADDED", "7", RUNNER, "Pending"),
    ]
    found = {p.slot: p.reason for p in pairs_from_events(events, 0.0, delete_reasons(log))}
    assert found == {"3": "excess", "7": None}


def test_the_pairs_time_is_split_by_how_each_ended() -> None:
    pairs = [
        Pair("1", 0.0, 30.0, 50.0),  # taken by a job 20 s after it ran
        Pair("2", 10.0, 40.0, 100.0, "excess"),  # released unused after 60 s
        Pair("3", 20.0, None, 35.0, "excess"),  # trimmed while launching
        Pair("4", 90.0, 100.0, None),  # Running at the end of the window
        Pair("5", -30.0, None, None),  # created before the window, never ran
    ]
    assert pair_seconds(pairs, until=120.0) == {
        "pending": 30.0 + 30.0 + 15.0 + 10.0 + 120.0,
        "running_then_taken": 20.0,
        "running_then_released": 60.0,
        "running_at_end": 20.0,
    }
    assert figures([], pairs, until=120.0)["pair_seconds"]["running_then_released"] == 60.0
    assert "pair_seconds" not in figures([], pairs)
