"""Warm pools end to end on the real Karpenter (kwok provider, nodes register 10 s after
launch): a scheduled pool's floor rises at its window start and pairs on new nodes follow; a
fixed pool holds its pairs after a burst of jobs, when nothing is queued any more.

The listener is the real process; GitHub and HUD are the fakes. The NodePools and their
clean-up are those of test_karpenter_capacity.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta

from tests.e2e.test_karpenter_capacity import MakePools, pools, settings, spec, warm
from tools.e2e_site import Site, Stage
from tools.fake_actions import JobState
from tools.listener_process import metric_value
from tools.localcluster.karpenter import Karpenter

__all__ = ["pools"]  # the fixture, used by name


async def warm_target(site: Site) -> float | None:
    listener = site.listener
    assert listener is not None
    return metric_value(await listener.metrics_text(), "gha_capacity_warm_pool_target")


async def test_scheduled_floor_rises_at_the_window_start_and_pairs_follow(
    stage: Stage, karpenter: Karpenter, pools: MakePools
) -> None:
    site = await stage.add_site(spec("scheduled", 95))
    await pools(site)
    # A window that opens at the next whole minute at least 20 s away (windows have minutes).
    opens = (datetime.now(UTC) + timedelta(seconds=80)).replace(second=0, microsecond=0)
    closes = opens + timedelta(hours=1)
    window = f"Mon-Sun {opens:%H:%M}-{closes:%H:%M} UTC"
    capacity = settings(
        site,
        proactive=0,
        warm_pool={"mode": "scheduled", "schedule": [{"window": window, "floor": 2}]},
    )
    site.start_listener(capacity=capacity, max_runners=8)
    await site.wait_session()

    # Before the window: no pair, nothing advertised.
    while time.time() < opens.timestamp() - 3:
        assert site.view().pairs_running == 0
        assert site.advertised() == 0
        await asyncio.sleep(1.0)
    assert await warm_target(site) == 0

    # From the window start: two pairs, on nodes Karpenter launches for them.
    await warm(site, 2, within=90)
    ready_after = time.time() - opens.timestamp()
    assert await warm_target(site) == 2
    print(json.dumps({"scheduled_pairs_ready_after_window_start_s": round(ready_after, 1)}))


async def test_fixed_pool_holds_its_pairs_after_a_burst(
    stage: Stage, karpenter: Karpenter, pools: MakePools
) -> None:
    site = await stage.add_site(spec("fixed", 96))
    await pools(site)
    capacity = settings(site, proactive=2, hud=True, hud_floor=0)
    site.start_listener(capacity=capacity, max_runners=8)
    await site.wait_session()
    await warm(site, 2, within=90)
    assert await warm_target(site) == 2

    # A burst: one workflow run's matrix of four jobs. Demand brings pairs for them on top of
    # the pool; the jobs take ready pairs first.
    jobs = stage.fake.add_jobs(4, labels=["linux"])
    await site.wait_for(
        lambda: all(j.state is JobState.COMPLETED for j in jobs), "the burst to run", 150
    )
    assert all(j.result == "succeeded" for j in jobs)
    assert await warm_target(site) == 2
    # Nothing is queued any more, yet confirmed capacity for the pool stays ready for the
    # next burst. Counted as the advertised value, not as whole Running pairs: after the
    # hand-off some pairs are broken (a runner half given up for the runners, its workflow
    # half kept), and a broken pair's surviving half still counts on its side until the
    # downscale delay, so the monitor does not make a new pair beside it.
    await site.wait_for(lambda: (site.advertised() or 0) >= 2, "2 pairs' capacity advertised", 90)
    assert stage.fake.stranded() == []
