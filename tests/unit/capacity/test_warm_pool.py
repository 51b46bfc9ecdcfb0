"""The warm pools (capacity/warm_pool.py): schedule windows across time zones and daylight
saving time, the compound-Poisson cover, the adaptive pool's bounds, monotonicity and its
break-even hold (Hypothesis properties), and the arrival counter."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capacity.warm_pool import (
    AdaptiveConfig,
    AdaptivePool,
    ArrivalCounter,
    Estimate,
    FixedPool,
    ScheduledPool,
    cover,
    parse_window,
)

BERLIN = ZoneInfo("Europe/Berlin")
UTC = ZoneInfo("UTC")


def at(text: str, tz: ZoneInfo = UTC) -> float:
    """Epoch seconds of a wall-clock time in a zone ("2026-03-27 08:00")."""
    return datetime.fromisoformat(text).replace(tzinfo=tz).timestamp()


# --- fixed and scheduled ------------------------------------------------------------------


def test_fixed_pool_is_its_size() -> None:
    pool = FixedPool(3)
    pool.observe(0.0, 10, 10)
    assert pool.target(0.0) == 3


def test_window_boundaries_are_wall_clock_start_inclusive_end_exclusive() -> None:
    pool = ScheduledPool([parse_window("Mon-Fri 08:00-18:00 Europe/Berlin", 6)], default=1)
    # Friday 2026-11-27 (CET, UTC+1).
    assert pool.target(at("2026-11-27 07:59:59", BERLIN)) == 1
    assert pool.target(at("2026-11-27 08:00", BERLIN)) == 6
    assert pool.target(at("2026-11-27 17:59:59", BERLIN)) == 6
    assert pool.target(at("2026-11-27 18:00", BERLIN)) == 1
    assert pool.target(at("2026-11-28 12:00", BERLIN)) == 1  # Saturday
    # The same instant in UTC: 08:00 Berlin is 07:00 UTC in winter.
    assert pool.target(at("2026-11-27 07:00", UTC)) == 6


def test_window_follows_daylight_saving_time() -> None:
    pool = ScheduledPool([parse_window("Mon-Fri 08:00-18:00 Europe/Berlin", 6)])
    # Berlin moves to summer time on Sunday 2026-03-29: the window opens at 07:00 UTC the
    # Friday before and at 06:00 UTC the Monday after.
    assert pool.target(at("2026-03-27 06:59", UTC)) == 0
    assert pool.target(at("2026-03-27 07:00", UTC)) == 6
    assert pool.target(at("2026-03-30 05:59", UTC)) == 0
    assert pool.target(at("2026-03-30 06:00", UTC)) == 6


def test_window_over_a_skipped_hour() -> None:
    # 02:00-03:00 does not exist in Berlin on 2026-03-29: the window is never active that
    # night, and 03:00 local (01:00 UTC) is outside it.
    pool = ScheduledPool([parse_window("Sun 02:00-03:00 Europe/Berlin", 4)])
    start = at("2026-03-29 00:00", UTC)
    assert all(pool.target(start + m * 60) == 0 for m in range(0, 180))
    # A week earlier (winter time) it is active from 01:00 to 02:00 UTC.
    assert pool.target(at("2026-03-22 01:30", UTC)) == 4


def test_overnight_window_belongs_to_its_start_day() -> None:
    pool = ScheduledPool([parse_window("Fri 22:00-06:00 UTC", 2)])
    assert pool.target(at("2026-11-27 21:59")) == 0
    assert pool.target(at("2026-11-27 22:00")) == 2
    assert pool.target(at("2026-11-28 05:59")) == 2  # Saturday morning
    assert pool.target(at("2026-11-28 06:00")) == 0
    assert pool.target(at("2026-11-26 23:00")) == 0  # Thursday night


def test_overlapping_windows_take_the_largest_floor() -> None:
    pool = ScheduledPool(
        [parse_window("Mon-Sun 00:00-24:00 UTC", 1), parse_window("Wed 10:00-11:00 UTC", 5)]
    )
    assert pool.target(at("2026-11-25 10:30")) == 5
    assert pool.target(at("2026-11-25 11:30")) == 1


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("weekdays 08:00-18:00 UTC", "invalid window"),
        ("Mon-Fry 08:00-18:00 UTC", "invalid day 'mon-fry'"),
        ("Mon 08:00-18:00 Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
        ("Mon 08:60-18:00 UTC", "invalid time '08:60'"),
        ("Mon 24:00-18:00 UTC", "invalid time '24:00'"),
        ("Mon 08:00-08:00 UTC", "empty window"),
    ],
)
def test_bad_windows_fail_with_one_line(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match="^" + problem) as error:
        parse_window(text, 1)
    assert "\n" not in str(error.value)


def test_day_lists_and_wrapping_ranges() -> None:
    assert parse_window("Mon,Wed-Fri 08:00-09:00 UTC", 1).days == {0, 2, 3, 4}
    assert parse_window("Sat-Mon 08:00-09:00 UTC", 1).days == {5, 6, 0}


@given(
    floors=st.lists(st.integers(0, 20), min_size=1, max_size=4),
    default=st.integers(0, 20),
    now=st.floats(1.6e9, 2.0e9),
)
def test_schedule_is_between_default_and_largest_floor(
    floors: list[int], default: int, now: float
) -> None:
    windows = [
        parse_window(f"Mon-Fri 0{i}:00-1{i}:00 Europe/Berlin", f) for i, f in enumerate(floors)
    ]
    target = ScheduledPool(windows, default=default).target(now)
    assert default <= target <= max(default, *floors)


# --- the compound-Poisson cover -----------------------------------------------------------


def test_cover_of_a_poisson_stream_matches_the_fill_rate() -> None:
    # 1 job/s over 60 s, one job per batch: N ~ Poisson(60). Fill rate 0.9 asks for B with
    # E[(N−B)+] ≤ 6; by direct summation of Σ (k−B)·pmf(k), B = 55 is short by 6.17 jobs
    # and B = 56 by 5.46.
    poisson = Estimate(rate=1.0, mean_size=1.0, second_moment=1.0)
    assert cover(poisson, 60.0, 0.9, 200) == 56


def test_batches_need_more_than_their_mean_rate() -> None:
    # The same mean (1 job/s) in batches of 10 every 10 s on average: far burstier.
    singles = Estimate(rate=1.0, mean_size=1.0, second_moment=1.0)
    batches = Estimate(rate=0.1, mean_size=10.0, second_moment=100.0)
    assert cover(batches, 60.0, 0.9, 500) > cover(singles, 60.0, 0.9, 500)


def test_rare_batches_still_get_a_pool() -> None:
    # One batch of 8 every 10 minutes: P(no batch within 60 s) is 0.9, so a quantile of N
    # would give 0; the share of *jobs* that find a pair ready asks for most of a batch.
    rare = Estimate(rate=1 / 600, mean_size=8.0, second_moment=64.0)
    assert cover(rare, 60.0, 0.9, 50) >= 4


def test_no_arrivals_no_pool() -> None:
    assert cover(Estimate(), 60.0, 0.99, 10) == 0


estimates = st.builds(
    lambda rate, mean, extra: Estimate(
        rate=rate, mean_size=mean, second_moment=mean * mean + extra
    ),
    st.floats(0.0, 2.0),
    st.floats(1.0, 30.0),
    st.floats(0.0, 500.0),
)


@given(e=estimates, q1=st.floats(0.0, 0.99), q2=st.floats(0.0, 0.99), ceiling=st.integers(0, 60))
def test_cover_is_bounded_and_monotone_in_the_target(
    e: Estimate, q1: float, q2: float, ceiling: int
) -> None:
    low, high = sorted((q1, q2))
    b_low, b_high = (cover(e, 60.0, q, ceiling) for q in (low, high))
    assert 0 <= b_low <= b_high <= ceiling


# --- the adaptive pool --------------------------------------------------------------------

T0 = at("2026-11-25 10:00")  # a Wednesday


def adaptive(**overrides: object) -> AdaptivePool:
    return AdaptivePool(AdaptiveConfig(**overrides))  # type: ignore[arg-type]


def test_adaptive_pool_grows_after_a_burst_and_releases_after_the_hold() -> None:
    pool = adaptive(ceiling=20, lead_time=60.0, launch_cost=60.0, fast_window=600.0)
    for i in range(20):  # ten quiet minutes
        pool.observe(T0 + 30 * i, 0, 0)
    assert pool.target(T0 + 600) == 0
    for i in range(4):  # four runs of 6 jobs within two minutes
        pool.observe(T0 + 600 + 30 * i, 6, 6)
    grown = pool.target(T0 + 720)
    assert grown >= 6
    # Arrivals stop; the fast estimate decays over its window, and what it asked for last is
    # held for the break-even time (120 s) and then released.
    now = T0 + 720
    while now < T0 + 720 + 3600:
        now += 30
        pool.observe(now, 0, 0)
    assert pool.target(now) < grown


def test_a_batch_seen_in_parts_within_the_batch_window_is_one_batch() -> None:
    # The monitor sees a batch of 40 as the 10 that took ready pairs (runner pods, next
    # pass) and the 30 left queued (next demand read, up to one read interval later).
    whole, parts = adaptive(batch_window=30.0), adaptive(batch_window=30.0)
    for pool in (whole, parts):
        pool.observe(T0, 0, 0)
    whole.observe(T0 + 10, 0, 40)
    parts.observe(T0 + 10, 0, 10)
    parts.observe(T0 + 30, 30, 30)
    fast_whole, _ = whole.estimates(T0 + 30)
    fast_parts, _ = parts.estimates(T0 + 30)
    assert fast_parts.mean_size == pytest.approx(40.0, rel=0.05)  # decayed a little
    assert fast_parts.second_moment == pytest.approx(fast_whole.second_moment, rel=0.05)
    assert parts.raw_target(T0 + 30) >= whole.raw_target(T0 + 30) - 1
    # Later than the window: a batch of its own.
    parts.observe(T0 + 100, 0, 5)
    assert parts.estimates(T0 + 100)[0].mean_size < 40.0


def test_profile_has_working_hours_ready_before_the_first_batch() -> None:
    pool = adaptive(ceiling=20, fast_window=300.0, profile_min_exposure=1800.0)
    week = 7 * 24 * 3600
    for w in range(3):  # three Wednesdays busy from 10:00 to 11:00, quiet before
        for i in range(240):  # 09:00 to 11:00, every 30 s
            now = T0 - 3600 + w * week + 30 * i
            busy = now >= T0 + w * week and i % 4 == 0
            pool.observe(now, 0, 5 if busy else 0)
    # The fourth Wednesday: quiet at 09:58 (no batch yet today, the fast estimate is cold
    # from a week ago) — the profile for 10:00, one lead time ahead, already holds pairs.
    morning = T0 + 3 * week - 120
    for i in range(4):
        pool.observe(morning - 90 + 30 * i, 0, 0)
    fast, _ = pool.estimates(morning)
    assert fast.rate == pytest.approx(0.0, abs=1e-6)
    assert pool.target(T0 + 3 * week - 30) > 0


@settings(max_examples=60, deadline=None)
@given(
    arrivals=st.lists(st.integers(0, 30), min_size=1, max_size=40),
    step=st.floats(1.0, 120.0),
    target_ready=st.floats(0.0, 0.99),
    ceiling=st.integers(0, 40),
    floor=st.integers(0, 10),
)
def test_adaptive_target_is_within_floor_and_ceiling(
    arrivals: list[int], step: float, target_ready: float, ceiling: int, floor: int
) -> None:
    pool = AdaptivePool(
        AdaptiveConfig(target_ready=target_ready, ceiling=ceiling),
        floor=ScheduledPool([], default=floor),
    )
    for i, new in enumerate(arrivals):
        now = T0 + i * step
        pool.observe(now, new, new)
        target = pool.target(now)
        assert target >= 0
        assert floor <= target <= max(floor, ceiling)


@settings(max_examples=60, deadline=None)
@given(
    arrivals=st.lists(st.integers(0, 30), min_size=1, max_size=40),
    step=st.floats(1.0, 120.0),
    q1=st.floats(0.0, 0.99),
    q2=st.floats(0.0, 0.99),
)
def test_adaptive_target_is_monotone_in_the_target_share(
    arrivals: list[int], step: float, q1: float, q2: float
) -> None:
    low, high = sorted((q1, q2))
    pools = [AdaptivePool(AdaptiveConfig(target_ready=q, ceiling=50)) for q in (low, high)]
    for i, new in enumerate(arrivals):
        now = T0 + i * step
        targets = []
        for pool in pools:
            pool.observe(now, new, new)
            targets.append(pool.target(now))
        assert targets[0] <= targets[1]


@settings(max_examples=60, deadline=None)
@given(
    arrivals=st.lists(st.integers(0, 30), min_size=1, max_size=60),
    steps=st.lists(st.floats(0.5, 90.0), min_size=60, max_size=60),
    lead=st.floats(10.0, 120.0),
    launch=st.floats(0.0, 120.0),
)
def test_a_pair_asked_for_is_not_released_before_break_even(
    arrivals: list[int], steps: list[float], lead: float, launch: float
) -> None:
    pool = AdaptivePool(AdaptiveConfig(ceiling=50, lead_time=lead, launch_cost=launch))
    hold = lead + launch
    now = T0
    raised: list[tuple[float, int]] = []  # when the target rose, and to what
    last = 0
    for new, step in zip(arrivals, steps, strict=False):
        pool.observe(now, new, new)
        target = pool.target(now)
        # A pair added at t is still wanted until t + hold, whatever the estimate says now.
        held = max((v for t, v in raised if now - t <= hold), default=0)
        assert target >= held
        if target > last:
            raised.append((now, target))
        last = target
        now += step
    # And once nothing is raised any more, the hold does end: the pool falls back to what
    # the estimate alone asks for.
    later = now + hold + 1.0
    assert pool.target(later) == pool.raw_target(later)


def test_bad_adaptive_config_fails() -> None:
    with pytest.raises(ValueError, match="target_ready must be in"):
        AdaptiveConfig(target_ready=1.0)
    with pytest.raises(ValueError, match="ceiling must be >= 0"):
        AdaptiveConfig(ceiling=-1)


def test_estimates_are_finite_from_the_first_pass() -> None:
    pool = adaptive()
    pool.observe(T0, 10, 10)  # a batch at the very first pass: no exposure yet
    fast, profile = pool.estimates(T0)
    assert math.isfinite(fast.rate)
    assert fast.rate > 0
    assert profile == Estimate()  # an hour is trusted only after profile_min_exposure


# --- arrivals -----------------------------------------------------------------------------


def test_arrivals_are_queue_rises_plus_new_runners() -> None:
    count = ArrivalCounter()
    assert count.count(5, ["a"]) == 0  # the first pass only learns what exists
    assert count.count(8, ["a"]) == 3  # three more queued
    assert count.count(6, ["a", "b", "c"]) == 0  # two left the queue for runners
    assert count.count(6, ["a", "b", "c", "d"]) == 1  # one came and went between reads
    # Source down: a runner first takes a job the last read showed queued.
    assert count.count(None, ["a", "b", "c", "d", "e"]) == 0
    assert count.count(2, ["e"]) == 0  # back, and fewer queued than known
    assert count.count(1, ["e"]) == 0  # never negative


def test_a_runner_seen_before_the_read_shows_its_job_gone_is_not_a_second_arrival() -> None:
    # The demand read lags the cluster: a queued job's runner pod appears while the value
    # read before it started is still in use. It arrived once, when the read saw it queued.
    count = ArrivalCounter()
    assert count.count(0, [], read_at=0.0) == 0
    assert count.count(3, [], read_at=30.0) == 3
    assert count.count(3, ["x", "y", "z"], read_at=30.0) == 0  # the same read, held
    assert count.count(0, ["x", "y", "z"], read_at=60.0) == 0  # the read catches up
    # A job that came and started between two reads is still an arrival.
    assert count.count(0, ["x", "y", "z", "w"], read_at=60.0) == 1
    assert count.count(2, ["x", "y", "z", "w"], read_at=90.0) == 2


# --- the profile across restarts ----------------------------------------------------------


def busy_pool(zone: str = "UTC") -> AdaptivePool:
    pool = AdaptivePool(AdaptiveConfig(profile_zone=ZoneInfo(zone)))
    for i in range(240):
        pool.observe(T0 + 30 * i, 0, 3 if i % 5 == 0 else 0)
    return pool


def test_profile_round_trips_through_json() -> None:
    pool = busy_pool()
    fresh = AdaptivePool(AdaptiveConfig())
    assert fresh.load_profile(json.loads(json.dumps(pool.profile_data())))
    assert fresh.profile == pool.profile
    assert fresh.estimates(T0 + 3600)[1] == pool.estimates(T0 + 3600)[1]


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(version=2),
        lambda d: d.update(timezone="Europe/Berlin"),  # other hours: not used
        lambda d: d.update(hours=d["hours"][:-1]),
        lambda d: d["hours"][3].__setitem__(1, -1.0),
        lambda d: d["hours"][3].__setitem__(1, float("nan")),
        lambda d: d["hours"][3].__setitem__(0, "week"),
        lambda d: d["hours"].__setitem__(5, [1, 2]),
    ],
)
def test_an_unusable_profile_changes_nothing(change: Callable[[dict[str, Any]], None]) -> None:
    data = busy_pool().profile_data()
    change(data)
    fresh = AdaptivePool(AdaptiveConfig())
    assert not fresh.load_profile(data)
    assert fresh.profile == AdaptivePool(AdaptiveConfig()).profile
    assert not fresh.load_profile("not a mapping")


def test_a_vanishing_rate_gives_no_pool_not_the_ceiling() -> None:
    # A rate decayed over a long quiet spell: the expected jobs round away in floating point.
    for rate in (1e-20, 1e-63, 5e-324):
        assert cover(Estimate(rate=rate, mean_size=1.0, second_moment=1.0), 60.0, 0.9, 10) == 0
    assert cover(Estimate(rate=1e-3, mean_size=1.0, second_moment=1e300), 60.0, 0.9, 10) <= 10
