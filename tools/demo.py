"""The local demo (``make demo`` / ``python -m tools.demo``): the whole product working
without GitHub, in about two minutes.

By default the story runs on two clusters whose nodes come from Karpenter
(``demo_karpenter``); ``--static-nodes`` runs the one-cluster story below on hand-made kwok
nodes (no Karpenter build needed).

What runs: a local Kubernetes control plane with fake kwok nodes (a runner pool and a workflow
pool), a fake GitHub + Actions service and a fake HUD, the runner stand-in (test
infrastructure playing ARC's controllers and the runners) and OUR LISTENER as a real process
with capacity-awareness on.

The story, printed live once a second:
1. warm-up: two placeholder pairs become Running; the listener advertises 2;
2. burst: 16 jobs arrive for 8 workflow slots; HUD sees the queue and pairs are requested for
   it (Pending pairs are what a node autoscaler would provision for); GitHub hands out only
   capacity the scheduler confirmed, the rest waits on GitHub's queue (where another cluster
   could take it) — not stranded inside this one;
3. capacity loss: the whole workflow pool is reclaimed; the header drops to 0 at once, 4 new
   jobs stay queued instead of being stranded; capacity returns and they run.

Exit status 0 when every job ran and none was stranded, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tools import demo_karpenter
from tools.control_plane import local_control_plane, new_workdir
from tools.e2e_site import Pool, Site, SiteSpec, Stage
from tools.fake_actions import FakeActions, FakeJob, JobState
from tools.waits import WaitFailed, wait_until

PAT = "ghp_e2e_fake_token"
WORKFLOW_SLOTS = 8  # 2 workflow nodes x 4 CPU, workflow pods request 1 CPU


def _out(line: str = "") -> None:
    print(line, flush=True)


class Demo:
    def __init__(self, stage: Stage, site: Site, started: float) -> None:
        self.stage = stage
        self.site = site
        self.started = started
        self.phase = "setup"
        self.max_header = 0
        self.max_workflow_pending = 0
        self.headers_seen: list[tuple[float, int | None]] = []

    def line(self) -> str:
        view = self.site.view()
        fake = self.stage.fake
        queued = len(fake.queued())
        self.max_header = max(self.max_header, view.advertised or 0)
        self.max_workflow_pending = max(self.max_workflow_pending, view.workflow_pending)
        header = "-" if view.advertised is None else str(view.advertised)
        return (
            f"{time.monotonic() - self.started:5.0f}s {self.phase:<14}"
            f" header {header:>2} | pairs {view.pairs_running:>2} run {view.pairs_pending:>2} pend"
            f" {view.pairs_broken:>2} broken"
            f" | runners {view.runners:>2} ({view.runners_busy} busy)"
            f" | workflow pods {view.workflow_running:>2} run {view.workflow_pending:>2} pend"
            f" | jobs queued {queued:>2} assigned {view.assigned:>2} running {view.running:>2}"
            f" done {view.completed:>2} stranded {view.stranded}"
        )

    async def ticker(self) -> None:
        while True:
            _out(self.line())
            await asyncio.sleep(1.0)


def _all_done(jobs: list[FakeJob]) -> Callable[[], bool]:
    return lambda: all(j.state is JobState.COMPLETED for j in jobs)


async def run_demo(workdir: Path, *, burst: int, job_seconds: float) -> int:
    started = time.monotonic()
    with local_control_plane(workdir / "cluster", progress=_out) as cluster:
        # The real service holds a long poll ~50 s; the listener re-issues it when capacity
        # changes, which is what keeps the header current.
        fake = FakeActions(pats=[PAT], poll_hold=50.0, strand_grace=10.0, broker=True)
        async with Stage(cluster, workdir / "stage", fake=fake, prefix="demo") as stage:
            spec = SiteSpec(
                name="demo-linux",
                scale_set_id=1,
                runner_pool=Pool(nodes=1, cpu="16", memory="32Gi"),
                workflow_pool=Pool(nodes=2, cpu="4", memory="16Gi"),
                job_seconds=job_seconds,
                strand_after=8.0,
            )
            _out("creating fake nodes, the EphemeralRunnerSet and the runner stand-in ...")
            site = await stage.add_site(spec)
            listener = site.start_listener(
                capacity=site.capacity_settings(proactive=2, hud=True, hud_floor=0), max_runners=12
            )
            _out(f"listener pid {listener.pid}, log {listener.log_path}")
            _out(f"metrics: {listener.metrics_url}")
            _out(f"fake Actions service: {fake.url}  (state: {fake.url}/_fake/state)")
            _out("")
            demo = Demo(stage, site, started)
            ticker = asyncio.get_running_loop().create_task(demo.ticker())
            try:
                return await _story(demo, stage, site, burst)
            finally:
                ticker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await ticker
                _out("")
                _out("cleaning up: SIGTERM to the listener, deleting pods, nodes, namespace ...")


async def _story(demo: Demo, stage: Stage, site: Site, burst: int) -> int:
    fake = stage.fake
    demo.phase = "warm-up"
    await wait_until(
        lambda: site.advertised() == 2 and site.view().pairs_running == 2,
        "2 warm pairs",
        90,
        [demo.site],
    )

    demo.phase = "burst"
    _out(f"--- burst: {burst} jobs for {WORKFLOW_SLOTS} workflow slots")
    burst_jobs = fake.add_jobs(burst, labels=["linux"])
    await wait_until(_all_done(burst_jobs), "the burst to finish", 150, [demo.site])

    demo.phase = "capacity-loss"
    _out("--- capacity loss: the workflow pool is reclaimed (no replacement available)")
    await site.remove_nodes("workflow")
    await wait_until(lambda: site.advertised() == 0, "the header to drop to 0", 30, [demo.site])
    late = fake.add_jobs(4, labels=["linux"])
    _out("--- 4 more jobs arrive while there is no capacity")
    await asyncio.sleep(10.0)
    held_queued = sum(j.state is JobState.QUEUED for j in late)

    demo.phase = "recovered"
    _out("--- capacity is back: 2 new workflow nodes")
    await site.add_nodes("workflow", 2)
    await wait_until(_all_done(late), "the late jobs to finish", 90, [demo.site])
    _out(demo.line())
    return _summary(demo, stage, site, burst_jobs + late, held_queued)


def _summary(demo: Demo, stage: Stage, site: Site, jobs: list[FakeJob], held: int) -> int:
    fake = stage.fake
    stranded = fake.stranded()
    waits = sorted(
        j.workflow_started_at - j.history[0][0] for j in jobs if j.workflow_started_at is not None
    )
    succeeded = sum(j.result == "succeeded" for j in jobs)
    _out("")
    _out("=== summary")
    _out(f"jobs: {len(jobs)}, {succeeded} succeeded, {len(stranded)} stranded")
    _out(
        f"highest header sent: {demo.max_header} (workflow slots: {WORKFLOW_SLOTS}); "
        f"most workflow pods Pending at once: {demo.max_workflow_pending}"
    )
    _out(f"during the capacity loss {held} of 4 new jobs stayed on GitHub's queue")
    if waits:
        _out(
            f"queue → workflow pod Running: median {waits[len(waits) // 2]:.1f}s, "
            f"max {waits[-1]:.1f}s"
        )
    polls = fake.capacity_history(site.scale_set_id)
    _out(f"long polls issued: {len(polls)}; sessions: {fake.sessions_created}")
    ok = not stranded and succeeded == len(jobs)
    _out("result: OK — no job was stranded" if ok else "result: FAILED")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.demo", description=__doc__)
    parser.add_argument("--burst", type=int, default=None, help="jobs in the burst (12; 16)")
    parser.add_argument("--job-seconds", type=float, default=6.0, help="job duration (6)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep logs here")
    parser.add_argument(
        "--static-nodes",
        action="store_true",
        help="one cluster on hand-made kwok nodes instead of two on Karpenter",
    )
    args = parser.parse_args(argv)
    workdir = args.workdir or new_workdir("capacity-listener-demo")
    try:
        if args.static_nodes:
            _out("capacity-listener demo: local control plane + fake GitHub + our listener")
            _out(f"work directory (logs): {workdir}")
            story = run_demo(workdir, burst=args.burst or 16, job_seconds=args.job_seconds)
        else:
            _out("capacity-listener demo: two clusters on Karpenter + fake GitHub + our listener")
            _out(f"work directory (logs): {workdir}")
            story = demo_karpenter.run_karpenter_demo(
                workdir, burst=args.burst or 12, job_seconds=args.job_seconds
            )
        code = asyncio.run(story)
        _out("all demo processes stopped")
        return code
    except WaitFailed as exc:
        _out(f"demo failed: {exc}")
        return 1
    except KeyboardInterrupt:
        _out("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
