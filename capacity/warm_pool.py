"""Warm pools: how many placeholder pairs to hold beyond the queued jobs (docs/capacity-model.md
§10).

PURE: no clock, no randomness, no I/O. Time (epoch seconds) is passed in. Every pool has the
same two calls, used by the monitor on each reconcile pass and by a simulator in virtual time:

    observe(now, queued_jobs, new_jobs)   what the monitor saw: jobs queued now, and jobs that
                                          arrived since the previous call
    target(now) -> int                    pairs to hold beyond demand

Two pools:

- `FixedPool`: a constant (the `proactive_capacity` setting);
- `ScheduledPool`: time windows with their own floor, in the windows' own time zones
  (wall-clock time, so a window follows daylight saving time), a default outside them.

Both behind the one interface, with the arrival counter that feeds any pool (a simulated
one too), so the monitor and a simulator drive the same objects from one file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from capacity.model import Demand, DemandSource

_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


class WarmPool(Protocol):
    """What the monitor (and a simulator) drive: see the module docstring."""

    def observe(self, now: float, queued_jobs: int, new_jobs: int) -> None: ...

    def target(self, now: float) -> int: ...


# --- fixed ---------------------------------------------------------------------------------


@dataclass
class FixedPool:
    """Always `size` pairs (today's `proactive_capacity`)."""

    size: int

    def observe(self, now: float, queued_jobs: int, new_jobs: int) -> None:
        del now, queued_jobs, new_jobs  # a fixed pool learns nothing

    def target(self, now: float) -> int:
        del now
        return max(0, self.size)


# --- scheduled -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """Days of week (0 = Monday), a wall-clock span [start, end) in minutes of the day, a time
    zone and the floor inside it. ``end <= start`` runs past midnight into the next day (the
    window belongs to the day it starts on)."""

    days: frozenset[int]
    start: int
    end: int
    zone: ZoneInfo
    floor: int

    def active(self, now: float) -> bool:
        local = datetime.fromtimestamp(now, self.zone)
        minute = local.hour * 60 + local.minute
        day = local.weekday()
        if self.start < self.end:
            return day in self.days and self.start <= minute < self.end
        return (day in self.days and minute >= self.start) or (
            (day - 1) % 7 in self.days and minute < self.end
        )


_WINDOW = re.compile(
    r"^\s*(?P<days>[A-Za-z]{3}(?:-[A-Za-z]{3})?(?:,[A-Za-z]{3}(?:-[A-Za-z]{3})?)*)\s+"
    r"(?P<start>\d{1,2}:\d{2})-(?P<end>\d{1,2}:\d{2})\s+(?P<zone>\S+)\s*$"
)


def _minute(text: str, *, end: bool) -> int:
    hours, minutes = (int(part) for part in text.split(":"))
    if minutes > 59 or hours > 24 or (hours == 24 and (minutes or not end)):
        raise ValueError(f"invalid time {text!r}")
    return hours * 60 + minutes


def _days(text: str) -> frozenset[int]:
    days: set[int] = set()
    for part in text.lower().split(","):
        first, _, last = part.partition("-")
        if first not in _DAYS or (last and last not in _DAYS):
            raise ValueError(f"invalid day {part!r} (use Mon..Sun)")
        a = _DAYS.index(first)
        b = _DAYS.index(last) if last else a
        days.update(d % 7 for d in range(a, a + (b - a) % 7 + 1))
    return frozenset(days)


def zone(name: str) -> ZoneInfo:
    """A time zone by IANA name; ValueError (one line) when unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r}") from None


def parse_window(text: str, floor: int) -> Window:
    """A window from "Mon-Fri 08:00-18:00 Europe/Berlin" (days: Mon..Sun, ranges and commas,
    e.g. "Mon,Wed-Fri"; times 00:00..24:00). ValueError (one line) on anything else."""
    match = _WINDOW.match(text)
    if match is None:
        raise ValueError(f"invalid window {text!r} (e.g. 'Mon-Fri 08:00-18:00 Europe/Berlin')")
    if floor < 0:
        raise ValueError(f"floor must be >= 0, got {floor}")
    start = _minute(match["start"], end=False)
    end = _minute(match["end"], end=True)
    if start == end:
        raise ValueError(f"empty window {text!r}")
    return Window(_days(match["days"]), start, end, zone(match["zone"]), floor)


@dataclass
class ScheduledPool:
    """The largest floor of the windows active now, else `default`."""

    windows: Sequence[Window]
    default: int = 0

    def observe(self, now: float, queued_jobs: int, new_jobs: int) -> None:
        del now, queued_jobs, new_jobs  # a schedule learns nothing

    def target(self, now: float) -> int:
        return max([self.default, *(w.floor for w in self.windows if w.active(now))])


# --- what the monitor sees -----------------------------------------------------------------


@dataclass
class ArrivalCounter:
    """Jobs that arrived between two passes, from what the monitor sees: the rise of the
    queued count at each new read of the demand source (while it is live) plus real runner
    pods not seen before (a job that left the queue for a runner arrived too, maybe between
    two reads). A runner pod first takes one of the jobs already counted as queued: the
    demand read lags the cluster, so a job counted when it was queued and seen again as a
    runner before the next read shows it gone is one arrival, not two. The first pass and
    the first live read only learn what exists. Jobs that arrive and leave the queue between
    two reads without a runner pod of this scale set (cancelled, taken by another scale set)
    are not seen: a floor, not an overcount."""

    runners: frozenset[str] | None = None
    known: int = 0  # jobs counted that the last read showed queued, less runners since
    read: float | None = None  # when the queued figure last counted was read
    live_once: bool = False

    def count(
        self, queued: int | None, runners: Iterable[str], read_at: float | None = None
    ) -> int:
        """`queued` is None while the demand source is not live (its held or floor value
        says nothing about arrivals); `read_at` is when it was read (None: every call is a
        new read)."""
        names = frozenset(runners)
        fresh = 0 if self.runners is None else len(names - self.runners)
        self.runners = names
        taken = min(fresh, self.known)
        self.known -= taken
        arrived = fresh - taken
        if queued is not None and (read_at is None or read_at != self.read):
            if self.live_once:
                arrived += max(0, queued - self.known)
            self.known, self.read, self.live_once = queued, read_at, True
        return arrived


def read_at(demand: Demand, now: float) -> float | None:
    """When the demand value in use was read, while the source is live (None otherwise);
    rounded so that one read gives one value at every pass."""
    if demand.source not in (DemandSource.HUD, DemandSource.GITHUB, DemandSource.WEBHOOK) or (
        demand.age is None
    ):
        return None
    return round(now - demand.age, 3)


def drive(
    pool: WarmPool,
    arrivals: ArrivalCounter,
    now: float,
    *,
    queued: int,
    read_at: float | None,
    runners: Iterable[str],
    commit: bool,
) -> int:
    """One pass's call of a pool, the same in the monitor and in the simulator (so what is
    simulated is what runs): a committed pass (the reconcile loop) first tells the pool the
    arrivals it saw (`read_at`: when the demand source read `queued`, None while the source
    is not live); every pass asks for the target."""
    if commit:
        live = read_at is not None
        pool.observe(now, queued, arrivals.count(queued if live else None, runners, read_at))
    return pool.target(now)
