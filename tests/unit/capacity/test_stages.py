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
from tools.whatif_staged import StagedSpec, StagedWorkflow, generate_staged
from tools.whatif_synth import DEFAULT_START
from whatif.predict import TraceParents, learn

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


def test_it_expects_share_times_count_within_the_window() -> None:
    model = learn(generate_staged(_one_shape(), 1))
    build = model.parents[(PULL, "build")]
    share = sum(f for _, f in build.observed) / len(build.observed)
    mean = statistics.mean(build.children["linux-gpu"].counts)
    parent = [RunningParent(PULL, "build", T0, run="9#1")]
    # Builds of about 1,200 s (σ 0.05): nothing due in the first 1,000 s, all by 1,500 s.
    assert model.expected(parent, T0, T0 + 1000) == []
    (everything,) = model.expected(parent, T0, T0 + 1500)
    assert everything.label_set == "linux-gpu"
    assert everything.parent == "9#1/.github/workflows/pull.yml/build"
    assert everything.count == pytest.approx(share * mean)
    (half,) = model.expected(parent, T0, T0 + 1200 + 4)  # the median build plus the delay
    assert 0.25 * everything.count < half.count < 0.75 * everything.count
    # Having run 1,000 s, the builds that failed early are ruled out: a higher share.
    (later,) = model.expected(parent, T0 + 1000, T0 + 1500)
    assert later.count > everything.count
    # Covering a quantile of the fan-out's size instead of its mean: the largest, at 1.
    (largest,) = model.expected(parent, T0, T0 + 1500, count_quantile=1.0)
    assert largest.count == pytest.approx(share * 8)
    # Past every fanned build seen: nothing more to expect.
    assert model.expected(parent, T0 + 5000, T0 + 6000) == []
    # An unknown parent predicts nothing.
    assert model.expected([RunningParent("other.yml", "build", T0)], T0, T0 + 9999) == []


def test_too_few_runs_or_too_old_predicts_nothing() -> None:
    model = StageModel(min_runs=5, max_age=3600.0)
    for i in range(4):
        model.record(PULL, "build", 600.0, {"gpu": (4, 3.0)}, T0 + i)
    parent = [RunningParent(PULL, "build", T0 + 10)]
    assert model.expected(parent, T0 + 10, T0 + 9999) == []
    model.record(PULL, "build", 600.0, {"gpu": (4, 3.0)}, T0 + 5)
    (expected,) = model.expected(parent, T0 + 10, T0 + 10 + 603.0)
    assert expected.count == 4.0
    assert model.expected(parent, T0 + 10, T0 + 10 + 602.9) == []  # due at 600 s + 3 s
    assert model.expected(parent, T0 + 5 + 3601, T0 + 9999) == []  # the model is too old


def test_a_parent_past_the_hold_counts_no_more() -> None:
    model = StageModel()
    for i, duration in enumerate([600, 610, 620, 630, 640, 650, 660, 670, 680, 1000]):
        model.record(PULL, "build", duration, {"gpu": (2, 0.0)}, T0 + i)
    parent = [RunningParent(PULL, "build", T0)]
    # Run 800 s: only the 1,000 s build is longer, and it fanned out.
    (expected,) = model.expected(parent, T0 + 800, T0 + 1000)
    assert expected.count == 2.0
    # But 800 s is more than 60 s past the 0.9 quantile (680 s): not on any time it knows.
    assert model.expected(parent, T0 + 800, T0 + 1000, hold=60.0) == []
    assert model.expected(parent, T0 + 800, T0 + 1000, hold=120.0) != []


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
    assert back.expected(parent, T0, T0 + 1500) == model.expected(parent, T0, T0 + 1500)


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
