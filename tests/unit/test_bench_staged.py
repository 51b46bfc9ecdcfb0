"""The outcome benchmark's staged family, its pure parts: the trace as jobs with their needs,
when each is queued, what the fakes are given, the configurations, the predictive variant's
starting model and settings, the staged figures; and that the fake GitHub REST API serves a
staged run as the GitHub demand source reads it. The staged document (goal rows, summary,
table, merge) is test_bench_staged_document.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import yaml

from capacity.github_demand import GitHubDemand, GitHubScope
from capacity.settings import CONFIG_FILE_ENV, load_capacity_settings
from capacity.settings_demand import GitHubDemandSettings
from capacity.stages import StageModel
from tools.bench_outcomes import VariantRun
from tools.bench_staged import (
    BUILD,
    FULL,
    NEVER,
    SHARDS,
    SITE_LABELS,
    SMOKE,
    VARIANTS,
    StagedJob,
    StagedPlan,
    StagedRun,
    _release,
    capacity_settings,
    fake_job_fields,
    plan,
    release_at,
    staged_figures,
    staged_jobs,
    trained_model,
)
from tools.e2e_site import Site, SiteSpec
from tools.fake_actions import FakeActions, FakeJob, JobState
from tools.fake_github_rest import FakeGitHubRest
from whatif.trace import TraceJob

START = 1_700_000_000.0
PULL = ".github/workflows/pull.yml"


def _trace_job(number: int, run: str, name: str, at: float, took: float, **kw: Any) -> TraceJob:
    labels = ("linux-gpu",) if name.startswith("test") else ("linux-cpu",)
    return TraceJob(
        job=str(number),
        run=run,
        labels=labels,
        queued_at=START + at,
        started_at=START + at,
        completed_at=START + at + took,
        workflow=PULL,
        job_name=name,
        **kw,
    )


def test_a_later_stage_needs_the_jobs_of_its_run_attempt_that_ended_before_it() -> None:
    trace = [
        _trace_job(1, "1", "build", 0.0, 100.0),
        _trace_job(2, "1", "test (1/2)", 103.0, 50.0),
        _trace_job(3, "1", "test (2/2)", 101.0, 60.0),
        _trace_job(4, "1", "report", 165.0, 10.0),
        _trace_job(5, "2", "build", 20.0, 30.0),  # another run: no needs across runs
        _trace_job(6, "1", "build", 300.0, 90.0, run_attempt=2),  # a re-run: a new root
    ]
    jobs = staged_jobs(trace, START)
    by_name = {(j.run, j.attempt, j.name): j for j in jobs}
    assert [j.at for j in jobs] == sorted(j.at for j in jobs)
    assert [j.index for j in jobs] == list(range(len(jobs)))
    build = by_name[(1, 1, "build")]
    assert build.needs == ()
    assert build.at == 0.0
    for shard, after in (("test (1/2)", 3.0), ("test (2/2)", 1.0)):
        assert by_name[(1, 1, shard)].needs == (build.index,)
        assert by_name[(1, 1, shard)].after == pytest.approx(after)
    report = by_name[(1, 1, "report")]
    shards = {by_name[(1, 1, "test (1/2)")].index, by_name[(1, 1, "test (2/2)")].index}
    assert set(report.needs) == {build.index, *shards}
    assert report.after == pytest.approx(165.0 - 161.0)  # after the last of them ended
    assert by_name[(2, 1, "build")].needs == ()
    assert by_name[(1, 2, "build")].needs == ()


def _staged(index: int, needs: tuple[int, ...] = (), *, at: float = 5.0) -> StagedJob:
    return StagedJob(
        index=index,
        run=1,
        attempt=1,
        workflow=PULL,
        name="test (1/2)" if needs else "build",
        labels=("linux-gpu",) if needs else ("linux-cpu",),
        at=at,
        duration=30.0,
        needs=needs,
        after=2.5,
    )


def test_a_job_is_queued_after_its_needs_end_in_the_variant_and_never_after_a_failure() -> None:
    root = _staged(0)
    assert release_at(root, {}, warmup=100.0) == 105.0  # its trace time after the warm-up
    child = _staged(2, needs=(0, 1), at=50.0)
    assert release_at(child, {0: (140.0, True)}, warmup=100.0) is None  # one still running
    # The variant's own ends, not the trace's: after the later of them, plus the trace's gap.
    assert release_at(child, {0: (140.0, True), 1: (170.0, True)}, warmup=100.0) == 172.5
    assert release_at(child, {0: (140.0, False)}, warmup=100.0) == NEVER
    assert release_at(child, {0: (140.0, True)}, warmup=100.0, skipped={1}) == NEVER
    assert math.isinf(NEVER)


def test_the_fake_gets_the_workflow_file_job_name_run_and_attempt() -> None:
    job = StagedJob(
        index=3,
        run=7,
        attempt=2,
        workflow=PULL,
        name="test (3/8)",
        labels=("linux-gpu",),
        at=12.0,
        duration=42.5,
    )
    fields = fake_job_fields(job)
    assert fields == {
        "owner": "acme",
        "repo": "app",
        "labels": ["linux-gpu"],
        "duration": 42.5,
        "workflow_file": "pull.yml",
        "display_name": "test (3/8)",
        "run_id": 70_007,
        "run_attempt": 2,
    }
    actions = FakeActions(pats=["p"])
    (fake,) = actions.add_jobs(1, **fields)
    assert fake.workflow_ref.startswith(f"acme/app/{PULL}@")
    assert (fake.workflow_run_id, fake.run_attempt, fake.display_name) == (70_007, 2, "test (3/8)")


@pytest.mark.parametrize("config", [FULL, SMOKE], ids=["full", "smoke"])
def test_the_configurations_give_shards_within_the_budget(config: Any) -> None:
    assert config.family == "staged"
    assert set(config.variants) <= set(VARIANTS)
    assert "ours_predictive" in config.variants
    assert "stock_min0" in config.variants
    for seed in config.seeds:
        seed_plan = plan(config, seed)
        shards = [j for j in seed_plan.jobs if j.labels == SITE_LABELS[SHARDS]]
        assert len(shards) >= (20 if config is FULL else 5), seed
        assert all(j.needs for j in shards)  # every shard follows a build
        window = config.warmup + seed_plan.last_end + config.tail
        assert window <= (1800 if config is FULL else 800), (seed, window)
        assert len(shards) < config.max_runners  # never capped by maxRunners
    described = config.describe()
    assert described["family"] == "staged"
    assert described["trace_spec"]["family"] == "staged"
    low, high = described["gpu_node_provisioning_delay_s"]
    assert (low, high) == (
        config.launch_delay[0] + config.gpu_registration,
        config.launch_delay[1] + config.gpu_registration,
    )
    assert config is SMOKE or 120 <= low < high <= 240  # GPU-like: slow launches
    assert described["changed_settings"]


def test_the_plan_is_seeded() -> None:
    assert plan(SMOKE, 3) == plan(SMOKE, 3)
    assert plan(SMOKE, 3) != plan(SMOKE, 4)


def test_the_predictive_variant_starts_with_a_fresh_model_that_predicts_gpu_shards() -> None:
    now = time.time()
    data = trained_model(SMOKE, SMOKE.seeds[0], now)
    model = StageModel.from_dict(data)
    parent = model.usable(PULL, "build", now)  # enough runs, and fresh
    assert parent is not None
    assert "linux-gpu" in parent.children  # the shards' scale set's label key
    assert max(p.updated_at for p in model.parents.values()) < now
    # Another seed is another history.
    assert trained_model(SMOKE, SMOKE.seeds[0] + 1, now) != data


def _site(name: str) -> Site:
    stage: Any = SimpleNamespace(hud=None)
    return Site(stage, SiteSpec(name=name, scale_set_id=1, labels=SITE_LABELS[name]), "ns-x")


def _load(settings: dict[str, Any], tmp_path: Path) -> Any:
    path = tmp_path / "capacity.yaml"
    path.write_text(yaml.safe_dump(settings))
    return load_capacity_settings({CONFIG_FILE_ENV: str(path)})


def test_our_variants_read_github_and_only_the_shards_predict(tmp_path: Path) -> None:
    assert capacity_settings(_site(BUILD), "stock_minN") is None
    for variant in ("ours_reactive", "ours_predictive"):
        for name in (BUILD, SHARDS):
            settings = capacity_settings(_site(name), variant)
            assert settings is not None
            loaded = _load(settings, tmp_path)  # the listener accepts them
            assert loaded.demand_source == "github"
            assert loaded.demand.cluster_count == 1  # no sharding: the pool refuses it
            predicts = variant == "ours_predictive" and name == SHARDS
            assert loaded.warm_pool.predictive.enabled is predicts, (variant, name)
            assert loaded.proactive_capacity == 0
            assert loaded.recalculate_interval == 30.0  # the product's default


def _fake_job(number: int, labels: tuple[str, ...], **fields: Any) -> FakeJob:
    job = FakeJob(
        runner_request_id=number,
        job_id=f"job-{number}",
        owner_name="acme",
        repository_name="app",
        workflow_ref="acme/app/.github/workflows/pull.yml@refs/heads/main",
        display_name="x",
        event_name="push",
        labels=labels,
        workflow_run_id=number,
        duration=10.0,
        queue_time=datetime.now(UTC),
        history=[(0.0, JobState.QUEUED)],
    )
    for key, value in fields.items():
        setattr(job, key, value)
    return job


def test_staged_figures_take_the_shards_apart() -> None:
    gpu, cpu = SITE_LABELS[SHARDS], SITE_LABELS[BUILD]
    jobs = [
        _fake_job(1, cpu, workflow_started_at=5.0, result="succeeded"),
        _fake_job(2, gpu, workflow_started_at=100.0, result="succeeded"),
        _fake_job(3, gpu, workflow_started_at=20.0, result="succeeded"),
        _fake_job(4, gpu, failure="prepare_timeout", result="failed", finished_at=300.0),
    ]
    per_pool = {
        f"{SHARDS}/workflow": {"node_seconds": 900.0},
        f"{SHARDS}/runner": {"node_seconds": 100.0},
        f"{BUILD}/workflow": {"node_seconds": 5000.0},
    }
    figures = staged_figures(jobs, per_pool, {"parent_failed": 2, "parent_unfinished": 0})
    assert figures["shard_jobs"] == 3
    assert figures["shard_wait_s"]["n"] == 3
    assert figures["shard_wait_s"]["failed_by_timeout"] == 1
    assert figures["shard_wait_s"]["max"] == 300.0  # the failed one, at its failure
    assert figures["other_wait_s"]["n"] == 1
    assert figures["shard_node_seconds"] == {"gpu": 900.0, "runner": 100.0, "total": 1000.0}
    assert figures["children_not_queued"] == {"parent_failed": 2, "parent_unfinished": 0}


@pytest.fixture
async def linked() -> AsyncIterator[tuple[FakeActions, str]]:
    actions = FakeActions(pats=["ghp_staged"])
    rest = FakeGitHubRest(tokens=[])
    rest.link(actions)
    actions.mount(rest.add_routes)
    async with actions:
        yield actions, actions.api_url


async def test_the_github_source_reads_a_running_build_and_its_queued_shards(
    linked: tuple[FakeActions, str],
) -> None:
    actions, api_url = linked
    actions.add_scale_set(1, BUILD, list(SITE_LABELS[BUILD]))
    build = _staged(0)
    (fake_build,) = actions.add_jobs(1, **fake_job_fields(build))
    actions.assign(1, 5)
    assert actions.claim_job(1, "runner-1") is fake_build  # the build runs
    shard = StagedJob(
        index=1,
        run=1,
        attempt=1,
        workflow=PULL,
        name="test (1/4)",
        labels=SITE_LABELS[SHARDS],
        at=40.0,
        duration=30.0,
        needs=(0,),
    )
    (fake_shard,) = actions.add_jobs(1, **fake_job_fields(shard))

    async def token() -> str:
        return "ghp_staged"

    async with httpx.AsyncClient(trust_env=False) as http:
        source = GitHubDemand(
            GitHubDemandSettings(),
            SITE_LABELS[SHARDS],
            client=http,
            token=token,
            scope=GitHubScope(api_url, "acme"),
            interval=30.0,
        )
        reading = await source.read()
    assert reading.outcome.queued == 1  # the shard, on the shards' labels
    (parent,) = reading.running
    assert (parent.workflow, parent.job_name, parent.run) == (PULL, "build", "70001#1")
    assert abs(parent.started_at - time.time()) < 30  # when its runner took it
    (queued,) = reading.queued_jobs
    assert (queued.run, queued.job_id) == ("70001#1", fake_shard.runner_request_id)


def test_each_variant_queues_a_stage_when_its_own_parents_end() -> None:
    now = [0.0]
    actions = FakeActions(pats=["p"], clock=lambda: now[0])
    stage: Any = SimpleNamespace(fake=actions)
    staged = StagedRun(VariantRun("ours_reactive", stage, None), {}, set())  # type: ignore[arg-type]
    trace = [
        _trace_job(1, "1", "build", 0.0, 100.0),
        _trace_job(2, "1", "test (1/2)", 102.0, 50.0),
        _trace_job(3, "1", "test (2/2)", 104.0, 60.0),
        _trace_job(4, "2", "build", 10.0, 90.0),
        _trace_job(5, "2", "test (1/1)", 103.0, 50.0),
    ]
    seed_plan = StagedPlan(1, staged_jobs(trace, START))
    warmup = 50.0
    assert _release(staged, seed_plan, warmup, 0.0, 55.0) == 4  # one build is due
    (build_1,) = staged.run.jobs
    assert build_1.display_name == "build"
    _release(staged, seed_plan, warmup, 0.0, 60.0)
    build_2 = staged.run.jobs[1]
    # The first build ends late in this variant (it waited), the second one fails.
    now[0] = 400.0
    actions.complete_job(build_1.runner_request_id)
    actions.complete_job(build_2.runner_request_id, "failed", failure="prepare_timeout")
    assert _release(staged, seed_plan, warmup, 0.0, 401.0) == 2  # due at 402 and 404
    assert _release(staged, seed_plan, warmup, 0.0, 404.0) == 0
    names = [j.display_name for j in staged.run.jobs]
    assert names == ["build", "build", "test (1/2)", "test (2/2)"]
    assert {j.workflow_run_id for j in staged.run.jobs[2:]} == {70_001}
    assert len(staged.never) == 1  # the failed build's shard
