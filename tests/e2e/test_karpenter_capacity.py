"""Capacity loss the way it happens in production, end to end on the real Karpenter.

Each site's runner and workflow pools are Karpenter NodePools (kwok cloud provider, nodes
register 10 s after launch; runner type ``c-2x``, workflow type ``w-4x``). Capacity is lost
because the workflow type has no cloud capacity (Karpenter's insufficient-capacity error on
launch, after the nodes the site had are reclaimed) or because the workflow NodePool is at its
``limits``. The listener is the real process; GitHub and HUD are the fakes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from tools.e2e_karpenter import create_site_nodepools, delete_nodepools, nodepool_name
from tools.e2e_site import Pool, Site, SiteSpec, Stage
from tools.fake_actions import JobState
from tools.localcluster import LocalCluster
from tools.localcluster.karpenter import (
    NODECLAIMS,
    NODEPOOL_LABEL,
    WORKFLOW_TYPE,
    Karpenter,
)

REGISTRATION_DELAY = "10s"
STRAND_AFTER = 20.0  # twice the registration delay: a pod waiting for a new node is not stranded
TYPES = {"runner": ("c-2x",), "workflow": (WORKFLOW_TYPE,)}
# Two runner pods per c-2x node, two workflow pods per w-4x node.
RUNNER_REQUESTS = {"cpu": "900m", "memory": "1Gi"}
WORKFLOW_REQUESTS = {"cpu": "1900m", "memory": "3Gi"}

MakePools = Callable[..., Awaitable[list[str]]]


def spec(name: str, scale_set_id: int) -> SiteSpec:
    return SiteSpec(
        name=name,
        scale_set_id=scale_set_id,
        runner_pool=Pool(nodes=0),
        workflow_pool=Pool(nodes=0),
        runner_requests=RUNNER_REQUESTS,
        workflow_requests=WORKFLOW_REQUESTS,
        job_seconds=3.0,
        strand_after=STRAND_AFTER,
    )


def settings(site: Site, **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "proactive": 2,
        "placeholder_ready_timeout": "60s",  # a pair waits for its nodes to register
    }
    values.update(overrides)
    return site.capacity_settings(**values)


@pytest.fixture
async def pools(
    stage: Stage, karpenter: Karpenter, local_cluster: LocalCluster
) -> AsyncIterator[MakePools]:
    """Create a site's NodePools; afterwards delete the sites' pods (grace 0), the pools and
    their nodes, and give the cloud its capacity back."""
    created: list[str] = []
    karpenter.set_registration_delay(REGISTRATION_DELAY)

    async def make(site: Site, types: Any = TYPES, **options: Any) -> list[str]:
        names = await asyncio.to_thread(create_site_nodepools, karpenter, site, types, **options)
        created.extend(names)
        return names

    yield make
    for site in stage.sites:
        for listener in site.listeners:
            if listener.returncode is None:
                await listener.stop(within=15.0)
        await asyncio.to_thread(
            local_cluster.rest.request,
            "DELETE",
            f"/api/v1/namespaces/{site.namespace}/pods",
            params={"gracePeriodSeconds": "0"},
        )
    await asyncio.to_thread(delete_nodepools, karpenter, created)
    karpenter.set_capacity()
    karpenter.set_registration_delay("0s")


async def warm(site: Site, pairs: int, within: float = 90) -> None:
    await site.wait_for(
        lambda: site.advertised() == pairs and site.view().pairs_running == pairs,
        f"{pairs} warm pairs on Karpenter's nodes",
        within,
    )


async def reclaim_workflow_nodes(karpenter: Karpenter, site: Site) -> None:
    """The cloud takes the workflow nodes back (Karpenter drains and deletes them)."""
    await asyncio.to_thread(
        karpenter.cluster.rest.request,
        "DELETE",
        NODECLAIMS,
        params={"labelSelector": f"{NODEPOOL_LABEL}={nodepool_name(site, 'workflow')}"},
    )


async def test_insufficient_capacity_keeps_jobs_queued_with_the_monitor(
    stage: Stage, karpenter: Karpenter, pools: MakePools
) -> None:
    site = await stage.add_site(spec("ice-guarded", 81))
    await pools(site)
    site.start_listener(capacity=settings(site), max_runners=8)
    await warm(site, 2)

    karpenter.set_capacity(insufficient=[WORKFLOW_TYPE])
    await reclaim_workflow_nodes(karpenter, site)
    await site.wait_for(lambda: site.advertised() == 0, "the header to drop to 0", 60)
    jobs = stage.fake.add_jobs(4, labels=["linux"])
    await asyncio.sleep(STRAND_AFTER + 5.0)
    assert stage.fake.stranded() == []
    assert {j.state for j in jobs} == {JobState.QUEUED}  # free to go to another cluster
    # The pairs wait for workflow nodes the cloud cannot supply; nothing is advertised.
    assert site.view().pairs_running == 0
    assert site.advertised() == 0
    assert not [n for n in karpenter.nodes(nodepool_name(site, "workflow")) if _ready(n)]

    karpenter.set_capacity()
    await site.wait_for(
        lambda: all(j.state is JobState.COMPLETED for j in jobs), "the queued jobs to run", 120
    )
    assert all(j.result == "succeeded" for j in jobs)
    assert stage.fake.stranded() == []


async def test_insufficient_capacity_strands_jobs_with_the_stock_static_header(
    stage: Stage, karpenter: Karpenter, pools: MakePools
) -> None:
    site = await stage.add_site(spec("ice-stock", 82))
    await pools(site)
    karpenter.set_capacity(insufficient=[WORKFLOW_TYPE])
    site.start_listener(capacity=None, max_runners=8)
    await site.wait_session()

    jobs = stage.fake.add_jobs(4, labels=["linux"])
    # Runner nodes launch, the runners claim the jobs, the workflow pods never schedule.
    await site.wait_for(
        lambda: len(stage.fake.stranded(site.scale_set_id)) == 4, "4 stranded jobs", 120
    )
    assert {j.state for j in jobs} == {JobState.RUNNING}
    assert {c.value for c in stage.fake.capacity_history(site.scale_set_id)} == {8}


async def test_two_clusters_jobs_flow_away_from_insufficient_capacity(
    stage: Stage, karpenter: Karpenter, pools: MakePools
) -> None:
    east = await stage.add_site(spec("east", 84))
    west = await stage.add_site(spec("west", 85))
    await pools(east)
    await pools(west, types={"runner": ("c-2x",), "workflow": ("c-4x",)})
    karpenter.set_capacity(insufficient=[WORKFLOW_TYPE])  # east's workflow type only
    for site in (east, west):
        site.start_listener(capacity=settings(site), max_runners=8)
    await warm(west, 2)
    await east.wait_for(lambda: east.advertised() == 0, "east advertising 0", 30)

    jobs = stage.fake.add_jobs(6, labels=["linux"])
    await west.wait_for(
        lambda: all(j.state is JobState.COMPLETED for j in jobs), "all jobs done in west", 150
    )
    assert {j.scale_set_id for j in jobs} == {west.scale_set_id}
    assert stage.fake.jobs_of(east.scale_set_id) == []
    assert stage.fake.stranded() == []
    assert all(j.result == "succeeded" for j in jobs)


async def test_nodepool_limit_caps_the_header(stage: Stage, pools: MakePools) -> None:
    site = await stage.add_site(spec("limit", 83))
    # One w-4x node: two workflow pods. The runner pool is not limited.
    await pools(site, limits={"workflow": {"cpu": "4"}})
    capacity = settings(site, proactive=0, hud=True, hud_floor=0)
    site.start_listener(capacity=capacity, max_runners=8)
    await site.wait_session()

    jobs = stage.fake.add_jobs(6, labels=["linux"])
    await site.wait_for(
        lambda: all(j.state is JobState.COMPLETED for j in jobs), "the jobs, two at a time", 180
    )
    assert all(j.result == "succeeded" for j in jobs)
    assert stage.fake.stranded() == []
    assert max(c.value or 0 for c in stage.fake.capacity_history(site.scale_set_id)) <= 2


def _ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
