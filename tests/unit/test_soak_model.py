"""The fault soak's pure parts (tools/soak_model.py): the schedule a seed gives, and
each invariant computed from hand-made records, including records that must fail it."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tools.soak_model import (
    KINDS,
    LISTENER_KINDS,
    LISTENER_SIGKILL,
    LISTENER_SIGTERM,
    NODE_LOSS,
    JobFacts,
    Poll,
    Restart,
    Sample,
    acks_duplicated,
    after_restart,
    confirmed_capacity,
    header_over_capacity,
    job_invariants,
    over_polls,
    restart_figures,
    schedule,
    summarize,
    verdict,
)


def test_a_seed_gives_the_same_schedule_every_time_and_another_seed_another() -> None:
    assert schedule(7, 240) == schedule(7, 240)
    assert schedule(7, 240) != schedule(8, 240)


def test_the_schedule_stays_in_the_window_and_uses_every_enabled_kind() -> None:
    faults = schedule(3, 240, lease=30.0)
    assert {f.kind for f in faults} == set(KINDS)
    assert all(20 < f.at < 240 - 15 for f in faults)
    assert [f.at for f in faults] == sorted(f.at for f in faults)


def test_only_the_enabled_kinds_are_scheduled() -> None:
    faults = schedule(3, 240, (NODE_LOSS, LISTENER_SIGTERM))
    assert {f.kind for f in faults} == {NODE_LOSS, LISTENER_SIGTERM}
    assert schedule(3, 240, ()) == ()


def test_a_listener_is_not_killed_again_while_its_restart_waits_for_the_lease() -> None:
    for seed in range(20):
        faults = schedule(seed, 600, LISTENER_KINDS, lease=30.0)
        for site in (0, 1):
            times = [f.at for f in faults if f.site == site]
            assert all(b - a >= 50.0 for a, b in itertools.pairwise(times)), seed


def test_an_unknown_kind_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="node_los"):
        schedule(1, 60, ("node_los",))


def _job(
    states: tuple[str, ...],
    runners: tuple[str, ...] = ("r1",),
    result: str | None = "succeeded",
    failure: str | None = None,
) -> JobFacts:
    return JobFacts("j", states, runners, result, failure)


DONE = ("queued", "assigned", "running", "completed")


def test_job_invariants_count_lost_duplicated_and_failed_jobs() -> None:
    figures = job_invariants(
        [
            _job(DONE),
            _job(("queued", "assigned"), runners=(), result=None),  # never finished: lost
            _job(("queued", "assigned", "running"), result=None),  # still running: lost
            _job(DONE, runners=("r1", "r2")),  # claimed by two runners
            _job(("queued", "assigned", "running", "running", "completed")),  # run twice
            _job(DONE, result="failed", failure="prepare_timeout"),
            _job(DONE, result="failed"),  # its pod was lost with its node
        ]
    )
    assert figures == {
        "jobs": 7,
        "jobs_lost": 2,
        "jobs_duplicated": 2,
        "jobs_failed_prepare_timeout": 1,
        "jobs_failed_other": 1,
    }


def test_a_message_acked_twice_is_counted() -> None:
    assert acks_duplicated([(1, 1), (1, 2), (2, 1)]) == 0
    assert acks_duplicated([(1, 1), (1, 2), (1, 1), (1, 1)]) == 2


def _pod(
    *,
    role: str | None = None,
    runner: bool = False,
    workflow: bool = False,
    phase: str = "Running",
    node: str | None = "n1",
    terminating: bool = False,
) -> dict[str, Any]:
    labels = {}
    if role:
        labels["capacity-listener.dev/role"] = role
    if runner:
        labels["actions-ephemeral-runner"] = "True"
    if workflow:
        labels["runner-pod"] = "r"
    meta: dict[str, Any] = {"labels": labels}
    if terminating:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}}


def test_confirmed_capacity_counts_running_placeholders_and_bound_real_pods() -> None:
    pods = [
        _pod(role="placeholder-runner"),
        _pod(role="placeholder-workflow"),
        _pod(role="placeholder-runner", phase="Pending", node=None),  # confirms nothing
        _pod(role="placeholder-workflow", terminating=True),  # confirms nothing
        _pod(runner=True),  # a job's runner pod, its workflow pod not yet created
        _pod(role="placeholder-workflow"),  # ... whose room is still held
        _pod(runner=True, phase="Pending", node=None),  # not bound: nothing
        _pod(runner=True, phase="Succeeded"),  # finished: nothing
    ]
    assert confirmed_capacity(pods, max_runners=10) == 2
    assert confirmed_capacity(pods, max_runners=1) == 1
    assert confirmed_capacity(pods[:1], max_runners=10) == 0  # a half is not a pair


def test_a_header_above_confirmed_capacity_is_counted_with_its_longest_stretch() -> None:
    samples = [Sample(float(t), 2 if t < 10 else 0) for t in range(0, 21)]
    polls = [
        Poll(1.0, 5.0, 2),  # fine
        Poll(5.0, 16.0, 2),  # capacity fell to 0 at t=10 and the poll held on: a stretch
        Poll(16.0, 30.0, 0),  # back in line
    ]
    figures = header_over_capacity(polls, samples, tolerance=2.0)
    # Judged at its start (t=5, capacity 2), the second poll is fine; the stretch counts it.
    assert figures["header_over_capacity_polls"] == 0
    assert figures["header_over_capacity_longest_s"] == pytest.approx(4.0)  # t=12 to t=16
    late = header_over_capacity([*polls, Poll(14.0, 15.0, 3)], samples, tolerance=2.0)
    assert late["header_over_capacity_polls"] == 1
    assert over_polls([*polls, Poll(14.0, 15.0, 3)], samples, tolerance=2.0) == [(14.0, 3, 0)]


def test_a_header_within_the_tolerance_of_a_capacity_change_is_not_counted() -> None:
    samples = [Sample(0.0, 3), Sample(1.0, 3), Sample(2.0, 0), Sample(3.0, 0), Sample(4.0, 0)]
    figures = header_over_capacity([Poll(2.2, 2.9, 3)], samples, tolerance=1.5)
    assert figures["header_over_capacity_polls"] == 0
    strict = header_over_capacity([Poll(2.2, 2.9, 3)], samples, tolerance=0.5)
    assert strict["header_over_capacity_polls"] == 1


def test_a_poll_without_samples_nearby_is_unobserved_and_an_absent_header_is_over() -> None:
    samples = [Sample(0.0, 5), Sample(30.0, 5)]
    figures = header_over_capacity(
        [Poll(15.0, 16.0, 9), Poll(30.0, 31.0, None)], samples, tolerance=2.0
    )
    assert figures["polls_unobserved"] == 1
    assert figures["polls_judged"] == 1
    assert figures["header_over_capacity_polls"] == 1  # no header: no limit


def test_restart_figures_measure_from_the_restart_and_from_the_old_sessions_expiry() -> None:
    figures = restart_figures(
        [
            Restart(0, LISTENER_SIGKILL, at=100.0, session_at=131.0, old_expiry=130.0),
            Restart(1, LISTENER_SIGTERM, at=200.0, session_at=201.5),
            Restart(1, "crash", at=300.0, session_at=None),
        ]
    )
    assert figures["restarts"] == 3
    assert figures["restarts_without_session"] == 1
    assert figures["restart_to_session_s_max"] == 31.0
    assert figures["sigkill_expiry_to_session_s_max"] == 1.0


def test_the_verdict_names_every_invariant_above_its_threshold() -> None:
    good = {"jobs_lost": 0, "sigkill_expiry_to_session_s_max": None, "unplanned_exits": 0}
    assert verdict(good) == (True, [])
    ok, failed = verdict({**good, "jobs_lost": 1, "sigkill_expiry_to_session_s_max": 4.2})
    assert not ok
    assert failed == ["jobs_lost", "sigkill_expiry_to_session_s_max"]


def test_the_summary_gives_min_median_and_max_per_invariant() -> None:
    summary = summarize([{"a": 1, "b": None}, {"a": 5, "b": 2.0}, {"a": 3, "b": 4.0}])
    assert summary["a"] == {"min": 1, "median": 3, "max": 5}
    assert summary["b"] == {"min": 2.0, "median": 3.0, "max": 4.0}


def test_an_over_capacity_poll_is_put_down_to_an_apiserver_restart_only_just_after_it() -> None:
    assert after_restart(120.0, [100.0])
    assert not after_restart(99.0, [100.0])  # before it
    assert not after_restart(141.0, [100.0])  # long after it
    assert not after_restart(120.0, [])


def _seed_document(seed: str, invariants: dict[str, Any], over: list[list[float]]) -> Any:
    return {
        "config": {"seeds": seed},
        "seeds": {
            seed: {
                "ok": invariants.get("header_over_capacity_polls", 0) == 0,
                "failed": [] if not over else ["header_over_capacity_polls"],
                "invariants": invariants,
                "applied": [{"t": 100.0, "kind": "apiserver_restart"}],
                "header_per_site": [{"over": over}],
            }
        },
        "run_seconds": 1.0,
        "date": "2026-01-01T00:00:00Z",
    }


def test_merged_runs_give_one_summary_and_fill_the_count_older_runs_lack() -> None:
    from tools.soak import merge

    older = _seed_document(
        "1", {"jobs_lost": 0, "header_over_capacity_polls": 2}, [[110.0, 3, 1], [300.0, 2, 1]]
    )
    newer = _seed_document(
        "11",
        {
            "jobs_lost": 0,
            "header_over_capacity_polls": 0,
            "header_over_capacity_polls_not_after_apiserver_restart": 0,
        },
        [],
    )
    merged = merge([newer, older])
    assert list(merged["seeds"]) == ["1", "11"]
    # 110 s is 10 s after the restart at 100 s; 300 s is not.
    assert (
        merged["seeds"]["1"]["invariants"]["header_over_capacity_polls_not_after_apiserver_restart"]
        == 1
    )
    assert merged["summary"]["header_over_capacity_polls"] == {"min": 0, "median": 1, "max": 2}
    assert not merged["ok"]
    assert merged["failed_by_seed"] == {"1": ["header_over_capacity_polls"]}
    # A seed whose cluster broke is kept and marked, and left out of the summary.
    marked = merge([newer, older], {"1": "kube-scheduler exited"})
    assert marked["environment_failed"] == {"1": ["kube-scheduler exited"]}
    assert marked["summary"]["header_over_capacity_polls"] == {"min": 0, "median": 0, "max": 0}


def test_a_merged_document_merges_again_with_a_newer_run() -> None:
    from tools.soak import merge

    first = merge([_seed_document("1", {"jobs_lost": 0}, []), _seed_document("2", {}, [])])
    again = merge([first, _seed_document("3", {"jobs_lost": 0}, [])])
    assert list(again["seeds"]) == ["1", "2", "3"]
    assert len(again["configs"]) == 3
    assert len(again["run_seconds"]) == 3
