"""The staged trace family: seeded, and shaped as its docstring says (builds, fan-outs within
seconds of the build's end, third stages, cancelled and failed builds, re-runs)."""

from __future__ import annotations

import statistics
from collections import defaultdict

import pytest

from tools.whatif_staged import StagedSpec, StagedWorkflow, generate_staged
from whatif.trace import TraceJob, read_lines, write_lines


def _attempts(jobs: list[TraceJob]) -> dict[tuple[str, int], list[TraceJob]]:
    runs: dict[tuple[str, int], list[TraceJob]] = defaultdict(list)
    for job in jobs:
        runs[(job.run, job.run_attempt)].append(job)
    return runs


def test_same_seed_same_trace_other_seed_other_trace() -> None:
    spec = StagedSpec(minutes=60)
    first = "".join(write_lines(generate_staged(spec, 3)))
    assert first == "".join(write_lines(generate_staged(spec, 3)))
    assert first != "".join(write_lines(generate_staged(spec, 4)))
    assert read_lines(first.splitlines()) == generate_staged(spec, 3)


def test_each_run_builds_then_fans_out_its_shards_within_seconds() -> None:
    jobs = generate_staged(StagedSpec(minutes=8 * 60), 1)
    fanned = 0
    for attempt in _attempts(jobs).values():
        (build,) = [j for j in attempt if j.job_name == "build"]
        assert build.queued_at == min(j.queued_at for j in attempt)
        shards = [j for j in attempt if j.job_name.startswith("test (")]
        if not shards:
            continue
        fanned += 1
        assert build.completed_at is not None
        assert len({j.label_set for j in shards}) == 1
        k = int(shards[0].job_name.split("/")[1].rstrip(")"))
        assert len(shards) == k
        for shard in shards:
            assert 1.0 <= shard.queued_at - build.completed_at <= 8.0
        reports = [j for j in attempt if j.job_name == "report"]
        for report in reports:
            assert report.queued_at > max(s.completed_at or 0 for s in shards)
    assert fanned > 50


def test_workflows_have_their_own_shapes_and_the_noise_is_there() -> None:
    jobs = generate_staged(StagedSpec(minutes=24 * 60), 2)
    builds: dict[str, list[float]] = defaultdict(list)
    fanouts: dict[str, list[int]] = defaultdict(list)
    for attempt in _attempts(jobs).values():
        build = next(j for j in attempt if j.job_name == "build")
        assert build.duration is not None
        builds[build.workflow].append(build.duration)
        fanouts[build.workflow].append(sum(j.job_name.startswith("test") for j in attempt))
    trunk = ".github/workflows/trunk.yml"
    lint = ".github/workflows/lint.yml"
    pull = ".github/workflows/pull.yml"
    assert 1800 < statistics.median(builds[trunk]) < 3000
    assert 200 < statistics.median(builds[lint]) < 400
    assert set(fanouts[trunk]) <= {0, 8, 10, 12}
    assert 8 in fanouts[trunk]
    assert set(fanouts[lint]) <= {0, 2, 3}
    assert set(fanouts[".github/workflows/docs.yml"]) == {0}
    # Failed or cancelled builds fan out nothing: a share of pull.yml's runs, not most.
    empty = fanouts[pull].count(0) / len(fanouts[pull])
    assert 0.05 < empty < 0.25
    assert any(j.run_attempt == 2 for j in jobs)  # re-runs
    gpu = {j.label_set for j in jobs if j.workflow in (pull, trunk) and j.job_name != "build"}
    assert "linux-gpu" in gpu


def test_a_rerun_comes_after_the_failed_attempt_of_the_same_run() -> None:
    jobs = generate_staged(StagedSpec(minutes=24 * 60, rerun_share=1.0), 5)
    runs = _attempts(jobs)
    reruns = [key for key in runs if key[1] == 2]
    assert reruns
    for run, _ in reruns:
        first_end = max(j.completed_at or 0 for j in runs[(run, 1)])
        assert min(j.queued_at for j in runs[(run, 2)]) >= first_end + 120


def test_build_sigma_scale_sets_how_predictable_builds_are() -> None:
    exact = generate_staged(StagedSpec(minutes=240, build_sigma_scale=0.0), 6)
    fanned = {(j.run, j.run_attempt) for j in exact if j.job_name.startswith("test")}
    builds = {
        j.workflow: j.duration
        for j in exact
        if j.job_name == "build" and (j.run, j.run_attempt) in fanned
    }
    assert builds[".github/workflows/pull.yml"] == 1200.0
    assert builds[".github/workflows/trunk.yml"] == 2400.0


def test_bad_shapes_are_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="shards"):
        StagedWorkflow(path="ci.yml", weight=1.0, shards=())
    with pytest.raises(ValueError, match=r"ci\.yml: fail_share"):
        StagedWorkflow(path="ci.yml", weight=1.0, fail_share=1.5)
    with pytest.raises(ValueError, match="rerun_share"):
        StagedSpec(rerun_share=2.0)
    with pytest.raises(ValueError, match="build_sigma_scale"):
        StagedSpec(build_sigma_scale=-1.0)
    with pytest.raises(ValueError, match="minutes"):
        StagedSpec(minutes=0)
