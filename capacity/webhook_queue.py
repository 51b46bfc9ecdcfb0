"""The webhook receiver's queue: GitHub's workflow jobs by id, from `workflow_job`
deliveries and from reconciles with GitHub's REST API. Pure: the caller passes the time.

A job moves forward only: pending (queued, or waiting on an environment's protection rules,
either way round) → in progress → completed. A delivery that would move a job
back (`queued` after its `in_progress`, anything after `completed`) changes nothing: GitHub
does not order deliveries. A delivery id seen before changes nothing either (a redelivery
keeps its id). A job that has started or finished is kept as a tombstone for
`tombstone_ttl`, so that a late `queued` cannot bring it back.

A reconcile lists the jobs GitHub reports as queued. Those the queue does not know (a lost
delivery, or a receiver restart) are added; with a *complete* listing (every repository
read), queued jobs it does not list and that the queue learned of before the listing began
are dropped (their `in_progress` was lost). A job queued longer than `max_age` ages out:
GitHub cancels a job that waits a day for a runner.

Counting follows GitHub's label rule (`label_match`): a job counts for a scale set when
every one of its labels is one of the scale set's. Queued jobs are indexed by their label
set, so a count costs one step per distinct label set, not per job.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

IMPLIED_LABEL = "self-hosted"
DAY = 86_400.0


class Status(enum.IntEnum):
    """A job's progress, in the order GitHub moves it."""

    WAITING = 0
    QUEUED = 1
    IN_PROGRESS = 2
    COMPLETED = 3


ACTIONS = {
    "waiting": Status.WAITING,
    "queued": Status.QUEUED,
    "in_progress": Status.IN_PROGRESS,
    "completed": Status.COMPLETED,
}


def label_set(labels: Iterable[str]) -> frozenset[str]:
    """Labels as GitHub compares them: without case."""
    return frozenset(label.lower() for label in labels)


def label_match(job: frozenset[str], scale_set: frozenset[str]) -> bool:
    """Whether a job with labels `job` (lowercase) runs on a scale set with labels
    `scale_set` (lowercase): every label is one of the scale set's, `self-hosted` implied."""
    if not job or job == {IMPLIED_LABEL}:
        return False
    return job <= scale_set | {IMPLIED_LABEL}


def _rank(status: Status) -> int:
    return max(status, Status.QUEUED)  # waiting and queued are both "not started yet"


@dataclass(frozen=True)
class JobEvent:
    """One `workflow_job` delivery, as the queue needs it."""

    delivery: str  # X-GitHub-Delivery
    job_id: int
    status: Status
    labels: frozenset[str]
    created_at: float  # the job's creation, epoch seconds


@dataclass(frozen=True)
class ListedJob:
    """A job a reconcile found queued."""

    job_id: int
    labels: frozenset[str]
    created_at: float


class Applied(enum.Enum):
    """What a delivery did to the queue."""

    CHANGED = "changed"
    DUPLICATE = "duplicate"  # a delivery id seen before
    OUT_OF_ORDER = "out_of_order"  # it would move the job back
    FULL = "full"  # the queue holds `max_jobs` already
    TOO_OLD = "too_old"  # a queued job created more than `max_age` ago


@dataclass
class _Job:
    status: Status
    labels: frozenset[str]
    created_at: float
    learned_at: float  # when the queue last heard of it (a delivery or a reconcile)


@dataclass(frozen=True)
class Count:
    """Queued jobs one scale set serves, and those among them queued `aged_after` or more."""

    queued: int
    aged: int


class JobQueue:
    """Jobs by id (see the module docstring)."""

    def __init__(
        self,
        *,
        max_age: float = DAY,
        tombstone_ttl: float = 3600.0,
        max_jobs: int = 200_000,
        delivery_memory: int = 100_000,
    ) -> None:
        self.max_age = max_age
        self.tombstone_ttl = tombstone_ttl
        self.max_jobs = max_jobs
        self._jobs: dict[int, _Job] = {}
        # Queued jobs by label set: job id -> creation time.
        self._queued: dict[frozenset[str], dict[int, float]] = {}
        self._deliveries: OrderedDict[str, None] = OrderedDict()
        self._delivery_memory = delivery_memory
        self._matches: dict[frozenset[str], list[frozenset[str]]] = {}  # scale set -> label sets

    def __len__(self) -> int:
        return len(self._jobs)

    @property
    def queued(self) -> int:
        return sum(map(len, self._queued.values()))

    def status(self, job_id: int) -> Status | None:
        job = self._jobs.get(job_id)
        return job.status if job is not None else None

    def apply(self, event: JobEvent, now: float) -> Applied:
        if event.delivery in self._deliveries:
            return Applied.DUPLICATE
        self._remember(event.delivery)
        job = self._jobs.get(event.job_id)
        if job is None:
            if len(self._jobs) >= self.max_jobs:
                return Applied.FULL
            if event.status is Status.QUEUED and now - event.created_at > self.max_age:
                return Applied.TOO_OLD
            self._put(event.job_id, _Job(event.status, event.labels, event.created_at, now))
            return Applied.CHANGED
        if _rank(event.status) < _rank(job.status):
            return Applied.OUT_OF_ORDER
        if event.status == job.status:
            return Applied.DUPLICATE
        self._put(event.job_id, _Job(event.status, job.labels, job.created_at, now))
        return Applied.CHANGED

    def reconcile(
        self, listed: Iterable[ListedJob], *, began: float, complete: bool, now: float
    ) -> tuple[int, int]:
        """Folds one REST listing of queued jobs in; returns (added, dropped)."""
        seen: set[int] = set()
        added = 0
        for item in listed:
            seen.add(item.job_id)
            if item.job_id in self._jobs or now - item.created_at > self.max_age:
                continue  # known: its own deliveries say more than a listing
            if len(self._jobs) >= self.max_jobs:
                break
            self._put(item.job_id, _Job(Status.QUEUED, item.labels, item.created_at, now))
            added += 1
        dropped = 0
        if complete:
            for job_id in [
                job_id
                for ids in self._queued.values()
                for job_id in ids
                if job_id not in seen and self._jobs[job_id].learned_at < began
            ]:
                self._drop(job_id)
                dropped += 1
        return added, dropped

    def expire(self, now: float) -> int:
        """Ages out queued jobs past `max_age` and tombstones past `tombstone_ttl`."""
        gone = [
            job_id
            for job_id, job in self._jobs.items()
            if (job.status <= Status.QUEUED and now - job.created_at > self.max_age)
            or (job.status >= Status.IN_PROGRESS and now - job.learned_at > self.tombstone_ttl)
        ]
        for job_id in gone:
            self._drop(job_id)
        return len(gone)

    def count(self, labels: frozenset[str], *, aged_after: float | None, now: float) -> Count:
        """Queued jobs a scale set with `labels` (lowercase) serves; the aged part only when
        `aged_after` is given (demand sharding), as it costs a step per job."""
        sets = self._matches.get(labels)
        if sets is None:
            sets = [s for s in self._queued if label_match(s, labels)]
            self._matches[labels] = sets
        queued = aged = 0
        for s in sets:
            times = self._queued.get(s, {})
            queued += len(times)
            if aged_after is not None:
                aged += sum(1 for t in times.values() if now - t >= aged_after)
        return Count(queued, aged)

    def _remember(self, delivery: str) -> None:
        self._deliveries[delivery] = None
        if len(self._deliveries) > self._delivery_memory:
            self._deliveries.popitem(last=False)

    def _put(self, job_id: int, job: _Job) -> None:
        self._unindex(job_id)
        self._jobs[job_id] = job
        if job.status is Status.QUEUED:
            ids = self._queued.get(job.labels)
            if ids is None:
                ids = self._queued[job.labels] = {}
                self._matches.clear()  # a new label set: every scale set's list may change
            ids[job_id] = job.created_at

    def _drop(self, job_id: int) -> None:
        self._unindex(job_id)
        del self._jobs[job_id]

    def _unindex(self, job_id: int) -> None:
        old = self._jobs.get(job_id)
        if old is not None and old.status is Status.QUEUED:
            self._queued[old.labels].pop(job_id, None)
