"""OPT₀: the least spare capacity any policy needs for zero queue time, knowing the future.

A policy that knows every job in advance can have a node ready the moment each job is
queued. What it cannot avoid is paying for nodes while they are launched (the lead time D:
launch + registration) and while they wait between jobs. This module computes that floor.

Model: one job per node (a node holds one pair, i.e. one job); nodes are interchangeable;
a job needs a node from ``queued_at`` for its duration (zero wait); a launch costs D
node-seconds of a node that is paid for but not yet usable, plus ``launch_cost`` (c₀,
node-seconds equivalent of a launch: image pulls, API calls, a price per launch).

Decomposition by levels. Let c(t) be the number of jobs running at t (zero wait). Any
policy holds N(t) ≥ c(t) nodes; write N as a sum of levels, level ℓ held when N(t) ≥ ℓ.
Level ℓ must be held while c(t) ≥ ℓ ("busy"), so between two busy periods of level ℓ
separated by an idle gap g the policy either keeps the node (g spare node-seconds) or
releases it and launches again (D + c₀, possible only when g ≥ D, and only worth it when
g > D + c₀); the first busy period of each level pays one launch. Levels do not interact
(a node freed at one level is indistinguishable from any other), so::

    OPT₀ spare = Σ_ℓ [ (D + c₀) + Σ_gaps of ℓ min(g, D + c₀) ]

and the number of launches is the number of levels plus the gaps longer than D + c₀.
One sweep over the sorted start and end events computes it in O(n log n): when c rises
to ℓ, level ℓ's gap (since c last fell below ℓ) is closed.

Ends before starts at the same instant: a node freed at t can take a job queued at t.

PURE: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from whatif.trace import TraceJob


@dataclass(frozen=True, kw_only=True)
class Optimum:
    """OPT₀ of one label set (node-seconds)."""

    jobs: int  # jobs that ran (had a duration)
    busy: float  # node-seconds spent running jobs
    spare: float  # OPT₀: the least node-seconds held without a job (launching or idle)
    launches: int  # node launches of the optimum
    peak: int  # most jobs running at once

    @property
    def spare_share(self) -> float:
        """Spare as a share of busy node-seconds (0 when nothing ran)."""
        return self.spare / self.busy if self.busy > 0 else 0.0

    def describe(self) -> dict[str, object]:
        return {
            "jobs": self.jobs,
            "busy_node_seconds": round(self.busy, 1),
            "spare_node_seconds": round(self.spare, 1),
            "spare_pct_of_busy": round(100 * self.spare_share, 2),
            "launches": self.launches,
            "peak_concurrency": self.peak,
        }


def intervals(jobs: Iterable[TraceJob]) -> list[tuple[float, float]]:
    """(start, end) of each job that ran, as if it had started the moment it was queued."""
    return [
        (job.queued_at, job.queued_at + duration)
        for job in jobs
        if (duration := job.duration) is not None
    ]


def optimum(spans: Sequence[tuple[float, float]], lead: float, launch_cost: float = 0.0) -> Optimum:
    """OPT₀ of jobs occupying ``spans`` = [(start, end)], for lead time ``lead`` (D) and
    ``launch_cost`` (c₀) in seconds (see the module docstring)."""
    if lead < 0 or launch_cost < 0:
        raise ValueError(f"lead time and launch cost must be >= 0, got {lead}, {launch_cost}")
    relaunch = lead + launch_cost
    # (time, +1 start / -1 end); ends sort first at equal times (-1 < +1).
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    idle_since: list[float] = []  # idle_since[ℓ-1]: when level ℓ last became idle
    running = 0
    spare = 0.0
    launches = 0
    for t, step in events:
        if step < 0:
            idle_since[running - 1] = t
            running -= 1
            continue
        running += 1
        if running > len(idle_since):  # the level's first busy period: one launch
            idle_since.append(t)
            spare += relaunch
            launches += 1
            continue
        gap = t - idle_since[running - 1]
        if gap > relaunch:
            spare += relaunch
            launches += 1
        else:
            spare += gap
    busy = sum(e - s for s, e in spans)
    return Optimum(jobs=len(spans), busy=busy, spare=spare, launches=launches, peak=len(idle_since))


def by_label_set(jobs: Iterable[TraceJob]) -> dict[str, list[TraceJob]]:
    """Jobs grouped by label set (one scale set each), label sets in sorted order."""
    groups: dict[str, list[TraceJob]] = {}
    for job in jobs:
        groups.setdefault(job.label_set, []).append(job)
    return {key: groups[key] for key in sorted(groups)}
