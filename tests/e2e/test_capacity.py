"""Capacity-awareness end to end: the listener process with the monitor on, placeholder pairs
on the real scheduler, the runner stand-in, the fake Actions service's shared job queue.

The outcome that matters is the stranded-job count: a job GitHub assigned whose workflow pod
never starts. Each site has a runner node pool and a workflow node pool, so losing the
workflow pool strands jobs while runner pods still start (docs/capacity-model.md §1).

Why these run on static nodes and not on Karpenter: a cluster of fixed node pools (no
autoscaler, or one that has reached its limits) is a setup we support, and on it a node
removed or full is the whole loss, at a moment the test chooses, with no provisioner that
might replace it. The same outcomes under an autoscaler (insufficient capacity, NodePool
limits, jobs flowing to the other cluster) are in test_karpenter_capacity.py.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from tools.e2e_site import Pool, Site, SiteSpec, Stage
from tools.fake_actions import FakeJob, JobState
from tools.fake_hud import Outage
from tools.listener_process import metric_value

STRAND_AFTER = 5.0
LOSS = pytest.mark.parametrize("how", ["removed", "full"])


def spec(name: str, scale_set_id: int, *, workflow_nodes: int = 1) -> SiteSpec:
    # Workflow pool: one 4-CPU node = room for 4 workflow pods (1 CPU each).
    return SiteSpec(
        name=name,
        scale_set_id=scale_set_id,
        workflow_pool=Pool(nodes=workflow_nodes, cpu="4"),
        job_seconds=3.0,
        strand_after=STRAND_AFTER,
    )


def states(jobs: list[FakeJob]) -> Counter[str]:
    return Counter(str(j.state) for j in jobs)


async def warm(site: Site, pairs: int) -> None:
    await site.wait_for(
        lambda: site.advertised() == pairs and site.view().pairs_running == pairs,
        f"{pairs} warm pairs advertised",
        60,
    )


async def test_burst_is_served_from_warm_pairs(stage: Stage) -> None:
    # The default runner group's default on GitHub: public repositories' jobs are kept out.
    stage.fake.runner_group_public = False
    site = await stage.add_site(spec("warm", 31))
    listener = site.start_listener(capacity=site.capacity_settings(proactive=4), max_runners=8)
    await warm(site, 4)
    # ... which the listener says once at start-up instead of leaving it to silence.
    assert "does not allow public repositories" in listener.log_text()
    text = await listener.metrics_text()
    assert metric_value(text, "gha_listener_runner_group_public_repositories") == 0

    jobs = stage.fake.add_jobs(4, labels=["linux"])
    await site.wait_for(
        lambda: all(j.state is JobState.COMPLETED for j in jobs), "the burst to finish", 90
    )
    assert all(j.result == "succeeded" for j in jobs)
    assert all(j.workflow_started_at is not None for j in jobs)
    assert stage.fake.stranded() == []
    # Never more than the 4 pairs the scheduler had confirmed.
    assert max(c.value or 0 for c in stage.fake.capacity_history(site.scale_set_id)) <= 4
    # Afterwards the warm pool is rebuilt.
    await warm(site, 4)


async def exhaust(stage: Stage, site: Site, how: str) -> list[FakeJob]:
    """Lose the workflow pool's room — its node is removed, or other workloads fill it —
    then queue 6 jobs and give them time to strand."""
    if how == "removed":
        await site.remove_nodes("workflow")
    else:
        await site.fill(4)  # 4 CPU of 4: the placeholders there are preempted
    await site.wait_for(lambda: site.advertised() == (0 if site.capacity_on else 8),
                        "the header after the capacity loss", 60)  # fmt: skip
    jobs = stage.fake.add_jobs(6, labels=["linux"])
    await asyncio.sleep(STRAND_AFTER + 5.0)
    return jobs


@LOSS
async def test_capacity_loss_keeps_jobs_queued_with_the_monitor(stage: Stage, how: str) -> None:
    site = await stage.add_site(spec("guarded", 32))
    site.start_listener(capacity=site.capacity_settings(proactive=2), max_runners=8)
    await warm(site, 2)

    jobs = await exhaust(stage, site, how)
    assert stage.fake.stranded() == []
    assert states(jobs) == {"queued": 6}  # still on GitHub's queue, free to go elsewhere
    assert site.standin is not None
    assert site.standin.stats().runners_busy == 0

    # Capacity comes back: the queued jobs run.
    await site.add_nodes("workflow", 2)
    await site.wait_for(
        lambda: all(j.state is JobState.COMPLETED for j in jobs), "queued jobs to run", 120
    )
    assert stage.fake.stranded() == []


@LOSS
async def test_capacity_loss_strands_jobs_with_the_stock_static_header(
    stage: Stage, how: str
) -> None:
    site = await stage.add_site(spec("stock", 33))
    site.start_listener(capacity=None, max_runners=8)
    await site.wait_session()

    jobs = await exhaust(stage, site, how)
    # On a slow machine the last runners may need longer than the fixed wait to claim.
    await site.wait_for(
        lambda: len(stage.fake.stranded(site.scale_set_id)) == 6, "6 stranded jobs", 60
    )
    assert states(jobs) == {"running": 6}  # claimed by runners, workflow pods Pending
    assert {c.value for c in stage.fake.capacity_history(site.scale_set_id)} == {8}


async def test_two_clusters_jobs_flow_to_the_one_with_capacity(stage: Stage) -> None:
    full = await stage.add_site(spec("east", 41, workflow_nodes=0))
    free = await stage.add_site(spec("west", 42))
    for site in (full, free):
        site.start_listener(capacity=site.capacity_settings(proactive=2), max_runners=8)
    await warm(free, 2)
    await full.wait_for(lambda: full.advertised() == 0, "east advertising 0", 30)

    jobs = stage.fake.add_jobs(8, labels=["linux"])
    await free.wait_for(
        lambda: all(j.state is JobState.COMPLETED for j in jobs), "all jobs done in west", 120
    )
    assert {j.scale_set_id for j in jobs} == {free.scale_set_id}
    assert stage.fake.jobs_of(full.scale_set_id) == []
    assert stage.fake.stranded() == []


async def test_listener_restart_mid_burst_loses_and_duplicates_nothing(stage: Stage) -> None:
    site = await stage.add_site(spec("restart", 51))
    capacity = site.capacity_settings(proactive=3)
    first = site.start_listener(capacity=capacity, max_runners=6)
    await warm(site, 3)
    first_session = stage.fake.session(site.scale_set_id)
    assert first_session is not None

    jobs = stage.fake.add_jobs(10, labels=["linux"])
    await site.wait_for(
        lambda: sum(j.state is not JobState.QUEUED for j in jobs) >= 2, "the burst to start", 60
    )
    assert await first.stop() == 0
    assert first_session.deleted
    assert stage.fake.expired_sessions == []

    site.start_listener(capacity=capacity, max_runners=6)
    await site.wait_session()
    assert stage.fake.sessions_created == 2
    await site.wait_for(
        lambda: all(j.state is JobState.COMPLETED for j in jobs), "the whole burst", 150
    )
    assert all(j.result == "succeeded" for j in jobs)
    assert stage.fake.stranded() == []
    # Each job was assigned once; every message was delivered and acknowledged exactly once.
    assert stage.fake.counters(site.scale_set_id)["assigned"] == 10
    scale_set = stage.fake.scale_sets[site.scale_set_id]
    await site.wait_for(lambda: not scale_set.messages, "every message acked", 10)
    acked = Counter(message_id for set_id, message_id in stage.fake.acks if set_id == 51)
    assert set(acked.values()) == {1}
    assert set(acked) == set(range(1, scale_set.next_message_id))


async def test_hud_outage_falls_back_to_the_floor(stage: Stage) -> None:
    hud = stage.hud
    assert hud is not None
    site = await stage.add_site(spec("hud", 61))
    # On demand only: pairs follow HUD's queued jobs; on failure the floor (2) applies.
    capacity = site.capacity_settings(proactive=0, hud=True)
    site.start_listener(capacity=capacity, max_runners=8)
    await site.wait_session()
    # Until HUD first answers the floor applies; a healthy empty queue then shrinks to 0
    # (after the downscale delay). Two answers at least: right after the start, before the
    # first pass has made the floor's pairs, there are none either.
    await site.wait_for(
        lambda: len(hud.requests) >= 2 and site.advertised() == 0 and not site.placeholders,
        "no pairs while HUD is empty",
        40,
    )
    assert all(r.status == 200 for r in hud.requests)

    hud.outage(Outage.SERVER_ERROR)
    await warm(site, 2)
    assert hud.requests[-1].status == 503

    jobs = stage.fake.add_jobs(2, labels=["linux"])
    await site.wait_for(
        lambda: all(j.state is JobState.COMPLETED for j in jobs), "jobs on the floor", 90
    )
    assert stage.fake.stranded() == []


async def test_max_runners_zero_stops_new_assignments(stage: Stage) -> None:
    site = await stage.add_site(spec("drain", 71))
    capacity = site.capacity_settings(proactive=2)
    first = site.start_listener(capacity=capacity, max_runners=4)
    await warm(site, 2)

    # ARC restarts the listener with the new config when the scale set's spec changes.
    assert await first.stop() == 0
    site.start_listener(capacity=capacity, max_runners=0)
    await site.wait_session()
    second = stage.fake.session(site.scale_set_id)
    assert second is not None
    jobs = stage.fake.add_jobs(3, labels=["linux"])
    await asyncio.sleep(5.0)
    assert states(jobs) == {"queued": 3}
    assert {p.capacity for p in stage.fake.polls if p.session_id == second.session_id} == {0}
    await site.wait_for(lambda: not site.placeholders, "placeholders removed", 30)
    assert stage.fake.stranded() == []
