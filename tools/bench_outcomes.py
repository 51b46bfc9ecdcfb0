"""The outcome benchmark (``make bench-outcomes``): one seeded job trace per seed, every
variant a user would pick, side by side on the same clock, the same shortage and the same
fixed window.

Two clusters (two Sites in one control plane) share GitHub's queue. Each has a runner pool
and a workflow pool, each a Karpenter NodePool (real Karpenter, kwok cloud provider), so every
node is launched by Karpenter and joins after a per-node provisioning delay drawn from
[30, 90] s (our Karpenter main holds each new Node back for its delay after the launch has
returned, as a cloud boots an instance; a KWOKNodeClass has one delay for all nodes) and
removed by its consolidation. Site A's workflow instance type runs out of cloud
capacity (Karpenter's insufficient-capacity error on launch) from a seeded random time during
the arrivals, for a seeded duration. The fake Actions service, in its broker mode (GitHub.com
today: jobs assigned directly, up to each listener's header), hands each job to the clusters
in a seeded random order (the first with room at its last poll), as GitHub picks whichever
eligible listener. The runner stand-in fails a job whose workflow pod is not Running within
the prepare-job timeout, as the runner-container hooks do.

Variants (all of one seed run at once, on the same clock; each its own control plane with its
own scheduler and Karpenter, fake Actions service, HUD, namespaces and NodePools; the order
they are set up in is shuffled per seed). A control plane per variant because a platform
team's cluster does not share its scheduler with five other fleets: on one shared scheduler
on 2 cores, its queue held hundreds of other variants' unschedulable pods at busy times and
served the lowest priority last, so our runner placeholders (-10) waited a median 109-159 s
on nodes that were already up, where stock's runner pods (0) waited 11-38 s:

* ``stock_min0``: ARC's listener, ``minRunners: 0`` (the static header ``maxRunners``);
* ``stock_minN``: ARC's listener, ``minRunners: N`` (the warm pool a user buys today);
* ``stock_overprov``: ARC's listener plus pause-pod overprovisioning: per cluster a Deployment
  of N runner-sized and one of N workflow-sized pause pods at PriorityClass
  ``overprovisioning`` (value -1, the common recipe), which runner (0) and workflow (20) pods
  preempt, so Karpenter keeps N spare slots of each;
* ``ours_demand``: our listener, ``proactive_capacity: 0`` (pairs for queued jobs, HUD demand
  sharded between the two clusters);
* ``ours_warm``: the same with ``proactive_capacity: N``.

Trace families (``--family``): ``capped`` (the default) runs with ``maxRunners: 10`` per
cluster, which the busy minutes of a trace exceed, so maxRunners holds every variant back
alike; ``roomy`` runs the same traces with ``maxRunners`` above any seed's peak of jobs in
flight (FAMILIES, peak_in_flight), so the variants differ only in how they get capacity. The
``staged`` family (tools/bench_staged.py, its own layout, variants and figures) replays staged
CI: builds fanning out into shards on slow GPU-like nodes, for the predictive warm pool.

Honest accounting: one window for every variant of a seed, from cluster start (listeners and
pause pods start; warm-up included) to a fixed time after the last arrival; node-seconds
integrate every NodeClaim alive in the window (also those still alive at its end), per pool.
Seeds: every figure per seed, then median and min–max over seeds, and the ratio to
``stock_min0`` per seed. Waits (``wait_s``, the headline): queue → workflow pod Running, and
for a job failed by the prepare-job timeout queue → its failure, so a variant is not made
fast by failing its slowest jobs; ``wait_succeeded_s`` has the succeeded jobs alone;
``queue_to_workflow_running_s`` (every job whose workflow pod ran) is what older runs
recorded, shown in their tables with a note. Where each job's wait goes (queued → counted
in a demand reading → pair created → pair Running → header rise → assigned → runner pod
Running → workflow pod Running): tools/critical_path.py, under each variant's
``critical_path`` (per step n, p50, p90 and share of the waits; the pairs' launch time;
every job's milestones), printed as a second table.

What it does not model: image pulls and container start (kwok runs pods at once), node boot
beyond the drawn delay, spot interruptions, prices (node-seconds are counted, not priced),
two label sets (the trace's two label sets are served by both clusters alike: every job is
labelled ``linux``), GitHub's own queueing delays.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from capacity.settings import HUD_READ_INTERVAL
from capacity.settings_values import parse_duration
from tools import node_occupancy
from tools.bench_goals import node_seconds_per_succeeded_job
from tools.critical_path import (
    JobPath,
    Pair,
    attribute,
    delete_reasons,
    pairs_from_events,
    rises,
)
from tools.critical_path import figures as critical_path_figures
from tools.critical_path import table as steps_table
from tools.e2e_karpenter import (
    NodeClaimLog,
    create_site_nodepools,
    ensure_karpenter,
    nodepool_name,
)
from tools.e2e_site import Pool, Site, SiteSpec, Stage
from tools.fake_actions import FakeActions, FakeJob, JobState
from tools.localcluster import LocalCluster
from tools.localcluster.karpenter import WORKFLOW_TYPE, Karpenter
from tools.localcluster.rest import TRANSIENT, KubeError
from tools.stats import percentile
from tools.whatif_synth import SynthSpec, generate
from whatif.optimum import optimum

PAT = "ghp_e2e_fake_token"
LONG_POLL = 50.0  # the real service holds a long poll about 50 s
ROUND = 2
BASE = "stock_min0"
VARIANTS = (
    "stock_min0",
    "stock_minN",
    "stock_overprov",
    "ours_demand",
    "ours_warm",
)
HEADERS = {
    "stock_min0": "stock, minRunners 0",
    "stock_minN": "stock, minRunners N",
    "stock_overprov": "stock + pause pods",
    "ours_demand": "ours, demand only",
    "ours_warm": "ours, warm pool N",
}
# Runner pods fit two to a 2-CPU node; workflow pods two to a 4-CPU node, in either cluster.
RUNNER_REQUESTS = {"cpu": "900m", "memory": "1Gi"}
# What the shipped chart and overlays put on runner and workflow pods: without it Karpenter's
# consolidation may remove a node under a running job, which no user of the chart would see.
SHIPPED_POD_ANNOTATIONS = {"karpenter.sh/do-not-disrupt": "true"}
WORKFLOW_REQUESTS = {"cpu": "1900m", "memory": "3Gi"}
# Site A's workflow pool uses the type that runs out; site B's workflow pool another one.
SITE_TYPES: tuple[dict[str, tuple[str, ...]], ...] = (
    {"runner": ("c-2x",), "workflow": (WORKFLOW_TYPE,)},
    {"runner": ("c-2x",), "workflow": ("c-4x",)},
)
SITE_NAMES = ("site-a", "site-b")
OVERPROV_CLASS = "overprovisioning"
OVERPROV_LABEL = "bench.capacity-listener.dev/overprovisioning"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def _say(line: str) -> None:
    print(f"bench: {line}", file=sys.stderr, flush=True)


# Trace families: the same seeded traces under another maxRunners. "capped": 10 per cluster,
# which the busy minutes of a trace often exceed (maxRunners is then the bottleneck for every
# variant alike); "roomy": more than any trace's peak of jobs in flight, even with every job
# held for two launches or the prepare-job timeout (peak_in_flight; a test checks it for
# FULL's and SMOKE's seeds), so the variants differ only in how they get capacity.
FAMILIES = {"capped": 10, "roomy": 80}


# After a launch is refused for lack of capacity the fake cloud reports the type unavailable
# this long, as Karpenter's AWS provider caches an offering that ran out (3 minutes by
# default); without it Karpenter retries the type on every provisioning pass.
REFUSED_TYPE_TTL = 180.0


@dataclass(frozen=True)
class Config:
    """Everything a run depends on; ``describe()`` is printed with the results."""

    spec: SynthSpec
    seeds: tuple[int, ...]
    variants: tuple[str, ...] = VARIANTS
    warm: int = 2  # N: minRunners, pause pods per pool, proactive pairs; per cluster
    max_runners: int = FAMILIES["capped"]
    family: str = "capped"  # FAMILIES; sets max_runners (with_family)
    warmup: float = 150.0  # cluster start -> the trace's t=0
    tail: float = 480.0  # the window ends this long after the last arrival
    overtime: float = 300.0  # wait at most this much longer for unfinished jobs (not counted)
    prepare_timeout: float = 180.0  # the hooks' default is 600 s
    launch_delay: tuple[float, float] = (30.0, 90.0)
    shortage_start: tuple[float, float] = (0.1, 0.6)  # share of the arrival span
    shortage_seconds: tuple[float, float] = (240.0, 480.0)
    hud_lag: float = 30.0
    # The listener's demand reads and the hold of queued jobs' pairs, at product defaults
    # (recorded so a replay can tell: runs before 2026-11-27 read HUD every 30 s and held
    # every pair for downscale_delay).
    demand_interval: float = HUD_READ_INTERVAL
    demand_hold: str = "auto"
    consolidate_after: str = "30s"
    waited_long: float = 60.0
    # ours read Karpenter's NodePools and its insufficient-capacity Events (nodepools.enabled,
    # the product's default): a half its pools said they cannot launch is released after one
    # launch. False: the setting turned off, as runs before it was the default.
    nodepools: bool = True
    # Seconds the fake cloud reports a type unavailable after refusing a launch of it (0:
    # never, as runs before 2026-11-28's afternoon).
    refused_ttl: float = REFUSED_TYPE_TTL

    def describe(self) -> dict[str, Any]:
        return {
            "seeds": list(self.seeds),
            "variants": list(self.variants),
            "trace_spec": self.spec.describe(),
            "N": self.warm,
            "family": self.family,
            "max_runners_per_cluster": self.max_runners,
            "window": {
                "warmup_s": self.warmup,
                "after_last_arrival_s": self.tail,
                "overtime_s": self.overtime,
            },
            "node_provisioning_delay_s": list(self.launch_delay),
            "demand_interval_s": self.demand_interval,
            "demand_hold": self.demand_hold,
            "nodepools_enabled": self.nodepools,
            "refused_type_ttl_s": self.refused_ttl,
            "shortage": {
                "site": SITE_NAMES[0],
                "instance_type": WORKFLOW_TYPE,
                "start_share_of_arrivals": list(self.shortage_start),
                "duration_s": list(self.shortage_seconds),
            },
            "instance_types": {
                name: {k: list(v) for k, v in types.items()}
                for name, types in zip(SITE_NAMES, SITE_TYPES, strict=True)
            },
            "requests": {"runner": RUNNER_REQUESTS, "workflow": WORKFLOW_REQUESTS},
            # Read back by bench_agreement (the simulator replays the run with them).
            "hud_lag_s": self.hud_lag,
            "consolidate_after": self.consolidate_after,
            "prepare_timeout_s": self.prepare_timeout,
            "runner_and_workflow_pod_annotations": dict(SHIPPED_POD_ANNOTATIONS),
            "changed_settings": self.changed_settings(),
        }

    def changed_settings(self) -> list[str]:
        """Every setting that is not the product's (or the environment's) default."""
        return [
            f"ours_warm: proactive_capacity {self.warm} (default 0); stock_minN: minRunners "
            f"{self.warm}; stock_overprov: {self.warm} + {self.warm} pause pods per cluster",
            "ours: demand sharded between the two clusters (demand.cluster_index 0/1, "
            "cluster_count 2; aged_after left at its default 900 s)",
            "ours: hud.enabled with the fake HUD's URL; placement and resources of the "
            "placeholders set to the pools' (required configuration, not tuning)",
            f"runner-container hooks: ACTIONS_RUNNER_PREPARE_JOB_TIMEOUT_SECONDS "
            f"{self.prepare_timeout:g} (default 600), shortened with the trace's durations",
            f"environment: fake HUD lags the queue by {self.hud_lag:g} s; Karpenter "
            f"consolidateAfter {self.consolidate_after}, consolidationPolicy "
            "WhenEmptyOrUnderutilized, budget 100 %; maxRunners "
            f"{self.max_runners} per cluster; the fake cloud reports a refused type "
            f"unavailable for {self.refused_ttl:g} s after each refusal (AWS's default)",
            "everything else at product defaults: recalculate_interval 30 s, "
            f"demand.interval {self.demand_interval:g} s, demand.hold {self.demand_hold}, "
            "hud.lag 30 s, downscale_delay 300 s, placeholder_ready_timeout 300 s, "
            "max_pending_pairs 30, hud.stale_after 300 s, hud.timeout 10 s, "
            "hud.failure_base_capacity 1",
            (
                "ours: nodepools.enabled (Karpenter's NodePools and insufficient-capacity "
                "Events read; the default)"
                if self.nodepools
                else "ours: nodepools.enabled false (NodePools not read)"
            ),
        ]


# Durations of real CI scaled by 1/4 (median 75 s instead of 300 s) so a 15-minute trace is a
# busy quarter hour; the seeds give >= 100 jobs each (seeds 2, 3 and 5 give fewer; not used).
FULL = Config(
    spec=SynthSpec(
        minutes=15,
        runs_per_minute_quiet=1.0,
        runs_per_minute_busy=4.0,
        mean_quiet_seconds=180.0,
        mean_busy_seconds=120.0,
        batch_cap=16,
        second_stage_share=0.2,
        duration_median_seconds=300.0,
        duration_sigma=0.7,
        duration_cap_seconds=1800.0,
        duration_scale=0.25,
    ),
    seeds=(1, 4, 6, 7, 8),
)
# The smoke run of `make test`: one seed, two variants, a 3-minute trace, short durations.
SMOKE = replace(
    FULL,
    spec=replace(
        FULL.spec,
        minutes=3,
        runs_per_minute_quiet=2.0,
        batch_cap=4,
        second_stage_share=0.0,
        duration_scale=0.1,
    ),
    seeds=(2,),
    variants=("stock_min0", "ours_demand"),
    warmup=60.0,
    tail=60.0,
    overtime=120.0,
    prepare_timeout=90.0,
    launch_delay=(10.0, 30.0),
    shortage_seconds=(60.0, 90.0),
)


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds after the trace's t=0
    duration: float


@dataclass(frozen=True)
class SeedPlan:
    seed: int
    arrivals: tuple[Arrival, ...]
    shortage: tuple[float, float]  # [from, to) after the trace's t=0

    @property
    def last_arrival(self) -> float:
        return max(a.at for a in self.arrivals)


def with_family(config: Config, family: str) -> Config:
    """``config`` in trace family ``family`` (FAMILIES); ValueError naming an unknown one."""
    if family not in FAMILIES:
        raise ValueError(f"family: {family!r} is not one of {', '.join(FAMILIES)}")
    return replace(config, family=family, max_runners=FAMILIES[family])


def peak_in_flight(config: Config, seed_plan: SeedPlan) -> int:
    """The most jobs of the trace in flight at once if each took its duration plus the
    longer of two launches in a row and the prepare-job timeout: more than any one cluster
    can hold at once whatever the variant."""
    margin = max(2 * config.launch_delay[1], config.prepare_timeout)
    edges = sorted(
        [(a.at, 1) for a in seed_plan.arrivals]
        + [(a.at + a.duration + margin, -1) for a in seed_plan.arrivals]
    )
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def plan(config: Config, seed: int) -> SeedPlan:
    jobs = generate(config.spec, seed)
    arrivals = tuple(
        Arrival(round(j.queued_at - config.spec.start, 3), float(j.duration or 0.0)) for j in jobs
    )
    rng = random.Random(f"shortage-{seed}")
    span = max(a.at for a in arrivals)
    start = rng.uniform(*config.shortage_start) * span
    return SeedPlan(
        seed, arrivals, (round(start, 1), round(start + rng.uniform(*config.shortage_seconds), 1))
    )


@dataclass
class Point:
    """One timeline sample (seconds since cluster start)."""

    t: float
    queued: int
    header: list[int | None]
    confirmed: list[int]
    running: list[int]


@dataclass
class VariantRun:
    name: str
    stage: Stage
    karpenter: Karpenter
    sites: list[Site] = field(default_factory=list)
    pools: list[str] = field(default_factory=list)
    log: NodeClaimLog | None = None
    jobs: list[FakeJob] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    pause_samples: list[tuple[float, int]] = field(default_factory=list)
    window: tuple[float, float] = (0.0, 0.0)  # wall clock: cluster start, the window's end
    origin: float = 0.0  # cluster start on the monotonic clock (the fakes' and stand-in's)


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, ROUND)


# ---------------------------------------------------------------------- running


ControlPlanes = Callable[[Path], AbstractContextManager[LocalCluster]]


def own_control_plane(workdir: Path) -> AbstractContextManager[LocalCluster]:
    """A control plane of the benchmark's own in ``workdir``, stopped when its seed ends."""
    from tools.control_plane import start_control_plane

    return start_control_plane(workdir, progress=_say)


async def benchmark(
    workdir: Path,
    out: Path,
    config: Config = FULL,
    control_planes: ControlPlanes = own_control_plane,
) -> dict[str, Any]:
    """Run every seed (variants of a seed side by side) and write JSON + figures to ``out``.

    Each variant of a seed runs on a control plane of its own (its own API server,
    scheduler and Karpenter), as each platform team's cluster would: with six variants on
    one scheduler on a 2-core machine, its queue held hundreds of other variants' pods at
    busy times and served the lowest priority (our runner placeholders, -10) last, minutes
    after their node was up."""
    started = time.monotonic()
    await asyncio.to_thread(out.mkdir, parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "config": {**config.describe(), "control_planes": "one per variant"},
        "load_average": {"start": list(os.getloadavg())},
        "seeds": {},
    }
    pictured: dict[str, VariantRun] = {}
    pictured_plan: SeedPlan | None = None
    for number, seed in enumerate(config.seeds):
        seed_plan = plan(config, seed)
        _say(
            f"seed {seed}: {len(seed_plan.arrivals)} jobs, last at "
            f"{seed_plan.last_arrival:.0f}s, shortage {seed_plan.shortage}"
        )
        runs, figures = await _run_seed(control_planes, workdir, config, seed_plan)
        figures["load_average"] = list(os.getloadavg())
        figures["reference"] = reference(config, seed_plan)
        result["seeds"][str(seed)] = figures
        # Written after every seed, so a long run that fails later keeps what it measured.
        await asyncio.to_thread(_write, out / "outcomes.json", result)
        if number == 0:
            pictured, pictured_plan = runs, seed_plan
    result["summary"] = summarize(result["seeds"], config)
    result["load_average"]["end"] = list(os.getloadavg())
    images = []
    if pictured_plan is not None:
        for name, run in pictured.items():
            path = out / f"outcomes-{name}.png"
            _draw(run, config, pictured_plan, result["seeds"][str(pictured_plan.seed)], path)
            images.append(path.name)
    summary_png = out / "outcomes-summary.png"
    _draw_summary(result["seeds"], config, summary_png)
    result["images"] = [*images, summary_png.name]
    result["run_seconds"] = round(time.monotonic() - started, 1)
    result["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result["note"] = (
        "Measured on a shared 2-core machine under load (load_average: 1/5/15-minute averages "
        "at the start, after each seed and at the end); absolute seconds vary with load, "
        "ratios to stock of the same seed hold better."
    )
    await asyncio.to_thread(_write, out / "outcomes.json", result)
    return result


def _write(path: Path, document: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(document, indent=1) + "\n")


def _prepare_cluster(cluster: LocalCluster) -> Karpenter:
    """Karpenter on ``cluster`` (started if it has none) set up for the benchmark, and the
    pause pods' PriorityClass."""
    karpenter = ensure_karpenter(cluster, _say)
    karpenter.set_registration_delay("0s")  # the per-node launch delay replaces it
    _ensure_overprov_class(cluster)
    return karpenter


def _ensure_overprov_class(cluster: LocalCluster) -> None:
    body = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": OVERPROV_CLASS},
        "value": -1,
        "globalDefault": False,
        "description": "Pause pods that hold spare room; every other pod preempts them.",
    }
    try:
        cluster.rest.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body)
    except KubeError as exc:
        if exc.status != 409:
            raise


async def _run_seed(
    control_planes: ControlPlanes,
    workdir: Path,
    config: Config,
    seed_plan: SeedPlan,
) -> tuple[dict[str, VariantRun], dict[str, Any]]:
    seed = seed_plan.seed
    order = list(config.variants)
    random.Random(f"order-{seed}").shuffle(order)
    runs: dict[str, VariantRun] = {}
    async with contextlib.AsyncExitStack() as stack:
        for number, name in enumerate(order):
            _say(f"seed {seed}: control plane for {name}")
            cluster = await asyncio.to_thread(
                stack.enter_context, control_planes(workdir / f"seed{seed}-{name}-cluster")
            )
            karpenter = await asyncio.to_thread(_prepare_cluster, cluster)
            # Each Karpenter draws the same delays from the seed: the variants of a seed
            # wait the same for their n-th node.
            karpenter.set_launch_delay(*config.launch_delay, seed=seed)
            karpenter.set_insufficient_capacity_ttl(config.refused_ttl)
            # GitHub.com's service as it is today: jobs assigned directly up to the header.
            fake = FakeActions(
                pats=[PAT],
                poll_hold=LONG_POLL,
                strand_grace=config.waited_long,
                assign_seed=seed,
                broker=True,
            )
            stage = await stack.enter_async_context(
                Stage(cluster, workdir / f"seed{seed}-{name}", fake=fake, prefix="out")
            )
            if stage.hud is not None:
                stage.hud.link(stage.fake, lag=config.hud_lag)
            run = runs[name] = VariantRun(name, stage, karpenter)
            for index, site_name in enumerate(SITE_NAMES):
                site = await stage.add_site(
                    SiteSpec(
                        name=site_name,
                        scale_set_id=1000 + 20 * number + index,
                        runner_pool=Pool(nodes=0),
                        workflow_pool=Pool(nodes=0),
                        runner_requests=RUNNER_REQUESTS,
                        workflow_requests=WORKFLOW_REQUESTS,
                        strand_after=config.waited_long,
                        prepare_timeout=config.prepare_timeout,
                        pod_annotations=SHIPPED_POD_ANNOTATIONS,
                    )
                )
                run.pools += await asyncio.to_thread(
                    create_site_nodepools,
                    karpenter,
                    site,
                    SITE_TYPES[index],
                    consolidate_after=config.consolidate_after,
                )
                run.sites.append(site)
            run.log = NodeClaimLog(cluster, run.pools).start()
        karpenters = [run.karpenter for run in runs.values()]
        try:
            await _play(runs, order, karpenters, config, seed_plan)
        finally:
            for run in runs.values():
                if run.log is not None:
                    await run.log.stop()
            for run in runs.values():
                for site in run.sites:
                    if site.listener is not None and site.listener.returncode is None:
                        await site.listener.stop(within=15.0)
    window = config.warmup + seed_plan.last_arrival + config.tail
    logs = {
        name: await asyncio.to_thread(read_occupancy, run.stage.cluster)
        for name, run in runs.items()
    }
    figures = {
        "jobs": len(seed_plan.arrivals),
        "last_arrival_s": seed_plan.last_arrival,
        "shortage_s": list(seed_plan.shortage),
        "window_s": _r(window),
        "variant_order": order,
        "variants": {name: _figures(run, config, window, logs[name]) for name, run in runs.items()},
    }
    return runs, figures


async def _start_variant(run: VariantRun, config: Config) -> None:
    for index, site in enumerate(run.sites):
        name = run.name
        if name == "stock_overprov":
            await asyncio.to_thread(_create_pause_pods, site, config.warm)
        capacity = _capacity(site, name, index, config)
        site.start_listener(
            capacity=capacity,
            max_runners=config.max_runners,
            min_runners=config.warm if name == "stock_minN" else 0,
            log_level="info",
        )


def _capacity(site: Site, variant: str, index: int, config: Config) -> dict[str, Any] | None:
    if not variant.startswith("ours"):
        return None
    settings = site.capacity_settings(
        proactive=config.warm if variant == "ours_warm" else 0,
        demand={"cluster_index": index, "cluster_count": len(SITE_NAMES)},
    )
    # Back to the product's defaults (capacity_settings is tuned for fast tests).
    for key in ("recalculate_interval", "placeholder_ready_timeout", "max_pending_pairs"):
        settings.pop(key, None)
    settings.pop("downscale_delay", None)
    assert site.stage.hud is not None
    settings["hud"] = {"enabled": True, "url": site.stage.hud.endpoint}
    settings["nodepools"] = {"enabled": config.nodepools}
    return settings


def _create_pause_pods(site: Site, count: int) -> None:
    """The common overprovisioning recipe: a Deployment of pause pods at priority -1, one
    runner-sized and one workflow-sized, each in its pool."""
    for pool, requests in (("runner", RUNNER_REQUESTS), ("workflow", WORKFLOW_REQUESTS)):
        labels = {OVERPROV_LABEL: pool}
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": f"overprovisioning-{pool}", "namespace": site.namespace},
            "spec": {
                "replicas": count,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "priorityClassName": OVERPROV_CLASS,
                        "terminationGracePeriodSeconds": 0,
                        "containers": [
                            {
                                "name": "pause",
                                "image": PAUSE_IMAGE,
                                "resources": {"requests": dict(requests)},
                            }
                        ],
                        **site.placement(pool),
                    },
                },
            },
        }
        site.stage.cluster.rest.request(
            "POST", f"/apis/apps/v1/namespaces/{site.namespace}/deployments", body
        )


def _running_pause_pods(site: Site) -> int:
    found = site.stage.cluster.rest.request(
        "GET", f"/api/v1/namespaces/{site.namespace}/pods", params={"labelSelector": OVERPROV_LABEL}
    )
    return sum(
        1
        for p in found.get("items", [])
        if (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    )


async def _play(
    runs: Mapping[str, VariantRun],
    order: Sequence[str],
    karpenters: Sequence[Karpenter],
    config: Config,
    seed_plan: SeedPlan,
) -> None:
    """Start every variant at t=0 (cluster start), queue the arrivals after the warm-up,
    switch the shortage on and off, sample every second; end at the window's end once every
    job has finished (or after the overtime)."""
    origin = time.monotonic()
    wall_origin = time.time()
    window = config.warmup + seed_plan.last_arrival + config.tail
    for name in order:
        runs[name].window = (wall_origin, wall_origin + window)
        runs[name].origin = origin
        await _start_variant(runs[name], config)
    arrivals = sorted(seed_plan.arrivals, key=lambda a: a.at)
    events: list[tuple[float, str, Arrival | None]] = [
        (config.warmup + a.at, "job", a) for a in arrivals
    ]
    events += [
        (config.warmup + seed_plan.shortage[0], "short", None),
        (config.warmup + seed_plan.shortage[1], "restore", None),
    ]
    events.sort(key=lambda e: e[0])
    last_pause_sample = -10.0
    while True:
        now = time.monotonic() - origin
        while events and events[0][0] <= now:
            _, kind, arrival = events.pop(0)
            if arrival is not None:
                for run in runs.values():
                    run.jobs += run.stage.fake.add_jobs(
                        1, labels=["linux"], duration=arrival.duration
                    )
            elif kind == "short":
                for karpenter in karpenters:
                    await asyncio.to_thread(karpenter.set_capacity, insufficient=[WORKFLOW_TYPE])
                _say(f"t={now:5.0f}s: {WORKFLOW_TYPE} out of capacity")
            else:
                for karpenter in karpenters:
                    await asyncio.to_thread(karpenter.set_capacity)
                _say(f"t={now:5.0f}s: {WORKFLOW_TYPE} capacity back")
        for run in runs.values():
            run.points.append(_sample(run, now))
        if now - last_pause_sample >= 2.0 and "stock_overprov" in runs:
            last_pause_sample = now
            overprov = runs["stock_overprov"]
            count = 0
            for site in overprov.sites:
                # A missed sample (a slow or reset connection) only widens the step.
                with contextlib.suppress(*TRANSIENT):
                    count += await asyncio.to_thread(_running_pause_pods, site)
            overprov.pause_samples.append((now, count))
        for run in runs.values():
            for site in run.sites:
                if site.listener is not None and site.listener.returncode is not None:
                    raise RuntimeError(
                        f"{run.name}: {site.listener.name} exited:\n{site.listener.log_tail(20)}"
                    )
        # A variant whose Karpenter died would go on without launches: stop the run.
        for karpenter in karpenters:
            karpenter.check_alive()
        finished = not events and all(
            j.state is JobState.COMPLETED for run in runs.values() for j in run.jobs
        )
        if now >= window and (finished or now >= window + config.overtime):
            break
        if int(now) % 60 == 0:
            done = sum(j.state is JobState.COMPLETED for r in runs.values() for j in r.jobs)
            _say(f"t={now:5.0f}s of {window:.0f}s: {done} jobs done over all variants")
        await asyncio.sleep(1.0)


def _sample(run: VariantRun, t: float) -> Point:
    views = [s.view() for s in run.sites]
    return Point(
        t=t,
        queued=len(run.stage.fake.queued()),
        header=[v.advertised for v in views],
        confirmed=[v.pairs_running for v in views],
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


def _pause_seconds(samples: Sequence[tuple[float, int]], window: float) -> float:
    """Running pause pods integrated over the window (sampled every 2 s; none: 0)."""
    if not samples:
        return 0.0
    total = 0.0
    for (t, count), (t_next, _) in zip(samples, [*samples[1:], (window, 0)], strict=True):
        total += count * max(0.0, min(t_next, window) - min(t, window))
    return total


TIMEOUT = "prepare_timeout"  # FakeJob.failure of a job the hooks failed (no workflow pod)
# The headline wait: queue → workflow pod Running, and for a job failed by the prepare-job
# timeout queue → its failure (it waited that long and then went red; leaving it out would
# make a variant that fails its slowest jobs look fast). Jobs unfinished at the window's end
# are counted apart ("unfinished"), in neither.
WAIT = "wait_s"
OCCUPANCY = "node_seconds_by_occupancy"
WAIT_SUCCEEDED = "wait_succeeded_s"  # queue → workflow Running of succeeded jobs only
PER_SUCCEEDED = "node_seconds_per_succeeded_job"  # derived: node_seconds.total / succeeded
# Queue → workflow Running of every job whose workflow pod ran, failed-by-timeout jobs left
# out: the only wait runs before the headline above recorded (older JSON has no other), and
# what bench_agreement compares with the simulator, which models no timeout.
WORKFLOW_RAN = "queue_to_workflow_running_s"


def _spread_of(waits: Sequence[float]) -> dict[str, Any]:
    return {
        "n": len(waits),
        "p50": _r(percentile(waits, 50)),
        "p90": _r(percentile(waits, 90)),
        "p99": _r(percentile(waits, 99)),
        "max": _r(max(waits) if waits else None),
    }


def wait_figures(jobs: Sequence[FakeJob]) -> dict[str, Any]:
    """The three wait distributions of a variant's jobs (see WAIT, WAIT_SUCCEEDED and
    WORKFLOW_RAN), each with its count and nearest-rank percentiles."""
    ran = {
        j.runner_request_id: j.workflow_started_at - j.history[0][0]
        for j in jobs
        if j.workflow_started_at is not None
    }
    failed = [
        j.finished_at - j.history[0][0]
        for j in jobs
        if j.failure == TIMEOUT and j.finished_at is not None and j.workflow_started_at is None
    ]
    succeeded = [
        ran[j.runner_request_id]
        for j in jobs
        if j.result == "succeeded" and j.runner_request_id in ran
    ]
    return {
        WAIT: {**_spread_of([*ran.values(), *failed]), "failed_by_timeout": len(failed)},
        WAIT_SUCCEEDED: _spread_of(succeeded),
        WORKFLOW_RAN: _spread_of(list(ran.values())),
    }


class Patience(Protocol):
    """What the figures read of a configuration (the staged family's has it too)."""

    @property
    def waited_long(self) -> float: ...


def read_occupancy(cluster: LocalCluster) -> node_occupancy.Logs | None:
    """The cluster's Karpenter and kwok logs, read for tools/node_occupancy.py (None: a
    cluster that keeps no logs)."""
    logs = cluster.log_dir
    if logs is None or not all((logs / f).is_file() for f in ("karpenter.log", "kwok.log")):
        return None
    return node_occupancy.read_dir(logs)


def _figures(
    run: VariantRun,
    config: Patience,
    window: float,
    occupancy_logs: node_occupancy.Logs | None = None,
) -> dict[str, Any]:
    log = run.log
    assert log is not None
    start, end = run.window
    jobs = run.jobs
    waits = [
        j.workflow_started_at - j.history[0][0] for j in jobs if j.workflow_started_at is not None
    ]
    timed_out = sum(j.failure == TIMEOUT for j in jobs)
    other_failed = sum(j.result == "failed" and j.failure != TIMEOUT for j in jobs)
    seconds = log.node_seconds(start, end)
    launches = log.launches(start, end)
    per_pool: dict[str, Any] = {}
    for site in run.sites:
        for pool in ("runner", "workflow"):
            name = nodepool_name(site, pool)
            per_pool[f"{site.spec.name}/{pool}"] = {
                "node_seconds": _r(seconds.get(name, 0.0)),
                "launches": launches.get(name, {}).get("launched", 0),
                "launch_attempts": launches.get(name, {}).get("attempted", 0),
            }
    placeholder = sum(_placeholder_seconds(site, start, end) for site in run.sites)
    occupied: dict[str, dict[str, float]] = {}
    removal: dict[str, Any] = {}
    if occupancy_logs is not None:
        occupied = node_occupancy.occupancy(occupancy_logs, start, end, run.pools)
        lags = node_occupancy.removal_lags(occupancy_logs, start, end, run.pools)
        removal = {node_occupancy.REMOVAL: node_occupancy.lag_figures(lags)}
        for site in run.sites:
            for pool in ("runner", "workflow"):
                states = occupied.get(nodepool_name(site, pool), {})
                per_pool[f"{site.spec.name}/{pool}"]["occupancy_s"] = {
                    k: _r(v) for k, v in states.items()
                }
    return {
        "jobs": len(jobs),
        "succeeded": sum(j.result == "succeeded" for j in jobs),
        "failed_by_timeout": timed_out,
        "failed_other": other_failed,
        # Why each of those went: "<runner|workflow>: <DisruptionTarget reason or deleted>".
        "failed_other_why": dict(
            Counter(
                j.failure or "unknown"
                for j in jobs
                if j.result == "failed" and j.failure != TIMEOUT
            )
        ),
        "unfinished": sum(j.state is not JobState.COMPLETED for j in jobs),
        "waited_over_60s": sum(w > config.waited_long for w in waits) + timed_out,
        **wait_figures(jobs),
        "node_seconds": {
            "total": _r(sum(seconds.values())),
            "runner": _r(sum(v for k, v in seconds.items() if k.endswith("-runner"))),
            "workflow": _r(sum(v for k, v in seconds.items() if k.endswith("-workflow"))),
        },
        # What held the nodes (tools/node_occupancy.py): per role, launching / a real pod
        # on it / placeholders or pause pods only / empty. Absent without the cluster's logs.
        **({OCCUPANCY: node_occupancy.by_role(occupied)} if occupied else {}),
        # A node's last pod gone → the node deleted (consolidateAfter and Karpenter's own
        # steps): bench_agreement keeps the simulator's empty nodes this long.
        **removal,
        "placeholder_pod_seconds": _r(placeholder + _pause_seconds(run.pause_samples, window)),
        "karpenter_launches": sum(v["launches"] for v in per_pool.values()),
        # NodeClaim creation → Node joined, every launch of the window (bench_agreement
        # draws the simulator's launch delays from these).
        "node_ready_s": [_r(x) for x in log.ready_after(start, end)],
        "karpenter_launch_attempts": sum(v["launch_attempts"] for v in per_pool.values()),
        "jobs_per_site": {
            site.spec.name: sum(j.scale_set_id == site.scale_set_id for j in jobs)
            for site in run.sites
        },
        "per_pool": per_pool,
        "window_s": _r(end - start),
        "critical_path": _critical_path(run),
    }


def _critical_path(run: VariantRun) -> dict[str, Any]:
    """Every job's milestones (tools/critical_path.py), seconds since cluster start; the
    pairs and header rises of each site attributed to its jobs by order."""
    origin, wall_origin = run.origin, run.window[0]
    stage = run.stage
    seen: dict[int, float] = {}
    for served in (
        stage.hud.first_served if stage.hud is not None else {},
        stage.github.first_served,
    ):
        for key, t in served.items():
            seen[key] = min(t, seen.get(key, t))

    def since(t: float | None) -> float | None:
        return None if t is None else t - origin

    by_site: dict[int, list[JobPath]] = {site.scale_set_id: [] for site in run.sites}
    paths: list[JobPath] = []
    for job in run.jobs:
        site = next((s for s in run.sites if s.scale_set_id == job.scale_set_id), None)
        ready = None
        if site is not None and site.standin is not None and job.runner_name is not None:
            ready = site.standin.ready_times.get(job.runner_name)
        failed = job.failure == TIMEOUT and job.workflow_started_at is None
        path = JobPath(
            queued=job.history[0][0] - origin,
            demand_seen=since(seen.get(job.runner_request_id)),
            assigned=since(job.assigned_at),
            runner_running=since(ready),
            workflow_running=since(job.workflow_started_at),
            failed=since(job.finished_at) if failed else None,
        )
        (by_site[site.scale_set_id] if site is not None else paths).append(path)
    pairs: list[Pair] = []
    for site in run.sites:
        reasons: dict[str, str] = {}
        for listener in site.listeners:
            if listener.log_path.exists():
                reasons |= delete_reasons(listener.log_path.read_text(errors="replace"))
        own = pairs_from_events(site.placeholder_events, wall_origin, reasons)
        pairs += own
        raised = rises(
            (c.monotonic - origin, c.value) for c in stage.fake.capacity_history(site.scale_set_id)
        )
        paths += attribute(by_site[site.scale_set_id], own, raised)
    return critical_path_figures(paths, pairs, run.window[1] - wall_origin)


METRICS = (
    ("failed by prepare timeout", ("failed_by_timeout",)),
    # A runner or workflow pod lost mid-run (its node removed, e.g. by consolidation).
    ("failed otherwise (pod lost mid-run)", ("failed_other",)),
    ("unfinished at the window's end", ("unfinished",)),
    ("waited > 60 s (incl. failed)", ("waited_over_60s",)),
    ("queue → workflow Running or failed p50 (s)", (WAIT, "p50")),
    ("queue → workflow Running or failed p90 (s)", (WAIT, "p90")),
    ("queue → workflow Running or failed p99 (s)", (WAIT, "p99")),
    ("queue → workflow Running or failed max (s)", (WAIT, "max")),
    ("succeeded jobs only: queue → workflow Running p50 (s)", (WAIT_SUCCEEDED, "p50")),
    ("succeeded jobs only: queue → workflow Running p90 (s)", (WAIT_SUCCEEDED, "p90")),
    ("node-seconds, total", ("node_seconds", "total")),
    ("node-seconds, runner pools", ("node_seconds", "runner")),
    ("node-seconds, workflow pools", ("node_seconds", "workflow")),
    # The cost of the work done: a job the timeout failed never ran its workflow pod, so a
    # variant that fails jobs holds fewer node-seconds in total for less work.
    ("node-seconds per succeeded job", (PER_SUCCEEDED,)),
    # What held those nodes (tools/node_occupancy.py; runs from before it have none).
    ("node-seconds launching (NodeClaim → Node)", (OCCUPANCY, "total", "launching")),
    ("node-seconds with a real pod", (OCCUPANCY, "total", "real")),
    ("node-seconds with placeholders / pause pods only", (OCCUPANCY, "total", "placeholders")),
    ("node-seconds empty", (OCCUPANCY, "total", "empty")),
    ("placeholder / pause pod-seconds", ("placeholder_pod_seconds",)),
    ("Karpenter launches", ("karpenter_launches",)),
)
# What a run from before WAIT recorded (failed-by-timeout jobs left out of the waits): the
# table shows these rows in place of the headline waits for such a run.
OLD_WAIT_METRICS = (
    ("queue → workflow Running p50 (s), failed left out", (WORKFLOW_RAN, "p50")),
    ("queue → workflow Running p90 (s), failed left out", (WORKFLOW_RAN, "p90")),
    ("queue → workflow Running p99 (s), failed left out", (WORKFLOW_RAN, "p99")),
    ("queue → workflow Running max (s), failed left out", (WORKFLOW_RAN, "max")),
)


def _get(figures: Mapping[str, Any], path: tuple[str, ...]) -> float | None:
    """The figure at ``path``; node-seconds per succeeded job derived from two figures."""
    if path == (PER_SUCCEEDED,):
        per_job = node_seconds_per_succeeded_job(figures)
        return None if per_job is None else round(per_job, 1)
    value: Any = figures
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return float(value) if isinstance(value, int | float) else None


def _spread(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def summarize(seeds: Mapping[str, Any], config: Config) -> dict[str, Any]:
    """Per variant and metric: median, min and max over seeds, of the value and of its ratio
    to ``stock_min0`` of the same seed."""
    summary: dict[str, Any] = {}
    for variant in config.variants:
        if not any(variant in figures["variants"] for figures in seeds.values()):
            continue  # not run
        entry: dict[str, Any] = {}
        for _, path in (*METRICS, *OLD_WAIT_METRICS):
            values, ratios = [], []
            for figures in seeds.values():
                own = figures["variants"].get(variant)
                base = figures["variants"].get(BASE)
                value = None if own is None else _get(own, path)
                if value is None:
                    continue
                values.append(value)
                under = None if base is None else _get(base, path)
                if under:
                    ratios.append(value / under)
            entry[".".join(path)] = {"value": _spread(values), "ratio_to_stock": _spread(ratios)}
        summary[variant] = entry
    bounds: dict[str, Any] = {}
    for _, path in (*METRICS, *OLD_WAIT_METRICS):
        values = [
            value
            for figures in seeds.values()
            if (value := _get(figures.get("reference") or {}, path)) is not None
        ]
        if values:
            bounds[".".join(path)] = {"value": _spread(values), "ratio_to_stock": None}
    if bounds:
        summary[REFERENCE] = bounds
    return summary


# Runner pods fit two to a runner node and workflow pods two to a workflow node.
SLOTS_PER_NODE = 2
REFERENCE = "offline optimum (bound)"


def reference(config: Config, seed_plan: SeedPlan) -> dict[str, Any]:
    """A lower bound on node-seconds for zero queue time: OPT₀ of the trace (every job known
    in advance) in slot-seconds with the shortest launch delay as lead time, divided by the
    slots per node, in each of the two pools a job occupies. No policy that starts every job
    the moment it is queued can hold less (packing, the shortage and the warm-up only add);
    the window's idle tail is not counted."""
    spans = [(a.at, a.at + a.duration) for a in seed_plan.arrivals]
    best = optimum(spans, lead=config.launch_delay[0])
    per_pool = (best.busy + best.spare) / SLOTS_PER_NODE
    return {
        "lead_s": config.launch_delay[0],
        "slots_per_node": SLOTS_PER_NODE,
        "succeeded": len(seed_plan.arrivals),
        "failed_by_timeout": 0,
        "failed_other": 0,
        "unfinished": 0,
        "waited_over_60s": 0,
        **{
            key: {"p50": 0, "p90": 0, "p99": 0, "max": 0}
            for key in (WAIT, WAIT_SUCCEEDED, WORKFLOW_RAN)
        },
        "node_seconds": {
            "runner": round(per_pool, 1),
            "workflow": round(per_pool, 1),
            "total": round(2 * per_pool, 1),
        },
        "busy_slot_seconds": round(best.busy, 1),
        "spare_slot_seconds": round(best.spare, 1),
        "priced": priced_reference(config, spans),
    }


def priced_reference(config: Config, spans: Sequence[tuple[float, float]]) -> dict[str, Any]:
    """The same bound with each launch priced as this cluster charges it: the mean launch
    delay as lead time, plus Karpenter's ``consolidateAfter`` as the empty tail a released
    node is paid for before it goes. Still perfect packing and foresight: what the best
    policy could hold here, not a floor no policy can reach (the bound above is that)."""
    lead = statistics.fmean(config.launch_delay)
    tail = parse_duration(config.consolidate_after)
    priced = optimum(spans, lead=lead, launch_cost=tail)
    return {
        "lead_s": lead,
        "tail_s": tail,
        "launches": priced.launches,
        "node_seconds": {"total": round(2 * (priced.busy + priced.spare) / SLOTS_PER_NODE, 1)},
    }


_REFUSED_SAID = re.compile(r"reports a refused type unavailable for ([0-9.]+) s")


def recorded_refused_ttl(described: Mapping[str, Any]) -> float:
    """The fake cloud's memory of a refused type a saved run had: ``refused_type_ttl_s``;
    the first runs with the memory said it only in their settings list; none before."""
    value = described.get("refused_type_ttl_s")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    for line in described.get("changed_settings") or ():
        found = _REFUSED_SAID.search(str(line))
        if found:
            return float(found.group(1))
    return 0.0


def config_of(document: Mapping[str, Any]) -> Config:
    """The configuration a saved JSON was run with (FULL or SMOKE, with its seeds)."""
    described = document["config"]
    for known in (FULL, SMOKE):
        if (
            known.describe()["trace_spec"] == described["trace_spec"]
            and list(known.launch_delay) == described["node_provisioning_delay_s"]
        ):
            return replace(
                with_family(known, described.get("family", "capped")),
                seeds=tuple(described["seeds"]),
                variants=tuple(described["variants"]),
                # Runs made before these were recorded read HUD every 30 s and held pairs
                # for downscale_delay.
                demand_interval=described.get("demand_interval_s", 30.0),
                demand_hold=described.get("demand_hold", "downscale_delay"),
                nodepools=described.get("nodepools_enabled", False),
                refused_ttl=recorded_refused_ttl(described),
                warm=int(described.get("N", known.warm)),
            )
    raise ValueError("config: the saved run matches neither FULL nor SMOKE; cannot re-plan it")


def with_reference(document: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` with the reference per seed (planned again: it depends on the trace
    alone, and older runs lack it or some of its figures) and the summary."""
    config = config_of(document)
    seeds = {
        key: {
            **figures,
            "reference": reference(config, plan(config, int(key))),
        }
        for key, figures in document["seeds"].items()
    }
    result = {**document, "seeds": seeds, "summary": summarize(seeds, config)}
    old = old_wait_seeds(seeds)
    if old:
        result["old_wait_seeds"] = old
    else:
        result.pop("old_wait_seeds", None)
    return result


def old_wait_seeds(seeds: Mapping[str, Any]) -> list[int]:
    """Seeds run before the headline wait (WAIT) was recorded: their waits leave out the jobs
    failed by the prepare-job timeout, and the summary's headline waits leave those seeds out."""
    return sorted(
        int(key)
        for key, figures in seeds.items()
        if any(WAIT not in own for own in figures["variants"].values())
    )


def merge(documents: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`merge_seeds`, then the summary and the offline optimum's bound computed again."""
    return with_reference(merge_seeds(documents))


def merge_seeds(documents: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One document from runs of the same configuration (a long benchmark run in parts): seeds
    together (the caller computes the summary again). The first run's figures and load
    averages are kept; each seed keeps its own. ValueError if the runs differ in a setting both
    recorded.

    Runs of other variants on the same seed join that seed (a six-variant table measured a few
    variants at a time): their trace must be the same (jobs, arrivals, shortage) and no variant
    may be in two of them; the seed's ``parts`` say which variants came from which run, with
    that run's load averages, so a reader sees they were not on one clock.

    A setting an older run did not record yet (the JSON gained it later) is taken from the
    runs that did, and ``unrecorded`` names it with the seeds whose run lacked it: the reader
    sees which values are stated rather than recorded."""
    if not documents:
        raise ValueError("merge: no documents")
    configs = [
        {k: v for k, v in d["config"].items() if k not in ("seeds", "variants")} for d in documents
    ]
    combined: dict[str, Any] = {}
    for config in configs:
        for key, value in config.items():
            if key in combined and combined[key] != value:
                raise ValueError(f"merge: the runs have another configuration: {key}")
            combined[key] = value
    seeds: dict[str, Any] = {}
    unrecorded: dict[str, list[int]] = {}
    for config, document in zip(configs, documents, strict=True):
        for key in sorted(combined.keys() - config.keys()):
            unrecorded.setdefault(key, []).extend(int(k) for k in document["seeds"])
        for key, figures in document["seeds"].items():
            seeds[key] = _join_seed(key, seeds[key], figures) if key in seeds else figures
    first = documents[0]
    ran = {v for d in documents for v in d["config"].get("variants", ())}
    ran |= {v for figures in seeds.values() for v in figures["variants"]}
    config_doc = {
        **combined,
        "variants": [v for v in VARIANTS if v in ran] + sorted(ran - set(VARIANTS)),
        "seeds": sorted(int(k) for k in seeds),
    }
    merged = {
        **first,
        "config": config_doc,
        "seeds": seeds,
        "run_seconds": round(sum(float(d.get("run_seconds") or 0.0) for d in documents), 1),
        "parts": [
            {
                "seeds": list(d["seeds"]),
                "variants": list(d["config"].get("variants", ())),
                "date": d.get("date"),
                "run_seconds": d.get("run_seconds"),
            }
            for d in documents
        ],
    }
    if unrecorded:
        merged["unrecorded"] = {key: sorted(found) for key, found in unrecorded.items()}
    return merged


# What a seed's trace is: runs that joined one seed must agree on these.
_TRACE_FACTS = ("jobs", "last_arrival_s", "shortage_s", "window_s")


def _join_seed(key: str, ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> dict[str, Any]:
    """Seed ``key``'s figures from two runs of other variants (see `merge_seeds`)."""
    for fact in _TRACE_FACTS:
        if fact in ours and fact in theirs and ours[fact] != theirs[fact]:
            raise ValueError(f"merge: seed {key}'s runs have another trace: {fact}")
    twice = sorted(ours["variants"].keys() & theirs["variants"].keys())
    if twice:
        raise ValueError(f"merge: seed {key} has {', '.join(twice)} in more than one run")

    def part(figures: Mapping[str, Any]) -> list[dict[str, Any]]:
        return list(
            figures.get("parts")
            or [
                {"variants": list(figures["variants"]), "load_average": figures.get("load_average")}
            ]
        )

    return {
        **ours,
        "variant_order": [*ours.get("variant_order", ()), *theirs.get("variant_order", ())],
        "variants": {**ours["variants"], **theirs["variants"]},
        "parts": part(ours) + part(theirs),
    }


def report(document: Mapping[str, Any]) -> str:
    """The README table, then where the wait goes per step (for runs that recorded it)."""
    steps = steps_table(document["seeds"], VARIANTS, HEADERS)
    return table(document) + (f"\n\n{steps}" if steps else "")


def table(document: Mapping[str, Any]) -> str:
    """The README table: median (min–max) over seeds, and the median ratio to stock; the
    offline optimum's bound as the last column."""
    summary = document["summary"]
    names = [v for v in VARIANTS if v in summary]
    recorded = any((summary[n].get(f"{WAIT}.p90") or {}).get("value") is not None for n in names)
    rows: list[tuple[str, tuple[str, ...]]] = list(METRICS)
    if not recorded:  # an old run: its own waits, labelled, in place of the headline
        at = next(i for i, (_, path) in enumerate(rows) if path[0] == WAIT)
        rows = [
            *rows[:at],
            *OLD_WAIT_METRICS,
            *(row for row in rows[at:] if row[1][0] not in (WAIT, WAIT_SUCCEEDED)),
        ]
    if REFERENCE in summary:
        names.append(REFERENCE)
    lines = [
        "| | " + " | ".join(HEADERS.get(n, n) for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for label, path in rows:
        cells = []
        for name in names:
            cell = summary[name].get(".".join(path), {"value": None, "ratio_to_stock": None})
            value, ratio = cell["value"], cell["ratio_to_stock"]
            if value is None:
                cells.append("–")
                continue
            text = f"{value['median']:g} ({value['min']:g}–{value['max']:g})"
            if name != BASE and ratio is not None:
                text += f" ×{ratio['median']:.2g}"
            cells.append(text)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    old = document.get("old_wait_seeds")
    if old:
        lines.append("")
        lines.append(
            f"Seeds {', '.join(map(str, old))} were run before failed jobs counted in the "
            "waits: their waits leave out the jobs failed by the prepare-job timeout"
            + (" and are not in the headline waits above." if recorded else ".")
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------- pictures


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 11})
    return plt


def _draw(
    run: VariantRun,
    config: Config,
    seed_plan: SeedPlan,
    figures: Mapping[str, Any],
    path: Path,
) -> None:
    plt = _pyplot()
    colors = ("tab:blue", "tab:orange")
    window = config.warmup + seed_plan.last_arrival + config.tail
    t = [p.t for p in run.points]
    fig, axes = plt.subplots(3, 1, figsize=(13, 9), sharex=True)
    top, middle, bottom = axes
    for i, name in enumerate(SITE_NAMES):
        top.step(
            t,
            [p.header[i] if p.header[i] is not None else 0 for p in run.points],
            where="post",
            color=colors[i],
            alpha=0.6,
            label=f"{name}: header sent",
        )
        if run.name.startswith("ours"):
            top.step(
                t,
                [p.confirmed[i] for p in run.points],
                where="post",
                color=colors[i],
                linewidth=2.2,
                label=f"{name}: confirmed capacity (Running pairs)",
            )
    top.set_ylabel("runners")
    middle.step(t, [p.queued for p in run.points], where="post", color="black", label="queued")
    for i, name in enumerate(SITE_NAMES):
        middle.step(
            t,
            [p.running[i] for p in run.points],
            where="post",
            color=colors[i],
            label=f"{name}: claimed by a runner",
        )
    middle.set_ylabel("jobs")
    log = run.log
    assert log is not None
    origin = run.window[0]
    for i, site in enumerate(run.sites):
        for pool, style in (("runner", "--"), ("workflow", "-")):
            name = nodepool_name(site, pool)
            bottom.step(
                [w - origin for w, _ in log.counts],
                [c.get(name, 0) for _, c in log.counts],
                where="post",
                color=colors[i],
                linestyle=style,
                label=f"{SITE_NAMES[i]}: {pool} NodeClaims",
            )
    bottom.set_ylabel("NodeClaims")
    bottom.set_xlabel("seconds since cluster start")
    for ax in axes:
        ax.axvspan(
            config.warmup + seed_plan.shortage[0],
            config.warmup + seed_plan.shortage[1],
            color="red",
            alpha=0.08,
            label=f"{SITE_NAMES[0]} workflow type out of capacity",
        )
        ax.axvline(config.warmup, color="grey", linewidth=0.8, linestyle=":")
        ax.set_xlim(0, window)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=10, frameon=False)
    waits = figures["variants"][run.name][WAIT]
    top.set_title(
        f"{HEADERS[run.name]} (seed {seed_plan.seed}): p90 wait {waits['p90']} s (failed "
        "counted), "
        f"{figures['variants'][run.name]['failed_by_timeout']} failed by timeout; "
        "dotted: first arrival slot",
        fontsize=12,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _draw_summary(seeds: Mapping[str, Any], config: Config, path: Path) -> None:
    def point(own: Mapping[str, Any]) -> tuple[Any, Any]:
        # An old run has no headline wait: its own (failed left out), as it was drawn.
        wait = WAIT if WAIT in own else WORKFLOW_RAN
        return _get(own, ("node_seconds", "total")), _get(own, (wait, "p90"))

    scatter_by_variant(
        seeds,
        {variant: HEADERS[variant] for variant in config.variants},
        point,
        path,
        labels=(
            "node-seconds in the window (all pools)",
            "p90 queue → workflow Running or failed (s)",
            "The trade-off: one point per variant and seed",
        ),
    )


def scatter_by_variant(
    seeds: Mapping[str, Any],
    variants: Mapping[str, str],
    point: Callable[[Mapping[str, Any]], tuple[Any, Any]],
    path: Path,
    labels: tuple[str, str, str],
) -> None:
    """One marker per variant (``variants``: name → legend), one point per seed: ``point``
    reads (cost, wait) from a variant's figures (either None: no point). ``labels``: the x
    axis, the y axis, the title."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 6))
    markers = "osD^vP"
    for index, (variant, legend) in enumerate(variants.items()):
        xs, ys = [], []
        for figures in seeds.values():
            own = figures["variants"].get(variant)
            x, y = (None, None) if own is None else point(own)
            if x is not None and y is not None:
                xs.append(x)
                ys.append(y)
        ax.scatter(xs, ys, marker=markers[index % len(markers)], s=60, label=legend)
    xlabel, ylabel, title = labels
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=12)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=10, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# ---------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    from tools.control_plane import new_workdir

    parser = argparse.ArgumentParser(prog="python -m tools.bench_outcomes")
    sub = parser.add_subparsers(dest="command", required=True)
    run_cmd = sub.add_parser("run", help="run the benchmark; JSON + figures into --out")
    run_cmd.add_argument("--out", type=Path, default=Path("docs/img"))
    run_cmd.add_argument("--seeds", type=int, nargs="*", default=None, help="default: FULL's")
    run_cmd.add_argument("--smoke", action="store_true", help="the 3-minute smoke run")
    run_cmd.add_argument("--variants", nargs="*", default=None, help="default: the config's")
    run_cmd.add_argument(
        "--family",
        choices=[*sorted(FAMILIES), "staged"],
        default="capped",
        help="capped: maxRunners 10 per cluster (the bottleneck at busy times); roomy: "
        "maxRunners above the trace's peak of jobs in flight; staged: builds fanning out "
        "into shards on slow GPU-like nodes (tools/bench_staged.py)",
    )
    run_cmd.add_argument("--workdir", type=Path, default=None)
    run_cmd.add_argument(
        "--warm",
        type=int,
        default=None,
        metavar="N",
        help="minRunners, pause pods and warm pool pairs per cluster (default 2); runs with "
        "another N are their own table (merge refuses to mix them)",
    )
    run_cmd.add_argument(
        "--nodepools",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="ours with nodepools.enabled, Karpenter's NodePools and insufficient-capacity "
        "Events read (the default; --no-nodepools: off, as runs before it was the default); "
        "capped and roomy families",
    )
    table_cmd = sub.add_parser("table", help="print the README table from a saved JSON")
    table_cmd.add_argument("json", type=Path)
    merge_cmd = sub.add_parser(
        "merge",
        help="one JSON from runs of one config on other seeds or variants; redraws the summary",
    )
    merge_cmd.add_argument("json", type=Path, nargs="+")
    merge_cmd.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "table":
        document = json.loads(args.json.read_text())
        with contextlib.suppress(BrokenPipeError):
            if document["config"].get("family") == "staged":
                from tools import bench_staged

                print(bench_staged.report(document))
            else:
                print(report(with_reference(document)))
        return 0
    if args.command == "run" and args.family == "staged":
        from tools import bench_staged

        return bench_staged.run_family(
            smoke=args.smoke,
            seeds=args.seeds,
            variants=args.variants,
            out=args.out,
            workdir=args.workdir,
        )
    if args.command == "merge":
        documents = [json.loads(path.read_text()) for path in args.json]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        if documents and documents[0]["config"].get("family") == "staged":
            from tools import bench_staged

            return bench_staged.merge_into(documents, args.out)
        try:
            merged = merge(documents)
        except ValueError as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
        # The summary figure has a point per variant and seed: drawn again for all of them.
        # (The per-variant timelines show the first seed, which the first run kept.)
        _draw_summary(merged["seeds"], config_of(merged), args.out.parent / "outcomes-summary.png")
        _write(args.out, merged)
        print(report(merged))
        return 0
    config = with_family(SMOKE if args.smoke else FULL, args.family)
    if args.seeds:
        config = replace(config, seeds=tuple(args.seeds))
    if args.variants:
        # A name that is no variant would run as demand only and fail at its first report.
        unknown = sorted(set(args.variants) - set(VARIANTS))
        if unknown:
            parser.error(f"--variants: {', '.join(unknown)} not one of {', '.join(VARIANTS)}")
        config = replace(config, variants=tuple(args.variants))
    if args.nodepools is not None:
        config = replace(config, nodepools=args.nodepools)
    if args.warm is not None:
        if args.warm < 0:
            parser.error(f"--warm: must be 0 or more, got {args.warm}")
        config = replace(config, warm=args.warm)
    workdir = args.workdir or new_workdir("capacity-listener-outcomes")

    document = asyncio.run(benchmark(workdir, args.out, config))
    print(report(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
