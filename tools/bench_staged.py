"""The outcome benchmark's ``staged`` trace family (``python -m tools.bench_outcomes run
--family staged``): staged CI, a build on CPU runners that fans out into test shards on
GPU-like runners whose nodes launch slowly, with stock ARC and our listener side by side.

The trace is ``python -m tools.whatif_synth --family staged``'s (tools/whatif_staged.py),
its durations scaled down so a seed fits about 25 minutes: per run a ``build`` job (label
``linux-cpu``), then, when it succeeds, K ``test (i/K)`` shards (``linux-gpu``, or
``linux-cpu`` for the lint workflow), sometimes a ``report`` job after the last shard;
cancelled runs, failed builds and re-runs (``run_attempt`` 2) as the generator makes them.

Layout: ONE cluster per variant (a Site of tools/e2e_site.py per scale set, both on the
variant's own fake Actions service, HUD and namespaces, on the one control plane): a
``build`` scale set (labels ``linux-cpu``) and a ``shards`` scale set (``linux-gpu``), each
with a runner and a workflow Karpenter NodePool. The shards' workflow pool uses a KWOKNodeClass
whose nodes register ``gpu_registration`` seconds after launch, on top of the per-node launch
delay every pool draws (``launch_delay``): GPU-like nodes, slow to boot and pull. One cluster
and not two because the predictive warm pool refuses demand sharding (every peer would hold
every predicted pair), and a stage's jobs go to the one scale set of their labels anyway.

Jobs flow as staged CI does, per variant: a run's first jobs are queued at their trace time;
a later job is queued when every job of its run attempt that ended before it in the trace
has ended in this variant, as long after the last of them as in the trace (``needs`` and
``after`` of ``StagedJob``). A job whose ``needs`` include one the variant failed (the
prepare-job timeout) is never queued, as GitHub skips a stage after a failed one; it is
counted (``children_not_queued``). So a variant that is slow to start builds delays its
own shards, and the GitHub demand source sees each build ``in_progress`` from the moment its
runner took it, as the predictive pool needs. Every job carries its workflow file, job name,
run id and run attempt into the fake Actions service, whose fake GitHub REST API
(tools/fake_github_rest.py) serves them as GitHub does.

Variants (all of a seed at once, the same clock, set up in a seeded shuffled order):

* ``stock_min0``, ``stock_minN``: ARC's listener, ``minRunners`` 0 or N on both scale sets;
* ``stock_overprov``: ARC's listener and N runner-sized plus N workflow-sized pause pods per
  scale set (the shards' are GPU-node-sized);
* ``ours_reactive``: our listener on both scale sets, pairs for queued jobs only, demand from
  the GitHub REST source (``demand.source: github``);
* ``ours_predictive``: the same, and ``warm_pool.predictive`` on the shards' scale set. Its
  stage model starts as the listener would find it after a history of the same CI: learned
  (whatif/predict.py ``learn``) from a staged trace of another seed
  (``train_seed`` + seed, ``train_minutes`` long, ending an hour before the run), written to
  the ConfigMap the listener reads at start; the listener keeps learning from what it sees.

Figures: everything the other families record per variant (bench_outcomes ``_figures``), and
under ``staged`` the shards' (``linux-gpu`` jobs') waits, the node-seconds of the shards'
pools (``gpu``: the slow workflow pool) and its nodes' launch times (``gpu_node_ready_s``),
the children not queued and, for the predictive
variant, whether its listener logged that it loaded the model. The window runs from
cluster start to ``tail`` after the trace's last job would have ended with no wait.

What it does not model beyond the other families: the GitHub REST API's own latency (the fake
answers at once), a build's logs or artefacts, a run cancelled because a newer push came.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import random
import sys
import time
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tools import node_occupancy
from tools.bench_outcomes import (
    LONG_POLL,
    PAT,
    REFUSED_TYPE_TTL,
    RUNNER_REQUESTS,
    SHIPPED_POD_ANNOTATIONS,
    WAIT,
    WORKFLOW_REQUESTS,
    VariantRun,
    _create_pause_pods,
    _ensure_overprov_class,
    _figures,
    _get,
    _running_pause_pods,
    _sample,
    _spread,
    _write,
    merge_seeds,
    read_occupancy,
    wait_figures,
)
from tools.bench_outcomes import METRICS as OUTCOME_METRICS
from tools.critical_path import table as steps_table
from tools.e2e_karpenter import (
    NodeClaimLog,
    delete_nodepools,
    ensure_karpenter,
    nodepool_name,
    reset_cloud,
    site_nodepool,
)
from tools.e2e_site import Pool, Site, SiteSpec, Stage
from tools.fake_actions import FakeActions, FakeJob, JobState
from tools.localcluster import LocalCluster
from tools.localcluster.karpenter import WORKFLOW_TYPE, Karpenter
from tools.localcluster.rest import TRANSIENT
from tools.whatif_staged import StagedSpec, generate_staged
from whatif.predict import learn
from whatif.trace import TraceJob

BUILD, SHARDS = "build", "shards"
SITES = (BUILD, SHARDS)
SITE_LABELS = {BUILD: ("linux-cpu",), SHARDS: ("linux-gpu",)}
SITE_TYPES: dict[str, dict[str, tuple[str, ...]]] = {
    BUILD: {"runner": ("c-2x",), "workflow": ("c-4x",)},
    SHARDS: {"runner": ("c-2x",), "workflow": (WORKFLOW_TYPE,)},
}
SLOW_CLASS = "staged-gpu"  # the KWOKNodeClass of the shards' workflow pool
BASE = "stock_min0"
VARIANTS = ("stock_min0", "stock_minN", "stock_overprov", "ours_reactive", "ours_predictive")
HEADERS = {
    "stock_min0": "stock, minRunners 0",
    "stock_minN": "stock, minRunners N",
    "stock_overprov": "stock + pause pods",
    "ours_reactive": "ours, reactive",
    "ours_predictive": "ours, predictive",
}
RUN_IDS = 70_000  # fake run id = this + the trace's run number
OWNER, REPOSITORY = "acme", "app"  # the organization the fakes serve, and its repository
WORKFLOWS_DIR = ".github/workflows/"
STAGE_MODEL_KEY = "model.json"  # capacity/kept.py keeps the model under this key
MODEL_LOADED = "stage model loaded"  # what the listener logs when it read that model


@dataclass(frozen=True)
class StagedConfig:
    """Everything a staged run depends on; ``describe()`` is printed with the results."""

    spec: StagedSpec
    seeds: tuple[int, ...]
    variants: tuple[str, ...] = VARIANTS
    warm: int = 4  # N: minRunners and pause pods per pool, per scale set
    max_runners: int = 80  # per scale set: above any seed's peak of jobs in flight
    warmup: float = 150.0  # cluster start -> the trace's t=0
    tail: float = 300.0  # the window ends this long after the trace's last end (no waits)
    overtime: float = 300.0  # wait at most this much longer for unfinished jobs
    prepare_timeout: float = 600.0  # the hooks' default: GPU pods wait for slow nodes
    launch_delay: tuple[float, float] = (30.0, 90.0)  # every node
    gpu_registration: float = 120.0  # added for the shards' workflow (GPU) nodes
    consolidate_after: str = "30s"
    waited_long: float = 60.0
    train_seed: int = 1000  # the predictive model learns from seed train_seed + s
    train_minutes: float = 240.0
    family: str = "staged"

    def describe(self) -> dict[str, Any]:
        low, high = self.launch_delay
        return {
            "seeds": list(self.seeds),
            "variants": list(self.variants),
            "trace_spec": self.spec.describe(),
            "N": self.warm,
            "family": self.family,
            "max_runners_per_scale_set": self.max_runners,
            "window": {
                "warmup_s": self.warmup,
                "after_last_trace_end_s": self.tail,
                "overtime_s": self.overtime,
            },
            "node_provisioning_delay_s": [low, high],
            "gpu_node_provisioning_delay_s": [
                low + self.gpu_registration,
                high + self.gpu_registration,
            ],
            "scale_sets": {name: list(SITE_LABELS[name]) for name in SITES},
            "instance_types": {
                name: {k: list(v) for k, v in types.items()} for name, types in SITE_TYPES.items()
            },
            "requests": {"runner": RUNNER_REQUESTS, "workflow": WORKFLOW_REQUESTS},
            "consolidate_after": self.consolidate_after,
            "prepare_timeout_s": self.prepare_timeout,
            "stage_model_training": {
                "seed": f"{self.train_seed} + seed",
                "minutes": self.train_minutes,
            },
            "runner_and_workflow_pod_annotations": dict(SHIPPED_POD_ANNOTATIONS),
            "changed_settings": self.changed_settings(),
        }

    def changed_settings(self) -> list[str]:
        """Every setting that is not the product's (or the environment's) default."""
        return [
            f"stock_minN: minRunners {self.warm}; stock_overprov: {self.warm} + {self.warm} "
            "pause pods per scale set",
            "ours: demand.source github (the fake GitHub REST API); placement and resources "
            "of the placeholders set to the pools' (required configuration, not tuning)",
            "ours_predictive: warm_pool.predictive.enabled on the shards' scale set (horizon, "
            "hold and count_quantile at their defaults); its stage model learned from a "
            f"{self.train_minutes:g}-minute staged trace of seed {self.train_seed} + seed",
            f"environment: Karpenter consolidateAfter {self.consolidate_after}, "
            "WhenEmptyOrUnderutilized, budget 100 %; maxRunners "
            f"{self.max_runners} per scale set; GPU nodes register "
            f"{self.gpu_registration:g} s after launch; the fake cloud reports a refused "
            f"type unavailable for {REFUSED_TYPE_TTL:g} s after each refusal (AWS's default)",
            "everything else at product defaults: recalculate_interval 30 s, github.* "
            "defaults, downscale_delay 300 s, placeholder_ready_timeout 300 s, "
            "max_pending_pairs 30",
        ]


# Durations of the staged family scaled by 1/5 (the PR build's median 240 s, its shards'
# 180 s): an 8-minute arrival window, and seeds with 28-56 GPU shards each (seeds 5, 6, 10
# and 15 give fewer than 20; 7, 8 and 13 more than 70; not used).
FULL = StagedConfig(
    spec=StagedSpec(
        minutes=8,
        runs_per_minute_quiet=0.8,
        runs_per_minute_busy=1.5,
        rerun_after=(30.0, 180.0),
        duration_scale=0.2,
    ),
    seeds=(1, 4, 9, 12, 14),
)
# The smoke run: one seed, three variants, a 3-minute arrival window, short durations and
# launches.
SMOKE = replace(
    FULL,
    spec=replace(FULL.spec, minutes=2, runs_per_minute_quiet=1.0, duration_scale=0.05),
    seeds=(3,),
    variants=("stock_min0", "ours_reactive", "ours_predictive"),
    warmup=60.0,
    tail=30.0,
    overtime=60.0,
    prepare_timeout=300.0,
    launch_delay=(10.0, 30.0),
    gpu_registration=45.0,
    train_minutes=120.0,
)


# ---------------------------------------------------------------------- the trace as jobs


@dataclass(frozen=True)
class StagedJob:
    """One trace job as the benchmark queues it (times in seconds after the trace's t=0)."""

    index: int  # in the plan's jobs
    run: int  # the trace's run number
    attempt: int
    workflow: str  # the workflow file's path
    name: str
    labels: tuple[str, ...]
    at: float  # queued in the trace
    duration: float
    # The jobs of its run attempt that ended before it was queued in the trace (its stage's
    # ``needs``), and how long after the last of them it was queued. No needs: queued at
    # ``at``.
    needs: tuple[int, ...] = ()
    after: float = 0.0

    @property
    def end(self) -> float:
        """When it ended in the trace (no waits)."""
        return self.at + self.duration


@dataclass(frozen=True)
class StagedPlan:
    seed: int
    jobs: tuple[StagedJob, ...]

    @property
    def last_end(self) -> float:
        return max(j.end for j in self.jobs)


def staged_jobs(trace: Sequence[TraceJob], start: float) -> tuple[StagedJob, ...]:
    """The trace's jobs in queue order with their ``needs`` (see StagedJob)."""
    ordered = sorted(trace, key=lambda j: (j.queued_at, int(j.job)))
    jobs: list[StagedJob] = []
    for job in ordered:
        at = round(job.queued_at - start, 3)
        duration = round(float(job.duration or 0.0), 3)
        needs = tuple(
            other.index
            for other in jobs
            if (other.run, other.attempt) == (int(job.run), job.run_attempt) and other.end <= at
        )
        after = at - max(jobs[i].end for i in needs) if needs else 0.0
        jobs.append(
            StagedJob(
                index=len(jobs),
                run=int(job.run),
                attempt=job.run_attempt,
                workflow=job.workflow,
                name=job.job_name,
                labels=job.labels,
                at=at,
                duration=duration,
                needs=needs,
                after=round(after, 3),
            )
        )
    return tuple(jobs)


def plan(config: StagedConfig, seed: int) -> StagedPlan:
    return StagedPlan(seed, staged_jobs(generate_staged(config.spec, seed), config.spec.start))


def fake_job_fields(job: StagedJob) -> dict[str, Any]:
    """What ``FakeActions.add_jobs`` is given for one job: its labels and duration, and the
    workflow file, job name, run and attempt the GitHub demand source reads back."""
    return {
        "owner": OWNER,
        "repo": REPOSITORY,
        "labels": list(job.labels),
        "duration": job.duration,
        "workflow_file": job.workflow.removeprefix(WORKFLOWS_DIR),
        "display_name": job.name,
        "run_id": RUN_IDS + job.run,
        "run_attempt": job.attempt,
    }


NEVER = math.inf  # a job whose needs include a failed one is never queued


def release_at(
    job: StagedJob,
    ended: Mapping[int, tuple[float, bool]],
    warmup: float,
    skipped: Set[int] = frozenset(),
) -> float | None:
    """When to queue ``job`` (seconds since cluster start): ``warmup + at`` without needs;
    else ``after`` past the last of its needs' ends (``ended``: index -> (end, succeeded));
    NEVER when one of them failed or was itself never queued (``skipped``); None while one
    is still to end."""
    if not job.needs:
        return warmup + job.at
    ends = [ended.get(i) for i in job.needs]
    if any(e is not None and not e[1] for e in ends) or any(i in skipped for i in job.needs):
        return NEVER
    if any(e is None for e in ends):
        return None
    return max(e[0] for e in ends if e is not None) + job.after


def trained_model(config: StagedConfig, seed: int, now: float) -> dict[str, object]:
    """The stage model the predictive variant starts with: learned from a staged trace of
    seed ``train_seed + seed`` that ends about an hour before ``now`` (so it is fresh)."""
    span = config.train_minutes * 60.0
    spec = replace(config.spec, minutes=config.train_minutes, start=now - span - 7200.0)
    return learn(generate_staged(spec, config.train_seed + seed)).to_dict()


# ---------------------------------------------------------------------- running


@dataclass
class StagedRun:
    """A variant's run and its jobs by plan index."""

    run: VariantRun
    queued: dict[int, FakeJob]
    never: set[int]


async def benchmark(
    cluster: LocalCluster, workdir: Path, out: Path, config: StagedConfig = FULL
) -> dict[str, Any]:
    """Run every seed (variants side by side) and write JSON + the summary figure to ``out``."""
    started = time.monotonic()
    karpenter = await asyncio.to_thread(ensure_karpenter, cluster, _say)
    await asyncio.to_thread(out.mkdir, parents=True, exist_ok=True)
    karpenter.set_registration_delay("0s")
    await asyncio.to_thread(
        karpenter.ensure_node_class, SLOW_CLASS, f"{config.gpu_registration:g}s"
    )
    await asyncio.to_thread(_ensure_overprov_class, cluster)
    result: dict[str, Any] = {
        "config": config.describe(),
        "load_average": {"start": list(os.getloadavg())},
        "seeds": {},
    }
    try:
        for seed in config.seeds:
            seed_plan = plan(config, seed)
            _say(
                f"staged seed {seed}: {len(seed_plan.jobs)} jobs in the trace, last end "
                f"{seed_plan.last_end:.0f}s"
            )
            figures = await _run_seed(cluster, karpenter, workdir, config, seed_plan)
            figures["load_average"] = list(os.getloadavg())
            result["seeds"][str(seed)] = figures
            await asyncio.to_thread(_write, out / "outcomes-staged.json", result)
    finally:
        await asyncio.to_thread(reset_cloud, karpenter)
    result["summary"] = summarize(result["seeds"], config.variants)
    result["load_average"]["end"] = list(os.getloadavg())
    summary_png = out / "outcomes-staged-summary.png"
    _draw_summary(result["seeds"], config.variants, summary_png)
    result["images"] = [summary_png.name]
    result["run_seconds"] = round(time.monotonic() - started, 1)
    result["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result["note"] = (
        "Measured on a shared 2-core machine under load; absolute seconds vary with load, "
        "ratios of the same seed hold better."
    )
    await asyncio.to_thread(_write, out / "outcomes-staged.json", result)
    return result


def _say(line: str) -> None:
    print(f"bench: {line}", file=sys.stderr, flush=True)


async def _run_seed(
    cluster: LocalCluster,
    karpenter: Karpenter,
    workdir: Path,
    config: StagedConfig,
    seed_plan: StagedPlan,
) -> dict[str, Any]:
    seed = seed_plan.seed
    karpenter.set_launch_delay(*config.launch_delay, seed=seed)
    karpenter.set_insufficient_capacity_ttl(REFUSED_TYPE_TTL)
    order = list(config.variants)
    random.Random(f"order-{seed}").shuffle(order)
    runs: dict[str, StagedRun] = {}
    async with contextlib.AsyncExitStack() as stack:
        for number, name in enumerate(order):
            fake = FakeActions(
                pats=[PAT],
                poll_hold=LONG_POLL,
                strand_grace=config.waited_long,
                assign_seed=seed,
                broker=True,
            )
            stage = await stack.enter_async_context(
                Stage(cluster, workdir / f"staged{seed}-{name}", fake=fake, prefix="stg")
            )
            # The organization has its repository before any job runs, as on GitHub: the
            # demand source lists it at start and again only every repositories_refresh.
            stage.github.add_repositories(OWNER, [REPOSITORY])
            run = VariantRun(name, stage, karpenter)
            runs[name] = StagedRun(run, {}, set())
            for index, site_name in enumerate(SITES):
                site = await stage.add_site(
                    SiteSpec(
                        name=site_name,
                        scale_set_id=2000 + 20 * number + index,
                        labels=SITE_LABELS[site_name],
                        runner_pool=Pool(nodes=0),
                        workflow_pool=Pool(nodes=0),
                        runner_requests=RUNNER_REQUESTS,
                        workflow_requests=WORKFLOW_REQUESTS,
                        strand_after=config.waited_long,
                        prepare_timeout=config.prepare_timeout,
                        pod_annotations=SHIPPED_POD_ANNOTATIONS,
                    )
                )
                run.pools += await asyncio.to_thread(_create_nodepools, karpenter, site, config)
                run.sites.append(site)
            run.log = NodeClaimLog(cluster, run.pools).start()
        try:
            await _play(runs, order, karpenter, config, seed_plan)
        finally:
            for staged in runs.values():
                if staged.run.log is not None:
                    await staged.run.log.stop()
            for staged in runs.values():
                for site in staged.run.sites:
                    if site.listener is not None and site.listener.returncode is None:
                        await site.listener.stop(within=15.0)
    _say(f"staged seed {seed}: removing NodePools and nodes")
    await asyncio.to_thread(
        delete_nodepools, karpenter, [p for s in runs.values() for p in s.run.pools]
    )
    window = config.warmup + seed_plan.last_end + config.tail
    logs = await asyncio.to_thread(read_occupancy, cluster)
    return {
        "trace_jobs": len(seed_plan.jobs),
        "trace_last_end_s": round(seed_plan.last_end, 2),
        "window_s": round(window, 2),
        "variant_order": order,
        "variants": {
            name: _variant_figures(staged, seed_plan, config, window, logs)
            for name, staged in runs.items()
        },
    }


def _create_nodepools(karpenter: Karpenter, site: Site, config: StagedConfig) -> list[str]:
    names = []
    for pool in ("runner", "workflow"):
        manifest = site_nodepool(
            site,
            pool,
            SITE_TYPES[site.spec.name][pool],
            consolidate_after=config.consolidate_after,
        )
        if site.spec.name == SHARDS and pool == "workflow":
            manifest["spec"]["template"]["spec"]["nodeClassRef"]["name"] = SLOW_CLASS
        names.append(karpenter.create_nodepool(manifest))
    return names


def capacity_settings(site: Site, variant: str) -> dict[str, Any] | None:
    """Our listener's settings for ``site`` in ``variant`` (None: stock ARC)."""
    if not variant.startswith("ours"):
        return None
    settings = site.capacity_settings(proactive=0, demand={"source": "github"})
    # Back to the product's defaults (capacity_settings is tuned for fast tests).
    for key in (
        "recalculate_interval",
        "placeholder_ready_timeout",
        "max_pending_pairs",
        "downscale_delay",
    ):
        settings.pop(key, None)
    if variant == "ours_predictive" and site.spec.name == SHARDS:
        settings["warm_pool"] = {"predictive": {"enabled": True}}
    return settings


def _write_stage_model(site: Site, model: Mapping[str, object]) -> None:
    """The ConfigMap the listener reads its stage model from at start (capacity/kept.py:
    ``capacity-stage-model-<scale set>`` in the placeholder namespace, key model.json)."""
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"capacity-stage-model-{site.spec.name}"},
        "data": {STAGE_MODEL_KEY: json.dumps(model, separators=(",", ":"))},
    }
    site.stage.cluster.rest.request("POST", f"/api/v1/namespaces/{site.namespace}/configmaps", body)


async def _start_variant(staged: StagedRun, config: StagedConfig, seed: int) -> None:
    run = staged.run
    for site in run.sites:
        if run.name == "stock_overprov":
            await asyncio.to_thread(_create_pause_pods, site, config.warm)
        if run.name == "ours_predictive" and site.spec.name == SHARDS:
            model = trained_model(config, seed, time.time())
            await asyncio.to_thread(_write_stage_model, site, model)
        site.start_listener(
            capacity=capacity_settings(site, run.name),
            max_runners=config.max_runners,
            min_runners=config.warm if run.name == "stock_minN" else 0,
            log_level="info",
        )


async def _play(
    runs: Mapping[str, StagedRun],
    order: Sequence[str],
    karpenter: Karpenter,
    config: StagedConfig,
    seed_plan: StagedPlan,
) -> None:
    """Start every variant at t=0 (cluster start); queue each job when it is due in that
    variant (``release_at``); sample every second; end at the window's end once every job
    that can come has finished (or after the overtime)."""
    origin = time.monotonic()
    wall_origin = time.time()
    window = config.warmup + seed_plan.last_end + config.tail
    for name in order:
        runs[name].run.window = (wall_origin, wall_origin + window)
        runs[name].run.origin = origin
        await _start_variant(runs[name], config, seed_plan.seed)
    last_pause_sample = -10.0
    while True:
        now = time.monotonic() - origin
        waiting = 0
        for staged in runs.values():
            waiting += _release(staged, seed_plan, config.warmup, origin, now)
        for staged in runs.values():
            staged.run.points.append(_sample(staged.run, now))
        if now - last_pause_sample >= 2.0 and "stock_overprov" in runs:
            last_pause_sample = now
            overprov = runs["stock_overprov"].run
            count = 0
            for site in overprov.sites:
                with contextlib.suppress(*TRANSIENT):
                    count += await asyncio.to_thread(_running_pause_pods, site)
            overprov.pause_samples.append((now, count))
        for staged in runs.values():
            for site in staged.run.sites:
                if site.listener is not None and site.listener.returncode is not None:
                    raise RuntimeError(
                        f"{staged.run.name}: {site.listener.name} exited:\n"
                        f"{site.listener.log_tail(20)}"
                    )
        karpenter.check_alive()
        finished = not waiting and all(
            j.state is JobState.COMPLETED for s in runs.values() for j in s.run.jobs
        )
        if now >= window and (finished or now >= window + config.overtime):
            break
        if int(now) % 60 == 0:
            done = sum(j.state is JobState.COMPLETED for s in runs.values() for j in s.run.jobs)
            _say(f"t={now:5.0f}s of {window:.0f}s: {done} jobs done over all variants")
        await asyncio.sleep(1.0)


def _release(
    staged: StagedRun, seed_plan: StagedPlan, warmup: float, origin: float, now: float
) -> int:
    """Queue the variant's jobs that are due by ``now``; how many may still come."""
    ended = {
        index: (job.finished_at - origin, job.result == "succeeded")
        for index, job in staged.queued.items()
        if job.state is JobState.COMPLETED and job.finished_at is not None
    }
    waiting = 0
    for job in seed_plan.jobs:
        if job.index in staged.queued or job.index in staged.never:
            continue
        due = release_at(job, ended, warmup, staged.never)
        if due == NEVER:
            staged.never.add(job.index)
        elif due is not None and due <= now:
            (fake_job,) = staged.run.stage.fake.add_jobs(1, **fake_job_fields(job))
            staged.queued[job.index] = fake_job
            staged.run.jobs.append(fake_job)
        else:
            waiting += 1
    return waiting


# ---------------------------------------------------------------------- figures


def staged_figures(
    jobs: Sequence[FakeJob],
    per_pool: Mapping[str, Mapping[str, Any]],
    not_queued: Mapping[str, int],
) -> dict[str, Any]:
    """The staged family's own figures: the shards' (``linux-gpu`` jobs') waits, the other
    jobs' waits, the node-seconds of the shards' pools (``gpu``: its workflow pool), and
    the children never queued (``parent_failed``, ``parent_unfinished``)."""
    shard = [j for j in jobs if tuple(j.labels) == SITE_LABELS[SHARDS]]
    other = [j for j in jobs if tuple(j.labels) != SITE_LABELS[SHARDS]]

    def seconds(pool: str) -> float:
        return float((per_pool.get(f"{SHARDS}/{pool}") or {}).get("node_seconds") or 0.0)

    runner, gpu = seconds("runner"), seconds("workflow")
    return {
        "shard_jobs": len(shard),
        "shard_wait_s": wait_figures(shard)[WAIT],
        "other_wait_s": wait_figures(other)[WAIT],
        "shard_node_seconds": {
            "gpu": round(gpu, 2),
            "runner": round(runner, 2),
            "total": round(gpu + runner, 2),
        },
        "children_not_queued": dict(not_queued),
    }


def _variant_figures(
    staged: StagedRun,
    seed_plan: StagedPlan,
    config: StagedConfig,
    window: float,
    logs: node_occupancy.Logs | None,
) -> dict[str, Any]:
    figures = _figures(staged.run, config, window, logs)
    unqueued = [j for j in seed_plan.jobs if j.index not in staged.queued]
    figures["staged"] = staged_figures(
        staged.run.jobs,
        figures["per_pool"],
        {
            "parent_failed": sum(j.index in staged.never for j in unqueued),
            "parent_unfinished": sum(j.index not in staged.never for j in unqueued),
        },
    )
    log, (start, end) = staged.run.log, staged.run.window
    assert log is not None
    gpu_pools = {nodepool_name(s, "workflow") for s in staged.run.sites if s.spec.name == SHARDS}
    # Creation to Node of the GPU pool's NodeClaims: the slow launches the shards really had.
    figures["staged"]["gpu_node_ready_s"] = sorted(
        round(c.ready_after, 2)
        for c in log.claims.values()
        if c.pool in gpu_pools and start <= c.created <= end and c.ready_after is not None
    )
    if staged.run.name == "ours_predictive":
        # Whether the shards' listener read the trained model (capacity/kept.py logs it): a
        # predictive run whose model did not load predicts nothing and measures reactive.
        texts = [
            listener.log_path.read_text(errors="replace")
            for site in staged.run.sites
            if site.spec.name == SHARDS
            for listener in site.listeners
            if listener.log_path.exists()
        ]
        figures["staged"]["stage_model_loaded"] = any(MODEL_LOADED in text for text in texts)
    return figures


STAGED_METRICS = (
    ("shards: queue → workflow Running or failed p50 (s)", ("staged", "shard_wait_s", "p50")),
    ("shards: queue → workflow Running or failed p90 (s)", ("staged", "shard_wait_s", "p90")),
    ("shards: failed by prepare timeout", ("staged", "shard_wait_s", "failed_by_timeout")),
    ("builds and others: p90 (s)", ("staged", "other_wait_s", "p90")),
    ("node-seconds, GPU pool (shards' workflow)", ("staged", "shard_node_seconds", "gpu")),
    ("node-seconds, shards' pools", ("staged", "shard_node_seconds", "total")),
    ("children not queued (parent failed)", ("staged", "children_not_queued", "parent_failed")),
    *OUTCOME_METRICS,
)


def summarize(seeds: Mapping[str, Any], variants: Sequence[str]) -> dict[str, Any]:
    """Per variant and metric: median, min and max over seeds, of the value and of its ratio
    to ``stock_min0`` of the same seed."""
    summary: dict[str, Any] = {}
    for variant in variants:
        if not any(variant in figures["variants"] for figures in seeds.values()):
            continue
        entry: dict[str, Any] = {}
        for _, path in STAGED_METRICS:
            values, ratios = [], []
            for figures in seeds.values():
                own = figures["variants"].get(variant)
                value = None if own is None else _get(own, path)
                if value is None:
                    continue
                values.append(value)
                base = figures["variants"].get(BASE)
                under = None if base is None else _get(base, path)
                if under:
                    ratios.append(value / under)
            entry[".".join(path)] = {"value": _spread(values), "ratio_to_stock": _spread(ratios)}
        summary[variant] = entry
    return summary


def table(document: Mapping[str, Any]) -> str:
    """The staged table: median (min–max) over seeds, and the median ratio to stock."""
    summary = document["summary"]
    names = [v for v in VARIANTS if v in summary]
    lines = [
        "| | " + " | ".join(HEADERS[n] for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for label, path in STAGED_METRICS:
        cells = []
        for name in names:
            cell = summary[name].get(".".join(path)) or {"value": None, "ratio_to_stock": None}
            value, ratio = cell["value"], cell["ratio_to_stock"]
            if value is None:
                cells.append("–")
                continue
            text = f"{value['median']:g} ({value['min']:g}–{value['max']:g})"
            if name != BASE and ratio is not None:
                text += f" ×{ratio['median']:.2g}"
            cells.append(text)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(document: Mapping[str, Any]) -> str:
    """The staged table, then where the wait goes per step."""
    steps = steps_table(document["seeds"], VARIANTS, HEADERS)
    return table(document) + (f"\n\n{steps}" if steps else "")


def _draw_summary(seeds: Mapping[str, Any], variants: Sequence[str], path: Path) -> None:
    from tools.bench_outcomes import scatter_by_variant

    def point(own: Mapping[str, Any]) -> tuple[Any, Any]:
        return (
            _get(own, ("staged", "shard_node_seconds", "gpu")),
            _get(own, ("staged", "shard_wait_s", "p90")),
        )

    scatter_by_variant(
        seeds,
        {variant: HEADERS[variant] for variant in variants},
        point,
        path,
        labels=(
            "GPU node-seconds in the window (the shards' workflow pool)",
            "shards' p90 queue → workflow Running or failed (s)",
            "Staged CI: one point per variant and seed",
        ),
    )


def merge_into(documents: Sequence[Mapping[str, Any]], out: Path) -> int:
    """``bench_outcomes merge`` of staged runs: seeds together, the summary and its figure
    (``outcomes-staged-summary.png`` beside ``out``) drawn again; prints the table."""
    try:
        merged = merge_seeds(documents)
    except ValueError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    variants = [v for v in VARIANTS if v in merged["config"]["variants"]]
    merged["summary"] = summarize(merged["seeds"], variants)
    summary_png = out.parent / "outcomes-staged-summary.png"
    _draw_summary(merged["seeds"], variants, summary_png)
    merged["images"] = [summary_png.name]
    _write(out, merged)
    print(report(merged))
    return 0


def run_family(
    *,
    smoke: bool,
    seeds: Sequence[int] | None,
    variants: Sequence[str] | None,
    out: Path,
    workdir: Path | None,
) -> int:
    """``bench_outcomes run --family staged``: run and print the table."""
    from tools.control_plane import local_control_plane, new_workdir

    config = SMOKE if smoke else FULL
    if seeds:
        config = replace(config, seeds=tuple(seeds))
    if variants:
        unknown = [v for v in variants if v not in VARIANTS]
        if unknown:
            print(f"bench: --variants: {unknown[0]!r} is not a staged variant", file=sys.stderr)
            return 2
        config = replace(config, variants=tuple(variants))
    where = workdir or new_workdir("capacity-listener-outcomes-staged")

    async def go() -> dict[str, Any]:
        with local_control_plane(where / "cluster", progress=_say) as cluster:
            return await benchmark(cluster, where, out, config)

    document = asyncio.run(go())
    print(report(document))
    return 0
