"""The simulator's nodes: a lone half repaired in either pool, Karpenter's consolidation of
nodes holding only placeholders, and where the scheduler puts a pod."""

from __future__ import annotations

from dataclasses import replace

import pytest

from capacity.model import Params, Role
from capacity.warm_pool import FixedPool
from whatif import simulate as simulate_module
from whatif.simulate import SimConfig, simulate
from whatif.trace import TraceJob

PARAMS = Params(max_runners=100, demand_failure_base_capacity=0)  # no floor before the first read
CONFIG = SimConfig(params=PARAMS, delays=(60.0,), demand_lag=2.0, coalesce=0.15)
WORKFLOW_ONLY = frozenset({Role.WORKFLOW})


def _job(n: int, at: float, duration: float) -> TraceJob:
    return TraceJob(
        job=str(n),
        run=str(n),
        labels=("linux",),
        queued_at=at,
        started_at=at,
        completed_at=at + duration,
    )


def test_a_lone_workflow_half_is_repaired_as_a_lone_runner_half_is() -> None:
    """The lone runner half of ``test_whatif_simulate``, with the runner pool out instead
    (and no word from it): job 2's workflow pod finds room beside C's workflow half and
    preempts B's runner half. The policy sees the jobs' own pods (each runner pod and its
    workflow pod Running), so it does not hold B's workflow half back for a runner still
    waiting for its workflow pod, and gives it a runner half: the outcome is the workflow
    pool's, the pools swapped."""
    config = replace(
        CONFIG,
        pairs_per_node=2,
        params=replace(PARAMS, ttl=10_000.0),
        outages=((0.0, 1000.0),),
    )
    jobs = [_job(1, 1.0, 500.0), _job(2, 100.0, 500.0)]
    runner_out = simulate(
        jobs, replace(config, outage_roles=frozenset({Role.RUNNER})), FixedPool(2), begin=-300.0
    )
    workflow_out = simulate(
        jobs, replace(config, outage_roles=WORKFLOW_ONLY), FixedPool(2), begin=-300.0
    )
    assert runner_out.waits == workflow_out.waits == (0.0, 0.0)
    assert runner_out.repairs == workflow_out.repairs == 1
    assert runner_out.pair_seconds == pytest.approx(workflow_out.pair_seconds)
    assert runner_out.workflow_node_seconds == pytest.approx(workflow_out.runner_node_seconds)
    assert runner_out.runner_node_seconds == pytest.approx(workflow_out.workflow_node_seconds)


def test_a_node_holding_only_placeholders_is_consolidated_onto_room_elsewhere() -> None:
    """Two warm pairs share a node (two halves a node) until job 1 takes pair A's place;
    the pool's new pair C gets a new node (with, until 330 s, the pair made for job 1 while
    it was queued). When job 1 ends (at 1,000 s) B is alone on the first node and C on the
    second. With ``consolidation`` (WhenEmptyOrUnderutilized)
    C's node goes 20 s later, its halves evicted, and the pool's pair is made again in the
    room beside B; without it both nodes stay to the end of the window."""
    config = replace(CONFIG, pairs_per_node=2, params=replace(PARAMS, ttl=100_000.0))
    jobs = [_job(1, 0.0, 1000.0)]
    kept = simulate(jobs, config, FixedPool(2), begin=-300.0, until=2000.0)
    moved = simulate(
        jobs, replace(config, consolidation=20.0), FixedPool(2), begin=-300.0, until=2000.0
    )
    assert kept.waits == moved.waits == (0.0,)
    # Per pool: the first node for the whole window (2,300 s), C's from 0 to the end or
    # to 1,020 s.
    assert kept.runner_node_seconds == pytest.approx(2300.0 + 2000.0)
    assert moved.runner_node_seconds == pytest.approx(2300.0 + 1020.0)
    assert moved.workflow_node_seconds == moved.runner_node_seconds
    assert moved.pairs_created == kept.pairs_created + 1  # C again, in the room beside B
    assert moved.pool_launches == kept.pool_launches  # no launch for it
    assert moved.pair_seconds == pytest.approx(kept.pair_seconds, abs=1.0)


def test_a_node_whose_pods_just_changed_is_not_consolidated_before_node_idle() -> None:
    """As above, with an empty node kept 1,500 s: C's node is consolidated only once its
    pods have been left alone that long, as Karpenter's consolidateAfter counts from a
    node's last pod event. Its last was at 330 s: the pair made beside C for job 1 while it
    was queued went then, the downscale delay after."""
    config = replace(
        CONFIG, pairs_per_node=2, params=replace(PARAMS, ttl=100_000.0), node_idle=1500.0
    )
    jobs = [_job(1, 0.0, 1000.0)]
    moved = simulate(
        jobs, replace(config, consolidation=20.0), FixedPool(2), begin=-300.0, until=2000.0
    )
    assert moved.runner_node_seconds == pytest.approx(2300.0 + 330.15 + 1500.0)


def test_with_spread_a_pod_goes_to_the_emptiest_node_with_room() -> None:
    """The kube-scheduler's default scoring (LeastAllocated) puts a pod on the node with the
    most room; without ``spread`` the simulator puts it on the fullest."""
    config = replace(CONFIG, pairs_per_node=2)
    queue = simulate_module._Queue(jobs=())
    for spread, expected in ((True, 1), (False, 0)):
        run = simulate_module._Run(
            queue=queue, index=0, config=replace(config, spread=spread), pool=FixedPool(0)
        )
        run.nodes[0] = simulate_module._Node(role=Role.RUNNER, launched_at=0.0, ready=True, jobs=1)
        run.nodes[1] = simulate_module._Node(role=Role.RUNNER, launched_at=0.0, ready=True)
        run.nodes[2] = simulate_module._Node(role=Role.RUNNER, launched_at=0.0, ready=True, jobs=2)
        run.nodes[3] = simulate_module._Node(role=Role.WORKFLOW, launched_at=0.0, ready=True)
        assert run.free_room(Role.RUNNER) == expected


def test_a_negative_consolidation_delay_is_refused() -> None:
    with pytest.raises(ValueError, match="consolidation"):
        SimConfig(params=PARAMS, consolidation=-1.0)
