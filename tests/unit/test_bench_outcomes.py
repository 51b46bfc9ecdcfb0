"""The outcome benchmark's arithmetic: NodeClaim lifetimes clipped to the trace window,
placeholder and pause pod-seconds, the seeded plan, the summary over seeds and its ratios to
stock."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from tools.bench_outcomes import (
    FAMILIES,
    FULL,
    REFERENCE,
    SMOKE,
    Arrival,
    SeedPlan,
    VariantRun,
    _critical_path,
    _figures,
    _pause_seconds,
    _placeholder_seconds,
    config_of,
    main,
    merge,
    peak_in_flight,
    plan,
    reference,
    summarize,
    table,
    wait_figures,
    with_family,
    with_reference,
)
from tools.e2e_karpenter import Claim, NodeClaimLog
from tools.e2e_site import PodEvent
from tools.fake_actions import CapacityRecord, FakeJob, JobState


def test_claim_seconds_are_clipped_to_the_window() -> None:
    claim = Claim("c1", "pool-a", created=90.0, last_seen=150.0)
    assert claim.seconds_within(100.0, 200.0) == 50.0
    assert claim.seconds_within(100.0, 120.0) == 20.0
    assert claim.seconds_within(160.0, 200.0) == 0.0


def test_node_seconds_and_launches_per_pool() -> None:
    log = NodeClaimLog(cluster=None, pools=["a", "b"])  # type: ignore[arg-type]
    log.claims = {
        "1": Claim("1", "a", created=0.0, last_seen=30.0, launched=True),
        "2": Claim("2", "a", created=10.0, last_seen=12.0, launched=False),  # ICE: no instance
        "3": Claim("3", "b", created=5.0, last_seen=100.0, launched=True),
    }
    assert log.node_seconds(0.0, 50.0) == {"a": 32.0, "b": 45.0}
    assert log.launches(0.0, 50.0) == {
        "a": {"attempted": 2, "launched": 1},
        "b": {"attempted": 1, "launched": 1},
    }


class _Site:
    def __init__(self, events: list[PodEvent]) -> None:
        self.placeholder_events = events


def _event(wall: float, kind: str, name: str, terminating: bool = False) -> PodEvent:
    return PodEvent(wall, kind, name, "placeholder-runner", "Running", terminating)


def test_placeholder_seconds_end_at_termination_and_at_the_window() -> None:
    site: Any = _Site(
        [
            _event(10.0, "ADDED", "p1"),
            _event(20.0, "MODIFIED", "p1"),
            _event(40.0, "MODIFIED", "p1", terminating=True),  # counted until here
            _event(45.0, "DELETED", "p1"),
            _event(50.0, "ADDED", "p2"),  # still alive at the end of the window
        ]
    )
    assert _placeholder_seconds(site, 0.0, 70.0) == pytest.approx(30.0 + 20.0)
    assert _placeholder_seconds(site, 30.0, 70.0) == pytest.approx(10.0 + 20.0)


def _variant(failed: int, p90: float, total: float) -> dict[str, Any]:
    return {
        "failed_by_timeout": failed,
        "wait_s": {"p90": p90},
        "wait_succeeded_s": {"p90": p90 - 1},
        "queue_to_workflow_running_s": {"p90": p90 - 2},
        "node_seconds": {"total": total},
    }


def _old_variant(failed: int, p90: float, total: float) -> dict[str, Any]:
    """A variant's figures as runs before the headline wait wrote them."""
    figures = _variant(failed, p90, total)
    del figures["wait_s"], figures["wait_succeeded_s"]
    return figures


def _job(number: int, queued: float, **fields: Any) -> FakeJob:
    job = FakeJob(
        runner_request_id=number,
        job_id=f"job-{number}",
        owner_name="acme",
        repository_name="app",
        workflow_ref="ci.yml",
        display_name="build",
        event_name="push",
        labels=("linux",),
        workflow_run_id=number,
        duration=10.0,
        queue_time=datetime.now(UTC),
        history=[(queued, JobState.QUEUED)],
    )
    for key, value in fields.items():
        setattr(job, key, value)
    return job


def test_a_job_failed_by_the_timeout_waits_until_its_failure_in_the_headline() -> None:
    jobs = [
        _job(1, 0.0, workflow_started_at=10.0, result="succeeded", finished_at=50.0),
        _job(2, 0.0, workflow_started_at=20.0, result="succeeded", finished_at=60.0),
        # Failed by the prepare-job timeout: its workflow pod never ran; it waited 200 s.
        _job(3, 10.0, result="failed", failure="prepare_timeout", finished_at=210.0),
        # Ran, then lost its pod: in the headline at its start, not among the succeeded.
        _job(4, 0.0, workflow_started_at=30.0, result="failed", failure="runner: deleted"),
        _job(5, 0.0),  # unfinished: in none
    ]
    waits = wait_figures(jobs)
    assert waits["wait_s"] == {
        "n": 4,
        "failed_by_timeout": 1,
        "p50": 20.0,
        "p90": 200.0,
        "p99": 200.0,
        "max": 200.0,
    }
    assert waits["wait_succeeded_s"] == {"n": 2, "p50": 10.0, "p90": 20.0, "p99": 20.0, "max": 20.0}
    # The old figure: every job whose workflow pod ran, the failed one left out.
    assert waits["queue_to_workflow_running_s"]["n"] == 3
    assert waits["queue_to_workflow_running_s"]["max"] == 30.0


def test_summary_is_median_and_range_over_seeds_and_ratios_per_seed() -> None:
    config = replace(SMOKE, variants=("stock_min0", "ours_warm", "ours_demand"))
    seeds = {
        "1": {
            "variants": {
                "stock_min0": _variant(4, 80.0, 2000.0),
                "ours_warm": _variant(0, 20.0, 3000.0),
            }
        },
        "2": {
            "variants": {
                "stock_min0": _variant(2, 40.0, 1000.0),
                "ours_warm": _variant(0, 20.0, 1000.0),
            }
        },
        "3": {
            "variants": {
                "stock_min0": _variant(0, 50.0, 1000.0),
                "ours_warm": _variant(1, 25.0, 2000.0),
            }
        },
    }
    summary = summarize(seeds, config)
    assert set(summary) == {"stock_min0", "ours_warm"}  # a variant no seed ran is left out
    p90 = summary["ours_warm"]["wait_s.p90"]
    assert p90["value"] == {"median": 20.0, "min": 20.0, "max": 25.0}
    assert p90["ratio_to_stock"] == {"median": 0.5, "min": 0.25, "max": 0.5}
    total = summary["ours_warm"]["node_seconds.total"]["ratio_to_stock"]
    assert total == {"median": 1.5, "min": 1.0, "max": 2.0}
    # A seed where stock had none is left out of the ratio, not divided by zero.
    failed = summary["ours_warm"]["failed_by_timeout"]
    assert failed["ratio_to_stock"] == {"median": 0.0, "min": 0.0, "max": 0.0}
    lines = table({"summary": summary}).splitlines()
    assert lines[0] == "| | stock, minRunners 0 | ours, warm pool N |"
    assert "| queue → workflow Running or failed p90 (s) | 50 (40–80) | 20 (20–25) ×0.5 |" in lines
    assert (
        "| succeeded jobs only: queue → workflow Running p90 (s) | 49 (39–79) | 19 (19–24) ×0.49 |"
        in lines
    )
    assert not any("failed left out" in line for line in lines)  # a new run: no old rows


def test_pause_pod_seconds_integrate_samples_up_to_the_window() -> None:
    assert _pause_seconds([], 100.0) == 0.0
    assert _pause_seconds([(0.0, 2), (10.0, 4), (120.0, 4)], 100.0) == 2 * 10 + 4 * 90


def test_a_seed_plan_is_repeatable_and_its_shortage_falls_in_the_arrivals() -> None:
    first, again = plan(FULL, 1), plan(FULL, 1)
    assert first == again
    assert len(first.arrivals) >= 100
    assert first.last_arrival >= 15 * 60 * 0.9
    start, end = first.shortage
    assert 0.1 * first.last_arrival <= start <= 0.6 * first.last_arrival
    assert 240 <= end - start <= 480
    assert plan(FULL, 4).shortage != first.shortage


def test_saved_runs_are_re_planned_with_their_configuration() -> None:
    document = {"config": replace(SMOKE, seeds=(2, 3), warm=6).describe(), "seeds": {}}
    assert config_of(document).seeds == (2, 3)
    assert config_of(document).warm == 6  # a run with another N is re-planned with its own
    document["config"]["node_provisioning_delay_s"] = [1.0, 2.0]
    with pytest.raises(ValueError, match="matches neither"):
        config_of(document)


def test_bad_options_are_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    warm, variant = ["--warm", "-1"], ["--variants", "ours_warm", "ours_adaptive"]
    for argv, line in ((warm, "--warm: must be 0 or more"), (variant, "ours_adaptive not one of")):
        with pytest.raises(SystemExit):
            main(["run", "--smoke", *argv])
        assert line in capsys.readouterr().err


def test_summary_and_table_carry_the_reference_column() -> None:
    config = replace(SMOKE, variants=("stock_min0",))
    bound = reference(config, plan(config, 2))
    seeds = {"2": {"variants": {"stock_min0": _variant(1, 50.0, 9000.0)}, "reference": bound}}
    summary = summarize(seeds, config)
    assert (
        summary[REFERENCE]["node_seconds.total"]["value"]["median"]
        == bound["node_seconds"]["total"]
    )
    text = table({"summary": summary})
    assert text.splitlines()[0].endswith(f"| {REFERENCE} |")
    assert "| – |" in text  # no launches for the bound


def test_launch_delays_are_creation_to_node_of_claims_created_in_the_window() -> None:
    log = NodeClaimLog(cluster=None, pools=["a"])  # type: ignore[arg-type]
    log.claims = {
        "1": Claim("1", "a", created=10.0, last_seen=300.0, registered_at=130.0),
        "2": Claim("2", "a", created=20.0, last_seen=300.0, registered_at=95.0),
        "3": Claim("3", "a", created=30.0, last_seen=40.0),  # never joined (ICE)
        "4": Claim("4", "a", created=500.0, last_seen=600.0, registered_at=560.0),  # after
    }
    assert log.ready_after(0.0, 400.0) == [75.0, 120.0]


def test_the_figures_carry_each_launch_s_delay() -> None:
    log = NodeClaimLog(cluster=None, pools=["p-runner"])  # type: ignore[arg-type]
    log.claims = {"1": Claim("1", "p-runner", created=10.0, last_seen=200.0, registered_at=75.5)}
    no_karpenter: Any = None
    run = VariantRun("ours_demand", _stage(), no_karpenter, log=log, window=(0.0, 300.0))
    figures = _figures(run, SMOKE, 300.0)
    assert figures["node_ready_s"] == [65.5]
    assert figures["node_seconds"]["runner"] == 190.0


def _stage(served: dict[int, float] | None = None, polls: Any = ()) -> Any:
    """What _critical_path reads of a Stage: the demand fakes' notes and the poll records."""
    return SimpleNamespace(
        hud=SimpleNamespace(first_served=served or {}),
        github=SimpleNamespace(first_served={}),
        fake=SimpleNamespace(capacity_history=lambda scale_set_id: list(polls)),
    )


def test_each_jobs_path_is_read_from_the_fakes_on_one_clock_since_cluster_start() -> None:
    origin, wall_origin = 1000.0, 5000.0  # cluster start: monotonic, wall
    slot = "7"
    site = SimpleNamespace(
        scale_set_id=11,
        listeners=[],
        standin=SimpleNamespace(ready_times={"runner-a": origin + 95.0}),
        placeholder_events=[
            PodEvent(
                wall_origin + 40.0, "ADDED", "r", "placeholder-runner", "Pending", False, slot
            ),
            PodEvent(
                wall_origin + 41.0, "ADDED", "w", "placeholder-workflow", "Pending", False, slot
            ),
            PodEvent(
                wall_origin + 70.0, "MODIFIED", "r", "placeholder-runner", "Running", False, slot
            ),
            PodEvent(
                wall_origin + 80.0, "MODIFIED", "w", "placeholder-workflow", "Running", False, slot
            ),
        ],
    )
    polls = [
        CapacityRecord(origin + t, wall_origin + t, 11, value)
        for t, value in ((10.0, 0), (85.0, 1), (120.0, 1))
    ]
    job = _job(
        1,
        origin + 5.0,
        scale_set_id=11,
        assigned_at=origin + 86.0,
        runner_name="runner-a",
        workflow_started_at=origin + 100.0,
        result="succeeded",
    )
    run = VariantRun(
        "ours_demand",
        stage=_stage({1: origin + 36.0}, polls),
        karpenter=None,  # type: ignore[arg-type]
        sites=[site],  # type: ignore[list-item]
        jobs=[job],
        window=(wall_origin, wall_origin + 300.0),
        origin=origin,
    )
    path = _critical_path(run)
    assert path["jobs"] == [[5.0, 36.0, 40.0, 80.0, 85.0, 86.0, 95.0, 100.0, None]]
    assert path["steps_s"]["pair_running"]["p50"] == 40.0
    assert path["pair_launch_s"]["p50"] == 40.0


def test_runs_on_other_seeds_merge_into_one_document() -> None:
    config = replace(SMOKE, variants=("stock_min0",))

    def run(seed: int, p90: float) -> dict[str, Any]:
        return {
            "config": replace(config, seeds=(seed,)).describe(),
            "seeds": {str(seed): {"variants": {"stock_min0": _variant(0, p90, 100.0)}}},
            "run_seconds": 10.0,
        }

    merged = merge([run(2, 40.0), run(3, 60.0)])
    assert merged["config"]["seeds"] == [2, 3]
    assert merged["run_seconds"] == 20.0
    p90 = merged["summary"]["stock_min0"]["wait_s.p90"]["value"]
    assert (p90["min"], p90["max"]) == (40.0, 60.0)
    assert REFERENCE in merged["summary"]  # the bound, planned again for each seed
    with pytest.raises(ValueError, match="seed 2 has stock_min0 in more than one run"):
        merge([run(2, 40.0), run(2, 50.0)])
    other = run(3, 60.0)
    other["config"]["N"] = 5
    with pytest.raises(ValueError, match="another configuration: N"):
        merge([run(2, 40.0), other])


def test_an_older_run_that_did_not_record_a_setting_merges_and_says_so() -> None:
    config = replace(SMOKE, variants=("stock_min0",))

    def run(seed: int) -> dict[str, Any]:
        return {
            "config": replace(config, seeds=(seed,)).describe(),
            "seeds": {str(seed): {"variants": {"stock_min0": _variant(0, 50.0, 100.0)}}},
            "run_seconds": 10.0,
        }

    older = run(2)
    del older["config"]["hud_lag_s"]  # recorded only since a later version
    merged = merge([older, run(3)])
    assert merged["config"]["hud_lag_s"] == run(3)["config"]["hud_lag_s"]
    assert merged["unrecorded"] == {"hud_lag_s": [2]}
    newer = run(3)
    newer["config"]["hud_lag_s"] = 99.0  # recorded by both, but different
    with pytest.raises(ValueError, match="another configuration: hud_lag_s"):
        merge([run(2), newer])


def test_an_old_run_without_the_headline_wait_prints_its_own_waits_and_says_so() -> None:
    config = replace(SMOKE, variants=("stock_min0",))

    def run(seed: int, variant: dict[str, Any]) -> dict[str, Any]:
        return {
            "config": replace(config, seeds=(seed,)).describe(),
            "seeds": {str(seed): {"variants": {"stock_min0": variant}}},
        }

    old = with_reference(run(2, _old_variant(3, 50.0, 100.0)))
    assert old["old_wait_seeds"] == [2]
    lines = table(old).splitlines()
    assert "| queue → workflow Running p90 (s), failed left out | 48 (48–48) | 0 (0–0) |" in lines
    assert not any(line.startswith("| queue → workflow Running or failed") for line in lines)
    assert lines[-1].startswith("Seeds 2 were run before failed jobs counted in the waits")
    # Merged with a new run: the headline over the new seed only, and the note says so.
    merged = merge([run(2, _old_variant(3, 50.0, 100.0)), run(3, _variant(1, 70.0, 100.0))])
    assert merged["old_wait_seeds"] == [2]
    p90 = merged["summary"]["stock_min0"]["wait_s.p90"]["value"]
    assert p90 == {"median": 70.0, "min": 70.0, "max": 70.0}
    text = table(merged)
    assert "| queue → workflow Running or failed p90 (s) | 70 (70–70) |" in text
    assert text.endswith("are not in the headline waits above.")
    assert "old_wait_seeds" not in with_reference(run(3, _variant(1, 70.0, 100.0)))


def test_the_roomy_family_holds_more_runners_than_any_seeds_peak_in_flight() -> None:
    roomy = with_family(FULL, "roomy")
    assert roomy.describe()["max_runners_per_cluster"] == FAMILIES["roomy"]
    assert FULL.describe()["family"] == "capped"
    for config in (roomy, with_family(SMOKE, "roomy")):
        for seed in config.seeds:
            assert peak_in_flight(config, plan(config, seed)) <= config.max_runners, seed
    # ... which the capped family's maxRunners is not (it is the bottleneck there).
    assert peak_in_flight(FULL, plan(FULL, 1)) > FULL.max_runners
    seed_plan = SeedPlan(1, (Arrival(0.0, 10.0), Arrival(5.0, 10.0), Arrival(400.0, 1.0)), (0, 0))
    assert peak_in_flight(SMOKE, seed_plan) == 2  # 90 s of timeout margin: the first two overlap
    with pytest.raises(ValueError, match="family: 'huge' is not one of capped, roomy"):
        with_family(FULL, "huge")


def test_a_saved_runs_family_is_read_back_and_runs_of_two_families_do_not_merge() -> None:
    roomy = replace(with_family(SMOKE, "roomy"), seeds=(2,), variants=("stock_min0",))
    assert config_of({"config": roomy.describe()}).max_runners == FAMILIES["roomy"]
    older = roomy.describe()
    del older["family"]  # before families: the capped one
    assert config_of({"config": older}).family == "capped"

    def run(config: Any, seed: int) -> dict[str, Any]:
        return {
            "config": replace(config, seeds=(seed,)).describe(),
            "seeds": {str(seed): {"variants": {"stock_min0": _variant(0, 50.0, 100.0)}}},
        }

    capped = replace(SMOKE, variants=("stock_min0",))
    with pytest.raises(ValueError, match="another configuration"):
        merge([run(capped, 2), run(roomy, 3)])
