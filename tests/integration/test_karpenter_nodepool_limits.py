"""NodePool limits (settings ``nodepools``) on the real Karpenter.

The runner NodePool may launch 4 CPU: two 2-CPU nodes (Karpenter counts 1800m of capacity
for each on the kwok provider), which hold two runner halves each, so four pairs fit; the
workflow pool is unlimited. Six pairs are wanted. With the limits read, the monitor creates
exactly four pairs and none that would wait Pending; without them (the setting off, or on
but unreadable) it keeps creating pairs that time out, as before. Raising the limit lets the
next pairs through at once.

The observed numbers are printed at the end of the run ("karpenter timings").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from base.kube import Resource
from capacity import nodepool_watch
from capacity.nodepools import nodepool_from
from capacity.settings import CapacitySettings
from capacity.settings_pools import NodePoolSettings
from tests.integration import test_karpenter
from tests.integration.test_karpenter import WORKFLOWS, runner_pool, workflow_pool
from tests.support.deploy_cluster_kit import apply, as_listener, bind_to, dynamic, our_role
from tests.support.deploy_files import DEPLOY, yaml_docs
from tests.support.karpenter_kit import Scene, Timeline, record_timings, settings
from tests.support.monitor_scene import MonitorRun
from tools.localcluster import LocalCluster
from tools.localcluster.karpenter import NODEPOOLS
from tools.waits import eventually

pytestmark = pytest.mark.cluster

scene = test_karpenter.scene  # the same fixture: runner set, NodePools, one monitor

WANTED = 6  # pairs wanted (proactive capacity)
FITS = 4  # pairs the runner pool's 4-CPU limit holds
WINDOW = 20.0  # seconds watched after the pairs that fit run: over three ready timeouts
READY_TIMEOUT = 6.0  # without the limits: pairs that cannot start time out within the window
# With the limits read, no pair should ever wait, so none needs to time out; a pair on a new
# node takes about 5 s to run here (longer under load), and at 6 s a slow launch would be
# deleted and re-made, which the exact create counts below would take for a wrong plan.
READY_TIMEOUT_WITH_LIMITS = 60.0


def config(
    scene: Scene, nodepools: NodePoolSettings, ready_timeout: float = READY_TIMEOUT
) -> CapacitySettings:
    return settings(
        scene.ns,
        WORKFLOWS,
        proactive_capacity=WANTED,
        max_pending_pairs=WANTED,
        placeholder_ready_timeout=ready_timeout,
        nodepools=nodepools,
    )


async def settle(scene: Scene, run: MonitorRun) -> dict[str, Any]:
    """Wait for the pairs that fit, then watch a fixed window; what happened in it."""
    timeline = Timeline(scene).start()
    await run.advertises(FITS)
    creates_before = run.creates()
    timeouts_before = run.count("gha_capacity_pair_deletes_total", reason="timeout")
    await asyncio.sleep(WINDOW)  # an observation window, not a wait for a condition
    await timeline.stop()
    return {
        "creates_in_window": run.creates() - creates_before,
        "timeouts_in_window": run.count("gha_capacity_pair_deletes_total", reason="timeout")
        - timeouts_before,
        "max_placeholders": max(sum(x.running.values()) + x.pending for x in timeline.samples),
        "max_advertised": max(v for _, v in run.values),
    }


def pool_status(scene: Scene, name: str) -> dict[str, str]:
    got = scene.karpenter.cluster.rest.get(f"{NODEPOOLS}/{name}")
    return dict(got.get("status", {}).get("resources", {}))


async def test_pairs_stay_within_the_limits_and_follow_a_raise(scene: Scene) -> None:
    runners = runner_pool(scene, limits={"cpu": "4"})
    workflow_pool(scene)
    started = time.monotonic()
    run = scene.start(
        config(scene, NodePoolSettings(enabled=True), ready_timeout=READY_TIMEOUT_WITH_LIMITS)
    )
    seen = await settle(scene, run)
    record_timings("nodepool limits on", **seen)

    # Exactly the pairs that fit were ever created, and none timed out.
    assert run.creates() == FITS
    assert seen["creates_in_window"] == 0
    assert run.count("gha_capacity_pair_deletes_total", reason="timeout") == 0
    assert seen["max_placeholders"] <= 2 * FITS
    assert seen["max_advertised"] == FITS
    assert len(scene.karpenter.nodes(runners)) == 2
    assert run.metric("gha_capacity_nodepool_held_pairs") == WANTED - FITS
    assert run.metric("gha_capacity_nodepool_pair_room") == 0
    assert run.metric("gha_capacity_nodepool_state", state="watching") == 1

    # The headroom series match the NodePool Karpenter reports.
    used = nodepool_from(
        {"metadata": {"name": runners}, "status": {"resources": pool_status(scene, runners)}}
    ).used["cpu"]
    labels = {"nodepool": runners, "resource": "cpu"}
    assert run.metric("gha_capacity_nodepool_limit", **labels) == 4
    assert run.metric("gha_capacity_nodepool_used", **labels) == float(used)
    assert run.metric("gha_capacity_nodepool_headroom", **labels) == float(Fraction(4) - used)
    # The unlimited workflow pool has no limit series (nothing to run out of).
    workflows = scene.pool_name(WORKFLOWS)
    assert run.metric("gha_capacity_nodepool_limit", nodepool=workflows, resource="cpu") == -1

    # Raise the limit: one more node's worth (two runner halves) fits, through the watch.
    scene.karpenter.patch_nodepool(runners, {"spec": {"limits": {"cpu": "6"}}})
    raised = time.monotonic()

    async def room_seen() -> bool:
        return run.creates() > FITS

    await eventually(room_seen, "new pairs created after the raise", 60, interval=0.05)
    created = time.monotonic()
    rose = await run.advertises(WANTED, within=90)
    assert run.creates() == WANTED
    assert run.count("gha_capacity_pair_deletes_total", reason="timeout") == 0
    assert run.metric("gha_capacity_nodepool_held_pairs") == 0
    assert run.metric("gha_capacity_nodepool_limit", **labels) == 6
    assert len(scene.karpenter.nodes(runners)) == 3
    record_timings(
        "nodepool limit raised",
        raise_to_pairs_created_s=created - raised,
        raise_to_advertised_s=rose - raised,
        since_start_s=rose - started,
    )
    await run.close()


@contextlib.asynccontextmanager
async def without_nodepool_rbac(
    cluster: LocalCluster, admin: client.ApiClient, namespace: str, tmp_path: Path
) -> AsyncIterator[client.ApiClient]:
    """A client acting as a listener's ServiceAccount with deploy/rbac's Role and binding in
    the runner namespace, and no NodePool ClusterRole."""
    controller = cluster.create_namespace("ctl")
    try:
        bodies = [
            our_role(),
            bind_to(yaml_docs(DEPLOY / "rbac" / "rolebinding.yaml")[0], controller),
        ]
        async with dynamic(admin, tmp_path) as dyn:
            for body in bodies:
                await apply(dyn, body, namespace, dry_run=False)
        async with as_listener(cluster, controller) as api:
            yield api
    finally:
        cluster.delete_namespace(controller)


@pytest.mark.parametrize(
    "how", ["setting off", "no NodePool resource (404)", "no NodePool RBAC (403)"]
)
async def test_without_the_limits_pairs_beyond_them_wait_and_time_out(
    scene: Scene,
    how: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    local_cluster: LocalCluster,
    tmp_path: Path,
) -> None:
    """Today's behaviour, and exactly it when the NodePools cannot be read: pairs beyond the
    limit are created, stay Pending, are deleted at the ready timeout, and are created
    again. An unreadable NodePool resource costs one log line."""
    runner_pool(scene, limits={"cpu": "4"})
    workflow_pool(scene)
    pools = NodePoolSettings(enabled=how != "setting off")
    if how == "no NodePool resource (404)":
        # Served by no apiserver: the answer a cluster without Karpenter's CRDs gives (this
        # cluster has them, for the other tests).
        monkeypatch.setattr(
            nodepool_watch, "RESOURCE", Resource.cluster("karpenter.sh", "v0", "nodepools")
        )
    caplog.set_level(logging.INFO, logger="capacity.nodepools")
    async with contextlib.AsyncExitStack() as stack:
        if how == "no NodePool RBAC (403)":
            api = await stack.enter_async_context(
                without_nodepool_rbac(local_cluster, scene.api, scene.ns, tmp_path)
            )
            scene.start(config(scene, pools), api=api)
        else:
            scene.start(config(scene, pools))
        assert scene.run is not None
        run = scene.run
        seen = await settle(scene, run)
        states = {
            s: run.metric("gha_capacity_nodepool_state", state=s) for s in ("absent", "forbidden")
        }
        await run.close()
    record_timings(f"nodepool limits: {how}", **seen)

    assert seen["max_advertised"] == FITS  # never counted what did not run
    assert seen["creates_in_window"] >= 2  # pairs beyond the limit, again and again
    assert seen["timeouts_in_window"] >= 2
    assert seen["max_placeholders"] > 2 * FITS
    lines = [r.getMessage() for r in caplog.records if r.name == "capacity.nodepools"]
    if how == "setting off":
        assert lines == []
        assert states == {"absent": -1, "forbidden": -1}  # no reader, no state series
        return
    state, reason = (
        ("absent", "the cluster has no Karpenter NodePool resource")
        if "404" in how
        else (
            "forbidden",
            "the listener may not read them (bind deploy/rbac/clusterrole-nodepools.yaml)",
        )
    )
    assert lines == [f"NodePool limits off: {reason}; placeholders are created as without them"]
    assert states[state] == 1
