"""The predictive setting of a what-if sweep: a stage model learned from a trace, and the
parents a simulated listener would see running.

``learn`` feeds a trace's jobs to a ``StageLearner`` in time order (ends before queues at
one instant, as a child is queued after its parent's end) and returns the model.

``TraceParents`` is what the simulator gives a ``PredictivePool`` as the parents running
at a pass: the trace's jobs whose *traced* run spans that moment, on every label set (a
parent on the build label set announces children on another). Traced, not simulated,
times: the simulator replays each job's arrival at its traced ``queued_at``, so a child
comes a traced parent-duration after the traced start, whatever the parent waited in the
simulation. With a learner, the model keeps learning as virtual time passes (each job as
it ends, each child as it is queued), as a listener's would.

PURE: no I/O, no clock.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from capacity.stage_pool import PredictivePool
from capacity.stages import LINK, RunningParent, StageLearner, StageModel
from capacity.warm_pool import WarmPool
from whatif.recommend import Setting
from whatif.trace import TraceJob

_QUEUED, _STARTED, _ENDED = 1, 2, 0  # at one instant: ends, then queues, then starts


def _attempt(job: TraceJob) -> str:
    return f"{job.run}#{job.run_attempt}"


def _events(jobs: Iterable[TraceJob]) -> list[tuple[float, int, int]]:
    """(time, kind, index) of every queue, start and end, in time order."""
    events: list[tuple[float, int, int]] = []
    for index, job in enumerate(jobs):
        events.append((job.queued_at, _QUEUED, index))
        if job.started_at is not None and job.completed_at is not None:
            events.append((job.started_at, _STARTED, index))
            events.append((job.completed_at, _ENDED, index))
    events.sort()
    return events


def learn(
    jobs: Sequence[TraceJob], model: StageModel | None = None, link: float = LINK
) -> StageModel:
    """The stage model of ``jobs`` (added to ``model`` when given)."""
    learner = StageLearner(model if model is not None else StageModel(), link=link)
    for t, kind, index in _events(jobs):
        learner.flush(t)
        job = jobs[index]
        if kind == _QUEUED:
            learner.queued(_attempt(job), job.label_set, t)
        elif kind == _ENDED:
            assert job.started_at is not None
            learner.ended(_attempt(job), job.workflow, job.job_name, job.started_at, t)
    learner.flush(math.inf)
    return learner.model


@dataclass
class TraceParents:
    """The trace's running jobs at a (non-decreasing) time; see the module docstring."""

    jobs: Sequence[TraceJob]
    learner: StageLearner | None = None
    events: list[tuple[float, int, int]] = field(default_factory=list)
    cursor: int = 0
    running: dict[int, RunningParent] = field(default_factory=dict)
    last: float = -math.inf

    def __post_init__(self) -> None:
        self.events = _events(self.jobs)

    def __call__(self, now: float) -> Sequence[RunningParent]:
        if now < self.last:
            raise ValueError(f"time went back: {now} < {self.last}")
        self.last = now
        learner = self.learner
        while self.cursor < len(self.events) and self.events[self.cursor][0] <= now:
            t, kind, index = self.events[self.cursor]
            self.cursor += 1
            job = self.jobs[index]
            if kind == _STARTED and job.workflow and job.job_name:
                self.running[index] = RunningParent(
                    job.workflow, job.job_name, t, run=_attempt(job)
                )
            elif kind == _ENDED:
                self.running.pop(index, None)
                if learner is not None:
                    assert job.started_at is not None
                    learner.ended(_attempt(job), job.workflow, job.job_name, job.started_at, t)
            elif kind == _QUEUED and learner is not None:
                learner.queued(_attempt(job), job.label_set, t)
            if learner is not None:
                learner.flush(t)
        if learner is not None:
            learner.flush(now)
        return list(self.running.values())


def predictive_pool(
    trained: dict[str, object],
    jobs: Sequence[TraceJob],
    label_set: str,
    *,
    horizon: float,
    hold: float,
    count_quantile: float | None = None,
    online: bool = True,
) -> WarmPool:
    """A fresh ``PredictivePool`` for ``label_set``: the model ``trained`` (a ``to_dict``),
    parents from the whole trace ``jobs``, learning on as they end when ``online``."""
    model = StageModel.from_dict(trained)
    parents = TraceParents(jobs, StageLearner(model) if online else None)
    return PredictivePool(
        model=model,
        label_set=label_set,
        parents=parents,
        horizon=horizon,
        hold=hold,
        count_quantile=count_quantile,
    )


def predictive_setting(
    trained: StageModel,
    jobs: Sequence[TraceJob],
    label_set: str,
    *,
    horizon: float,
    hold: float,
    count_quantile: float | None = None,
) -> Setting:
    """The predictive pool as a sweep's setting (a fresh pool and model copy per run)."""
    count = "" if count_quantile is None else f" count q{count_quantile:g}"
    return Setting(
        name=f"predictive {horizon:g}s{count}",
        pool=functools.partial(
            predictive_pool,
            trained.to_dict(),
            jobs,
            label_set,
            horizon=horizon,
            hold=hold,
            count_quantile=count_quantile,
        ),
    )
