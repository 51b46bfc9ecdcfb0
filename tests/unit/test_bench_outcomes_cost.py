"""Node-seconds per succeeded job in the outcome benchmark's summary and table
(tools/bench_outcomes.py): a job the prepare-job timeout failed held its runner's node but
never ran its workflow pod, so a variant that fails jobs holds fewer node-seconds for less
work; the cost of the work done is the total over the jobs that succeeded. And the offline
optimum the costs are measured against, as a bound and priced as the cluster charges a
launch."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tools.bench_outcomes import (
    REFERENCE,
    SMOKE,
    Arrival,
    SeedPlan,
    plan,
    reference,
    summarize,
    table,
)


def _variant(succeeded: int, total: float) -> dict[str, Any]:
    return {"succeeded": succeeded, "node_seconds": {"total": total}}


def test_summary_and_table_carry_node_seconds_per_succeeded_job() -> None:
    config = replace(SMOKE, variants=("stock_min0", "ours_warm"))
    seeds = {
        # stock failed 4 of 10: 2000 / 6 = 333.3 against ours 3000 / 10 = 300 (×0.9).
        "1": {"variants": {"stock_min0": _variant(6, 2000.0), "ours_warm": _variant(10, 3000.0)}},
        # 1000 / 8 = 125 against 1000 / 10 = 100 (×0.8).
        "2": {"variants": {"stock_min0": _variant(8, 1000.0), "ours_warm": _variant(10, 1000.0)}},
        # ours failed one: 1000 / 10 = 100 against 2000 / 9 = 222.2 (×2.22).
        "3": {"variants": {"stock_min0": _variant(10, 1000.0), "ours_warm": _variant(9, 2000.0)}},
    }
    summary = summarize(seeds, config)
    assert summary["ours_warm"]["node_seconds_per_succeeded_job"] == {
        "value": {"median": 222.2, "min": 100.0, "max": 300.0},
        "ratio_to_stock": {"median": 0.9, "min": 0.8, "max": 2.222},
    }
    lines = table({"summary": summary}).splitlines()
    assert "| node-seconds per succeeded job | 125 (100–333.3) | 222.2 (100–300) ×0.9 |" in lines


def test_a_variant_with_no_succeeded_job_has_no_cost_per_job() -> None:
    config = replace(SMOKE, variants=("stock_min0", "ours_warm"))
    seeds = {
        "1": {"variants": {"stock_min0": _variant(0, 2000.0), "ours_warm": _variant(10, 900.0)}}
    }
    summary = summarize(seeds, config)
    assert summary["stock_min0"]["node_seconds_per_succeeded_job"]["value"] is None
    # No ratio to a cost that does not exist (rather than a division by zero).
    assert summary["ours_warm"]["node_seconds_per_succeeded_job"] == {
        "value": {"median": 90.0, "min": 90.0, "max": 90.0},
        "ratio_to_stock": None,
    }


def test_the_bound_counts_every_job_as_succeeded() -> None:
    config = replace(SMOKE, variants=("stock_min0",))
    seed_plan: SeedPlan = plan(config, 2)
    bound = reference(config, seed_plan)
    assert bound["succeeded"] == len(seed_plan.arrivals)
    summary = summarize({"2": {"variants": {}, "reference": bound}}, config)
    per_job = summary[REFERENCE]["node_seconds_per_succeeded_job"]["value"]["median"]
    assert per_job == round(bound["node_seconds"]["total"] / len(seed_plan.arrivals), 1)


def test_reference_is_the_optimum_in_slot_seconds_halved_per_pool() -> None:
    config = replace(SMOKE, launch_delay=(30.0, 90.0))
    seed_plan = SeedPlan(1, (Arrival(0.0, 100.0), Arrival(10.0, 100.0)), (0.0, 0.0))
    bound = reference(config, seed_plan)
    # Two slots, each launched once (30 s lead) and busy 100 s: 260 slot-seconds.
    assert bound["busy_slot_seconds"] == 200.0
    assert bound["spare_slot_seconds"] == 60.0
    assert bound["node_seconds"] == {"runner": 130.0, "workflow": 130.0, "total": 260.0}


def test_the_priced_reference_charges_the_mean_launch_and_the_consolidation_tail() -> None:
    config = replace(SMOKE, launch_delay=(30.0, 90.0), consolidate_after="30s")
    # One slot: busy 0–100 s and 250–350 s. The 150 s gap is longer than a launch priced at
    # 60 s + 30 s, so the slot is released and launched again: 2 × 90 + 200 slot-seconds.
    seed_plan = SeedPlan(1, (Arrival(0.0, 100.0), Arrival(250.0, 100.0)), (0.0, 0.0))
    priced = reference(config, seed_plan)["priced"]
    assert (priced["lead_s"], priced["tail_s"], priced["launches"]) == (60.0, 30.0, 2)
    assert priced["node_seconds"] == {"total": 380.0}  # 380 slot-s, halved, in two pools
    # A gap shorter than the priced launch is held instead: 60 s, one launch.
    held = reference(config, SeedPlan(1, (Arrival(0.0, 100.0), Arrival(160.0, 100.0)), (0, 0)))
    assert held["priced"]["launches"] == 1
    assert held["priced"]["node_seconds"] == {"total": 90.0 + 60.0 + 200.0}
