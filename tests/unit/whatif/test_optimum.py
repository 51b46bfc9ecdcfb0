"""OPT₀ by the level sweep, checked against an independent brute force on small traces.

The brute force does not use levels or the min(g, D + c₀) formula: it tries every
assignment of jobs to nodes (every set partition: a node runs its jobs one after another),
and on each node every keep-or-release choice for each idle gap between its jobs, checks
feasibility (a released node is relaunched D before its next job, so the gap must be at
least D), and charges what the choices hold explicitly. Its minimum must equal the sweep.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from whatif.optimum import by_label_set, intervals, optimum
from whatif.trace import TraceJob

Span = tuple[float, float]


def _partitions(items: list[int]) -> Iterator[list[list[int]]]:
    """Every set partition of ``items`` (a node per block)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for partition in _partitions(rest):
        yield [[first], *partition]
        for i in range(len(partition)):
            yield [*partition[:i], [first, *partition[i]], *partition[i + 1 :]]


def _node_cost(spans: Sequence[Span], lead: float, launch: float) -> tuple[float, int] | None:
    """Least (spare, launches) of one node running ``spans`` in order; None if they overlap.
    Tries every keep/release choice per gap and charges each explicitly."""
    ordered = sorted(spans)
    if any(a[1] > b[0] for a, b in itertools.pairwise(ordered)):
        return None
    gaps = [b[0] - a[1] for a, b in itertools.pairwise(ordered)]
    best: tuple[float, int] | None = None
    for choice in itertools.product((False, True), repeat=len(gaps)):  # True: release
        held = lead  # the first launch: the node is paid from D before the first job
        launches = 1
        feasible = True
        for gap, release in zip(gaps, choice, strict=True):
            if not release:
                held += gap  # kept idle through the gap
                continue
            if gap < lead:  # a new node could not be ready in time
                feasible = False
                break
            held += lead  # the relaunched node, paid from D before the next job
            launches += 1
        if not feasible:
            continue
        cost = held + launch * launches
        if best is None or cost < best[0] - 1e-9:
            best = (cost, launches)
    return best


def _brute_force(spans: Sequence[Span], lead: float, launch: float) -> float:
    best = float("inf")
    for partition in _partitions(list(range(len(spans)))):
        total = 0.0
        for block in partition:
            cost = _node_cost([spans[i] for i in block], lead, launch)
            if cost is None:
                break
            total += cost[0]
        else:
            best = min(best, total)
    return best


_spans = st.lists(
    st.tuples(st.integers(0, 40), st.integers(1, 15)).map(
        lambda p: (float(p[0]), float(p[0] + p[1]))
    ),
    min_size=0,
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(spans=_spans, lead=st.integers(0, 12), launch=st.integers(0, 6))
def test_the_sweep_equals_the_brute_force(spans: list[Span], lead: int, launch: int) -> None:
    swept = optimum(spans, float(lead), float(launch))
    assert swept.spare == pytest.approx(_brute_force(spans, float(lead), float(launch)))
    assert swept.busy == pytest.approx(sum(e - s for s, e in spans))


def test_a_short_gap_is_kept_and_a_long_one_relaunched() -> None:
    # One level: jobs [0,10), [15,20) (gap 5 < D=8: keep), [50,60) (gap 30: relaunch).
    result = optimum([(0, 10), (15, 20), (50, 60)], lead=8.0, launch_cost=1.0)
    assert result.spare == pytest.approx(9 + 5 + 9)
    assert result.launches == 2
    assert result.peak == 1
    assert result.describe()["spare_pct_of_busy"] == pytest.approx(100 * 23 / 25)


def test_levels_are_counted_by_concurrency_not_by_job() -> None:
    # Two overlapping jobs need two nodes; a third after both ends reuses one (gap 0).
    result = optimum([(0, 10), (5, 12), (12, 20)], lead=10.0)
    assert result.peak == 2
    assert result.spare == pytest.approx(10 + 10 + 0 + 0)  # two launches; [10,12) kept by level 2
    assert result.launches == 2


def test_jobs_that_never_ran_take_no_capacity_and_label_sets_are_apart() -> None:
    jobs = [
        TraceJob(job="1", run="1", labels=("a",), queued_at=0, started_at=5, completed_at=15),
        TraceJob(job="2", run="1", labels=("a",), queued_at=0),
        TraceJob(job="3", run="2", labels=("b",), queued_at=3, started_at=3, completed_at=4),
    ]
    groups = by_label_set(jobs)
    assert list(groups) == ["a", "b"]
    assert intervals(groups["a"]) == [(0, 10)]  # zero wait: from queued_at, for its duration


def test_a_negative_lead_time_is_refused() -> None:
    with pytest.raises(ValueError, match="lead time"):
        optimum([], lead=-1.0)
