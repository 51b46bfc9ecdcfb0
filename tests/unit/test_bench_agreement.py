"""The simulator-vs-cluster comparison: the recorded config rebuilds the run, the benchmark's
parameters map onto the simulator's, and the differences are computed as stated."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

import pytest

from capacity.model import Role
from capacity.warm_pool import FixedPool
from tools.bench_agreement import (
    AgreementError,
    Knobs,
    Row,
    assignment_order,
    check_plan,
    compare,
    config_from,
    launch_delays,
    launch_overhead,
    mapping,
    replay,
    rows,
    shortage_as_karpenter_saw_it,
)
from tools.bench_outcomes import FULL, SITE_NAMES, SMOKE, plan, recorded_refused_ttl
from tools.fake_actions import FakeActions


def test_the_recorded_config_rebuilds_the_benchmark_s() -> None:
    for config in (SMOKE, FULL, replace(FULL, hud_lag=12.0, consolidate_after="1m")):
        assert config_from(config.describe()) == config


def test_the_clouds_memory_of_a_refused_type_is_read_back_and_stretches_the_shortage() -> None:
    described = FULL.describe()
    assert recorded_refused_ttl(described) == FULL.refused_ttl == 180.0
    del described["refused_type_ttl_s"]
    # The first runs with the memory said it only in their settings list; none before.
    assert recorded_refused_ttl(described) == 180.0
    described["changed_settings"] = [x for x in described["changed_settings"] if "refused" not in x]
    assert recorded_refused_ttl(described) == 0.0
    assert config_from(described).refused_ttl == 0.0
    seed = FULL.seeds[0]
    low, high = plan(FULL, seed).shortage
    assert shortage_as_karpenter_saw_it(replace(FULL, refused_ttl=0.0), seed) == (low, high)
    # Asked again each time the memory lapses: back at the first lapse after the cloud is.
    stretched = shortage_as_karpenter_saw_it(replace(FULL, refused_ttl=100.0), seed)
    assert stretched[0] == low
    assert high <= stretched[1] < high + 100.0
    assert (stretched[1] - low) % 100.0 == pytest.approx(0.0)


def test_a_run_recorded_before_the_lag_was_written_gets_the_default() -> None:
    described = SMOKE.describe()
    for key in ("hud_lag_s", "consolidate_after", "prepare_timeout_s"):
        del described[key]
    rebuilt = config_from(described)
    assert (rebuilt.hud_lag, rebuilt.consolidate_after) == (30.0, "30s")
    assert rebuilt.spec == SMOKE.spec


def test_a_bad_config_is_refused_with_the_field_named() -> None:
    described = SMOKE.describe()
    del described["window"]["warmup_s"]
    with pytest.raises(AgreementError, match=r"config\.window\.warmup_s: missing"):
        config_from(described)
    described = SMOKE.describe()
    described["trace_spec"]["duration"]["scale"] = "fast"
    with pytest.raises(AgreementError, match=r"config\.trace_spec\.duration\.scale"):
        config_from(described)
    described = SMOKE.describe()
    described["node_provisioning_delay_s"] = [10.0]
    with pytest.raises(AgreementError, match="node_provisioning_delay_s"):
        config_from(described)


def test_a_config_that_does_not_rebuild_the_seed_s_trace_is_refused() -> None:
    seed = SMOKE.seeds[0]
    again = plan(SMOKE, seed)
    recorded = {"jobs": len(again.arrivals), "last_arrival_s": again.last_arrival}
    check_plan(SMOKE, seed, recorded)
    with pytest.raises(AgreementError, match=rf"seeds\.{seed}\.jobs"):
        check_plan(SMOKE, seed, {**recorded, "jobs": len(again.arrivals) + 1})
    # A different generator spec gives another trace: caught by the same check.
    other = replace(SMOKE, spec=replace(SMOKE.spec, runs_per_minute_busy=9.0))
    with pytest.raises(AgreementError, match=rf"seeds\.{seed}\."):
        check_plan(other, seed, recorded)


def test_differences_are_relative_to_the_measured_value() -> None:
    assert Row("m", 115.0, 100.0).difference == pytest.approx(0.15)
    assert Row("m", 115.0, 100.0).within(0.15) is True
    assert Row("m", 116.0, 100.0).within(0.15) is False
    assert Row("m", 80.0, 100.0).difference == pytest.approx(-0.2)
    assert Row("m", 80.0, 100.0).within(0.15) is False
    assert Row("m", 0.0, 0.0).within(0.15) is True
    assert Row("m", 1.0, 0.0).difference == math.inf
    assert Row("m", 1.0, 0.0).within(0.15) is False
    assert Row("m", 1.0, None).within(0.15) is None
    described = Row("m", 1.0, 0.0).describe(0.15)
    assert described["difference"] is None  # JSON has no infinity
    assert described["simulated_minus_measured"] == 1.0


def test_the_benchmark_s_parameters_map_onto_the_simulator() -> None:
    last = plan(SMOKE, 2).last_arrival
    warm = mapping(SMOKE, "ours_warm", 2, last)
    assert [p.target(0.0) for p in warm.pools] == [SMOKE.warm, SMOKE.warm]  # N per cluster
    assert all(isinstance(p, FixedPool) for p in warm.pools)
    for index, sim in enumerate(warm.sims):
        # Each peer as the benchmark configures its listener: its shard of the demand, its
        # own max_runners and failure floor (product default 1).
        assert (sim.params.cluster_index, sim.params.cluster_count) == (index, 2)
        assert sim.params.max_runners == SMOKE.max_runners
        assert sim.params.demand_failure_base_capacity == 1
        assert sim.pairs_per_node == 2
        assert sim.handover
        assert sim.demand_lag == SMOKE.hud_lag
        assert sim.node_idle == 30.0
        assert all(SMOKE.launch_delay[0] <= d <= SMOKE.launch_delay[1] for d in sim.delays)
    assert warm.sims[0].delays != warm.sims[1].delays  # each cluster draws its own
    # Site A runs out, until Karpenter asks again after the cloud's memory of the refusal.
    low, high = shortage_as_karpenter_saw_it(SMOKE, 2)
    assert high > plan(SMOKE, 2).shortage[1]
    start = SMOKE.spec.start
    assert warm.sims[0].outages == ((start + low, start + high),)
    assert warm.sims[1].outages == ()
    unshort = mapping(SMOKE, "ours_warm", 2, last, Knobs(shortage=False))
    assert unshort.sims[0].outages == ()
    assert warm.begin == SMOKE.spec.start - SMOKE.warmup
    assert warm.until == SMOKE.spec.start + last + SMOKE.tail
    demand = mapping(SMOKE, "ours_demand", 2, last)
    assert [p.target(0.0) for p in demand.pools] == [0, 0]
    with pytest.raises(AgreementError, match="variant"):
        mapping(SMOKE, "stock_min0", 2, last)


def _figures(p50: float, nodes: float) -> dict[str, Any]:
    return {
        "queue_to_workflow_running_s": {"n": 3, "p50": p50, "p90": p50, "p99": p50},
        "node_seconds": {"total": 2 * nodes, "runner": nodes, "workflow": nodes},
        "placeholder_pod_seconds": 0.0,
        "karpenter_launches": 0,
    }


def _document(variants: dict[str, Any]) -> dict[str, Any]:
    """An outcome document of SMOKE's first seed with ``variants``' figures."""
    seed = SMOKE.seeds[0]
    again = plan(SMOKE, seed)
    return {
        "config": SMOKE.describe(),
        "seeds": {
            str(seed): {
                "jobs": len(again.arrivals),
                "last_arrival_s": again.last_arrival,
                "variants": variants,
            }
        },
    }


@pytest.mark.parametrize("variant_number", [0, 3])
def test_each_job_asks_the_sites_in_the_order_the_benchmark_s_fake_drew(
    variant_number: int,
) -> None:
    """The benchmark's fake, as ``bench_outcomes`` builds it (assign_seed = the seed, its
    two sites' scale sets, then the trace's jobs one by one), prefers for each job the site
    ``assignment_order`` puts first, and asks them in that order."""
    seed = 4
    fake = FakeActions(pats=["p"], assign_seed=seed, broker=True)
    ids = [1000 + 20 * variant_number + index for index in range(len(SITE_NAMES))]
    for scale_set_id, name in zip(ids, SITE_NAMES, strict=True):
        fake.add_scale_set(scale_set_id, name)
    queued = [fake.add_jobs(1, labels=["linux"], duration=1.0)[0] for _ in range(40)]
    drawn = tuple(
        tuple(ids.index(s) for s in fake._preference[job.runner_request_id]) for job in queued
    )
    assert assignment_order(seed, 40) == drawn
    assert {order[0] for order in drawn} == {0, 1}  # a draw, not a constant
    assert assignment_order(seed, 40) != assignment_order(seed + 1, 40)


def test_the_seeded_order_decides_which_site_takes_a_job() -> None:
    seed = SMOKE.seeds[0]
    drawn = replay(SMOKE, "ours_warm", seed)
    rotation = replay(SMOKE, "ours_warm", seed, Knobs(seeded_order=False))
    assert sum(drawn.cluster_jobs) == sum(rotation.cluster_jobs) == drawn.jobs
    assert drawn.cluster_jobs != rotation.cluster_jobs
    assert "fake service drew" in str(compare(_document({})).model["assignment"])


def test_a_document_is_compared_seed_by_seed_and_variant_by_variant() -> None:
    seed = SMOKE.seeds[0]
    document = _document({"ours_warm": _figures(1.0, 1000.0), "stock_min0": {}})
    report = compare(document, source="x.json")
    assert list(report.seeds[str(seed)]) == ["ours_warm"]
    assert report.skipped == {f"{seed}/ours_demand": "not run"}
    found = {row.metric: row for row in report.seeds[str(seed)]["ours_warm"]}
    # Runner and workflow node-seconds are each the simulated pool's, the total their sum
    # (site A's runner pool keeps launching in the shortage, its workflow pool does not).
    assert found["node-seconds, total"].simulated == pytest.approx(
        found["node-seconds, runner"].simulated + found["node-seconds, workflow"].simulated
    )
    assert found["node-seconds, runner"].measured == 1000.0
    assert report.count()["compared"] == len(found)
    assert "| ours_warm | wait p50 (s) |" in report.table()
    with pytest.raises(AgreementError, match="seeds: missing"):
        compare({"config": SMOKE.describe()})


def test_an_empty_node_stays_as_long_as_the_run_measured_it_did() -> None:
    seed = SMOKE.seeds[0]
    figures = {**_figures(1.0, 1000.0), "empty_before_removal_s": {"n": 9, "p50": 50.0}}
    document = _document({"ours_warm": figures, "ours_demand": _figures(1.0, 1000.0)})
    report = compare(document)
    # The recorded median where there is one, else consolidateAfter (30 s in SMOKE).
    assert report.idles == {f"{seed}/ours_demand": 30.0, f"{seed}/ours_warm": 50.0}
    assert mapping(SMOKE, "ours_warm", seed, 0.0, Knobs(node_idle=50.0)).sims[0].node_idle == 50
    short = compare(document, knobs=Knobs(node_idle=30.0))
    assert short.idles[f"{seed}/ours_warm"] == 30.0

    def nodes(r: Any) -> float:
        found = {row.metric: row for row in r.seeds[str(seed)]["ours_warm"]}
        return float(found["node-seconds, total"].simulated)

    assert nodes(report) > nodes(short)  # empty nodes kept 20 s longer cost more


class _Outcome:
    node_seconds = 10.0
    runner_node_seconds = 10.0
    workflow_node_seconds = 12.0
    pair_seconds = 5.0
    launches = 1
    pool_launches = 2

    def percentile(self, p: float) -> float:
        return p / 10


def test_a_metric_the_run_did_not_record_is_not_compared() -> None:
    found = rows(_Outcome(), {"queue_to_workflow_running_s": {"p50": None}})  # type: ignore[arg-type]
    assert [row.measured for row in found] == [None] * len(found)
    assert [row.simulated for row in found][:2] == [5.0, 9.0]


def test_node_seconds_are_compared_in_the_room_a_simulated_node_stands_for() -> None:
    figures = _figures(1.0, 100.0)
    two = {row.metric: row.simulated for row in rows(_Outcome(), figures)}  # type: ignore[arg-type]
    one = {row.metric: row.simulated for row in rows(_Outcome(), figures, 1)}  # type: ignore[arg-type]
    # Two halves a simulated node, two pods a cluster node: pool for pool; one half a
    # simulated node: half of one.
    assert (two["node-seconds, runner"], two["node-seconds, workflow"]) == (10.0, 12.0)
    assert (two["node-seconds, total"], two["node launches"]) == (22.0, 2.0)
    assert (one["node-seconds, runner"], one["node-seconds, total"]) == (5.0, 11.0)
    knobs = Knobs(handover=False, pairs_per_node=1)
    mapped = mapping(SMOKE, "ours_demand", 2, 100.0, knobs)
    assert all(not s.handover and s.pairs_per_node == 1 for s in mapped.sims)


def test_only_site_a_s_workflow_pool_runs_out_and_says_so_with_nodepools() -> None:
    unread = replace(SMOKE, nodepools=False)
    mapped = mapping(unread, "ours_demand", 2, 100.0)
    site_a, site_b = mapped.sims
    assert site_a.outages
    assert not site_b.outages
    assert site_a.outage_roles == frozenset({Role.WORKFLOW})
    assert not site_a.word  # a run with the NodePools not read: time alone
    told = mapping(SMOKE, "ours_demand", 2, 100.0)  # read by default
    assert all(s.word for s in told.sims)
    both = mapping(SMOKE, "ours_demand", 2, 100.0, Knobs(workflow_shortage=False))
    assert both.sims[0].outage_roles == frozenset(Role)
    assert config_from(SMOKE.describe()).nodepools
    assert not config_from(unread.describe()).nodepools


def test_launch_delays_are_the_run_s_own_when_it_recorded_them() -> None:
    rng = random.Random(1)
    measured = [100.0, 120.0, 140.0]
    # Each the longer of two of the measured ones (a pair's two nodes): never the shortest
    # unless drawn twice, always one of them.
    paired = launch_delays(SMOKE, Knobs(), measured, rng)
    assert len(paired) == 3
    assert set(paired) <= set(measured)
    many = launch_delays(SMOKE, Knobs(), measured * 100, random.Random(2))
    assert sum(many) / len(many) > 125.0  # one draw: a mean of 120
    override = launch_delays(SMOKE, Knobs(launch_delay=(5.0, 6.0)), measured, rng)
    assert all(5.0 <= d <= 6.0 for d in override)
    configured = launch_delays(SMOKE, Knobs(), [], rng)
    assert all(SMOKE.launch_delay[0] <= d <= SMOKE.launch_delay[1] for d in configured)
    seed = SMOKE.seeds[0]
    again = plan(SMOKE, seed)
    figures = _figures(1.0, 100.0)
    document = {
        "config": SMOKE.describe(),
        "seeds": {
            str(seed): {
                "jobs": len(again.arrivals),
                "variants": {"ours_demand": {**figures, "node_ready_s": measured}},
            }
        },
    }
    report = compare(document)
    assert report.delays == {f"{seed}/ours_demand": "measured, 3 launches: 100–140 s, median 120 s"}
    document["seeds"][str(seed)]["variants"]["ours_demand"]["node_ready_s"] = ["slow"]
    with pytest.raises(AgreementError, match=r"ours_demand\.node_ready_s"):
        compare(document)


def _ran(nodes: list[float], launches: list[tuple[float, float]]) -> dict[str, object]:
    """One variant's figures: its node launches and the jobs' rows with these pairs."""
    columns = ["queued", "demand_seen", "pair_created", "pair_running", "assigned"]
    rows = [[0.0, 1.0, created, running, running] for created, running in launches]
    return {"node_ready_s": nodes, "critical_path": {"columns": columns, "jobs": rows}}


def test_the_launch_overhead_is_what_pairs_that_needed_a_node_took_beyond_it() -> None:
    nodes = [float(x) for x in range(50, 150)]  # 50..149 s
    # The median of the longer of two draws is the draw's 0.707 quantile: 120 s here.
    slow = [(10.0, 160.0), (20.0, 180.0), (30.0, 190.0)]  # 150, 160, 160 s
    quick = [(40.0, 41.0), (50.0, 52.0), (60.0, 61.0), (70.0, 71.0)]  # room on a node
    assert launch_overhead({"ours_demand": _ran(nodes, slow)}) == pytest.approx(40.0)
    # Pairs that landed in a node's room are not launches: they do not pull it to 0.
    assert launch_overhead({"ours_demand": _ran(nodes, slow + quick)}) == pytest.approx(40.0)
    # A pair shared by several jobs counts once; our variants of the seed are pooled.
    shared = _ran(nodes, [slow[0], slow[0], slow[0]])
    pooled = {"ours_demand": shared, "ours_warm": _ran(nodes, slow[1:])}
    assert launch_overhead(pooled) == pytest.approx(40.0)
    # A pair Running only after the shortage ended may have waited it out: left out.
    waited = [(100.0, 400.0), (110.0, 420.0), (120.0, 430.0)]
    assert launch_overhead({"ours_demand": _ran(nodes, slow + waited)}) == pytest.approx(110.0)
    assert launch_overhead(
        {"ours_demand": _ran(nodes, slow + waited)}, shortage_ends=300.0
    ) == pytest.approx(40.0)
    # Too few launches, or none recorded: nothing to say.
    assert launch_overhead({"ours_demand": _ran(nodes, slow[:2] + quick)}) is None
    assert launch_overhead({"ours_demand": {"node_ready_s": nodes}}) is None
    assert launch_overhead({"stock_min0": _ran(nodes, slow)}) is None
    fast = {"ours_demand": _ran(nodes, [(0.0, 60.0), (0.0, 61.0), (0.0, 62.0)])}
    assert launch_overhead(fast) == 0.0  # never negative
    # Added to every delay the simulator draws.
    rng = random.Random(3)
    plain = launch_delays(SMOKE, Knobs(launch_overhead=0.0), nodes, random.Random(3))
    slower = launch_delays(SMOKE, Knobs(launch_overhead=40.0), nodes, rng)
    assert [b - a for a, b in zip(plain, slower, strict=True)] == pytest.approx([40.0] * 100)


def test_with_consolidate_karpenter_moves_placeholders_off_half_empty_nodes() -> None:
    """The NodePools consolidate WhenEmptyOrUnderutilized: with ``consolidate`` a node
    holding only placeholders goes once they fit elsewhere, after what an empty node takes
    beyond consolidateAfter (30 s in SMOKE), and pods go to the emptiest node, as the
    default kube-scheduler scores nodes. Off by default: empty nodes only, the fullest."""
    seed = SMOKE.seeds[0]
    plain = mapping(SMOKE, "ours_warm", seed, 100.0, Knobs(node_idle=48.0))
    assert all(sim.consolidation is None and not sim.spread for sim in plain.sims)
    moved = mapping(SMOKE, "ours_warm", seed, 100.0, Knobs(node_idle=48.0, consolidate=True))
    assert all(sim.consolidation == 18.0 and sim.spread for sim in moved.sims)
    # An empty node kept no longer than consolidateAfter: the move as soon as it is possible.
    quick = mapping(SMOKE, "ours_warm", seed, 100.0, Knobs(node_idle=20.0, consolidate=True))
    assert all(sim.consolidation == 0.0 for sim in quick.sims)
