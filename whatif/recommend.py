"""Sweeps of warm-pool settings over a trace, and the cheapest setting that meets a target.

A *setting* is a warm pool (a fixed size B, or any ``WarmPool`` factory such as a scheduled
pool) and a look-ahead horizon. ``sweep`` simulates each on one label set's jobs; the points
(spare node-seconds, p90 queue time) are the wait-versus-cost curve. ``cheapest`` picks the
setting with the fewest spare node-seconds whose p90 queue time is within the target.

PURE: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from capacity.warm_pool import FixedPool, WarmPool
from whatif.simulate import Outcome, SimConfig, simulate
from whatif.trace import TraceJob


@dataclass(frozen=True)
class Setting:
    """One point of a sweep: a pool (by name) and a look-ahead horizon (0: none)."""

    name: str
    pool: Callable[[], WarmPool]
    lookahead: float = 0.0
    fixed: int | None = None  # the pool's size when it is a fixed pool

    def describe(self) -> dict[str, object]:
        result: dict[str, object] = {"policy": self.name, "lookahead_seconds": self.lookahead}
        if self.fixed is not None:
            result["proactive_capacity"] = self.fixed
        return result


def fixed_pools(sizes: Iterable[int], lookahead: float = 0.0) -> list[Setting]:
    """``proactive_capacity: B`` for each B (B = 0 is the reactive, demand-only policy)."""
    suffix = f"+lookahead {lookahead:g}s" if lookahead else ""
    return [
        Setting(
            name=(f"fixed B={size}" if size else "reactive") + suffix,
            pool=lambda size=size: FixedPool(size),  # type: ignore[misc]
            lookahead=lookahead,
            fixed=size,
        )
        for size in sizes
    ]


@dataclass(frozen=True)
class Point:
    setting: Setting
    outcome: Outcome

    @property
    def p90(self) -> float:
        return self.outcome.percentile(90)

    def describe(self, opt_spare: float | None) -> dict[str, object]:
        return {**self.setting.describe(), **self.outcome.describe(opt_spare)}


def sweep(jobs: Sequence[TraceJob], config: SimConfig, settings: Iterable[Setting]) -> list[Point]:
    """Each setting simulated on ``jobs`` (a fresh pool each)."""
    return [
        Point(s, simulate(jobs, replace(config, lookahead=s.lookahead), s.pool())) for s in settings
    ]


def cheapest(points: Iterable[Point], p90_target: float) -> Point | None:
    """The point with the least spare node-seconds whose p90 queue time is within the target
    (ties: the shorter p90); None when none is."""
    meeting = [p for p in points if p.p90 <= p90_target]
    if not meeting:
        return None
    return min(meeting, key=lambda p: (p.outcome.spare, p.p90))
