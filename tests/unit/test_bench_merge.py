"""`bench_outcomes merge` of runs of other variants on the same seed: a six-variant table
measured a few variants at a time joins per seed, and says which run each variant came from."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tools.bench_outcomes import SMOKE, merge, table


def _variant(p90: float, total: float) -> dict[str, Any]:
    return {
        "failed_by_timeout": 0,
        "wait_s": {"p90": p90},
        "wait_succeeded_s": {"p90": p90},
        "queue_to_workflow_running_s": {"p90": p90},
        "node_seconds": {"total": total},
    }


def _run(seed: int, load: float, **variants: dict[str, Any]) -> dict[str, Any]:
    config = replace(SMOKE, seeds=(seed,), variants=tuple(variants))
    return {
        "config": config.describe(),
        "seeds": {
            str(seed): {
                "jobs": 10,
                "last_arrival_s": 100.0,
                "shortage_s": [20.0, 60.0],
                "window_s": 700.0,
                "variant_order": list(variants),
                "variants": variants,
                "load_average": [load, load, load],
            }
        },
        "run_seconds": 100.0,
    }


def test_runs_of_other_variants_on_one_seed_join_it() -> None:
    first = _run(2, 1.0, stock_min0=_variant(100.0, 1000.0), ours_demand=_variant(60.0, 1000.0))
    second = _run(2, 5.0, stock_minN=_variant(80.0, 1500.0), ours_warm=_variant(40.0, 1400.0))
    other_seed = _run(3, 2.0, stock_min0=_variant(90.0, 900.0))
    merged = merge([first, second, other_seed])
    assert merged["config"]["variants"] == ["stock_min0", "stock_minN", "ours_demand", "ours_warm"]
    assert merged["config"]["seeds"] == [2, 3]
    seed = merged["seeds"]["2"]
    assert set(seed["variants"]) == {"stock_min0", "ours_demand", "stock_minN", "ours_warm"}
    assert seed["parts"] == [
        {"variants": ["stock_min0", "ours_demand"], "load_average": [1.0, 1.0, 1.0]},
        {"variants": ["stock_minN", "ours_warm"], "load_average": [5.0, 5.0, 5.0]},
    ]
    assert "parts" not in merged["seeds"]["3"]  # one run: nothing to say
    # The ratio to stock minRunners 0 pairs variants of the two runs on the seed.
    ratio = merged["summary"]["ours_warm"]["wait_s.p90"]["ratio_to_stock"]
    assert ratio["median"] == 0.4
    assert "ours, warm pool N" in table(merged)
    assert [p["variants"] for p in merged["parts"]] == [
        ["stock_min0", "ours_demand"],
        ["stock_minN", "ours_warm"],
        ["stock_min0"],
    ]


def test_a_variant_twice_or_another_trace_on_one_seed_is_refused() -> None:
    first = _run(2, 1.0, stock_min0=_variant(100.0, 1000.0))
    with pytest.raises(ValueError, match="seed 2 has stock_min0 in more than one run"):
        merge([first, _run(2, 1.0, stock_min0=_variant(90.0, 1000.0))])
    other_trace = _run(2, 1.0, ours_warm=_variant(40.0, 1400.0))
    other_trace["seeds"]["2"]["jobs"] = 11
    with pytest.raises(ValueError, match="seed 2's runs have another trace: jobs"):
        merge([first, other_trace])
