"""Warm pools: how many placeholder pairs to hold beyond the queued jobs (docs/capacity-model.md
§10).

PURE: no clock, no randomness, no I/O. Time (epoch seconds) is passed in. Every pool has the
same two calls, used by the monitor on each reconcile pass and by a simulator in virtual time:

    observe(now, queued_jobs, new_jobs)   what the monitor saw: jobs queued now, and jobs that
                                          arrived since the previous call
    target(now) -> int                    pairs to hold beyond demand

Three pools:

- `FixedPool`: a constant (the `proactive_capacity` setting);
- `ScheduledPool`: time windows with their own floor, in the windows' own time zones
  (wall-clock time, so a window follows daylight saving time), a default outside them;
- `AdaptivePool`: covers the jobs likely to arrive within one lead time D (node launch and
  runner registration), for a target share of jobs that should find a pair ready.

The adaptive estimate. Workflow runs queue their jobs in batches (a matrix, a fan-out), so
arrivals are modelled as compound Poisson: batches at rate λ, batch size S with moments
E[S], E[S²]. Over D the job count N has mean μ = λ·D·E[S] and variance σ² = λ·D·E[S²]; it is
approximated by the negative binomial with that mean and variance (Poisson when σ² ≤ μ),
which keeps the heavy right tail a plain Poisson rate hides. B is the least count whose
*fill rate* meets the target: E[(N − B)⁺] / E[N] ≤ 1 − target_ready, the share of the jobs
arriving within D that would find no pair ready. (A quantile of N would be a share of
*moments*, not of jobs: with rare batches P(N = 0) alone can exceed 0.9 and give B = 0 while
every burst waits.)

Two estimates of (λ, E[S], E[S²]), and B is the larger of the two Bs:

- a fast one, exponentially decayed with time constant `fast_window` (minutes): it reacts to
  a surge within a few batches;
- an hour-of-week profile in `profile_timezone` (168 buckets, each decayed week over week by
  `profile_decay`): it has working hours ready *before* the first batch of the morning, which
  the fast estimate can only follow.

The maximum, not a blend: a blend dilutes whichever signal is currently right (a surge the
profile has never seen, or the morning ramp the fast average has not seen yet), and the cost
of taking the larger one is bounded by the hold below.

The hold. A pair released while the next burst is under one lead time away costs a launch
and D of waiting; a pair kept idle costs its idle time. Keeping an idle pair for the
break-even time `hold` = D + launch cost and then releasing it is the classic rent-or-buy
rule: it never costs more than twice the best choice in hindsight. So the adaptive target is
the largest raw B of the last `hold` seconds: a wrong guess is paid for at most `hold`
seconds per pair.

A schedule combines with the adaptive pool as a floor: `target = max(floor(now), adaptive)`,
and the ceiling `max` bounds only the adaptive part (an explicit floor is the operator's).

Size: every warm pool behind the one interface, with what they share (windows, the cover,
the arrival counter), so the monitor and a simulator drive the same objects from one file.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from capacity.model import Demand, DemandSource

PROFILE_VERSION = 1
MAX_GAP = 300.0  # seconds between two observations still counted as watched
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


# --- adaptive ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """Compound-Poisson arrivals: batches per second and the batch-size moments."""

    rate: float = 0.0
    mean_size: float = 0.0
    second_moment: float = 0.0

    def over(self, lead_time: float) -> tuple[float, float]:
        """Mean and variance of the job count within `lead_time` seconds."""
        batches = self.rate * lead_time
        return batches * self.mean_size, batches * self.second_moment


@dataclass
class _Sums:
    """Decayed sums: batches, Σ size, Σ size², and seconds observed (the exposure)."""

    batches: float = 0.0
    size: float = 0.0
    size2: float = 0.0
    exposure: float = 0.0

    def scale(self, factor: float) -> None:
        self.batches *= factor
        self.size *= factor
        self.size2 *= factor
        self.exposure *= factor

    def estimate(self, min_exposure: float, floor: float) -> Estimate:
        """The estimate once `min_exposure` seconds were observed; the exposure counts as at
        least `floor` seconds (one batch right after a start is not an infinite rate)."""
        if self.exposure < min_exposure or self.batches <= 0:
            return Estimate()
        return Estimate(
            rate=self.batches / max(self.exposure, floor, 1e-9),
            mean_size=self.size / self.batches,
            second_moment=self.size2 / self.batches,
        )


MIN_EXPECTED_JOBS = 1e-9


def _fill_shortfalls(mean: float, variance: float, ceiling: int) -> Iterable[float]:
    """E[(N − B)⁺] for B = 0, 1, …, ceiling, N negative binomial with the given moments
    (Poisson when the variance does not exceed the mean)."""
    if mean <= 0:
        yield from (0.0 for _ in range(ceiling + 1))
        return
    if variance <= mean * (1 + 1e-9):

        def log_pmf(k: int) -> float:
            return -mean + k * math.log(mean) - math.lgamma(k + 1)

    else:
        p = max(mean / variance, 1e-300)  # an enormous variance must not make log(p) fail
        r = mean * p / (1 - p)
        log_p, log_q, lg_r = math.log(p), math.log1p(-p), math.lgamma(r)

        def log_pmf(k: int) -> float:
            return math.lgamma(k + r) - lg_r - math.lgamma(k + 1) + r * log_p + k * log_q

    # E[(N − B)⁺] = E[N] − Σ_{j<B} P(N > j)
    shortfall, cdf = mean, 0.0
    for b in range(ceiling + 1):
        yield max(0.0, shortfall)
        cdf = min(1.0, cdf + math.exp(log_pmf(b)))
        shortfall -= 1.0 - cdf


def cover(estimate: Estimate, lead_time: float, target_ready: float, ceiling: int) -> int:
    """The least B ≤ ceiling whose fill rate over `lead_time` meets `target_ready` (the
    ceiling when none does)."""
    mean, variance = estimate.over(lead_time)
    # Below one-in-a-billion expected jobs within the lead time nothing is coming (a rate
    # decayed over a long quiet spell ends here), and floating point could not tell the
    # tail apart anyway: 1 − e^(−mean) rounds to 0, and the search ran to the ceiling.
    if mean < MIN_EXPECTED_JOBS or target_ready <= 0:
        return 0
    allowed = (1.0 - target_ready) * mean
    for b, shortfall in enumerate(_fill_shortfalls(mean, variance, ceiling)):
        if shortfall <= allowed:
            return b
    return ceiling


@dataclass(frozen=True, kw_only=True)
class AdaptiveConfig:
    """The adaptive pool's knobs (seconds; see the module docstring)."""

    target_ready: float = 0.9
    ceiling: int = 10
    lead_time: float = 60.0
    launch_cost: float = 60.0
    fast_window: float = 600.0
    # Arrivals seen within this long of a batch's first are that batch (see `observe`).
    batch_window: float = 30.0
    profile_zone: ZoneInfo = field(default_factory=lambda: ZoneInfo("UTC"))
    profile_decay: float = 0.5  # weight left to last week's figures when a new week starts
    # A profile hour is trusted once it has been observed this long (summed over weeks).
    profile_min_exposure: float = 1800.0

    def __post_init__(self) -> None:
        if not 0 <= self.target_ready < 1:
            raise ValueError(f"target_ready must be in [0, 1), got {self.target_ready}")
        if self.ceiling < 0:
            raise ValueError(f"ceiling must be >= 0, got {self.ceiling}")
        for name in (
            "lead_time",
            "launch_cost",
            "fast_window",
            "batch_window",
            "profile_min_exposure",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 seconds, got {getattr(self, name)}")
        if not 0 <= self.profile_decay <= 1:
            raise ValueError(f"profile_decay must be in [0, 1], got {self.profile_decay}")

    @property
    def hold(self) -> float:
        """The break-even time: how long an idle pair is kept before it may go."""
        return self.lead_time + self.launch_cost


def hour_of_week(now: float, tz: ZoneInfo) -> tuple[int, int]:
    """(week number, hour of week 0..167, Monday 00:00 local = 0) of `now`."""
    local = datetime.fromtimestamp(now, tz)
    how = local.weekday() * 24 + local.hour
    # The week number only orders weeks; local midnight Monday of this week, in days.
    week = (local.toordinal() - local.weekday()) // 7
    return week, how


@dataclass
class AdaptivePool:
    """Demand-following warm pool with a break-even hold, over an optional floor."""

    config: AdaptiveConfig
    floor: ScheduledPool | None = None
    fast: _Sums = field(default_factory=_Sums)
    profile: list[_Sums] = field(default_factory=lambda: [_Sums() for _ in range(168)])
    profile_week: list[int] = field(default_factory=lambda: [0] * 168)
    last_seen: float | None = None
    # The batch still being seen: when it was first seen and its size so far.
    batch: tuple[float, int] | None = None
    # Sliding-window maximum of recent raw targets (time, B), newest last.
    recent: tuple[tuple[float, int], ...] = ()

    def observe(self, now: float, queued_jobs: int, new_jobs: int) -> None:
        del queued_jobs  # already provisioned for by the policy; only arrivals matter here
        cfg = self.config
        elapsed = 0.0 if self.last_seen is None else max(0.0, now - self.last_seen)
        self.last_seen = now if self.last_seen is None else max(self.last_seen, now)
        # Fast estimate: the decayed exposure is ∫ e^{−(now−t)/τ} dt over what was observed.
        if cfg.fast_window > 0:
            decay = math.exp(-elapsed / cfg.fast_window)
            self.fast.scale(decay)
            self.fast.exposure += cfg.fast_window * (1 - decay)
        else:
            self.fast = _Sums(exposure=elapsed)
        # Profile: this hour of week, decayed once per new week.
        week, how = hour_of_week(now, cfg.profile_zone)
        bucket = self.profile[how]
        if self.profile_week[how] != week:
            gap = max(1, week - self.profile_week[how]) if self.profile_week[how] else 1
            bucket.scale(cfg.profile_decay**gap)
            self.profile_week[how] = week
        # A gap longer than a few passes is time the monitor did not watch (a restart, an
        # outage): it says nothing about this hour's arrivals.
        bucket.exposure += min(elapsed, MAX_GAP)
        if new_jobs > 0:
            # The monitor sees one batch in parts: the jobs that took ready pairs as runner
            # pods at the next pass, the rest at the next demand read, up to one read
            # interval later. Counted as separate batches, a batch of 40 seen as 10 + 30
            # halves E[S²]/E[S] and the cover misses exactly the bursts it is for; so parts
            # within `batch_window` of the batch's first are one batch.
            first, size = self.batch if self.batch is not None else (now, 0)
            joined = size > 0 and now - first <= cfg.batch_window
            if not joined:
                first, size = now, 0
            for sums in (self.fast, bucket):
                sums.batches += 0 if joined else 1
                sums.size += new_jobs
                sums.size2 += (size + new_jobs) ** 2 - size * size
            self.batch = (first, size + new_jobs)
        self.recent = self._slide(now, self.raw_target(now))

    def estimates(self, now: float) -> tuple[Estimate, Estimate]:
        """(fast, profile) estimates at `now`; the profile's is the busier of this hour and
        the hour one lead time ahead (so a ramp at the top of the hour is met)."""
        cfg = self.config
        fast = self.fast.estimate(0.0, cfg.lead_time)
        profiles = []
        for t in (now, now + cfg.lead_time):
            _, how = hour_of_week(t, cfg.profile_zone)
            profiles.append(self.profile[how].estimate(cfg.profile_min_exposure, cfg.lead_time))
        profile = max(profiles, key=lambda e: e.rate * e.mean_size)
        return fast, profile

    def raw_target(self, now: float) -> int:
        """The cover the estimates ask for at `now`, before the hold."""
        cfg = self.config
        return max(
            cover(e, cfg.lead_time, cfg.target_ready, cfg.ceiling) for e in self.estimates(now)
        )

    def _slide(self, now: float, value: int) -> tuple[tuple[float, int], ...]:
        span = self.config.hold
        kept = [(t, v) for t, v in self.recent if 0 <= now - t <= span and v > value]
        kept.append((now, value))
        return tuple(kept)

    def adaptive_target(self, now: float) -> int:
        """The held adaptive part: the largest raw B of the last `hold` seconds. What it
        returns is remembered, so a pair asked for now is held for `hold` seconds."""
        self.recent = self._slide(now, self.raw_target(now))
        return min(self.config.ceiling, max(v for _, v in self.recent))

    def profile_data(self) -> dict[str, object]:
        """The hour-of-week profile as plain JSON values (what survives a restart; the fast
        estimate and the hold are minutes long and start again)."""
        return {
            "version": PROFILE_VERSION,
            "timezone": self.config.profile_zone.key,
            "hours": [
                [week, b.batches, b.size, b.size2, b.exposure]
                for week, b in zip(self.profile_week, self.profile, strict=True)
            ],
        }

    def load_profile(self, data: object) -> bool:
        """Take a profile written by `profile_data`; False (and nothing changed) when it is
        not one, or was kept in another time zone (its hours are other hours)."""
        if not isinstance(data, dict) or data.get("version") != PROFILE_VERSION:
            return False
        hours = data.get("hours")
        if data.get("timezone") != self.config.profile_zone.key or not isinstance(hours, list):
            return False
        if len(hours) != len(self.profile):
            return False
        weeks: list[int] = []
        sums: list[_Sums] = []
        for row in hours:
            if not isinstance(row, list) or len(row) != 5:
                return False
            week, *values = row
            if not isinstance(week, int) or isinstance(week, bool) or week < 0:
                return False
            if not all(
                isinstance(v, int | float)
                and not isinstance(v, bool)
                and math.isfinite(v)
                and v >= 0
                for v in values
            ):
                return False
            weeks.append(week)
            sums.append(_Sums(*(float(v) for v in values)))
        self.profile_week, self.profile = weeks, sums
        return True

    def target(self, now: float) -> int:
        base = self.floor.target(now) if self.floor is not None else 0
        return max(base, self.adaptive_target(now))


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
