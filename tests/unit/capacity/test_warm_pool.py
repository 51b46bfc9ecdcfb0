"""The warm pools (capacity/warm_pool.py): schedule windows across time zones and daylight
saving time (with a Hypothesis property), and the arrival counter."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capacity.warm_pool import ArrivalCounter, FixedPool, ScheduledPool, parse_window

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
