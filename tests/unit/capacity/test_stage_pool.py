"""The predictive pool: pairs armed one lead ahead of the children a stage model expects,
counted down by arrivals, released by the hold or the parent's end; and, in the simulator,
ahead of reactive on a staged trace with slow child launches."""

from __future__ import annotations

import random

import pytest

from capacity.model import Params
from capacity.stage_pool import PredictivePool
from capacity.stages import RunningParent, StageModel
from capacity.warm_pool import FixedPool
from capacity.whatif.optimum import by_label_set
from capacity.whatif.predict import learn, predictive_setting
from capacity.whatif.simulate import SimConfig, simulate
from capacity.whatif.staged import StagedSpec, StagedWorkflow, generate_staged
from capacity.whatif.synth import provisioning_delays
from capacity.whatif.trace import TraceJob

PULL = ".github/workflows/pull.yml"
T0 = 1_000_000.0


def _model() -> StageModel:
    model = StageModel()
    for i in range(10):  # builds of 600 s, each fanning out 4 GPU shards 5 s after its end
        model.record(PULL, "build", 600.0, {"gpu": (4, 5.0)}, T0 + i)
    return model


def _pool(parents: list[RunningParent], **kwargs: object) -> PredictivePool:
    return PredictivePool(
        model=_model(),
        label_set="gpu",
        parents=lambda now: parents,
        lead=100.0,
        hold=60.0,
        **kwargs,  # type: ignore[arg-type]
    )


def test_children_are_armed_one_lead_ahead_and_met_by_arrivals() -> None:
    parents = [RunningParent(PULL, "build", T0, run="1#1")]
    pool = _pool(parents)
    arrival = T0 + 605.0
    assert pool.target(arrival - 101) == 0  # not yet one lead ahead
    assert pool.target(arrival - 100) == 4
    pool.observe(arrival, queued_jobs=3, new_jobs=3)  # three children came
    assert pool.target(arrival) == 1
    pool.observe(arrival + 1, queued_jobs=1, new_jobs=1)
    assert pool.target(arrival + 1) == 0
    # Armed once: the same parent is not armed again.
    assert pool.target(arrival + 2) == 0


def test_unmet_children_are_released_after_the_hold() -> None:
    pool = _pool([RunningParent(PULL, "build", T0, run="1#1")])
    arrival = T0 + 605.0
    assert pool.target(arrival - 50) == 4
    assert pool.target(arrival + 60) == 4
    assert pool.target(arrival + 61) == 0


def test_a_parent_that_ended_without_children_releases_them() -> None:
    parents = [RunningParent(PULL, "build", T0, run="1#1")]
    pool = _pool(parents, grace=30.0)
    assert pool.target(T0 + 520) == 4
    parents.clear()  # the build failed at T0 + 530
    assert pool.target(T0 + 530) == 4
    assert pool.target(T0 + 561) == 0


def test_a_base_pool_adds_its_target() -> None:
    pool = _pool([RunningParent(PULL, "build", T0, run="1#1")], base=FixedPool(2))
    assert pool.target(T0) == 2
    assert pool.target(T0 + 505) == 6


def test_bad_knobs_are_refused() -> None:
    with pytest.raises(ValueError, match="quantile"):
        _pool([], quantile=1.0)
    with pytest.raises(ValueError, match="lead and hold"):
        PredictivePool(
            model=_model(), label_set="gpu", parents=lambda now: [], lead=-1.0, hold=60.0
        )


def _staged(seed: int) -> list[TraceJob]:
    flow = StagedWorkflow(
        path=PULL,
        weight=1.0,
        build_median=900.0,
        build_sigma=0.05,
        shards=((4, 0.5), (6, 0.5)),
        shard_median=600.0,
        third_stage_share=0.0,
    )
    spec = StagedSpec(
        minutes=180, runs_per_minute_quiet=0.1, runs_per_minute_busy=0.3, workflows=(flow,)
    )
    return generate_staged(spec, seed)


def test_predictive_beats_reactive_on_a_staged_trace_with_slow_child_launches() -> None:
    """Child launches of 150–210 s: reactive waits for each; the predictive pool has pairs
    Running when the shards come, for a bounded extra cost."""
    trained = learn(_staged(101))
    jobs = _staged(1)
    gpu = by_label_set(jobs)["linux-gpu"]
    config = SimConfig(
        params=Params(max_runners=1000, max_pending_pairs=30, demand_enabled=True),
        delays=tuple(provisioning_delays(random.Random(1), 500, 150.0, 210.0)),
        demand_interval=10.0,
    )
    reactive = simulate(gpu, config, FixedPool(0))
    setting = predictive_setting(trained, jobs, "linux-gpu", lead=210.0, hold=210.0)
    predictive = simulate(gpu, config, setting.pool())
    assert reactive.percentile(90) > 150.0  # each shard waits for a launch
    assert predictive.percentile(90) <= 0.25 * reactive.percentile(90)  # measured: 7 s vs 196 s
    assert predictive.node_seconds <= 1.3 * reactive.node_seconds  # measured: 1.17
    # Without the model's knowledge (an empty model), it is reactive.
    empty = predictive_setting(StageModel(), jobs, "linux-gpu", lead=210.0, hold=210.0)
    blind = simulate(gpu, config, empty.pool())
    # Learning online, it catches up after its first runs: better than reactive, worse than
    # trained.
    assert predictive.percentile(90) <= blind.percentile(90) <= reactive.percentile(90)
