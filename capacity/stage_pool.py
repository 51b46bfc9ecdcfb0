"""A predictive warm pool: pairs for the children a stage model expects, ahead of them.

A ``WarmPool`` (observe/target, as every pool in ``capacity.warm_pool``) for one label set.
On each pass it asks the stage model (``capacity.stages``) how many children the parents
running now (given by a callable: the simulator reads them from its trace, a listener
would read them from the runs in progress) will queue on its label set within
``horizon`` seconds, and holds that many pairs, rounded up:

* **ahead by the lead time**: a pair made now is Running one launch later, so the horizon
  is at least the lead time (create to Running); what it adds beyond is a margin against
  a build that ends earlier than its median;
* **pooled over parents**: each parent adds P(its children come within the horizon | it
  has run this long) × E[count], a fraction while its end is uncertain. Many builds in
  flight add up to whole pairs that serve whichever build ends first, where one pair per
  build would each wait for their own;
* **released when they are not coming**: a parent that ended stops counting (its
  children, if any, are queued: demand the policy covers); one that has run more than
  ``hold`` past the 0.9 quantile of its fanned runs stops counting too (the break-even
  hold: keeping a pair longer than a launch costs more than launching again). The policy
  then keeps the pairs its own hold (``downscale_delay``) before deleting them.

The target is that sum plus an optional ``base`` pool's target (a fixed or scheduled pool
for the jobs no parent announces), so it composes with the existing pools without
changing the policy.

PURE: no I/O, no clock; time is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from capacity.stages import Expected, RunningParent, StageModel
from capacity.warm_pool import WarmPool

ParentSource = Callable[[float], Sequence[RunningParent]]


@dataclass
class PredictivePool:
    """See the module docstring."""

    model: StageModel
    label_set: str
    parents: ParentSource
    horizon: float  # children expected within this many seconds get pairs (>= the lead)
    hold: float  # a parent this long past the 0.9 quantile of its fanned runs counts no more
    count_quantile: float | None = None  # of the count per fan-out (None: its mean)
    base: WarmPool | None = None

    def __post_init__(self) -> None:
        if self.horizon < 0 or self.hold < 0:
            raise ValueError(f"horizon and hold must be >= 0, got {self.horizon}, {self.hold}")
        if self.count_quantile is not None and not 0 < self.count_quantile <= 1:
            raise ValueError(f"count_quantile: must be in (0, 1], got {self.count_quantile}")

    def observe(self, now: float, queued_jobs: int, new_jobs: int) -> None:
        # Arrivals need no counting here: a parent whose children came has ended.
        if self.base is not None:
            self.base.observe(now, queued_jobs, new_jobs)

    def expected(self, now: float) -> list[Expected]:
        """The children expected on this label set within the horizon, per parent."""
        found = self.model.expected(
            self.parents(now),
            now,
            now + self.horizon,
            count_quantile=self.count_quantile,
            hold=self.hold,
        )
        return [e for e in found if e.label_set == self.label_set]

    def predicted(self, now: float) -> float:
        """The children expected within the horizon (a mean, before rounding up)."""
        return sum(e.count for e in self.expected(now))

    def target(self, now: float) -> int:
        base = self.base.target(now) if self.base is not None else 0
        return base + math.ceil(self.predicted(now) - 1e-9)
