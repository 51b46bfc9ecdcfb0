"""Demand sharding end to end: two clusters serve the same labels from one job queue and one
HUD. Each pre-provisions for its share of the fresh jobs, so a queue of N jobs costs about N
pairs in total, not 2N; jobs queued longer than the age threshold are claimed by both, so when
one cluster's listener is gone the other picks its share up and the jobs run.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tools.e2e_site import Pool, Site, SiteSpec, Stage
from tools.fake_actions import JobState

AGED_AFTER_S = 60.0  # HUD counts queue time in whole minutes: one minute is the shortest


def spec(name: str, scale_set_id: int) -> SiteSpec:
    # Room for 8 workflow pods per cluster, so capacity is never what limits the pairs.
    return SiteSpec(
        name=name,
        scale_set_id=scale_set_id,
        workflow_pool=Pool(nodes=2, cpu="4"),
        job_seconds=3.0,
    )


def sharded(site: Site, index: int, count: int = 2) -> dict[str, Any]:
    return site.capacity_settings(
        proactive=0,
        hud=True,
        hud_floor=0,
        demand={"cluster_index": index, "cluster_count": count, "aged_after": "1m"},
        # Pairs are counted exactly: a slow start must not be deleted and made again.
        placeholder_ready_timeout="60s",
    )


def pairs_created(site: Site, since: float) -> int:
    """Placeholder pairs this cluster created after `since` (wall clock), from the watch."""
    return sum(
        1
        for e in site.placeholder_events
        if e.kind == "ADDED" and e.role == "placeholder-runner" and e.wall >= since
    )


async def idle(site: Site) -> None:
    await site.wait_session()
    await site.wait_for(
        lambda: site.advertised() == 0 and not site.placeholders,
        f"{site.spec.name}: no pairs while the queue is empty",
        40,
    )


async def test_two_clusters_share_a_queue_without_doubling_the_pairs(stage: Stage) -> None:
    east = await stage.add_site(spec("east", 81))
    west = await stage.add_site(spec("west", 82))
    for index, site in enumerate((east, west)):
        site.start_listener(capacity=sharded(site, index), max_runners=8)
    for site in (east, west):
        await idle(site)
    assert stage.hud is not None

    # First HUD alone shows the queue: both clusters must see it before either can be handed
    # a job. Otherwise the first cluster to poll HUD advertises its half, takes those jobs,
    # plans its half of what is left, and can drain the queue before its peer polls once
    # (CI: 8 jobs gone in 1.2 s, a HUD poll every 2 s), so the peer rightly plans nothing.
    n = 8
    since = time.time()
    stage.hud.set_queued("linux", n, min_minutes=0, max_minutes=0)
    await east.wait_for(
        lambda: all(pairs_created(s, since) >= n // 2 for s in (east, west)),
        "both clusters to plan their halves",
        40,
    )
    await asyncio.sleep(3)  # a HUD poll or more later, neither has planned the other's half
    planned = {s.spec.name: pairs_created(s, since) for s in (east, west)}
    assert planned == {"east": n // 2, "west": n // 2}, planned

    # Then the jobs themselves, in the same step as the rows go, so HUD never counts both.
    stage.hud.clear_rows()
    jobs = stage.fake.add_jobs(n, labels=["linux"])
    await east.wait_for(
        lambda: all(j.state is JobState.COMPLETED for j in jobs), "the queue to drain", 120
    )
    assert stage.fake.stranded() == []
    created = {s.spec.name: pairs_created(s, since) for s in (east, west)}
    # Pairs re-made while a consumed one's job still shows as queued add a little, never a
    # second copy of the queue.
    assert sum(created.values()) <= n + n // 4, created
    # Which cluster ran which job is not asserted: the headers route the queue to whichever
    # cluster confirmed capacity first, and on a loaded machine one cluster's pairs can all
    # become Running (and be re-made) before the other's.


async def test_a_stopped_clusters_share_is_claimed_by_its_peer_once_aged(stage: Stage) -> None:
    down = await stage.add_site(spec("down", 83))
    up = await stage.add_site(spec("up", 84))
    # `down` has index 0, so a lone fresh job is its share (the remainder goes to index 0)
    # and `up` (index 1) plans nothing for it until the job has aged.
    stopped = down.start_listener(capacity=sharded(down, 0), max_runners=8)
    up.start_listener(capacity=sharded(up, 1), max_runners=8)
    for site in (down, up):
        await idle(site)
    assert await stopped.stop() == 0

    (job,) = stage.fake.add_jobs(1, labels=["linux"])
    queued_at = time.monotonic()
    # Fresh: not `up`'s share. It stays queued, with no pair and a header of 0.
    await up.wait_for(lambda: time.monotonic() - queued_at > AGED_AFTER_S - 15, "fresh", 60)
    assert job.state is JobState.QUEUED
    assert up.advertised() == 0
    assert pairs_created(up, 0.0) == 0
    # Aged: every peer claims it, `up` makes a pair, advertises it and the job runs there.
    await up.wait_for(lambda: job.state is JobState.COMPLETED, "the aged job to run", 90)
    assert job.scale_set_id == up.scale_set_id
    assert job.claimed_at is not None
    assert job.claimed_at - queued_at >= AGED_AFTER_S
    assert pairs_created(up, 0.0) >= 1
    assert stage.fake.stranded() == []
