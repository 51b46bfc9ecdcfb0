"""The e2e harness survives what it simulates: an apiserver restart while jobs are being
claimed must not leave the runner stand-in's jobs "running" forever, nor stop the site's
placeholder watch that scenarios read."""

from __future__ import annotations

import asyncio

import httpx
from kubernetes_asyncio import client

from tools.capacity_kit import restart_apiserver
from tools.e2e_site import PLACEHOLDER_SCALE_SET_LABEL, Site, SiteSpec, Stage
from tools.fake_actions import JobState
from tools.localcluster import LocalCluster
from tools.runner_standin import ARC_GROUP, ARC_VERSION, ERS_PLURAL, MERGE_PATCH


async def scale(site: Site, replicas: int, patch_id: int) -> None:
    """Patch the EphemeralRunnerSet as the listener does."""
    await client.CustomObjectsApi(site.stage.api).patch_namespaced_custom_object(
        ARC_GROUP,
        ARC_VERSION,
        site.namespace,
        ERS_PLURAL,
        site.runner_set_name,
        {"spec": {"patchID": patch_id, "replicas": replicas}},
        _content_type=MERGE_PATCH,
    )


async def apiserver_down(cluster: LocalCluster) -> None:
    while True:
        try:
            await asyncio.to_thread(cluster.rest.get, "/readyz")
        except (httpx.HTTPError, OSError, RuntimeError):
            return
        await asyncio.sleep(0.05)


async def test_standin_and_placeholder_watch_survive_an_apiserver_restart(
    stage: Stage, local_cluster: LocalCluster
) -> None:
    site = await stage.add_site(SiteSpec(name="chaos", scale_set_id=91, job_seconds=2.0))
    standin = site.standin
    assert standin is not None
    await scale(site, 2, 1)
    await site.wait_for(lambda: standin.stats().runners_idle == 2, "2 idle runners", 60)

    restart = asyncio.create_task(restart_apiserver(local_cluster, downtime=3.0))
    await asyncio.wait_for(apiserver_down(local_cluster), timeout=30)
    # Runners claim these while the apiserver is away: creating their workflow pods fails
    # until it is back.
    jobs = stage.fake.add_jobs(2, labels=["linux"])
    stage.fake.assign(site.scale_set_id, None)
    await site.wait_for(lambda: standin.stats().runners_busy == 2, "jobs claimed", 10)
    assert await restart == 0

    await site.wait_for(
        lambda: all(j.state is JobState.COMPLETED for j in jobs), "jobs done after restart", 90
    )
    assert all(j.result == "succeeded" and j.workflow_started_at is not None for j in jobs)
    await site.wait_for(lambda: standin.stats().runners_busy == 0, "runners cleaned up", 30)

    # The placeholder watch still follows the cluster after the restart.
    pod = site.filler_pod("watched-after-restart", pool="runner")
    pod["metadata"]["labels"][PLACEHOLDER_SCALE_SET_LABEL] = site.spec.name
    await client.CoreV1Api(stage.api).create_namespaced_pod(site.namespace, pod)
    await site.wait_for(
        lambda: "watched-after-restart" in site.placeholders, "the watch to see a new pod", 30
    )
