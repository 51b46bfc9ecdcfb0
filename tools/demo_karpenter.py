"""The demo on Karpenter (``make demo``): two clusters share GitHub's queue, every node comes
from Karpenter (kwok cloud provider, nodes register 10 s after launch).

What runs: a local control plane with Karpenter, a fake GitHub + Actions service and a fake
HUD, and per cluster ("site-a", "site-b") a runner NodePool and a workflow NodePool (site-a's
workflow type is ``w-4x``, site-b's ``c-4x``), the runner stand-in (test infrastructure
playing ARC's controllers and the runners) and OUR LISTENER as a real process with
capacity-awareness on (one warm pair per cluster, HUD demand).

The story, printed live every two seconds:
1. warm-up: Karpenter launches nodes for the placeholders; each header rises to 1;
2. burst: jobs arrive; HUD sees them, pairs are created, Karpenter launches nodes for them,
   the headers rise as pairs become Running, and the jobs run;
3. insufficient capacity in site-a: its workflow nodes are reclaimed and its workflow type
   has no cloud capacity; site-a's header drops to 0 and new jobs run in site-b;
4. capacity back, the queue drains, and Karpenter consolidates the idle nodes.

Exit status 0 when every job ran and none was stranded, 1 otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path

from tools.control_plane import local_control_plane
from tools.e2e_karpenter import (
    NodeClaimLog,
    create_site_nodepools,
    delete_nodepools,
    ensure_karpenter,
    nodepool_name,
    reset_cloud,
)
from tools.e2e_site import Pool, Site, SiteSpec, Stage
from tools.fake_actions import FakeActions, FakeJob, JobState
from tools.localcluster.karpenter import (
    NODECLAIMS,
    NODEPOOL_LABEL,
    WORKFLOW_TYPE,
    Karpenter,
)
from tools.waits import wait_until

PAT = "ghp_e2e_fake_token"
REGISTRATION_DELAY = "10s"
RUNNER_REQUESTS = {"cpu": "900m", "memory": "1Gi"}
WORKFLOW_REQUESTS = {"cpu": "1900m", "memory": "3Gi"}
SITE_TYPES = (
    {"runner": ("c-2x",), "workflow": (WORKFLOW_TYPE,)},
    {"runner": ("c-2x",), "workflow": ("c-4x",)},
)


def _out(line: str = "") -> None:
    print(line, flush=True)


class KarpenterDemo:
    def __init__(self, stage: Stage, sites: list[Site], log: NodeClaimLog) -> None:
        self.stage = stage
        self.sites = sites
        self.log = log
        self.started = time.monotonic()
        self.phase = "warm-up"
        self.max_header = [0 for _ in sites]
        self.max_nodes = 0

    def nodes(self, site: Site, pool: str) -> int:
        counts = self.log.counts[-1][1] if self.log.counts else {}
        return counts.get(nodepool_name(site, pool), 0)

    def line(self) -> str:
        parts = [f"{time.monotonic() - self.started:5.0f}s {self.phase:<12}"]
        total = 0
        for i, site in enumerate(self.sites):
            view = site.view()
            header = "-" if view.advertised is None else str(view.advertised)
            self.max_header[i] = max(self.max_header[i], view.advertised or 0)
            runner, workflow = self.nodes(site, "runner"), self.nodes(site, "workflow")
            total += runner + workflow
            parts.append(
                f"{site.spec.name[-1].upper()}: header {header:>2} pairs {view.pairs_running}"
                f"+{view.pairs_pending}p jobs {view.running:>2} nodes r{runner} w{workflow}"
            )
        self.max_nodes = max(self.max_nodes, total)
        fake = self.stage.fake
        parts.append(f"queued {len(fake.queued()):>2} done {self._done():>2}")
        return " | ".join(parts)

    def _done(self) -> int:
        return sum(j.state is JobState.COMPLETED for j in self.stage.fake.jobs.values())

    async def ticker(self) -> None:
        while True:
            _out(self.line())
            await asyncio.sleep(2.0)


def _all_done(jobs: list[FakeJob]) -> Callable[[], bool]:
    return lambda: all(j.state is JobState.COMPLETED for j in jobs)


async def run_karpenter_demo(workdir: Path, *, burst: int, job_seconds: float) -> int:
    with local_control_plane(workdir / "cluster", progress=_out) as cluster:
        karpenter = await asyncio.to_thread(ensure_karpenter, cluster, _out)
        karpenter.set_registration_delay(REGISTRATION_DELAY)
        fake = FakeActions(pats=[PAT], poll_hold=50.0, strand_grace=30.0, broker=True)
        pools: list[str] = []
        try:
            async with Stage(cluster, workdir / "stage", fake=fake, prefix="demo") as stage:
                _out("creating two clusters' NodePools, EphemeralRunnerSets and stand-ins ...")
                sites = []
                for index, name in enumerate(("site-a", "site-b")):
                    site = await stage.add_site(
                        SiteSpec(
                            name=name,
                            scale_set_id=1 + index,
                            runner_pool=Pool(nodes=0),
                            workflow_pool=Pool(nodes=0),
                            runner_requests=RUNNER_REQUESTS,
                            workflow_requests=WORKFLOW_REQUESTS,
                            job_seconds=job_seconds,
                            strand_after=30.0,
                        )
                    )
                    pools += await asyncio.to_thread(
                        create_site_nodepools,
                        karpenter,
                        site,
                        SITE_TYPES[index],
                        consolidate_after="5s",
                    )
                    sites.append(site)
                for site in sites:
                    settings = site.capacity_settings(
                        proactive=1,
                        hud=True,
                        hud_floor=0,
                        placeholder_ready_timeout="40s",
                        downscale_delay="5s",
                    )
                    listener = site.start_listener(capacity=settings, max_runners=8)
                    _out(f"{site.spec.name}: listener pid {listener.pid}, log {listener.log_path}")
                _out(f"fake Actions service: {fake.url}  (state: {fake.url}/_fake/state)")
                _out(
                    "columns per cluster: header sent | Running+pending pairs | jobs running "
                    "| Karpenter nodes (runner, workflow)"
                )
                _out("")
                log = NodeClaimLog(cluster, pools, interval=1.0).start()
                demo = KarpenterDemo(stage, sites, log)
                ticker = asyncio.get_running_loop().create_task(demo.ticker())
                try:
                    return await _story(demo, stage, sites, karpenter, burst)
                finally:
                    ticker.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await ticker
                    await log.stop()
                    _out("")
                    _out("cleaning up: SIGTERM to the listeners, deleting pods, namespaces ...")
        finally:
            _out("deleting the NodePools; Karpenter removes their nodes ...")
            await asyncio.to_thread(delete_nodepools, karpenter, pools)
            await asyncio.to_thread(reset_cloud, karpenter)


async def _story(
    demo: KarpenterDemo, stage: Stage, sites: list[Site], karpenter: Karpenter, burst: int
) -> int:
    fake = stage.fake
    a = sites[0]
    await wait_until(
        lambda: all(s.advertised() == 1 for s in sites),
        "one warm pair Running per cluster (Karpenter launches nodes for them)",
        90,
        demo.sites,
    )
    warm_at = time.monotonic() - demo.started

    demo.phase = "burst"
    _out(f"--- burst: {burst} jobs; HUD sees them, pairs are created, Karpenter launches nodes")
    burst_jobs = fake.add_jobs(burst, labels=["linux"])
    await wait_until(_all_done(burst_jobs), "the burst to finish", 150, demo.sites)

    demo.phase = "shortage"
    _out(f"--- site-a: its workflow nodes are reclaimed and {WORKFLOW_TYPE} has no capacity")
    karpenter.set_capacity(insufficient=[WORKFLOW_TYPE])
    before = {c.name for c in demo.log.claims.values() if not c.gone}
    await asyncio.to_thread(
        karpenter.cluster.rest.request,
        "DELETE",
        NODECLAIMS,
        params={"labelSelector": f"{NODEPOOL_LABEL}={nodepool_name(a, 'workflow')}"},
    )
    await wait_until(lambda: a.advertised() == 0, "site-a's header to drop to 0", 60, demo.sites)
    shortage_started = time.time()
    late = fake.add_jobs(6, labels=["linux"])
    _out("--- 6 more jobs arrive while site-a has no workflow capacity")
    await wait_until(_all_done(late), "the late jobs to finish", 120, demo.sites)
    failed_launches = sum(
        1
        for c in demo.log.claims.values()
        if c.pool == nodepool_name(a, "workflow")
        and c.created >= shortage_started - 5
        and not c.launched
        and c.name not in before
    )

    demo.phase = "restored"
    _out(f"--- {WORKFLOW_TYPE} capacity is back; Karpenter consolidates idle nodes")
    karpenter.set_capacity()
    peak = demo.max_nodes
    # Any node alive now that goes counts, also one removed while site-a's pair comes back:
    # comparing node counts after that wait missed a removal during it, and a launch for the
    # pair could hide one after it.
    alive = {c.name for c in demo.log.claims.values() if not c.gone}
    await wait_until(lambda: a.advertised() == 1, "site-a's warm pair again", 60, demo.sites)
    await wait_until(
        lambda: any(demo.log.claims[name].gone for name in alive),
        "Karpenter to remove an idle node",
        90,
        demo.sites,
    )
    await _settle(demo, quiet=10.0, within=45.0)
    _out(demo.line())
    return _summary(demo, stage, burst_jobs, late, warm_at, failed_launches, peak)


async def _settle(demo: KarpenterDemo, *, quiet: float, within: float) -> None:
    """Until the node count has not changed for ``quiet`` seconds (consolidation removes
    nodes in rounds), at most ``within`` seconds."""
    deadline = time.monotonic() + within
    last, since = _live_nodes(demo), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet:
        await asyncio.sleep(0.5)
        if (now := _live_nodes(demo)) != last:
            last, since = now, time.monotonic()


def _live_nodes(demo: KarpenterDemo) -> int:
    return sum(demo.nodes(site, pool) for site in demo.sites for pool in ("runner", "workflow"))


def _summary(
    demo: KarpenterDemo,
    stage: Stage,
    burst: list[FakeJob],
    late: list[FakeJob],
    warm_at: float,
    failed_launches: int,
    peak: int,
) -> int:
    fake = stage.fake
    jobs = burst + late
    stranded = fake.stranded()
    a, b = demo.sites
    waits = sorted(
        j.workflow_started_at - j.history[0][0] for j in jobs if j.workflow_started_at is not None
    )
    succeeded = sum(j.result == "succeeded" for j in jobs)
    launched = sum(1 for c in demo.log.claims.values() if c.launched)
    _out("")
    _out("=== summary")
    _out(f"jobs: {len(jobs)}, {succeeded} succeeded, {len(stranded)} stranded")
    _out(f"warm pairs Running in both clusters after {warm_at:.0f}s (node launch + registration)")
    _out(
        f"highest header sent: site-a {demo.max_header[0]}, site-b {demo.max_header[1]}; "
        f"most Karpenter nodes at once: {peak}"
    )
    _out(
        f"during site-a's shortage: {failed_launches} launches failed with insufficient "
        f"capacity; the {len(late)} new jobs ran in site-a "
        f"{sum(j.scale_set_id == a.scale_set_id for j in late)}, site-b "
        f"{sum(j.scale_set_id == b.scale_set_id for j in late)}"
    )
    _out(
        f"Karpenter launched {launched} nodes in all; {_live_nodes(demo)} left after consolidation"
    )
    if waits:
        _out(
            f"queue → workflow pod Running: median {waits[len(waits) // 2]:.1f}s, "
            f"max {waits[-1]:.1f}s (nodes register {REGISTRATION_DELAY} after launch)"
        )
    ok = not stranded and succeeded == len(jobs)
    _out("result: OK — no job was stranded" if ok else "result: FAILED")
    return 0 if ok else 1
