"""The stage model: what it learns from a staged trace, what it predicts, and its storage."""

from __future__ import annotations

import json
import statistics

import pytest

from capacity.stages import (
    MAX_PARENTS,
    SAMPLES,
    RunningParent,
    StageLearner,
    StageModel,
    StageModelError,
    job_key,
)
from capacity.whatif.predict import TraceParents, learn
from capacity.whatif.staged import StagedSpec, StagedWorkflow, generate_staged
from capacity.whatif.synth import DEFAULT_START

PULL = ".github/workflows/pull.yml"
T0 = DEFAULT_START + 86400.0  # a day after the traces learned from: a fresh model


def _one_shape(minutes: float = 600.0) -> StagedSpec:
    flow = StagedWorkflow(
        path=PULL,
        weight=1.0,
        build_median=1200.0,
        build_sigma=0.05,
        fail_share=0.2,
        cancel_share=0.0,
        shards=((4, 0.5), (8, 0.5)),
        third_stage_share=0.0,
    )
    return StagedSpec(minutes=minutes, rerun_share=0.0, workflows=(flow,))


def test_matrix_suffixes_are_one_parent() -> None:
    assert job_key("test (3/8)") == "test"
    assert job_key("test (linux, 3.12)") == "test"
    assert job_key("build") == "build"
    assert job_key("(odd)") == "(odd)"


def test_it_learns_the_fan_out_share_the_count_and_the_delay() -> None:
    model = learn(generate_staged(_one_shape(), 1))
    build = model.parents[(PULL, "build")]
    assert build.runs >= 50
    fanned = [f for _, f in build.observed]
    assert 0.65 < sum(fanned) / len(fanned) < 0.95  # 20 % of builds fail
    gpu = build.children["linux-gpu"]
    assert 5.0 < statistics.mean(gpu.counts) < 7.0  # 4 or 8
    assert set(gpu.counts) == {4, 8}
    assert all(1.0 <= d <= 8.0 for d in gpu.delays)
    durations = [d for d, f in build.observed if f]
    assert 1100 < statistics.median(durations) < 1300
    # Shards are parents too, and fan out nothing here.
    assert not any(f for _, f in model.parents[(PULL, "test")].observed)
    assert len(build.observed) <= SAMPLES


def test_it_predicts_share_times_count_at_the_duration_plus_delay() -> None:
    model = learn(generate_staged(_one_shape(), 1))
    build = model.parents[(PULL, "build")]
    share = sum(f for _, f in build.observed) / len(build.observed)
    mean = statistics.mean(build.children["linux-gpu"].counts)
    (expected,) = model.predict([RunningParent(PULL, "build", T0, run="9#1")], T0)
    assert expected.label_set == "linux-gpu"
    assert expected.count == pytest.approx(share * mean)
    assert T0 + 1150 < expected.at < T0 + 1250
    early = model.predict([RunningParent(PULL, "build", T0, run="9#1")], T0, quantile=0.1)
    assert T0 + 1050 < early[0].at < expected.at
    # Having run 1,000 s, the builds that failed early are ruled out: a higher share.
    later = model.predict([RunningParent(PULL, "build", T0, run="9#1")], T0 + 1000)
    assert later[0].count > expected.count
    # Past every fanned build seen: nothing more to expect.
    assert model.predict([RunningParent(PULL, "build", T0, run="9#1")], T0 + 5000) == []
    # Covering a quantile of the fan-out's size instead of its mean: the largest, at 1.
    (largest,) = model.predict([RunningParent(PULL, "build", T0)], T0, count_quantile=1.0)
    assert largest.count == pytest.approx(share * 8)
    # An unknown parent predicts nothing.
    assert model.predict([RunningParent("other.yml", "build", T0)], T0) == []


def test_too_few_runs_or_too_old_predicts_nothing() -> None:
    model = StageModel(min_runs=5, max_age=3600.0)
    for i in range(4):
        model.record(PULL, "build", 600.0, {"gpu": (4, 3.0)}, T0 + i)
    parent = [RunningParent(PULL, "build", T0 + 10)]
    assert model.predict(parent, T0 + 10) == []
    model.record(PULL, "build", 600.0, {"gpu": (4, 3.0)}, T0 + 5)
    (expected,) = model.predict(parent, T0 + 10)
    assert expected.count == 4.0
    assert expected.at == T0 + 10 + 600.0 + 3.0
    assert model.predict(parent, T0 + 5 + 3601) == []  # the model is too old


def test_the_model_is_bounded() -> None:
    model = StageModel()
    for i in range(MAX_PARENTS + 10):
        model.record(f"w{i}.yml", "build", 60.0, {}, T0 + i)
    assert len(model.parents) == MAX_PARENTS
    assert ("w0.yml", "build") not in model.parents  # the stalest went
    for i in range(SAMPLES * 2):
        model.record(PULL, "build", float(i), {"gpu": (2, 1.0)}, T0 + i)
    kept = model.parents[(PULL, "build")]
    assert len(kept.observed) == SAMPLES
    assert kept.observed[0][0] == SAMPLES  # the latest kept
    assert len(json.dumps(model.to_dict())) < 200_000  # fits a ConfigMap


def test_round_trip_through_json() -> None:
    model = learn(generate_staged(_one_shape(minutes=240), 2))
    data = json.loads(json.dumps(model.to_dict()))
    back = StageModel.from_dict(data)
    assert back.to_dict() == model.to_dict()
    parent = [RunningParent(PULL, "build", T0, run="1#1")]
    assert back.predict(parent, T0) == model.predict(parent, T0)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "field version"),
        ({"version": 99, "parents": []}, "field version"),
        ({"version": 1}, "field parents"),
        ({"version": 1, "parents": [7]}, r"parents\[0\]: expected an object"),
        ({"version": 1, "parents": [{"workflow": 1, "job": "b"}]}, "field workflow/job"),
        (
            {"version": 1, "parents": [{"workflow": "w", "job": "b", "updated_at": "x"}]},
            r"parents\[0\].updated_at: expected a finite number",
        ),
        (
            {
                "version": 1,
                "parents": [
                    {"workflow": "w", "job": "b", "updated_at": 1, "runs": -1, "observed": []}
                ],
            },
            r"parents\[0\].runs: expected a number >= 0",
        ),
    ],
)
def test_a_bad_stored_model_is_one_line_naming_the_field(data: object, message: str) -> None:
    with pytest.raises(StageModelError, match=message) as info:
        StageModel.from_dict(data)
    assert "\n" not in str(info.value)


def test_online_learning_job_by_job_gives_the_batch_model() -> None:
    jobs = generate_staged(_one_shape(minutes=240), 3)
    batch = learn(jobs)
    online = StageModel()
    parents = TraceParents(jobs, StageLearner(online))
    end = max(j.completed_at or j.queued_at for j in jobs)
    t = jobs[0].queued_at
    while t <= end + 120:
        parents(t)
        t += 17.0
    assert online.to_dict() == batch.to_dict()


def test_trace_parents_are_the_jobs_running_at_a_time() -> None:
    jobs = generate_staged(_one_shape(minutes=60), 4)
    parents = TraceParents(jobs)
    first = jobs[0]
    assert first.started_at is not None
    assert first.completed_at is not None
    running = parents(first.started_at + 1)
    assert any(p.started_at == first.started_at and p.job_name == "build" for p in running)
    assert all(p.run for p in running)
    later = parents(first.completed_at + 1)
    assert not any(p.started_at == first.started_at and p.job_name == first.job_name for p in later)
    with pytest.raises(ValueError, match="time went back"):
        parents(first.started_at)
