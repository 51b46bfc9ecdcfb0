"""The simulator replays traces through policy.plan with the timing its docstring states."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import pytest

from capacity.model import Params, Role
from capacity.warm_pool import FixedPool
from tools.whatif_synth import SynthSpec, generate
from whatif import simulate as simulate_module
from whatif.recommend import cheapest, fixed_pools, sweep
from whatif.simulate import SimConfig, merge, percentile, simulate, simulate_clusters
from whatif.trace import TraceJob

PARAMS = Params(max_runners=100, demand_failure_base_capacity=0)  # no floor before the first read
CONFIG = SimConfig(params=PARAMS, delays=(60.0,), demand_lag=2.0, coalesce=0.15)


def _job(n: int, at: float, duration: float, run: str | None = None) -> TraceJob:
    return TraceJob(
        job=str(n),
        run=run or str(n),
        labels=("linux",),
        queued_at=at,
        started_at=at,
        completed_at=at + duration,
    )


def test_a_reactive_job_waits_for_the_read_the_pass_and_the_node() -> None:
    out = simulate([_job(1, 0.0, 100.0)], CONFIG, FixedPool(0))
    # Read at 0 (the job is queued), used 2 s later, pass 0.15 s after that, node 60 s.
    assert out.waits == pytest.approx((62.15,))
    assert out.busy == pytest.approx(100.0)
    # The read at 60 still saw the job queued (it started at 62.15), but the job's runner
    # started after that read: the as-of correction does not count it again, so no second
    # pair (without it: a node launched for nobody, the lag's cost).
    assert out.pairs_created == out.launches == 1
    # Spare: the node's launch (60 s).
    assert out.spare == pytest.approx(60)


def test_a_warm_pair_takes_a_later_job_at_once() -> None:
    jobs = [_job(1, 0.0, 10.0), _job(2, 1000.0, 10.0)]
    reactive = simulate(jobs, CONFIG, FixedPool(0))
    warm = simulate(jobs, CONFIG, FixedPool(1))
    assert reactive.waits[-1] > 60
    # Job 2 takes the warm pair at once; job 1 came with the pool's first pair (60 s).
    assert warm.waits == (0.0, 60.0)
    assert warm.spare > reactive.spare  # the warm pair was paid for


def test_a_job_waits_for_a_running_pair_when_the_queue_exceeds_the_pool() -> None:
    jobs = [_job(1, 0.0, 5.0), *(_job(n, 500.0, 500.0) for n in range(2, 6))]
    out = simulate(jobs, CONFIG, FixedPool(2))
    assert out.waits[:2] == (0.0, 0.0)  # two of the burst of four on warm pairs
    assert all(w >= 60 for w in out.waits[2:])  # the rest wait for a node


def test_the_pool_holds_its_size_between_jobs() -> None:
    jobs = [_job(1, 0.0, 10.0), _job(2, 7200.0, 10.0)]
    out = simulate(jobs, CONFIG, FixedPool(3))
    # Three pairs for two hours (renewed every TTL: make-before-break holds a few more).
    assert 3 * 7000 < out.pair_seconds < 4.5 * 7200
    assert out.launches > 3  # renewals launch nodes: one pair per node


@dataclass
class _Recorder:
    seen: list[tuple[float, int, int]] = field(default_factory=list)

    def observe(self, now: float, queued_jobs: int, new_jobs: int) -> None:
        self.seen.append((now, queued_jobs, new_jobs))

    def target(self, now: float) -> int:
        return 1 if now > 100 else 0


def test_any_warm_pool_object_is_driven_as_the_monitor_drives_it() -> None:
    jobs = [_job(1, 0.0, 5.0), _job(2, 0.0, 5.0), _job(3, 40.0, 5.0), _job(4, 400.0, 5.0)]
    pool = _Recorder()
    out = simulate(jobs, CONFIG, pool)
    # Every reconcile pass tells the pool what it saw, as warm_pool.drive does in the monitor.
    assert len(pool.seen) == out.passes
    assert pool.seen[0] == (0.0, 0, 0)  # the first pass only learns what exists
    # Job 4 took the pool's pair and ended before the next demand read: the read never saw
    # it queued, but its runner pod was seen, so it counts (jobs 1 and 2 were queued at the
    # first live read, the counter's baseline, and count when their runners appear).
    assert sum(new for _, _, new in pool.seen) == 4
    assert out.waits[0] == 0.0  # the pool's pair, asked for after 100 s, took job 4


def test_lookahead_sees_a_run_s_second_stage_coming() -> None:
    # A run whose second stage is queued 100 s after its first.
    jobs = [_job(1, 0.0, 100.0, run="r"), *(_job(n, 100.0, 30.0, run="r") for n in (2, 3))]
    plain = simulate(jobs, CONFIG, FixedPool(0))
    ahead = simulate(jobs, SimConfig(params=PARAMS, delays=(60.0,), lookahead=120.0), FixedPool(0))
    assert ahead.waits == pytest.approx((0.0, 0.0, 62.15))  # both second-stage jobs at once
    assert sum(plain.waits) > sum(ahead.waits) + 50


def test_percentiles_are_nearest_rank_and_outcomes_merge() -> None:
    assert percentile([], 90) == 0.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == 4.0
    a = simulate([_job(1, 0.0, 10.0)], CONFIG, FixedPool(0))
    both = merge([a, a])
    assert both.jobs == 2
    assert both.busy == 2 * a.busy
    assert len(both.waits) == 2


def test_a_sweep_gives_a_curve_and_the_cheapest_setting_meeting_a_target() -> None:
    jobs = generate(SynthSpec(minutes=60, label_sets=SynthSpec().label_sets[:1]), 7)
    points = sweep(jobs, CONFIG, fixed_pools([0, 4, 12]))
    assert [p.setting.name for p in points] == ["reactive", "fixed B=4", "fixed B=12"]
    spares = [p.outcome.spare for p in points]
    assert spares == sorted(spares)  # a bigger pool costs more...
    assert points[-1].p90 <= points[0].p90  # ...and makes jobs wait less
    best = cheapest(points, points[1].p90)
    assert best is not None
    assert best.outcome.spare <= points[1].outcome.spare
    assert cheapest(points, -1.0) is None
    described = best.describe(opt_spare=1000.0)
    assert {"policy", "proactive_capacity", "queue_seconds", "spare_over_opt0"} <= described.keys()


def test_bad_configurations_are_refused_with_the_field_named() -> None:
    with pytest.raises(ValueError, match="delays"):
        SimConfig(params=PARAMS, delays=())
    with pytest.raises(ValueError, match="demand_interval"):
        SimConfig(params=PARAMS, demand_interval=0)
    with pytest.raises(ValueError, match="lookahead"):
        SimConfig(params=PARAMS, lookahead=-1)
    with pytest.raises(ValueError, match="pairs_per_node"):
        SimConfig(params=PARAMS, pairs_per_node=0)
    with pytest.raises(ValueError, match="begin"):
        simulate([_job(1, 0.0, 10.0)], CONFIG, FixedPool(0), begin=5.0)


def test_two_pairs_per_node_share_one_launch_and_keep_the_room() -> None:
    jobs = [_job(1, 0.0, 100.0), _job(2, 0.0, 100.0)]
    one = simulate(jobs, CONFIG, FixedPool(0))
    two = simulate(jobs, replace(CONFIG, pairs_per_node=2), FixedPool(0))
    # Both pairs wait on the node the first one launched: the same waits, half the nodes.
    assert two.waits == one.waits == pytest.approx((62.15, 62.15))
    assert two.launches * 2 == one.launches
    assert two.node_seconds == pytest.approx(one.node_seconds / 2)
    # Spare is counted in a pair's room, so it does not change with the node size here.
    assert two.spare == pytest.approx(one.spare)
    assert two.busy == one.busy == pytest.approx(200.0)


def test_a_pair_waiting_for_a_node_takes_the_free_half_of_a_busy_one() -> None:
    # Job 1 runs from 62.15 to 1062.15 on a two-pair node; job 2, queued at 510 (a demand
    # read), gets the node's other half at once (the pair made at 512.15 is Running).
    jobs = [_job(1, 0.0, 1000.0), _job(2, 510.0, 10.0)]
    out = simulate(jobs, replace(CONFIG, pairs_per_node=2), FixedPool(0))
    assert out.waits == pytest.approx((2.15, 62.15))
    one = simulate(jobs, CONFIG, FixedPool(0))
    assert one.waits[0] > 60  # one pair per node: job 2 waits for its own node


def test_the_window_starts_the_pool_early_and_counts_the_quiet_tail() -> None:
    config = replace(CONFIG, params=replace(PARAMS, ttl=10_000.0))  # no renewals
    jobs = [_job(1, 1.0, 10.0)]  # between two demand reads: no demand, only the pool
    late = simulate(jobs, config, FixedPool(1))
    early = simulate(jobs, config, FixedPool(1), begin=-300.0, until=1000.0)
    assert late.waits == (60.0,)  # the pool's first pair comes with the job
    assert early.waits == (0.0,)  # started 300 s ahead, the pair was ready
    # Node 0: -300..1000 (the job's, then the next pair's: it moved there when the job
    # ended); node 1, launched at 1.15 for the pool's next pair, came up empty at 61.15
    # and went 30 s later. Nothing is counted past `until`.
    assert early.node_seconds == pytest.approx(1300.0 + 90.0)
    assert early.pair_seconds == pytest.approx(301.0 + (1000.0 - 1.15))
    assert early.busy == pytest.approx(10.0)
    assert early.spare == pytest.approx(1390.0 - 10.0)
    # A window ending before the last job counts the job's part inside it.
    cut = simulate(jobs, config, FixedPool(1), begin=-300.0, until=5.0)
    assert cut.busy == pytest.approx(4.0)
    assert cut.waits == (0.0,)


def test_a_job_admitted_by_a_pair_runs_in_free_room_and_the_pair_stays() -> None:
    # One warm pair on a two-pair node, two jobs at once: the first job's pods fit beside
    # the pair (the scheduler preempts only when nothing fits), so the pair stays and
    # admits the second job at once, which then preempts it.
    config = replace(CONFIG, pairs_per_node=2, params=replace(PARAMS, ttl=10_000.0))
    jobs = [_job(1, 1.0, 500.0), _job(2, 1.0, 500.0)]
    out = simulate(jobs, config, FixedPool(1), begin=-300.0)
    assert out.waits == (0.0, 0.0)
    # One pair per node: no free room; the second job waits for a pair and a node.
    one = simulate(jobs, replace(config, pairs_per_node=1), FixedPool(1), begin=-300.0)
    assert one.waits[0] == 0.0
    assert one.waits[1] > 40


def test_clusters_sharing_a_queue_each_serve_it_with_their_own_pool() -> None:
    config = replace(CONFIG, params=replace(PARAMS, ttl=10_000.0))
    jobs = [_job(1, 1.0, 100.0), _job(2, 1.0, 100.0)]
    # A warm pair in each of two clusters: both jobs start at once, one in each.
    two = simulate_clusters(jobs, [config, config], [FixedPool(1), FixedPool(1)], begin=-300.0)
    assert two.waits == (0.0, 0.0)
    one = simulate(jobs, config, FixedPool(1), begin=-300.0)
    assert one.waits[1] > 40
    with pytest.raises(ValueError, match="pools"):
        simulate_clusters(jobs, [config], [FixedPool(1), FixedPool(1)])


def test_each_job_asks_the_clusters_in_its_own_order() -> None:
    config = replace(CONFIG, params=replace(PARAMS, ttl=10_000.0))
    jobs = [_job(1, 1.0, 100.0), _job(2, 2.0, 100.0)]
    warm = [FixedPool(1), FixedPool(1)]
    # By default a rotation: job 1 asks cluster 0 first, job 2 cluster 1.
    rotation = simulate_clusters(jobs, [config, config], warm, begin=-300.0)
    assert rotation.cluster_jobs == (1, 1)
    # Both prefer cluster 1 (as a service that drew that order would hand them): the first
    # takes its warm pair, the second finds no Running pair there and goes to cluster 0.
    both = simulate_clusters(
        jobs, [config, config], warm, begin=-300.0, preference=[(1, 0), (1, 0)]
    )
    assert both.cluster_jobs == (1, 1)
    assert both.waits == (0.0, 0.0)
    first = simulate_clusters(jobs[:1], [config, config], warm, begin=-300.0, preference=[(1, 0)])
    assert first.cluster_jobs == (0, 1)
    assert merge([first, rotation]).cluster_jobs == (1, 2)
    with pytest.raises(ValueError, match="one order per job"):
        simulate_clusters(jobs, [config, config], warm, preference=[(1, 0)])
    with pytest.raises(ValueError, match="every cluster once"):
        simulate_clusters(jobs, [config, config], warm, preference=[(1, 1), (0, 1)])


def test_sharded_peers_make_pairs_for_their_claim_of_the_queue() -> None:
    jobs = [_job(n, 1.0, 100.0) for n in (1, 2, 3)]
    fast = replace(CONFIG, delays=(50.0,))  # the jobs start before the next read but one
    peers = [
        replace(fast, params=replace(PARAMS, cluster_index=i, cluster_count=2)) for i in (0, 1)
    ]
    out = simulate_clusters(jobs, peers, [FixedPool(0), FixedPool(0)])
    # The first read sees three queued: peer 0 claims two, peer 1 one; no pair twice (and
    # none for the read that still shows them once they start: the as-of correction).
    assert out.waits == pytest.approx((52.15,) * 3)
    assert out.launches == 3
    # Without sharding each peer makes a pair per queued job: six at the first read.
    unsharded = simulate_clusters(jobs, [fast, fast], [FixedPool(0), FixedPool(0)])
    assert unsharded.launches == 6


@dataclass
class _BeforeStart:
    """One warm pair before t=0, none after."""

    def observe(self, now: float, queued_jobs: int, new_jobs: int) -> None:
        del now, queued_jobs, new_jobs

    def target(self, now: float) -> int:
        return 1 if now < 0 else 0


def test_with_hand_over_a_finishing_job_s_room_goes_to_the_oldest_waiting_job() -> None:
    # Job 1 takes the warm pair at once (no read sees it queued, so no pair is made for
    # it later) and ends at 101; job 2 is queued at 91, after the read at 90.
    jobs = [_job(1, 1.0, 100.0), _job(2, 91.0, 10.0)]
    plain = simulate(jobs, CONFIG, _BeforeStart(), begin=-300.0)
    handed = simulate(jobs, replace(CONFIG, handover=True), _BeforeStart(), begin=-300.0)
    # Without: the read at 120 sees job 2, used at 122; the pass at 122.15 makes a pair
    # on job 1's node (empty, not yet consolidated).
    assert plain.waits == pytest.approx((0.0, 31.15))
    # With: the service hands job 1's slot to job 2 when job 1 ends.
    assert handed.waits == pytest.approx((0.0, 10.0))


def test_a_launch_during_an_outage_comes_up_one_delay_after_it() -> None:
    jobs = [_job(1, 0.0, 10.0)]
    out = simulate(jobs, replace(CONFIG, outages=((0.0, 100.0),)), FixedPool(0))
    # Read at 0, pair at 2.15: retried until 100, then the 60 s launch.
    assert out.waits == pytest.approx((160.0,))
    after = simulate(jobs, replace(CONFIG, outages=((-50.0, 1.0),)), FixedPool(0))
    assert after.waits == pytest.approx((62.15,))  # asked for after it ended
    # The refused tries cost nothing: the node is paid for from the outage's end, so the
    # job costs what it costs when asked for after the outage (not 97.85 s more).
    assert out.node_seconds == pytest.approx(after.node_seconds)
    assert out.runner_node_seconds == pytest.approx(after.runner_node_seconds)
    with pytest.raises(ValueError, match="outages"):
        SimConfig(params=PARAMS, outages=((5.0, 5.0),))


def test_a_peer_in_an_outage_holds_its_share_until_the_other_claims_it_aged() -> None:
    """Two jobs, sharded: peer 0 claims one, peer 1 the other. Peer 0 cannot launch for
    1,000 s. Without an aged count its job waits out the outage; with aged_after 120 s
    peer 1 claims it at its first read after two minutes and runs it a launch later."""
    jobs = [_job(n, 1.0, 50.0) for n in (1, 2)]
    peers = [
        replace(CONFIG, params=replace(PARAMS, cluster_index=i, cluster_count=2)) for i in (0, 1)
    ]
    peers[0] = replace(peers[0], outages=((0.0, 1000.0),))
    held = simulate_clusters(jobs, peers, [FixedPool(0), FixedPool(0)])
    assert max(held.waits) > 1000.0
    aged = [replace(p, aged_after=120.0) for p in peers]
    freed = simulate_clusters(jobs, aged, [FixedPool(0), FixedPool(0)])
    # Reads every 30 s from the first arrival (t = 1): peer 1's own job is seen at once,
    # its pair made 2.15 s later and up 60 s after that.
    assert min(freed.waits) == pytest.approx(62.15)
    # The read at 121 s sees the other one aged (queued 120 s before); seen at 123 s, its
    # pair at 123.15 s lands on peer 1's node, empty since its job ended and not yet
    # consolidated: Running at once.
    assert max(freed.waits) == pytest.approx(122.15)
    with pytest.raises(ValueError, match="aged_after"):
        SimConfig(params=PARAMS, aged_after=0.0)


WORKFLOW_ONLY = frozenset({Role.WORKFLOW})


def test_the_two_pools_mirror_each_other_unless_one_runs_out() -> None:
    jobs = generate(SynthSpec(minutes=30), seed=3)
    start = jobs[0].queued_at
    config = replace(CONFIG, outages=((start + 600.0, start + 900.0),))
    both = simulate(jobs, config, FixedPool(1))
    assert both.runner_node_seconds == pytest.approx(both.workflow_node_seconds)
    assert both.node_seconds == pytest.approx(both.runner_node_seconds)
    assert both.pool_launches == 2 * both.launches
    assert both.stalls == both.repairs == 0
    # The workflow pool alone out: runner pods find room that workflow pods do not, and
    # the halves they leave alone are given their missing half back.
    one = simulate(jobs, replace(config, outage_roles=WORKFLOW_ONLY), FixedPool(1))
    assert one.repairs > 0


def test_a_workflow_pool_that_cannot_launch_is_a_stall_once_the_pools_say_so() -> None:
    """One job; the workflow pool cannot launch for 2,000 s. Its runner half comes up at
    once. From time alone (fewer than eight launches seen, so no stall timeout) the pair
    waits, timed out and made again every ready timeout, on the runner node it holds the
    whole time; with the pools' word it is released as stalled after half the ready
    timeout, and the runner node goes between tries."""
    jobs = [_job(1, 0.0, 10.0)]
    out = replace(CONFIG, outages=((0.0, 2000.0),), outage_roles=WORKFLOW_ONLY)
    silent = simulate(jobs, out, FixedPool(0))
    assert silent.stalls == 0
    assert silent.waits == pytest.approx((2060.0,))  # the launch retried until 2,000 s
    # The runner node is held from the pair's creation (2.15 s); the workflow node is paid
    # for from the outage's end, when the cloud gives an instance.
    assert silent.runner_node_seconds == pytest.approx(silent.workflow_node_seconds + 1997.85)
    told = simulate(jobs, replace(out, word=True), FixedPool(0))
    assert told.stalls >= 2
    assert told.runner_node_seconds < 0.6 * silent.runner_node_seconds
    assert told.waits[0] > silent.waits[0]  # the back-off's price: the retry comes later
    # Both pools out: both halves Pending, which is no stall, word or not.
    both = simulate(jobs, replace(out, outage_roles=frozenset(Role), word=True), FixedPool(0))
    assert both.stalls == 0


def test_a_job_whose_runner_pod_finds_room_leaves_a_lone_runner_half_that_is_repaired() -> None:
    """Two warm pairs on one runner and one workflow node (two halves each); the workflow
    pool cannot launch from 0 to 1,000 s. Job 1 takes pair A's place in both pools; the
    pool's new pair C gets a new runner node (up at once) and waits for a workflow node.
    Job 2, admitted by pair B, puts its runner pod in the free room beside C's runner half
    and preempts B's workflow half: B's runner half is alone, and the policy gives it a
    workflow half back instead of making a new pair."""
    config = replace(
        CONFIG,
        pairs_per_node=2,
        params=replace(PARAMS, ttl=10_000.0),
        outages=((0.0, 1000.0),),
        word=True,
    )
    jobs = [_job(1, 1.0, 500.0), _job(2, 100.0, 500.0)]
    one = simulate(jobs, replace(config, outage_roles=WORKFLOW_ONLY), FixedPool(2), begin=-300.0)
    assert one.waits == (0.0, 0.0)
    assert one.repairs >= 1
    # Both pools out: C's runner node launches too, so job 2 preempts B whole.
    both = simulate(jobs, config, FixedPool(2), begin=-300.0)
    assert both.waits == (0.0, 0.0)
    assert both.repairs == 0


def test_karpenters_word_on_a_refused_half_stops_new_pairs_within_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job every 15 s while the workflow pool cannot launch: each would get a pair whose
    runner half holds a runner node. Karpenter says it has no node for the first workflow
    half ``KARPENTER_RETRY`` after the refusal, and no more pair is made from then; without
    that word the shortage is confirmed a minute after the first half's creation."""
    jobs = [_job(n, 15.0 * n, 10.0) for n in range(6)]
    out = replace(CONFIG, outages=((0.0, 1000.0),), outage_roles=WORKFLOW_ONLY, word=True)
    told = simulate(jobs, out, FixedPool(0))
    monkeypatch.setattr(simulate_module, "KARPENTER_RETRY", math.inf)
    floor_only = simulate(jobs, out, FixedPool(0))
    assert told.pairs_created < floor_only.pairs_created
    assert told.runner_node_seconds < floor_only.runner_node_seconds
    assert told.percentile(0.9) == pytest.approx(floor_only.percentile(0.9), abs=120.0)
