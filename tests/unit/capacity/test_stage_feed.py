"""capacity/stage_feed.py: readings in sequence → the learner's ended/queued calls (a parent
gone from a good reading ended when last seen, a new queued job is fed once, a failed read
holds the last good set), the children counted for the pool, and the horizon and hold
taken from observed launches."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from capacity.stage_feed import (
    DEFAULT_HOLD,
    DEFAULT_HORIZON,
    MAX_SEEN,
    StageFeed,
    label_key,
    window,
)
from capacity.stages import LINK, Expected, QueuedJob, RunningParent, StageLearner, StageModel

LABELS = "linux-gpu"
T0 = 1_800_000_000.0
INTERVAL = 30.0


class RecordingLearner(StageLearner):
    """The real learner, recording the calls the feed makes, in order."""

    def __init__(self, model: StageModel, link: float) -> None:
        super().__init__(model, link=link)
        self.calls: list[tuple[object, ...]] = []

    def ended(
        self, run: str, workflow: str, job_name: str, started_at: float, ended_at: float
    ) -> None:
        self.calls.append(("ended", run, job_name, started_at, ended_at))
        super().ended(run, workflow, job_name, started_at, ended_at)

    def queued(self, run: str, label_set: str, at: float) -> str | None:
        self.calls.append(("queued", run, label_set, at))
        return super().queued(run, label_set, at)


def recording_feed() -> tuple[StageFeed, RecordingLearner]:
    feed = StageFeed(StageModel(), LABELS, INTERVAL)
    learner = RecordingLearner(feed.model, feed.learner.link)
    feed.learner = learner
    return feed, learner


def build(run: str, started: float, name: str = "build") -> RunningParent:
    return RunningParent("ci.yml", name, started, run=run)


def read(
    feed: StageFeed,
    at: float,
    running: Sequence[RunningParent] = (),
    queued: Sequence[QueuedJob] = (),
    *,
    ok: bool = True,
    truncated: bool = False,
    partial: bool = False,
) -> dict[str, int]:
    """One reading whose read began at ``at`` and ended 2 s later; the children that came
    for counted parents, per workflow."""
    return feed.read(
        ok=ok,
        running=running,
        queued=queued,
        read_at=at,
        now=at + 2,
        truncated=truncated,
        partial=partial,
    )


def test_the_link_window_is_widened_by_one_read() -> None:
    feed = StageFeed(StageModel(), LABELS, INTERVAL)
    assert feed.learner.link == LINK + INTERVAL


def test_a_parent_gone_from_a_reading_ended_when_last_seen() -> None:
    feed, learner = recording_feed()
    parent = build("7#1", T0 - 600)
    read(feed, T0, [parent])
    read(feed, T0 + 30, [parent])
    assert learner.calls == []
    read(feed, T0 + 60, [])
    assert learner.calls == [("ended", "7#1", "build", T0 - 600, T0 + 30)]


def test_children_are_fed_once_after_the_parents_that_ended_with_them() -> None:
    feed, learner = recording_feed()
    parent = build("7#1", T0 - 600)
    read(feed, T0, [parent])
    shards = [QueuedJob("7#1", 100 + i, T0 + 12 + i) for i in range(3)]
    read(feed, T0 + 30, [], shards)
    assert learner.calls == [
        ("ended", "7#1", "build", T0 - 600, T0),
        *(("queued", "7#1", LABELS, T0 + 12 + i) for i in range(3)),
    ]
    # Still queued in the next readings: not children again.
    read(feed, T0 + 60, [], shards)
    read(feed, T0 + 90, [], shards[1:])
    assert len(learner.calls) == 4
    # The window has closed (60 s link + one read, recorded one read later): it is learned.
    read(feed, T0 + 150)
    (stats,) = feed.model.parents.values()
    assert stats.runs == 1
    assert stats.children[LABELS].counts == [3]


def test_a_failed_read_holds_the_last_good_running_set() -> None:
    feed, learner = recording_feed()
    parents = [build("7#1", T0 - 600), build("8#1", T0 - 300)]
    read(feed, T0, parents)
    assert read(feed, T0 + 30, [], ok=False) == {}
    assert learner.calls == []
    assert feed.parents(T0 + 32) == parents  # what the pool counts meanwhile
    # Back: one parent ended meanwhile. It was last seen by the last good read.
    read(feed, T0 + 60, parents[1:])
    assert learner.calls == [("ended", "7#1", "build", T0 - 600, T0)]
    assert feed.parents(T0 + 62) == parents[1:]


def test_a_queued_job_seen_before_a_failed_read_is_not_fed_again() -> None:
    feed, learner = recording_feed()
    job = QueuedJob("7#1", 100, T0 - 5)
    read(feed, T0, [], [job])
    read(feed, T0 + 30, [], ok=False)
    read(feed, T0 + 60, [], [job])
    assert learner.calls == [("queued", "7#1", LABELS, T0 - 5)]


def test_a_job_without_an_id_is_not_fed() -> None:
    feed, learner = recording_feed()
    read(feed, T0, [], [QueuedJob("7#1", -1, T0 - 5)])
    assert learner.calls == []


def test_a_reading_cut_at_the_bound_forgets_older_parents_without_ending_them() -> None:
    feed, learner = recording_feed()
    old, mid, new = build("1#1", T0 - 900), build("2#1", T0 - 300), build("3#1", T0 - 100)
    read(feed, T0, [old, mid, new])
    read(feed, T0 + 30, [mid, new], truncated=True)
    assert learner.calls == []
    assert feed.parents(T0 + 32) == [mid, new]
    # One started after the oldest a cut reading holds, missing from it, did end.
    read(feed, T0 + 60, [mid], truncated=True)
    assert learner.calls == [("ended", "3#1", "build", T0 - 100, T0 + 30)]


def test_a_partial_reading_ends_nobody_and_the_next_complete_one_ends_the_missing() -> None:
    feed, learner = recording_feed()
    a, b, c = build("1#1", T0 - 900), build("2#1", T0 - 300), build("3#1", T0 + 10)
    read(feed, T0, [a, b])
    read(feed, T0 + 30, [b, c], partial=True)  # a's run not reached: maybe still running
    assert learner.calls == []
    assert feed.parents(T0 + 32) == [a, b, c]
    read(feed, T0 + 60, [c])
    assert learner.calls == [
        ("ended", "1#1", "build", T0 - 900, T0),  # last seen by the first read
        ("ended", "2#1", "build", T0 - 300, T0 + 30),
    ]


def test_parents_kept_through_partial_readings_are_bounded() -> None:
    feed, _ = recording_feed()
    for i in range(MAX_SEEN + 10):
        read(feed, T0 + i, [build(f"{i}#1", T0 + i)], partial=True)
    kept = feed.parents(T0 + MAX_SEEN + 10)
    assert len(kept) == MAX_SEEN
    assert min(p.started_at for p in kept) == T0 + 10  # the most recently started


def test_children_of_counted_parents_are_counted_as_arrived() -> None:
    feed = StageFeed(StageModel(), LABELS, INTERVAL)
    counted, other = build("7#1", T0 - 600), build("8#1", T0 - 600)
    read(feed, T0, [counted, other])
    feed.count(
        [
            Expected(LABELS, 2.5, "7#1/ci.yml/build", "ci.yml"),
            Expected(LABELS, 0.0, "8#1/ci.yml/build", "ci.yml"),  # counted nothing
        ]
    )
    children = [QueuedJob("7#1", 1, T0 + 10), QueuedJob("7#1", 2, T0 + 11)]
    children += [QueuedJob("8#1", 3, T0 + 12)]
    assert read(feed, T0 + 30, [], children) == {"ci.yml": 2}
    # A job not linked to any parent (none ended in its run) is not counted.
    assert read(feed, T0 + 60, [], [QueuedJob("9#1", 4, T0 + 40)]) == {}
    # Once recorded, the parent's name is dropped.
    read(feed, T0 + 200)
    assert feed.counted == {}


def test_learned_online_it_predicts_the_next_run() -> None:
    feed = StageFeed(StageModel(), LABELS, INTERVAL)
    t = T0
    for run in range(6):  # six builds of 20 minutes, each fanning out into 4 shards
        name = f"{run}#1"
        parent = build(name, t)
        read(feed, t + 1170, [parent])
        shards = [QueuedJob(name, 10 * run + i, t + 1203) for i in range(4)]
        read(feed, t + 1200, [], shards)
        read(feed, t + 1230, [], shards)
        t += 3600
    read(feed, t)  # every window closed
    running = build("9#1", t - 1000)
    found = feed.model.expected([running], t, t + 300)
    assert [(e.label_set, e.count) for e in found] == [(LABELS, 4.0)]


def test_label_key_is_the_sorted_labels() -> None:
    assert label_key(("self-hosted", "linux-gpu")) == "linux-gpu,self-hosted"


def test_window_defaults_until_enough_launches_are_seen() -> None:
    assert window([200.0] * 7, None, None) == (DEFAULT_HORIZON, DEFAULT_HOLD)


def test_window_follows_the_longest_launch() -> None:
    launches = [5.0] * 7 + [200.0]
    assert window(launches, None, None) == (250.0, 200.0)
    # Launches onto nodes with room only: the longest is taken as at least a minute.
    assert window([5.0] * 8, None, None) == (75.0, 60.0)


@pytest.mark.parametrize("launches", [(), [200.0] * 8])
def test_window_settings_win(launches: Sequence[float]) -> None:
    assert window(launches, 420.0, 30.0) == (420.0, 30.0)
    assert window(launches, None, 0.0)[1] == 0.0
