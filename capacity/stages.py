"""A stage model of workflows: which jobs fan out into which, how many, and when.

Staged CI announces its later stages ahead: when a run's build job starts, its test shards
will be queued about one build-duration later, on their own label set. The model learns,
per *parent* job (workflow, job key), from the jobs it has seen end:

* the parent's duration, and whether it fanned out, as a bounded sample of
  (duration, fanned) pairs, so both can be read conditionally on how long a running parent
  has already run (a build that failed early fans out nothing; one still running after
  that point is likelier to);
* per child label set, the number of children per fan-out and their delay after the
  parent's end (bounded samples);
* when it was last updated: a model older than ``max_age`` predicts nothing.

A job's *children* are the jobs of the same run attempt queued within ``link`` seconds of
its end (GitHub queues a stage the moment its ``needs`` are done); when several jobs of the
run ended before, the latest to end is the parent. The job key is the job's name without a
matrix suffix (``test (3/8)`` → ``test``), so shards of one matrix are one parent.

``StageLearner`` links jobs online, job by job (ended, queued). ``StageModel.expected``
gives, for the parents running now, the children expected on each label set within a time
window: P(fan-out and ended in time | ran this long) × E[count], a child arriving at the
parent's ``started + duration + delay``, over the parent's past runs at least as long as
it has run so far. Summed over many parents, fractions of different runs pool into whole
pairs. A parent seen fewer than ``min_runs`` times, or a model older than ``max_age``,
predicts nothing.

The model is a small JSON dict (``to_dict``/``from_dict``), bounded in size (parents,
samples, label sets), so it can be kept in a ConfigMap (``capacity.kept``).

PURE: no I/O, no clock; time is passed in.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

MODEL_VERSION = 1
SAMPLES = 64  # kept per sample list: the latest
MAX_PARENTS = 256  # parents kept: the most recently updated
MAX_LABEL_SETS = 8  # child label sets kept per parent
MIN_RUNS = 5
MAX_AGE = 14 * 86400.0
LINK = 60.0

_MATRIX = re.compile(r"\s*\([^()]*\)$")


class StageModelError(ValueError):
    """A stored model that cannot be read; one line naming the field."""


def job_key(name: str) -> str:
    """A job's name without its matrix suffix: ``test (3/8)`` → ``test``."""
    return _MATRIX.sub("", name) or name


@dataclass(frozen=True)
class RunningParent:
    """A job running now, as the predictor needs it; ``run`` tells two runs apart."""

    workflow: str
    job_name: str
    started_at: float
    run: str = ""


@dataclass(frozen=True)
class QueuedJob:
    """A job queued now, as the learner needs it: its run attempt (``run``, as in
    ``RunningParent``), an id telling it apart from the run's other jobs, and when it was
    queued."""

    run: str
    job_id: int
    queued_at: float
    labels: tuple[str, ...] = ()  # its `runs-on` labels, as GitHub gave them


def parent_name(parent: RunningParent) -> str:
    """One running parent's name: its run, workflow and job key."""
    return _name(parent.run, parent.workflow, parent.job_name)


def _name(run: str, workflow: str, job_name: str) -> str:
    return f"{run}/{workflow}/{job_key(job_name)}"


@dataclass(frozen=True)
class Expected:
    """Children expected on ``label_set`` from one running parent within a window:
    ``count`` is a mean, not an integer."""

    label_set: str
    count: float
    parent: str  # the parent's run and key
    workflow: str = ""  # the parent's workflow (per-workflow series on the dashboard)


@dataclass
class _Children:
    counts: list[int] = field(default_factory=list)  # per fan-out (0: none on this set)
    delays: list[float] = field(default_factory=list)  # after the parent's end


@dataclass
class _Parent:
    updated_at: float
    runs: int = 0
    observed: list[tuple[float, bool]] = field(default_factory=list)  # (duration, fanned)
    children: dict[str, _Children] = field(default_factory=dict)


def _keep(values: list[object]) -> None:
    del values[: max(0, len(values) - SAMPLES)]


def _quantile(ordered: Sequence[float], q: float) -> float:
    rank = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[rank]


@dataclass
class StageModel:
    """See the module docstring. ``parents`` is keyed by (workflow, job key)."""

    min_runs: int = MIN_RUNS
    max_age: float = MAX_AGE
    parents: dict[tuple[str, str], _Parent] = field(default_factory=dict)

    def record(
        self,
        workflow: str,
        job_name: str,
        duration: float,
        children: dict[str, tuple[int, float]],
        now: float,
    ) -> None:
        """One parent's end, seen whole: ``children`` maps a label set to (count, mean delay
        after the parent's end); empty when it fanned out nothing."""
        key = (workflow, job_key(job_name))
        parent = self.parents.get(key)
        if parent is None:
            parent = self.parents[key] = _Parent(updated_at=now)
            if len(self.parents) > MAX_PARENTS:
                stalest = min(self.parents, key=lambda k: self.parents[k].updated_at)
                del self.parents[stalest]
        parent.updated_at = max(parent.updated_at, now)
        parent.runs += 1
        fanned = any(count > 0 for count, _ in children.values())
        parent.observed.append((round(duration, 1), fanned))
        _keep(parent.observed)  # type: ignore[arg-type]
        if not fanned:
            return
        for label_set in set(parent.children) | set(children):
            count, delay = children.get(label_set, (0, 0.0))
            stats = parent.children.get(label_set)
            if stats is None:
                if len(parent.children) >= MAX_LABEL_SETS:
                    continue
                stats = parent.children[label_set] = _Children()
            stats.counts.append(count)
            _keep(stats.counts)  # type: ignore[arg-type]
            if count:
                stats.delays.append(round(delay, 1))
                _keep(stats.delays)  # type: ignore[arg-type]

    def usable(self, workflow: str, job_name: str, now: float) -> _Parent | None:
        """The parent's statistics when they are enough and fresh enough to predict from."""
        parent = self.parents.get((workflow, job_key(job_name)))
        if parent is None or parent.runs < self.min_runs or not parent.observed:
            return None
        if now - parent.updated_at > self.max_age:
            return None
        return parent

    def expected(
        self,
        parents: Iterable[RunningParent],
        now: float,
        until: float,
        *,
        count_quantile: float | None = None,
        hold: float = math.inf,
    ) -> list[Expected]:
        """Children expected from ``parents`` (running at ``now``) to be queued by ``until``,
        per parent and label set: the share of the parent's past runs at least this long
        whose children would have come by then (runs that fanned out, at their duration
        plus the median delay), times the mean count per fan-out (or its
        ``count_quantile``). A parent that has run past every fanned run seen, or more
        than ``hold`` past the 0.9 quantile of them, predicts nothing: its children are
        not coming on any time the model knows."""
        found: list[Expected] = []
        for running in parents:
            parent = self.usable(running.workflow, running.job_name, now)
            if parent is None:
                continue
            elapsed = now - running.started_at
            longer = [(d, f) for d, f in parent.observed if d >= elapsed]
            fanned = sorted(d for d, f in parent.observed if f)
            if not any(f for _, f in longer) or elapsed > _quantile(fanned, 0.9) + hold:
                continue
            for label_set, stats in sorted(parent.children.items()):
                if not stats.counts or not stats.delays:
                    continue
                delay = _quantile(sorted(stats.delays), 0.5)
                due = sum(1 for d, f in longer if f and running.started_at + d + delay <= until)
                if not due:
                    continue
                counts = sorted(stats.counts)
                size = (
                    sum(counts) / len(counts)
                    if count_quantile is None
                    else _quantile(counts, count_quantile)
                )
                found.append(
                    Expected(
                        label_set=label_set,
                        count=due / len(longer) * size,
                        parent=parent_name(running),
                        workflow=running.workflow,
                    )
                )
        return found

    # --- storage ------------------------------------------------------------------------

    def to_dict(self) -> dict[str, object]:
        """The model as plain JSON values (see ``from_dict``)."""
        return {
            "version": MODEL_VERSION,
            "parents": [
                {
                    "workflow": workflow,
                    "job": job,
                    "updated_at": round(p.updated_at, 3),
                    "runs": p.runs,
                    "observed": [[d, int(f)] for d, f in p.observed],
                    "children": {
                        label_set: {"counts": c.counts, "delays": c.delays}
                        for label_set, c in sorted(p.children.items())
                    },
                }
                for (workflow, job), p in sorted(self.parents.items())
            ],
        }

    @classmethod
    def from_dict(
        cls, data: object, *, min_runs: int = MIN_RUNS, max_age: float = MAX_AGE
    ) -> StageModel:
        """A model written by ``to_dict``; ``StageModelError`` names the first bad field."""
        if not isinstance(data, dict) or data.get("version") != MODEL_VERSION:
            raise StageModelError(f"stage model: field version: expected {MODEL_VERSION}")
        rows = data.get("parents")
        if not isinstance(rows, list):
            raise StageModelError("stage model: field parents: expected a list")
        model = cls(min_runs=min_runs, max_age=max_age)
        for index, row in enumerate(rows[:MAX_PARENTS]):
            where = f"stage model: parents[{index}]"
            if not isinstance(row, dict):
                raise StageModelError(f"{where}: expected an object")
            workflow, job = row.get("workflow"), row.get("job")
            if not isinstance(workflow, str) or not isinstance(job, str):
                raise StageModelError(f"{where}: field workflow/job: expected strings")
            parent = _Parent(
                updated_at=_number(row.get("updated_at"), f"{where}.updated_at"),
                runs=int(_number(row.get("runs"), f"{where}.runs")),
            )
            observed = row.get("observed")
            if not isinstance(observed, list):
                raise StageModelError(f"{where}: field observed: expected a list")
            for pair in observed[-SAMPLES:]:
                if not isinstance(pair, list) or len(pair) != 2:
                    raise StageModelError(f"{where}: field observed: expected [duration, 0|1]")
                parent.observed.append((_number(pair[0], f"{where}.observed"), bool(pair[1])))
            children = row.get("children")
            if not isinstance(children, dict):
                raise StageModelError(f"{where}: field children: expected an object")
            for label_set, stats in list(children.items())[:MAX_LABEL_SETS]:
                if not isinstance(stats, dict):
                    raise StageModelError(f"{where}: field children.{label_set}: an object")
                counts, delays = stats.get("counts"), stats.get("delays")
                if not isinstance(counts, list) or not isinstance(delays, list):
                    raise StageModelError(f"{where}: field children.{label_set}: lists")
                parent.children[str(label_set)] = _Children(
                    counts=[int(_number(c, f"{where}.counts")) for c in counts[-SAMPLES:]],
                    delays=[_number(d, f"{where}.delays") for d in delays[-SAMPLES:]],
                )
            model.parents[(workflow, job_key(job))] = parent
        return model


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise StageModelError(f"{where}: expected a finite number, got {value!r}")
    if value < 0:
        raise StageModelError(f"{where}: expected a number >= 0, got {value!r}")
    return float(value)


@dataclass
class _Ended:
    workflow: str
    job_name: str
    ended_at: float
    duration: float
    children: dict[str, list[float]] = field(default_factory=dict)  # label set → delays


@dataclass
class StageLearner:
    """Links jobs to the parent they followed, online, and records each parent into the
    model once its ``link`` window has passed (see the module docstring)."""

    model: StageModel
    link: float = LINK
    pending: dict[str, list[_Ended]] = field(default_factory=dict)  # run attempt → parents

    def ended(
        self, run: str, workflow: str, job_name: str, started_at: float, ended_at: float
    ) -> None:
        """A job of run attempt ``run`` ran from ``started_at`` to ``ended_at``."""
        if not workflow or not job_name:
            return  # a trace without workflows teaches nothing
        self.pending.setdefault(run, []).append(
            _Ended(workflow, job_name, ended_at, ended_at - started_at)
        )

    def queued(self, run: str, label_set: str, at: float) -> str | None:
        """A job of run attempt ``run`` was queued on ``label_set`` at ``at``. Returns the
        name (``parent_name``) of the parent it was linked to, if any."""
        candidates = [
            p for p in self.pending.get(run, ()) if p.ended_at <= at <= p.ended_at + self.link
        ]
        if not candidates:
            return None
        parent = max(candidates, key=lambda p: p.ended_at)
        parent.children.setdefault(label_set, []).append(at - parent.ended_at)
        return _name(run, parent.workflow, parent.job_name)

    def pending_names(self) -> set[str]:
        """The names of the parents ended but not yet recorded (their window is open)."""
        return {_name(run, p.workflow, p.job_name) for run, ps in self.pending.items() for p in ps}

    def flush(self, now: float) -> None:
        """Record every parent whose window has closed by ``now``, in the order they ended
        (so the bounded samples keep the same latest ones however often this is called)."""
        closed: list[_Ended] = []
        for run in list(self.pending):
            kept = [p for p in self.pending[run] if p.ended_at + self.link >= now]
            closed += [p for p in self.pending[run] if p.ended_at + self.link < now]
            if kept:
                self.pending[run] = kept
            else:
                del self.pending[run]
        closed.sort(key=lambda p: (p.ended_at, p.workflow, p.job_name, p.duration))
        for parent in closed:
            children = {
                label_set: (len(delays), sum(delays) / len(delays))
                for label_set, delays in parent.children.items()
            }
            self.model.record(
                parent.workflow, parent.job_name, parent.duration, children, parent.ended_at
            )
