"""The predictive warm pool in the capacity monitor, on the in-memory cluster: the demand
loop feeding the stage model from scripted GitHub readings (a failed read holds the running
set), pairs for the predicted children and their metrics, and the model kept in its
ConfigMap across a restart (the unit half: the ConfigMap code path on the in-memory
cluster)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Sequence

import pytest

from base.kube import KubeError
from capacity import kept
from capacity.demand import DemandReader, Reading
from capacity.kept import STAGE_MODEL_KEY, stage_model_config_map
from capacity.model import DemandOutcome, DemandResult
from capacity.stage_feed import StageFeed
from capacity.stage_pool import PredictivePool
from capacity.stages import QueuedJob, RunningParent, StageModel
from tests.support.fake_clock import FakeClock
from tests.support.memory_cluster import MemoryCluster
from tests.unit.capacity.test_monitor_logic import (
    NOW,
    NS,
    SCALE_SET,
    SCALE_SET_OF_TESTS,
    Running,
    Scene,
    start,
)
from tests.unit.capacity.test_stage_feed import RecordingLearner
from tools.waits import eventually

LABEL_SET = ",".join(sorted(SCALE_SET_OF_TESTS.labels))
PREDICTIVE = {"predictive": {"enabled": True}}
BUILD = ".github/workflows/ci.yml"


class ScriptedSource(DemandReader):
    """The GitHub source as the monitor sees it: each read waits for the next scripted
    reading, moves the scene's clock to its time and returns it. ``began`` holds the clock
    at the start of each read: the time the monitor takes as the reading's (its ``as_of``)."""

    def __init__(self) -> None:
        self.clock = FakeClock(NOW)  # the scene's, once it exists
        self.script: asyncio.Queue[tuple[float, Reading]] = asyncio.Queue()
        self.began: list[float] = []

    async def read(self) -> Reading:
        self.began.append(self.clock())
        at, reading = await self.script.get()
        self.clock.now = at
        return reading

    async def aclose(self) -> None:
        pass

    async def give(self, at: float, reading: Reading) -> None:
        """Hand the monitor one reading and wait until it has taken it in (the next read
        has begun)."""
        reads = len(self.began)
        self.script.put_nowait((at, reading))
        # The loop sleeps about one read interval (30 s, virtual time) before the next read.
        await eventually(lambda: len(self.began) > reads, "the reading taken in", 60)


def good(running: Sequence[RunningParent] = (), queued: Sequence[QueuedJob] = ()) -> Reading:
    outcome = DemandOutcome(result=DemandResult.OK, duration=0.1, queued=len(queued), aged=0)
    return Reading(
        source="github", outcome=outcome, running=tuple(running), queued_jobs=tuple(queued)
    )


FAILED = Reading(
    source="github",
    outcome=DemandOutcome(result=DemandResult.HTTP_ERROR, duration=0.1, detail="503"),
)


def predictive_scene(cluster: MemoryCluster | None = None) -> tuple[Scene, ScriptedSource]:
    source = ScriptedSource()
    scene = start(
        cluster,
        proactive=0,
        github_demand=lambda settings, labels: source,
        demand={"source": "github"},
        warm_pool=PREDICTIVE,
    )
    source.clock = scene.clock
    return scene, source


def feed_of(scene: Scene) -> StageFeed:
    feed = scene.monitor.stage_feed
    assert feed is not None
    return feed


def teach(model: StageModel, runs: int = 6, shards: int = 3) -> None:
    """``runs`` builds of 20 minutes, each fanning out into ``shards`` on this scale set."""
    for i in range(runs):
        model.record(BUILD, "build", 1200.0, {LABEL_SET: (shards, 5.0)}, NOW - 86400 + i)


def test_off_by_default_and_on_over_the_base_pool() -> None:
    assert start().monitor.stage_feed is None
    scene, _ = predictive_scene()
    pool = scene.monitor.warm_pool
    assert isinstance(pool, PredictivePool)
    assert pool.label_set == LABEL_SET
    assert pool.parents == feed_of(scene).parents
    assert (pool.horizon, pool.hold) == (300.0, 240.0)  # no launches seen yet


async def test_the_demand_loop_feeds_the_model_and_a_failed_read_holds_the_parents() -> None:
    scene, source = predictive_scene()
    feed = feed_of(scene)
    learner = feed.learner = RecordingLearner(feed.model, feed.learner.link)
    parent = RunningParent(BUILD, "build", NOW - 600, run="7#1")
    loop = asyncio.create_task(scene.monitor._hud_loop())
    try:
        await source.give(NOW + 30, good([parent]))
        await source.give(NOW + 60, good([parent]))
        last_seen = source.began[1]
        await source.give(NOW + 90, FAILED)
        assert learner.calls == []
        assert feed.parents(NOW + 90) == [parent]  # what the pool counts meanwhile
        # A read the call budget cut short does not see the parent's run: nothing ended.
        await source.give(NOW + 100, dataclasses.replace(good(), running_partial=True))
        assert learner.calls == []
        shards = [QueuedJob("7#1", 70 + i, NOW + 80 + i) for i in range(3)]  # after it ended
        await source.give(NOW + 120, good([], shards))
        await source.give(NOW + 150, good([], shards))  # still queued: not children again
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    assert learner.calls == [
        ("ended", "7#1", "build", NOW - 600, last_seen),
        *(("queued", "7#1", LABEL_SET, NOW + 80 + i) for i in range(3)),
    ]
    assert feed.parents(NOW + 150) == []


async def test_pairs_for_predicted_children_and_the_arrived_counter() -> None:
    scene, source = predictive_scene()
    feed = feed_of(scene)
    teach(feed.model)
    assert scene.metric("gha_capacity_predictive_pairs") == 0
    arrived = "gha_capacity_predictive_children_arrived_total"
    expected = "gha_capacity_predictive_children_expected"
    assert scene.metric(arrived, workflow=BUILD) == -1  # no child came yet: no series
    parent = RunningParent(BUILD, "build", NOW - 1100, run="7#1")  # due within the horizon
    loop = asyncio.create_task(scene.monitor._hud_loop())
    try:
        async with Running(scene):
            await source.give(NOW, good([parent]))
            plan = await scene.reconciler.reconcile_once()
            assert len(plan.creates) == 3
            assert scene.metric("gha_capacity_predictive_pairs") == 3
            assert scene.metric("gha_capacity_warm_pool_target") == 3
            assert 2 < scene.metric(expected, workflow=BUILD) <= 3  # a mean, per workflow
            shards = [QueuedJob("7#1", 70 + i, NOW + 40) for i in range(3)]
            await source.give(NOW + 60, good([], shards))
            assert scene.metric(arrived, workflow=BUILD) == 3
            scene.clock.now = NOW + 61
            await scene.reconciler.reconcile_once()
            assert scene.metric("gha_capacity_predictive_pairs") == 0  # the parent ended
            assert scene.metric(expected, workflow=BUILD) == -1
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)


def test_metrics_are_absent_with_the_pool_off() -> None:
    scene = start()
    assert scene.metric("gha_capacity_predictive_pairs") == -1
    assert scene.metric("gha_capacity_predictive_children_expected", workflow="ci.yml") == -1


async def _run_model_loop(scene: Scene) -> None:
    monitor = scene.monitor
    keeping = kept.keep_stage_model(
        monitor.kube,
        monitor.metrics,
        monitor.stage_feed,
        namespace=monitor.placeholder_namespace,
        scale_set_name=monitor.scale_set_name,
    )
    task = asyncio.create_task(keeping)
    await scene.settle()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_the_stage_model_survives_a_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kept, "STAGE_MODEL_SAVE_INTERVAL", 0.0)
    first, _ = predictive_scene()
    teach(feed_of(first).model)
    await _run_model_loop(first)
    key = (NS, stage_model_config_map(SCALE_SET))
    assert key[1] == f"capacity-stage-model-{SCALE_SET}"
    stored = json.loads(first.cluster.config_maps[key][STAGE_MODEL_KEY])
    assert stored == feed_of(first).model.to_dict()

    second, _ = predictive_scene(first.cluster)
    model = feed_of(second).model
    assert model.parents == {}
    # Learned by this process before the stored model was read: kept beside it.
    model.record("docs.yml", "docs", 60.0, {}, NOW)
    await _run_model_loop(second)
    assert model.parents[(BUILD, "build")] == feed_of(first).model.parents[(BUILD, "build")]
    assert model.parents[("docs.yml", "docs")].runs == 1
    parent = RunningParent(BUILD, "build", NOW - 1100, run="9#1")
    (found,) = model.expected([parent], NOW, NOW + 300)
    assert found.count == 3


async def test_an_unusable_stored_model_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kept, "STAGE_MODEL_SAVE_INTERVAL", 0.0)
    cluster = MemoryCluster()
    stored = json.dumps({"version": 1, "parents": [{"workflow": BUILD}]})
    cluster.config_maps[(NS, stage_model_config_map(SCALE_SET))] = {STAGE_MODEL_KEY: stored}
    scene, _ = predictive_scene(cluster)
    cluster.fail_config_maps = [KubeError("patch configmaps", 403, "Forbidden")]
    await _run_model_loop(scene)
    assert feed_of(scene).model.parents == {}
    assert (
        scene.metric(
            "gha_capacity_kube_errors_total", operation="write configmaps", kind="forbidden"
        )
        == 1
    )
