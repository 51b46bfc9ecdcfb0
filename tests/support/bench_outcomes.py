"""The outcome benchmark (``make bench`` section ``outcomes``): one job trace, four listeners.

Two clusters (two Sites on one control plane) share GitHub's queue. Each has a runner pool
and a workflow pool, each a Karpenter NodePool with its own instance types, so every node is
launched by Karpenter (kwok cloud provider) with a node-registration delay, and removed by its
consolidation. Site A's workflow type runs out of cloud capacity for a while (Karpenter's
insufficient-capacity error on launch). The same trace is run once per variant:

* ``stock``: ARC's behaviour — the static header ``max_runners``, no placeholders;
* ``demand``: ours, pairs only for queued jobs (``proactive_capacity: 0``, HUD demand, the
  queue sharded between the two clusters);
* ``demand_unsharded``: the same without sharding: each cluster holds pairs for the whole
  queue, so the two together hold two for every queued job (what sharding saves);
* ``warm_pool``: ours with ``proactive_capacity: N`` idle pairs per cluster as well.

Per variant: jobs stranded, queue → workflow pod Running (p50/p90/max), node-seconds per
pool (NodeClaim lifetimes), placeholder pod-seconds, pairs created and re-created, Karpenter
launches; every figure also as a ratio to stock from the same run, and the sharded demand
variant's as a ratio to the unsharded one. One timeline picture per variant (PNG) is written
too.

What it does not model: image pulls and container start (kwok runs pods at once), real
cloud latency and its variance (one fixed registration delay), node boot and kubelet
registration beyond that delay, prices (node-seconds are counted, not priced).

Size: one benchmark: the trace, the variants, the measurements taken while it runs and the
figures computed from them are read together when a number looks wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.e2e_karpenter import (
    NodeClaimLog,
    create_site_nodepools,
    delete_nodepools,
    ensure_karpenter,
    nodepool_name,
    reset_cloud,
)
from tests.support.e2e_site import Pool, Site, SiteSpec, Stage
from tests.support.fake_actions import FakeActions, FakeJob, JobState
from tests.support.listener_process import metric_value
from tests.support.localcluster import LocalCluster
from tests.support.localcluster.karpenter import WORKFLOW_TYPE, Karpenter
from tests.support.stats import percentile
from tests.support.waits import wait_until

PAT = "ghp_e2e_fake_token"
LONG_POLL = 50.0
ROUND = 2
VARIANTS = ("stock", "demand", "demand_unsharded", "warm_pool")
# Column headers of the README table.
HEADERS = {
    "stock": "stock",
    "demand": "demand, sharded",
    "demand_unsharded": "demand, unsharded",
    "warm_pool": "warm pool (sharded)",
}
# Runner pods fit two to a 2-CPU node; workflow pods two to a 4-CPU node, in either cluster.
RUNNER_REQUESTS = {"cpu": "900m", "memory": "1Gi"}
WORKFLOW_REQUESTS = {"cpu": "1900m", "memory": "3Gi"}
# Site A's workflow pool uses the type that runs out; site B's workflow pool another one.
SITE_TYPES: tuple[dict[str, tuple[str, ...]], ...] = (
    {"runner": ("c-2x",), "workflow": (WORKFLOW_TYPE,)},
    {"runner": ("c-2x",), "workflow": ("c-4x",)},
)
SITE_NAMES = ("site-a", "site-b")
# Deletions of pairs that never served a job and were made again (model.DeleteReason):
# timed out Pending, evicted (Finished), or on a node being disrupted/cordoned.
RECREATE_REASONS = ("timeout", "finished", "unusable")
DELETE_REASONS = ("timeout", "excess", "broken", "expired", "finished", "orphan", "unusable")


def _say(line: str) -> None:
    print(f"bench: {line}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Wave:
    at: float  # seconds after the trace starts
    durations: tuple[float, ...]  # one job each


@dataclass(frozen=True)
class Trace:
    waves: tuple[Wave, ...]
    shortage: tuple[float, float]  # site A's workflow type has no cloud capacity in [from, to)
    quiet: float  # watched after the last job finished (consolidation)
    cap: float  # the trace ends here at the latest
    registration_delay: float = 30.0
    # A claimed job whose workflow pod waited longer than this is counted as stranded: a new
    # node takes the registration delay plus Karpenter's batching (about a second).
    strand_grace: float = 40.0
    max_runners: int = 10
    warm_pairs: int = 2

    def describe(self) -> dict[str, Any]:
        return {
            "waves": [{"at_s": w.at, "job_seconds": list(w.durations)} for w in self.waves],
            "jobs": sum(len(w.durations) for w in self.waves),
            "insufficient_capacity": {
                "site": SITE_NAMES[0],
                "instance_type": WORKFLOW_TYPE,
                "from_s": self.shortage[0],
                "to_s": self.shortage[1],
            },
            "quiet_after_last_job_s": self.quiet,
            "node_registration_delay_s": self.registration_delay,
            "strand_grace_s": self.strand_grace,
            "max_runners_per_site": self.max_runners,
            "warm_pairs_per_site": self.warm_pairs,
            "instance_types": {
                name: {k: list(v) for k, v in types.items()}
                for name, types in zip(SITE_NAMES, SITE_TYPES, strict=True)
            },
            "requests": {"runner": RUNNER_REQUESTS, "workflow": WORKFLOW_REQUESTS},
        }


# The first wave's jobs are long, so site A's workflow nodes are all busy when its
# workflow type runs out and the second wave arrives: new workflow pods there need new nodes.
TRACE = Trace(
    waves=(
        Wave(0.0, (60.0, 65.0, 70.0, 75.0, 60.0, 70.0)),
        Wave(45.0, (15.0, 20.0, 25.0, 30.0, 35.0, 40.0, 45.0, 20.0)),
        Wave(100.0, (20.0, 25.0, 30.0, 35.0)),
    ),
    shortage=(40.0, 100.0),
    quiet=30.0,
    cap=300.0,
)


@dataclass
class Point:
    """One timeline sample (seconds since the trace started)."""

    t: float
    queued: int
    header: list[int | None]
    pairs_running: list[int]
    assigned: list[int]
    running: list[int]


@dataclass
class VariantRun:
    name: str
    sites: list[Site]
    log: NodeClaimLog
    start_wall: float = 0.0
    start_mono: float = 0.0
    end_wall: float = 0.0
    points: list[Point] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    jobs: list[FakeJob] = field(default_factory=list)


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, ROUND)


# ---------------------------------------------------------------------- the benchmark


async def outcomes(
    cluster: LocalCluster, workdir: Path, images: Path | None, trace: Trace = TRACE
) -> dict[str, Any]:
    karpenter = await asyncio.to_thread(ensure_karpenter, cluster, _say)
    images = images or workdir / "outcomes"
    images.mkdir(parents=True, exist_ok=True)
    delay = f"{trace.registration_delay:g}s"
    karpenter.set_registration_delay(delay)
    result: dict[str, Any] = {"trace": trace.describe(), "variants": {}}
    runs: dict[str, VariantRun] = {}
    try:
        for number, variant in enumerate(VARIANTS):
            _say(f"outcomes: variant {variant}")
            run = await _run_variant(cluster, karpenter, workdir, number, variant, trace)
            runs[variant] = run
            result["variants"][variant] = _figures(run, trace)
    finally:
        await asyncio.to_thread(reset_cloud, karpenter)
    _add_ratios(result["variants"])
    result["sharding"] = _sharding_ratios(result["variants"])
    written = []
    for variant, run in runs.items():
        path = images / f"outcomes-{variant}.png"
        _draw(run, trace, path)
        written.append(str(path))
    result["images"] = written
    result["note"] = (
        "Karpenter's real provisioning and consolidation code with a fake cloud (kwok "
        "provider): every node appears after the same registration delay; no image pulls, "
        "no container start time, no variance of real cloud latency; node-seconds are "
        "NodeClaim lifetimes (launch to removal) inside the trace window, not prices."
    )
    return result


async def _run_variant(
    cluster: LocalCluster,
    karpenter: Karpenter,
    workdir: Path,
    number: int,
    variant: str,
    trace: Trace,
) -> VariantRun:
    fake = FakeActions(pats=[PAT], poll_hold=LONG_POLL, strand_grace=trace.strand_grace)
    pools: list[str] = []
    async with Stage(cluster, workdir / f"outcomes-{variant}", fake=fake, prefix="out") as stage:
        sites = []
        for index, name in enumerate(SITE_NAMES):
            site = await stage.add_site(
                SiteSpec(
                    name=name,
                    scale_set_id=701 + 10 * number + index,
                    runner_pool=Pool(nodes=0),
                    workflow_pool=Pool(nodes=0),
                    runner_requests=RUNNER_REQUESTS,
                    workflow_requests=WORKFLOW_REQUESTS,
                    strand_after=trace.strand_grace,
                )
            )
            pools += await asyncio.to_thread(
                create_site_nodepools, karpenter, site, SITE_TYPES[index]
            )
            sites.append(site)
        log = NodeClaimLog(cluster, pools).start()
        run = VariantRun(variant, sites, log)
        try:
            for index, site in enumerate(sites):
                site.start_listener(
                    capacity=_capacity(site, variant, index, trace),
                    max_runners=trace.max_runners,
                    log_level="info",
                )
            for site in sites:
                await site.wait_session(60)
            if variant == "warm_pool":
                await wait_until(
                    lambda: all(s.view().pairs_running >= trace.warm_pairs for s in sites),
                    "the warm pairs Running",
                    trace.registration_delay + 90,
                    sites,
                )
            await _play(run, stage, karpenter, trace)
            for site in sites:
                if site.listener is not None and site.capacity_on:
                    run.metrics.append(await site.listener.metrics_text())
        finally:
            await log.stop()
            await asyncio.to_thread(karpenter.set_capacity)
    _say(f"outcomes: {variant}: removing its NodePools and nodes")
    await asyncio.to_thread(delete_nodepools, karpenter, pools)
    return run


def _capacity(site: Site, variant: str, index: int, trace: Trace) -> dict[str, Any] | None:
    if variant == "stock":
        return None
    # Each cluster provisions for its share of fresh jobs; jobs queued a minute or more are
    # provisioned by both (the failover path when one cluster has no capacity). Unsharded,
    # each provisions for every queued job.
    demand: dict[str, Any] = (
        {"cluster_count": 1}
        if variant == "demand_unsharded"
        else {"cluster_index": index, "cluster_count": len(SITE_NAMES), "aged_after": "1m"}
    )
    return site.capacity_settings(
        proactive=trace.warm_pairs if variant == "warm_pool" else 0,
        hud=True,
        hud_floor=0,
        demand=demand,
        # A pair waits for a node: registration delay plus Karpenter's batching.
        placeholder_ready_timeout=f"{trace.registration_delay + 45:g}s",
        downscale_delay="10s",
    )


async def _play(run: VariantRun, stage: Stage, karpenter: Karpenter, trace: Trace) -> None:
    """Queue the waves and turn the shortage on and off on time; sample every second; end
    after the quiet period (or at the cap)."""
    fake = stage.fake
    run.start_wall, run.start_mono = time.time(), time.monotonic()
    events: list[tuple[float, str, Wave | None]] = [(w.at, "wave", w) for w in trace.waves]
    events += [(trace.shortage[0], "short", None), (trace.shortage[1], "restore", None)]
    events.sort(key=lambda e: e[0])
    last_done: float | None = None
    while True:
        now = time.monotonic() - run.start_mono
        while events and events[0][0] <= now:
            _, kind, wave = events.pop(0)
            if wave is not None:
                for seconds in wave.durations:
                    run.jobs += fake.add_jobs(1, labels=["linux"], duration=seconds)
                _say(f"{run.name} t={now:5.1f}s: {len(wave.durations)} jobs queued")
            elif kind == "short":
                await asyncio.to_thread(karpenter.set_capacity, insufficient=[WORKFLOW_TYPE])
                _say(f"{run.name} t={now:5.1f}s: {WORKFLOW_TYPE} out of capacity")
            else:
                await asyncio.to_thread(karpenter.set_capacity)
                _say(f"{run.name} t={now:5.1f}s: {WORKFLOW_TYPE} capacity back")
        run.points.append(_sample(run, fake, now))
        done = not events and all(j.state is JobState.COMPLETED for j in run.jobs)
        if done and last_done is None:
            last_done = now
        if (last_done is not None and now - last_done >= trace.quiet) or now >= trace.cap:
            break
        for site in run.sites:
            if site.listener is not None and site.listener.returncode is not None:
                raise RuntimeError(f"{site.listener.name} exited:\n{site.listener.log_tail(20)}")
        await asyncio.sleep(1.0)
    run.end_wall = time.time()


def _sample(run: VariantRun, fake: FakeActions, t: float) -> Point:
    views = [s.view() for s in run.sites]
    return Point(
        t=t,
        queued=len(fake.queued()),
        header=[v.advertised for v in views],
        pairs_running=[v.pairs_running for v in views],
        assigned=[v.assigned for v in views],
        running=[v.running for v in views],
    )


# ---------------------------------------------------------------------- figures


def _placeholder_seconds(site: Site, start: float, end: float) -> float:
    """Placeholder pod lifetimes (both halves; creation as watched to deletion or the start
    of termination) inside [start, end]."""
    born: dict[str, float] = {}
    total = 0.0
    for event in site.placeholder_events:
        if event.kind in ("ADDED", "LISTED") and not event.terminating:
            born.setdefault(event.name, event.wall)
        elif (event.kind == "DELETED" or event.terminating) and event.name in born:
            total += max(0.0, min(event.wall, end) - max(born.pop(event.name), start))
    total += sum(max(0.0, end - max(b, start)) for b in born.values())
    return total


def _figures(run: VariantRun, trace: Trace) -> dict[str, Any]:
    start, end = run.start_wall, run.end_wall
    jobs = run.jobs
    waits = [
        j.workflow_started_at - j.history[0][0] for j in jobs if j.workflow_started_at is not None
    ]
    claim_waits = [
        (j.workflow_started_at or j.finished_at or time.monotonic()) - j.claimed_at
        for j in jobs
        if j.claimed_at is not None
    ]
    seconds = run.log.node_seconds(start, end)
    launches = run.log.launches(start, end)
    per_pool: dict[str, Any] = {}
    for site in run.sites:
        for pool in ("runner", "workflow"):
            key = f"{site.spec.name}/{pool}"
            name = nodepool_name(site, pool)
            per_pool[key] = {
                "node_seconds": _r(seconds.get(name, 0.0)),
                "launches": launches.get(name, {}).get("launched", 0),
                "launch_attempts": launches.get(name, {}).get("attempted", 0),
            }
    created = sum(
        1
        for site in run.sites
        for e in site.placeholder_events
        if e.kind == "ADDED" and e.role == "placeholder-runner" and start <= e.wall <= end
    )
    deletes: dict[str, int] = {}
    for text in run.metrics:
        for reason in DELETE_REASONS:
            value = metric_value(text, "gha_capacity_pair_deletes_total", {"reason": reason})
            if value:
                deletes[reason] = deletes.get(reason, 0) + int(value)
    recreated = sum(deletes.get(r, 0) for r in RECREATE_REASONS)
    attempts = sum(v["launch_attempts"] for v in per_pool.values())
    launched = sum(v["launches"] for v in per_pool.values())
    return {
        "jobs": len(jobs),
        "jobs_completed": sum(j.state is JobState.COMPLETED for j in jobs),
        # Claimed by a runner, then its workflow pod waited longer than the grace for a node
        # (FakeActions.stranded() forgets a job once its workflow starts; here every one does
        # start in the end, because the shortage ends).
        "jobs_stranded": sum(
            j.stranded_reported or w > trace.strand_grace
            for j, w in zip([j for j in jobs if j.claimed_at is not None], claim_waits, strict=True)
        ),
        "queue_to_workflow_running_s": {
            "n": len(waits),
            "p50": _r(percentile(waits, 50)),
            "p90": _r(percentile(waits, 90)),
            "max": _r(max(waits) if waits else None),
        },
        "claim_to_workflow_running_s": {
            "p50": _r(percentile(claim_waits, 50)),
            "max": _r(max(claim_waits) if claim_waits else None),
        },
        "node_seconds": {
            "total": _r(sum(seconds.values())),
            "runner": _r(sum(v for k, v in seconds.items() if k.endswith("-runner"))),
            "workflow": _r(sum(v for k, v in seconds.items() if k.endswith("-workflow"))),
        },
        "placeholder_pod_seconds": _r(
            sum(_placeholder_seconds(site, start, end) for site in run.sites)
        ),
        "pairs_created": created,
        "pairs_recreated": recreated,
        "pair_deletes_by_reason": deletes,
        "karpenter_launches": launched,
        "karpenter_launch_attempts": attempts,
        "jobs_per_site": {
            site.spec.name: sum(j.scale_set_id == site.scale_set_id for j in jobs)
            for site in run.sites
        },
        "per_pool": per_pool,
        "trace_seconds": _r(end - start),
    }


_RATIO_KEYS = (
    ("jobs_stranded",),
    ("claim_to_workflow_running_s", "max"),
    ("queue_to_workflow_running_s", "p50"),
    ("queue_to_workflow_running_s", "p90"),
    ("queue_to_workflow_running_s", "max"),
    ("node_seconds", "total"),
    ("node_seconds", "runner"),
    ("node_seconds", "workflow"),
    ("placeholder_pod_seconds",),
    ("pairs_created",),
    ("pairs_recreated",),
    ("karpenter_launches",),
)


def _get(figures: Mapping[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = figures
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return float(value) if isinstance(value, int | float) else None


def _ratios(base: Mapping[str, Any], figures: Mapping[str, Any]) -> dict[str, float | None]:
    """Each of ``figures`` divided by ``base``'s (None where the base is 0 or missing)."""
    ratios: dict[str, float | None] = {}
    for path in _RATIO_KEYS:
        under, value = _get(base, path), _get(figures, path)
        ratios[".".join(path)] = (
            None if under in (None, 0.0) or value is None else round(value / under, 3)
        )
    return ratios


def _add_ratios(variants: dict[str, dict[str, Any]]) -> None:
    """Every figure divided by stock's."""
    stock = variants.get("stock")
    if stock is None:
        return
    for figures in variants.values():
        figures["ratio_to_stock"] = _ratios(stock, figures)


def _sharding_ratios(variants: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
    """The sharded demand variant's figures divided by the unsharded one's: below 1 is what
    sharding saves."""
    sharded, unsharded = variants.get("demand"), variants.get("demand_unsharded")
    if sharded is None or unsharded is None:
        return {}
    return _ratios(unsharded, sharded)


# ---------------------------------------------------------------------- the picture


def _draw(run: VariantRun, trace: Trace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    colors = ("tab:blue", "tab:orange")
    t = [p.t for p in run.points]
    fig, axes = plt.subplots(3, 1, figsize=(9, 7.5), sharex=True)
    top, middle, bottom = axes
    for i, name in enumerate(SITE_NAMES):
        header = [p.header[i] if p.header[i] is not None else 0 for p in run.points]
        top.step(t, header, where="post", color=colors[i], label=f"{name} header sent")
        top.step(
            t,
            [p.pairs_running[i] for p in run.points],
            where="post",
            color=colors[i],
            linestyle="--",
            label=f"{name} confirmed (Running pairs)",
        )
    top.set_ylabel("runners")
    top.legend(fontsize=7, loc="upper right", ncol=2)
    middle.step(t, [p.queued for p in run.points], where="post", color="black", label="queued")
    for i, name in enumerate(SITE_NAMES):
        middle.step(
            t,
            [p.assigned[i] for p in run.points],
            where="post",
            color=colors[i],
            linestyle=":",
            label=f"{name} assigned",
        )
        middle.step(
            t,
            [p.running[i] for p in run.points],
            where="post",
            color=colors[i],
            label=f"{name} claimed/running",
        )
    middle.set_ylabel("jobs")
    middle.legend(fontsize=7, loc="upper right", ncol=2)
    start = run.start_wall
    for i, site in enumerate(run.sites):
        for pool, style, width in (("runner", "--", 2.0), ("workflow", "-", 1.2)):
            name = nodepool_name(site, pool)
            bottom.step(
                [w - start for w, _ in run.log.counts],
                [c.get(name, 0) for _, c in run.log.counts],
                where="post",
                color=colors[i],
                linestyle=style,
                linewidth=width,
                label=f"{SITE_NAMES[i]} {pool} nodes",
            )
    bottom.set_ylabel("NodeClaims")
    bottom.set_xlabel("seconds since the trace started")
    bottom.legend(fontsize=7, loc="upper right", ncol=2)
    for ax in axes:
        ax.axvspan(*trace.shortage, color="red", alpha=0.08)
        for wave in trace.waves:
            ax.axvline(wave.at, color="grey", linewidth=0.6)
        ax.set_xlim(left=0)
    top.set_title(
        f"{run.name}: shaded = {SITE_NAMES[0]}'s workflow type out of capacity; "
        "grey lines = job waves",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def ratios_table(
    variants: Mapping[str, Mapping[str, Any]],
    sharding: Mapping[str, float | None] | None = None,
) -> str:
    """A Markdown table of the figures (for the README), from the benchmark's JSON: each
    variant's figures with its ratio to stock, and, given ``sharding``, a last column with the
    sharded demand variant's ratio to the unsharded one."""
    rows = [
        ("jobs stranded (claimed, workflow pod waited > grace)", ("jobs_stranded",)),
        ("claim → workflow pod Running max (s)", ("claim_to_workflow_running_s", "max")),
        ("queue → workflow pod Running p50 (s)", ("queue_to_workflow_running_s", "p50")),
        ("queue → workflow pod Running p90 (s)", ("queue_to_workflow_running_s", "p90")),
        ("queue → workflow pod Running max (s)", ("queue_to_workflow_running_s", "max")),
        ("node-seconds, total", ("node_seconds", "total")),
        ("node-seconds, runner pools", ("node_seconds", "runner")),
        ("node-seconds, workflow pools", ("node_seconds", "workflow")),
        ("placeholder pod-seconds", ("placeholder_pod_seconds",)),
        ("pairs created", ("pairs_created",)),
        ("pairs re-created", ("pairs_recreated",)),
        ("Karpenter launches", ("karpenter_launches",)),
    ]
    names = [v for v in VARIANTS if v in variants]
    headers = [HEADERS[n] for n in names] + (["sharded / unsharded"] if sharding else [])
    lines = [
        "| | " + " | ".join(headers) + " |",
        "|---|" + "---|" * len(headers),
    ]
    for label, key in rows:
        cells = []
        for name in names:
            value = _get(variants[name], key)
            ratio = (variants[name].get("ratio_to_stock") or {}).get(".".join(key))
            text = "–" if value is None else f"{value:g}"
            if name != "stock" and ratio is not None:
                text += f" ({ratio:g}×)"
            cells.append(text)
        if sharding:
            ratio = sharding.get(".".join(key))
            cells.append("–" if ratio is None else f"{ratio:g}×")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":  # print the README table from a saved JSON document
    import json

    with contextlib.suppress(BrokenPipeError):
        doc = json.loads(Path(sys.argv[1]).read_text())
        section = doc.get("outcomes", doc)
        print(ratios_table(section["variants"], section.get("sharding")))
