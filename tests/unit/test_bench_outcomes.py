"""The outcome benchmark's arithmetic: NodeClaim lifetimes clipped to the trace window,
placeholder pod-seconds from watch events, ratios to stock."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.bench_outcomes import (
    _add_ratios,
    _placeholder_seconds,
    _sharding_ratios,
    ratios_table,
)
from tests.support.e2e_karpenter import Claim, NodeClaimLog
from tests.support.e2e_site import PodEvent


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


def test_ratios_to_stock_skip_a_zero_base() -> None:
    variants: dict[str, dict[str, Any]] = {
        "stock": {
            "jobs_stranded": 4,
            "queue_to_workflow_running_s": {"p90": 80.0},
            "pairs_created": 0,
        },
        "warm_pool": {
            "jobs_stranded": 0,
            "queue_to_workflow_running_s": {"p90": 20.0},
            "pairs_created": 12,
        },
    }
    _add_ratios(variants)
    ratios = variants["warm_pool"]["ratio_to_stock"]
    assert ratios["jobs_stranded"] == 0.0
    assert ratios["queue_to_workflow_running_s.p90"] == 0.25
    assert ratios["pairs_created"] is None  # stock creates none: no ratio
    assert variants["stock"]["ratio_to_stock"]["jobs_stranded"] == 1.0
    table = ratios_table(variants)
    assert "| queue → workflow pod Running p90 (s) | 80 | 20 (0.25×) |" in table


def test_sharding_is_the_sharded_demand_variant_over_the_unsharded_one() -> None:
    variants: dict[str, dict[str, Any]] = {
        "stock": {"node_seconds": {"total": 2000.0}, "pairs_created": 0},
        "demand": {"node_seconds": {"total": 1800.0}, "pairs_created": 18},
        "demand_unsharded": {"node_seconds": {"total": 2400.0}, "pairs_created": 36},
    }
    _add_ratios(variants)
    sharding = _sharding_ratios(variants)
    assert sharding["node_seconds.total"] == 0.75
    assert sharding["pairs_created"] == 0.5
    assert _sharding_ratios({"stock": variants["stock"]}) == {}
    table = ratios_table(variants, sharding).splitlines()
    assert table[0] == ("| | stock | demand, sharded | demand, unsharded | sharded / unsharded |")
    assert "| pairs created | 0 | 18 | 36 | 0.5× |" in table
    assert "| node-seconds, total | 2000 | 1800 (0.9×) | 2400 (1.2×) | 0.75× |" in table
