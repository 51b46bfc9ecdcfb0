"""tools/bench_whatif_staged.py: the mean ratios to reactive per policy, seed by seed."""

from __future__ import annotations

import pytest

from tools.bench_whatif_staged import OPT0, REACTIVE, summarize


def test_each_policy_is_averaged_as_a_ratio_to_reactive_on_its_own_seed() -> None:
    per_seed = {
        "1": {
            REACTIVE: {"p90": 200.0, "node_seconds": 1000.0},
            "predictive 300s": {"p90": 50.0, "node_seconds": 1200.0},
            OPT0: {"p90": 0.0, "node_seconds": 980.0},
        },
        "2": {
            REACTIVE: {"p90": 100.0, "node_seconds": 2000.0},
            "predictive 300s": {"p90": 50.0, "node_seconds": 2200.0},
            OPT0: {"p90": 0.0, "node_seconds": 1900.0},
        },
    }
    found = summarize(per_seed)
    assert found[REACTIVE] == {"p90_ratio": 1.0, "node_seconds_ratio": 1.0}
    # (0.25 + 0.5) / 2 and (1.2 + 1.1) / 2: a mean of ratios, not a ratio of sums
    assert found["predictive 300s"] == {"p90_ratio": 0.375, "node_seconds_ratio": 1.15}
    assert found[OPT0]["p90_ratio"] == 0.0
    assert found[OPT0]["node_seconds_ratio"] == pytest.approx(0.965)


def test_a_reactive_that_never_waited_gives_a_zero_ratio_not_a_division_error() -> None:
    per_seed = {"1": {REACTIVE: {"p90": 0.0, "node_seconds": 10.0}}}
    assert summarize(per_seed)[REACTIVE] == {"p90_ratio": 0.0, "node_seconds_ratio": 1.0}
