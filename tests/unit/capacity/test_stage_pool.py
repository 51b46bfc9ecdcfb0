"""The predictive pool: pairs for the children a stage model expects within its horizon,
pooled over parents, released when their parent ends or is overdue; and, in the simulator,
ahead of reactive on a staged trace with slow child launches."""

from __future__ import annotations

import random

import pytest

from capacity.model import Params
from capacity.stage_pool import PredictivePool
from capacity.stages import RunningParent, StageModel
from capacity.warm_pool import FixedPool
from tools.whatif_staged import StagedSpec, StagedWorkflow, generate_staged
from whatif.delays import provisioning_delays
from whatif.optimum import by_label_set
from whatif.predict import learn, predictive_setting
from whatif.simulate import SimConfig, simulate
from whatif.trace import TraceJob

PULL = ".github/workflows/pull.yml"
T0 = 1_000_000.0


def _model() -> StageModel:
    model = StageModel()
    for i, duration in enumerate([500.0, 550.0, 600.0, 650.0, 700.0] * 2):
        # Builds of 500–700 s, each fanning out 4 GPU shards 5 s after its end.
        model.record(PULL, "build", duration, {"gpu": (4, 5.0)}, T0 + i)
    model.record(PULL, "build", 200.0, {}, T0 + 10)  # one failed early: fanned out nothing
    return model


def _pool(parents: list[RunningParent], **kwargs: object) -> PredictivePool:
    return PredictivePool(
        model=_model(),
        label_set="gpu",
        parents=lambda now: parents,
        horizon=100.0,
        hold=60.0,
        **kwargs,  # type: ignore[arg-type]
    )


def test_pairs_for_the_children_expected_within_the_horizon() -> None:
    parents = [RunningParent(PULL, "build", T0, run="1#1")]
    pool = _pool(parents)
    assert pool.target(T0) == 0  # the first children are due at 505 s: beyond 100 s
    # At 410 s the 500 s builds' children (505 s) are within the horizon: 2 of 10 fanned
    # runs of the 10 at least this long, 4 shards each.
    assert pool.predicted(T0 + 410) == pytest.approx(0.2 * 4)
    assert pool.target(T0 + 410) == 1
    # At 560 s, of the 8 runs this long (600, 650, 700 s, twice each, and the 2 of 550 s
    # already ruled out), those due by 660 s: 600 and 650, 4 of 6.
    assert pool.predicted(T0 + 560) == pytest.approx(4 / 6 * 4)
    assert pool.target(T0 + 560) == 3
    parents.clear()  # the build ended: its children are queued (demand) or never come
    assert pool.target(T0 + 600) == 0


def test_many_parents_pool_their_fractions() -> None:
    one = _pool([RunningParent(PULL, "build", T0, run="1#1")])
    many = _pool([RunningParent(PULL, "build", T0 + i, run=f"{i}#1") for i in range(5)])
    assert one.target(T0 + 410) == 1  # 0.8 rounded up
    assert many.target(T0 + 414) == 4  # 5 x 0.8: not 5 x 1
    assert many.predicted(T0 + 414) == pytest.approx(4.0)


def test_a_parent_overdue_past_the_hold_counts_no_more() -> None:
    pool = _pool([RunningParent(PULL, "build", T0, run="1#1")])
    # 0.9 quantile of the fanned runs: 700 s; the hold 60 s.
    assert pool.target(T0 + 690) == 4
    assert pool.target(T0 + 761) == 0


def test_a_base_pool_adds_its_target() -> None:
    pool = _pool([RunningParent(PULL, "build", T0, run="1#1")], base=FixedPool(2))
    pool.observe(T0, queued_jobs=0, new_jobs=0)
    assert pool.target(T0) == 2
    assert pool.target(T0 + 690) == 6


def test_bad_knobs_are_refused() -> None:
    with pytest.raises(ValueError, match="count_quantile"):
        _pool([], count_quantile=0.0)
    with pytest.raises(ValueError, match="horizon and hold"):
        PredictivePool(
            model=_model(), label_set="gpu", parents=lambda now: [], horizon=100.0, hold=-1.0
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
    setting = predictive_setting(trained, jobs, "linux-gpu", horizon=260.0, hold=210.0)
    predictive = simulate(gpu, config, setting.pool())
    assert reactive.percentile(90) > 150.0  # each shard waits for a launch
    assert predictive.percentile(90) <= 0.25 * reactive.percentile(90)  # measured: 19 s vs 196 s
    assert predictive.node_seconds <= 1.3 * reactive.node_seconds  # measured: 1.21
    # Without the model's knowledge (an empty model), it is reactive.
    empty = predictive_setting(StageModel(), jobs, "linux-gpu", horizon=260.0, hold=210.0)
    blind = simulate(gpu, config, empty.pool())
    # Learning online, it catches up after its first runs: better than reactive, worse than
    # trained.
    assert predictive.percentile(90) <= blind.percentile(90) <= reactive.percentile(90)
