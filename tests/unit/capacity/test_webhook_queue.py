"""The webhook receiver's queue (capacity/webhook_queue.py): order, duplicates, reconciles,
ageing and counting by labels."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from capacity.webhook_queue import (
    DAY,
    Applied,
    JobEvent,
    JobQueue,
    ListedJob,
    Status,
    label_match,
    label_set,
)

NOW = 1_000_000.0
LINUX = label_set(["self-hosted", "linux"])
GPU = label_set(["self-hosted", "linux", "gpu"])
_ids = itertools.count(1)


def event(
    job: int, status: Status, labels: frozenset[str] = LINUX, created: float = NOW
) -> JobEvent:
    return JobEvent(f"d-{next(_ids)}", job, status, labels, created)


def queued(queue: JobQueue, labels: frozenset[str] = LINUX) -> int:
    return queue.count(labels, aged_after=None, now=NOW).queued


def test_labels_match_as_github_matches_them() -> None:
    assert label_match(LINUX, label_set(["Linux"]))  # self-hosted implied, case ignored
    assert label_match(LINUX, GPU)
    assert not label_match(GPU, LINUX)  # the job wants a label the scale set lacks
    assert not label_match(label_set(["self-hosted"]), LINUX)  # any runner: not ours alone
    assert not label_match(frozenset(), LINUX)


def test_a_job_counts_while_queued_and_stops_when_it_starts() -> None:
    queue = JobQueue()
    assert queue.apply(event(1, Status.QUEUED), NOW) is Applied.CHANGED
    assert queued(queue) == 1
    assert queued(queue, GPU) == 1  # a scale set with more labels serves it too
    assert queue.apply(event(1, Status.IN_PROGRESS), NOW) is Applied.CHANGED
    assert queued(queue) == 0
    assert queue.status(1) is Status.IN_PROGRESS


def test_a_redelivery_changes_nothing() -> None:
    queue = JobQueue()
    first = event(1, Status.QUEUED)
    queue.apply(first, NOW)
    queue.apply(event(1, Status.IN_PROGRESS), NOW)
    # The same delivery id again (GitHub's redelivery keeps it): the job stays started.
    assert queue.apply(first, NOW) is Applied.DUPLICATE
    assert queue.status(1) is Status.IN_PROGRESS


def test_completed_before_queued_leaves_nothing_queued() -> None:
    queue = JobQueue()
    assert queue.apply(event(1, Status.COMPLETED), NOW) is Applied.CHANGED
    assert queue.apply(event(1, Status.QUEUED), NOW) is Applied.OUT_OF_ORDER
    assert queue.apply(event(1, Status.IN_PROGRESS), NOW) is Applied.OUT_OF_ORDER
    assert queued(queue) == 0


def test_waiting_is_not_demand_until_queued() -> None:
    queue = JobQueue()
    queue.apply(event(1, Status.WAITING), NOW)
    assert queued(queue) == 0
    queue.apply(event(1, Status.QUEUED), NOW)
    assert queued(queue) == 1
    queue.apply(event(1, Status.WAITING), NOW)  # either way round: both are "not started"
    assert queued(queue) == 0


@given(st.permutations([Status.QUEUED, Status.IN_PROGRESS, Status.COMPLETED]), st.booleans())
def test_any_delivery_order_ends_where_the_latest_status_says(
    order: list[Status], twice: bool
) -> None:
    queue = JobQueue()
    events = [event(7, status) for status in order]
    for e in events + (events if twice else []):
        queue.apply(e, NOW)
    assert queue.status(7) is Status.COMPLETED
    assert queued(queue) == 0


def test_a_queue_created_a_day_ago_is_too_old_and_ages_out() -> None:
    queue = JobQueue()
    assert queue.apply(event(1, Status.QUEUED, created=NOW - DAY - 1), NOW) is Applied.TOO_OLD
    queue.apply(event(2, Status.QUEUED, created=NOW - DAY + 10), NOW)
    assert queued(queue) == 1
    assert queue.expire(NOW + 11) == 1
    assert queued(queue) == 0
    assert len(queue) == 0


def test_tombstones_go_after_their_ttl() -> None:
    queue = JobQueue(tombstone_ttl=60)
    queue.apply(event(1, Status.COMPLETED), NOW)
    assert queue.expire(NOW + 59) == 0
    assert queue.expire(NOW + 61) == 1
    assert len(queue) == 0


def test_a_full_queue_keeps_what_it_holds() -> None:
    queue = JobQueue(max_jobs=2)
    queue.apply(event(1, Status.QUEUED), NOW)
    queue.apply(event(2, Status.QUEUED), NOW)
    assert queue.apply(event(3, Status.QUEUED), NOW) is Applied.FULL
    assert queue.apply(event(1, Status.IN_PROGRESS), NOW) is Applied.CHANGED  # known jobs move
    assert queued(queue) == 1


def test_a_reconcile_adds_lost_jobs_and_drops_lost_starts() -> None:
    queue = JobQueue()
    queue.apply(event(1, Status.QUEUED), NOW)  # its in_progress delivery was lost
    queue.apply(event(2, Status.COMPLETED), NOW)
    queue.apply(event(4, Status.QUEUED), NOW + 5)  # delivered while the listing ran
    listed = [
        ListedJob(2, LINUX, NOW),  # known as completed: the listing is older than that
        ListedJob(3, LINUX, NOW),  # its queued delivery was lost
    ]
    added, dropped = queue.reconcile(listed, began=NOW + 1, complete=True, now=NOW + 10)
    assert (added, dropped) == (1, 1)
    assert queue.status(1) is None
    assert queue.status(2) is Status.COMPLETED
    assert queue.status(3) is Status.QUEUED
    assert queue.status(4) is Status.QUEUED
    assert queued(queue) == 2


def test_a_partial_reconcile_adds_but_never_drops() -> None:
    queue = JobQueue()
    queue.apply(event(1, Status.QUEUED), NOW)
    added, dropped = queue.reconcile(
        [ListedJob(3, GPU, NOW)], began=NOW + 1, complete=False, now=NOW + 10
    )
    assert (added, dropped) == (1, 0)
    assert queued(queue) == 1  # job 3 wants gpu, which the linux scale set lacks
    assert queued(queue, GPU) == 2


def test_the_aged_part_counts_jobs_queued_long_enough() -> None:
    queue = JobQueue()
    queue.apply(event(1, Status.QUEUED, created=NOW - 1000), NOW)
    queue.apply(event(2, Status.QUEUED, created=NOW - 10), NOW)
    count = queue.count(LINUX, aged_after=900, now=NOW)
    assert (count.queued, count.aged) == (2, 1)


def test_a_new_label_set_reaches_scale_sets_that_counted_before() -> None:
    queue = JobQueue()
    assert queued(queue, GPU) == 0  # caches the (empty) list of label sets for GPU
    queue.apply(event(1, Status.QUEUED, labels=GPU), NOW)
    assert queued(queue, GPU) == 1


def test_delivery_memory_is_bounded() -> None:
    queue = JobQueue(delivery_memory=2)
    first = event(1, Status.QUEUED)
    queue.apply(first, NOW)
    queue.apply(event(2, Status.QUEUED), NOW)
    queue.apply(event(3, Status.QUEUED), NOW)
    # The oldest id is forgotten; its job's own status still refuses the replay's effect.
    assert queue.apply(first, NOW) is Applied.DUPLICATE
    assert queued(queue) == 3
