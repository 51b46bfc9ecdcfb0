"""A predictive warm pool: pairs for the children a stage model expects, ahead of them.

A ``WarmPool`` (observe/target, as every pool in ``capacity.warm_pool``) for one label set.
On each pass it asks the stage model (``capacity.stages``) what the parents running now
(given by a callable: the simulator reads them from its trace, a listener would read them
from the runs in progress) will fan out onto its label set, and holds pairs for them:

* **timed by the lead time**: a parent's children expected at ``at`` are *armed* once
  ``now >= at - lead``, where ``lead`` is the launch time (create to Running), so the pairs
  are Running when the children come; each parent is armed once;
* **counted down by arrivals**: the jobs the pool is told arrived (``observe``'s
  ``new_jobs``) take the armed expectations' counts, the earliest first, since the children,
  once queued, are demand that the policy already covers;
* **released by the break-even hold**: an expectation still unmet ``hold`` seconds after
  its expected arrival is dropped (rent or buy: keeping a pair longer than a launch costs
  more than launching again for a late child), and so is one whose parent ended ``grace``
  seconds ago (its children, if any, have been queued and counted: a failed build's never
  come).

The target is the armed counts' sum, rounded up, plus an optional ``base`` pool's target
(a fixed or adaptive pool for the jobs no parent announces), so it composes with the
existing pools without changing the policy.

PURE: no I/O, no clock; time is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from capacity.stages import RunningParent, StageModel, parent_name
from capacity.warm_pool import WarmPool

ParentSource = Callable[[float], Sequence[RunningParent]]


@dataclass
class _Armed:
    at: float
    remaining: float
    until: float
    ended: float | None = None  # when its parent was first seen ended


@dataclass
class PredictivePool:
    """See the module docstring."""

    model: StageModel
    label_set: str
    parents: ParentSource
    lead: float  # create → Running of a pair (seconds)
    hold: float  # an unmet expectation is dropped this long after its expected arrival
    quantile: float = 0.5  # of the parent's duration, given the time it has run
    count_quantile: float | None = None  # of the count per fan-out (None: its mean)
    grace: float = 30.0  # after the parent's end: a demand read and a pass see its children
    base: WarmPool | None = None
    armed: dict[str, _Armed] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)  # parents armed once (while they run)

    def __post_init__(self) -> None:
        if self.lead < 0 or self.hold < 0:
            raise ValueError(f"lead and hold must be >= 0, got {self.lead}, {self.hold}")
        if not 0 < self.quantile < 1:
            raise ValueError(f"quantile: must be in (0, 1), got {self.quantile}")

    def observe(self, now: float, queued_jobs: int, new_jobs: int) -> None:
        if self.base is not None:
            self.base.observe(now, queued_jobs, new_jobs)
        # Arrivals meet the expectations that are due, the earliest first.
        left = float(new_jobs)
        for name in sorted(self.armed, key=lambda n: self.armed[n].at):
            if left <= 0:
                break
            armed = self.armed[name]
            taken = min(left, armed.remaining)
            armed.remaining -= taken
            left -= taken

    def predicted(self, now: float) -> float:
        """The children expected and armed now (a mean, before rounding up)."""
        running = self.parents(now)
        for expected in self.model.predict(
            running, now, quantile=self.quantile, count_quantile=self.count_quantile
        ):
            if expected.label_set != self.label_set or expected.parent in self.done:
                continue
            if now >= expected.at - self.lead:
                self.done.add(expected.parent)
                self.armed[expected.parent] = _Armed(
                    at=expected.at, remaining=expected.count, until=expected.at + self.hold
                )
        # Children come within seconds of their parent's end: once it has ended and a demand
        # read has had time to see them, what is still unmet is not coming.
        alive = {parent_name(p) for p in running}
        for name, armed in list(self.armed.items()):
            if name not in alive and armed.ended is None:
                armed.ended = now
            gone = armed.ended is not None and now > armed.ended + self.grace
            if armed.remaining <= 1e-9 or now > armed.until or gone:
                del self.armed[name]
        if len(self.done) > 4 * len(running) + 64:  # forget parents that have ended
            self.done &= alive
        return sum(a.remaining for a in self.armed.values())

    def target(self, now: float) -> int:
        base = self.base.target(now) if self.base is not None else 0
        return base + math.ceil(self.predicted(now) - 1e-9)
