"""Feeds the stage model online, from the demand source's readings (capacity/stages.py).

A listener never sees a job end: it sees readings. The GitHub source reports in each good
reading the jobs running in the runs it reads (``RunningParent``) and the queued jobs it
counted (``QueuedJob``, with their run attempt). From a sequence of readings:

* **a parent ended** when it was in the last good reading and is not in this one. It is
  recorded as running from its ``started_at`` to the start of the last read that still saw
  it: the end is known to within one read, so the learner's link window (children queued
  within it after the parent's end) is widened by one read interval. The delay learned is
  then measured from the same last-seen time, and a prediction (start + duration + delay)
  lands where the children came.
* **a child was queued** when a queued job (run attempt, job id) shows up that the last
  good reading did not have; it is fed once, at its own queue time, after the parents that
  ended in the same reading (a child is queued after its parent's end).
* **a failed reading says nothing**: the last good running set is kept, as the parents the
  predictive pool counts, and nothing is taken to have ended; the policy's demand fallback
  handles the queue meanwhile.
* **a reading cut at the source's bound** (the most recently started jobs only) leaves out
  old jobs that may still run: a parent missing from it that started before the oldest one
  reported is forgotten, not recorded as ended.
* **a partial reading** (the source's call budget did not reach every run of a repository)
  ends nobody: the parents it shows are added or seen again, the ones it misses are kept
  with their last-seen time (at most ``MAX_SEEN``, the most recently started), and the next
  complete reading ends those still missing, at the time they were last seen.

Parents are recorded into the model one more read interval after their window closes, so a
child first seen a read late is still linked. The feed also keeps which parents the pool
counted (``count``), so the children that then came for them can be counted: predicted
against arrived, for the dashboard.

``window`` turns the observed pair launch times into the predictive pool's horizon and hold
when the settings leave them unset (docs/whatif.md "Staged CI": a horizon of 1.25 x the
longest launch and a hold of one launch priced best).

PURE: no I/O, no clock; time is passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from capacity.policy import HOLD_MIN_LAUNCHES
from capacity.settings_pools import PredictiveSettings
from capacity.stage_pool import PredictivePool
from capacity.stages import (
    LINK,
    Expected,
    QueuedJob,
    RunningParent,
    StageLearner,
    StageModel,
    parent_name,
)
from capacity.warm_pool import WarmPool

# Before HOLD_MIN_LAUNCHES launches are seen: a GPU-like launch of 2-4 minutes, the setting
# docs/whatif.md measured (horizon 1.25 x 240 s, hold one launch).
DEFAULT_HORIZON = 300.0
DEFAULT_HOLD = 240.0
HORIZON_LAUNCHES = 1.25  # the horizon in longest launches: the launch plus a margin
# The longest launch is taken as at least this: recent pairs that all landed on nodes with
# room launch in seconds, and say nothing of the node a fan-out needs.
MIN_LAUNCH = 60.0
MAX_SEEN = 500  # parents kept through partial readings (as many as a reading reports)


def label_key(labels: Iterable[str]) -> str:
    """A scale set's labels as the stage model's label-set key (as traces write it)."""
    return ",".join(sorted(labels))


def window(
    launches: Sequence[float], horizon: float | None, hold: float | None
) -> tuple[float, float]:
    """The predictive pool's (horizon, hold): the settings' values, or from the longest of
    the recent pair launches (see the module docstring) when they are unset."""
    enough = len(launches) >= HOLD_MIN_LAUNCHES
    longest = max(MIN_LAUNCH, *launches) if enough else None
    if horizon is None:
        horizon = DEFAULT_HORIZON if longest is None else HORIZON_LAUNCHES * longest
    if hold is None:
        hold = DEFAULT_HOLD if longest is None else longest
    return horizon, hold


@dataclass
class StageFeed:
    """See the module docstring. ``interval``: seconds between reads of the source."""

    model: StageModel
    label_set: str
    interval: float
    learner: StageLearner = field(init=False)
    seen: dict[RunningParent, float] = field(default_factory=dict)  # last good set: last seen
    queued_seen: set[tuple[str, int]] = field(default_factory=set)  # (run, job id)
    # parent names the pool counted, with their workflows
    counted: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.learner = StageLearner(self.model, link=LINK + self.interval)

    def read(
        self,
        *,
        ok: bool,
        running: Sequence[RunningParent],
        queued: Sequence[QueuedJob],
        read_at: float,
        now: float,
        truncated: bool = False,
        partial: bool = False,
    ) -> dict[str, int]:
        """One reading (``ok``: a good one; ``read_at``: when its read began; ``truncated``,
        ``partial``: see the module docstring). Returns, per workflow, how many of its new
        queued jobs are children of a parent the pool counted."""
        if not ok:
            return {}  # hold the last good set; nothing ended that we know of
        if partial:
            seen = {**self.seen, **{parent: read_at for parent in running}}
            latest = sorted(seen, key=lambda p: p.started_at)[-MAX_SEEN:]
            self.seen = {parent: seen[parent] for parent in latest}
        else:
            self._end_missing(running, truncated)
            self.seen = {parent: read_at for parent in running}
        arrived: dict[str, int] = {}
        ids: set[tuple[str, int]] = set()
        for job in sorted(queued, key=lambda j: (j.queued_at, j.run, j.job_id)):
            if job.job_id < 0:
                continue  # no id: it could not be told from itself in the next reading
            key = (job.run, job.job_id)
            ids.add(key)
            if key in self.queued_seen:
                continue
            linked = self.learner.queued(job.run, self.label_set, job.queued_at)
            if linked is not None and linked in self.counted:
                workflow = self.counted[linked]
                arrived[workflow] = arrived.get(workflow, 0) + 1
        self.queued_seen = ids
        self.learner.flush(now - self.interval)
        # Only the names that can still be linked to: running, or ended and not recorded.
        live = {parent_name(p) for p in self.seen} | self.learner.pending_names()
        self.counted = {name: w for name, w in self.counted.items() if name in live}
        return arrived

    def _end_missing(self, running: Sequence[RunningParent], truncated: bool) -> None:
        current = set(running)
        oldest = min((p.started_at for p in running), default=None)
        for parent, last_seen in self.seen.items():
            if parent in current:
                continue
            if truncated and oldest is not None and parent.started_at < oldest:
                continue  # cut by the source's bound, maybe still running
            self.learner.ended(
                parent.run, parent.workflow, parent.job_name, parent.started_at, last_seen
            )

    def parents(self, now: float) -> Sequence[RunningParent]:
        """The predictive pool's ParentSource: the last good running set."""
        return list(self.seen)

    def count(self, found: Iterable[Expected]) -> None:
        """The pool counted these parents' children at a pass: remember whose they were."""
        self.counted.update({e.parent: e.workflow for e in found if e.count > 0})


def predictive_pool(
    knobs: PredictiveSettings, labels: Iterable[str], interval: float, base: WarmPool
) -> tuple[PredictivePool, StageFeed]:
    """The predictive pool on top of ``base`` (warm_pool.predictive), and the feed that
    teaches its stage model from demand readings taken every ``interval`` seconds."""
    feed = StageFeed(StageModel(), label_key(labels), interval)
    horizon, hold = window((), knobs.horizon, knobs.hold)
    pool = PredictivePool(
        model=feed.model,
        label_set=feed.label_set,
        parents=feed.parents,
        horizon=horizon,
        hold=hold,
        count_quantile=knobs.count_quantile,
        base=base,
    )
    return pool, feed
