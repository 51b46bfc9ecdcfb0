"""Demand sharding between peer clusters: the pure split, and how it meets the HUD fallback."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capacity.model import Demand, DemandOutcome, DemandResult, DemandSource, DemandState, Params
from capacity.policy import (
    claim,
    desired_pairs,
    net_of_starts,
    record_demand,
    resolve_demand,
    with_starts,
)

COUNTS = st.integers(1, 12)
JOBS = st.integers(0, 5_000)


@given(total=JOBS, aged=st.one_of(st.none(), JOBS), count=COUNTS)
def test_fresh_shares_add_up_to_the_fresh_total(total: int, aged: int | None, count: int) -> None:
    parts = [claim(total, aged, index=i, count=count) for i in range(count)]
    assert sum(p.share for p in parts) == parts[0].fresh
    assert parts[0].fresh + parts[0].aged == total
    # Remainder to the lower indexes: shares never grow with the index, and differ by <= 1.
    shares = [p.share for p in parts]
    assert shares == sorted(shares, reverse=True)
    assert max(shares) - min(shares) <= 1


@given(total=JOBS, aged=JOBS, count=COUNTS)
def test_aged_jobs_are_claimed_whole_by_every_peer(total: int, aged: int, count: int) -> None:
    parts = [claim(total, aged, index=i, count=count) for i in range(count)]
    assert {p.aged for p in parts} == {min(aged, total)}
    assert all(p.claimed == p.share + min(aged, total) for p in parts)
    # Together the peers cover the whole queue; aged jobs are the only ones counted twice.
    assert sum(p.claimed for p in parts) == total + (count - 1) * min(aged, total)


@given(total=JOBS, aged=st.one_of(st.none(), JOBS))
def test_one_peer_alone_claims_the_whole_queue(total: int, aged: int | None) -> None:
    assert claim(total, aged).claimed == total
    assert claim(total, aged, index=0, count=1).claimed == total


@given(
    total=JOBS,
    aged=st.one_of(st.none(), JOBS),
    max_runners=st.integers(0, 50),
    proactive=st.integers(0, 5),
    active=st.integers(0, 60),
)
def test_one_peer_plans_exactly_as_without_sharding(
    total: int, aged: int | None, max_runners: int, proactive: int, active: int
) -> None:
    """cluster_count 1 gives the same demand, hence the same desired pairs, as before."""
    base = Params(
        max_runners=max_runners, proactive_capacity=proactive, demand_enabled=True
    )  # the defaults are one peer
    state = record_demand(
        DemandState(),
        DemandOutcome(result=DemandResult.OK, duration=0.1, queued=total, aged=aged),
        0.0,
    )
    got = resolve_demand(state, 1.0, base)
    assert got.queued == total
    before = Demand(queued=total, source=DemandSource.HUD)
    assert desired_pairs(base, got, active) == desired_pairs(base, before, active)


def test_remainder_goes_to_the_lowest_indexes() -> None:
    assert [claim(7, 0, index=i, count=3).share for i in range(3)] == [3, 2, 2]
    assert [claim(1, 0, index=i, count=3).share for i in range(3)] == [1, 0, 0]
    assert [claim(10, 4, index=i, count=4).claimed for i in range(4)] == [6, 6, 5, 5]


def test_aged_above_total_is_clamped() -> None:
    # Two HUD requests may see slightly different queues: the aged part never exceeds the total.
    got = claim(3, 5, index=1, count=2)
    assert (got.total, got.aged, got.fresh, got.share, got.claimed) == (3, 3, 0, 0, 3)


def peers(count: int, **kw: float) -> list[Params]:
    return [
        Params(
            max_runners=100,
            demand_enabled=True,
            demand_stale_after=60.0,
            demand_failure_base_capacity=2,
            cluster_index=i,
            cluster_count=count,
            **kw,  # type: ignore[arg-type]
        )
        for i in range(count)
    ]


def ok(queued: int, aged: int) -> DemandOutcome:
    return DemandOutcome(result=DemandResult.OK, duration=0.1, queued=queued, aged=aged)


def test_held_value_is_each_peers_claim_not_the_whole_queue() -> None:
    state = record_demand(DemandState(), ok(9, 2), 0.0)
    state = record_demand(state, DemandOutcome(result=DemandResult.TIMEOUT, duration=5.0), 30.0)
    got = [resolve_demand(state, 30.0, p) for p in peers(3)]
    assert {d.source for d in got} == {DemandSource.STALE}
    assert [d.queued for d in got] == [5, 4, 4]  # 7 fresh split 3/2/2, plus 2 aged each


def test_floor_applies_whole_to_every_peer() -> None:
    """During an outage no peer can tell whether the others are up: none splits its floor
    (splitting 2 between 3 peers would leave one with nothing)."""
    state = record_demand(DemandState(), ok(9, 2), 0.0)
    state = record_demand(state, DemandOutcome(result=DemandResult.HTTP_ERROR, duration=0.1), 100.0)
    got = [resolve_demand(state, 100.0, p) for p in peers(3)]
    assert [(d.queued, d.source) for d in got] == [(2, DemandSource.FLOOR)] * 3
    never = [resolve_demand(DemandState(), 0.0, p) for p in peers(3)]
    assert [(d.queued, d.source) for d in never] == [(2, DemandSource.FLOOR)] * 3


def test_live_value_carries_its_parts() -> None:
    state = record_demand(DemandState(), ok(9, 2), 0.0)
    got = resolve_demand(state, 1.0, peers(2)[1])
    assert got.source == DemandSource.HUD
    assert got.claim is not None
    assert (got.claim.total, got.claim.aged, got.claim.fresh, got.claim.share) == (9, 2, 7, 3)
    assert got.queued == 5


def _given(queued_at: float, count: int) -> list[tuple[float, float]]:
    """``count`` jobs queued at ``queued_at`` and assigned here one a second after t=10."""
    return [(10.0 + n, queued_at) for n in range(count)]


def test_a_peer_given_more_than_its_share_plans_for_the_whole_queue_left() -> None:
    """Peer 1's reading (as of t=0) counts 20 queued, 2 of them aged: its claim is 9 fresh +
    2 aged. While the other peer serves its share, this one's starts come off its claim.
    Once GitHub has handed it more of the reading's jobs than its share, the other peer is
    not taking its half (a shortage: it advertises no room), and it plans for every job the
    reading counted that has not started here."""
    state = record_demand(DemandState(), ok(20, 2), 5.0, as_of=0.0)
    read = resolve_demand(state, 5.0, peers(2)[1])
    assert (read.queued, read.claim and read.claim.share) == (11, 9)
    for started, wanted in [(0, 11), (4, 7), (9, 2), (10, 10), (15, 5), (20, 0), (25, 0)]:
        got = net_of_starts(with_starts(read, _given(-1.0, started)))
        assert got.queued == wanted, started
    # Jobs queued after the reading's as-of time were not in it: they do not count.
    assert net_of_starts(with_starts(read, _given(1.0, 12))).queued == 11


def test_one_peer_alone_takes_its_starts_off_the_whole_queue() -> None:
    state = record_demand(DemandState(), ok(20, 2), 5.0, as_of=0.0)
    read = resolve_demand(state, 5.0, peers(1)[0])
    assert [net_of_starts(with_starts(read, _given(-1.0, n))).queued for n in (0, 5, 19)] == [
        20,
        15,
        1,
    ]


@pytest.mark.parametrize(("index", "count"), [(1, 1), (3, 2), (-1, 2)])
def test_params_reject_an_index_outside_the_peers(index: int, count: int) -> None:
    with pytest.raises(ValueError, match="cluster_index"):
        Params(max_runners=1, cluster_index=index, cluster_count=count)
