"""The gha_capacity_* series: exact names (dashboards and alerts use them), labels, no
_created samples, and what one recorded pass shows."""

from __future__ import annotations

import re
from dataclasses import replace
from fractions import Fraction

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from capacity.demand import Reading
from capacity.metrics import CapacityMetrics
from capacity.metrics_state import DEMAND_PARTS
from capacity.model import (
    Claim,
    Demand,
    DemandOutcome,
    DemandResult,
    DemandSource,
    Observed,
    Plan,
    PodPhase,
    RealPod,
    Role,
)
from capacity.nodepools import NodePool
from tests.unit.capacity.builders import pair, ph

BASE = {"name": "linux-cpu-x7k2p", "namespace": "arc-runners"}
NAMES = {
    "gha_capacity_advertised": "gauge",
    "gha_capacity_desired_pairs": "gauge",
    "gha_capacity_stall_backoff_seconds": "gauge",
    "gha_capacity_slow_start_pairs": "gauge",
    "gha_capacity_shortage_held_pairs": "gauge",
    "gha_capacity_pairs": "gauge",
    "gha_capacity_placeholder_pods": "gauge",
    "gha_capacity_runner_side": "gauge",
    "gha_capacity_workflow_side": "gauge",
    "gha_capacity_workflow_pods_unscheduled": "gauge",
    "gha_capacity_queued_jobs": "gauge",
    "gha_capacity_demand_source": "gauge",
    "gha_capacity_demand_jobs": "gauge",
    "gha_capacity_demand_github_calls_total": "counter",
    "gha_capacity_demand_github_rate_limit_remaining": "gauge",
    "gha_capacity_proactive_capacity": "gauge",
    "gha_capacity_hud_requests_total": "counter",
    "gha_capacity_hud_request_duration_seconds": "histogram",
    "gha_capacity_pair_creates_total": "counter",
    "gha_capacity_pair_deletes_total": "counter",
    "gha_capacity_stalls_total": "counter",
    "gha_capacity_probes_total": "counter",
    "gha_capacity_reconcile_duration_seconds": "histogram",
    "gha_capacity_reconcile_last_success_timestamp_seconds": "gauge",
    "gha_capacity_signal_changes_total": "counter",
    "gha_capacity_rise_checks_total": "counter",
    "gha_capacity_demand_age_seconds": "histogram",
    "gha_capacity_pair_launch_seconds": "histogram",
    "gha_capacity_rise_to_assignment_seconds": "histogram",
    "gha_capacity_kube_errors_total": "counter",
    "gha_capacity_nodepool_limit": "gauge",
    "gha_capacity_nodepool_used": "gauge",
    "gha_capacity_nodepool_headroom": "gauge",
    "gha_capacity_nodepool_pair_room": "gauge",
    "gha_capacity_nodepool_held_pairs": "gauge",
    "gha_capacity_nodepool_state": "gauge",
    "gha_capacity_warm_pool_mode": "gauge",
    "gha_capacity_warm_pool_target": "gauge",
    "gha_capacity_placeholders_on_deletion_candidates": "gauge",
    "gha_capacity_node_group_size": "gauge",
    "gha_capacity_node_group_headroom": "gauge",
    "gha_capacity_node_group_pair_room": "gauge",
    "gha_capacity_node_group_state": "gauge",
    "gha_capacity_launch_failure_state": "gauge",
    "gha_capacity_pod_refusal_state": "gauge",
}


def page(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {**BASE, **labels})


# Vectors with a label beyond name/namespace, or set only when a feature is on: like a Go
# vector, not written until a first child exists (a family without samples tells
# Prometheus nothing).
FIRST_WRITTEN_WHEN_USED = {
    "gha_capacity_demand_github_calls_total",
    "gha_capacity_demand_github_rate_limit_remaining",
    "gha_capacity_kube_errors_total",
    "gha_capacity_pair_deletes_total",
    "gha_capacity_nodepool_limit",
    "gha_capacity_nodepool_used",
    "gha_capacity_nodepool_headroom",
    "gha_capacity_nodepool_pair_room",
    "gha_capacity_nodepool_held_pairs",
    "gha_capacity_nodepool_state",
    "gha_capacity_warm_pool_mode",  # set by the monitor, from its settings
    # cluster-autoscaler: written by node checks and the node-group reader only.
    "gha_capacity_placeholders_on_deletion_candidates",
    "gha_capacity_node_group_size",
    "gha_capacity_node_group_headroom",
    "gha_capacity_node_group_pair_room",
    "gha_capacity_node_group_state",
    "gha_capacity_launch_failure_state",  # the Event reader only (with nodepools)
    "gha_capacity_pod_refusal_state",  # the pod Event reader only (with nodepools)
    # the predictive warm pool only (warm_pool.predictive.enabled)
    "gha_capacity_predictive_pairs",
    "gha_capacity_predictive_children_expected",
    "gha_capacity_predictive_children_arrived_total",
}


def test_every_series_is_registered_at_once_with_exact_names_and_no_created() -> None:
    registry = CollectorRegistry(auto_describe=True)
    CapacityMetrics(registry, **BASE)
    text = page(registry)
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    assert types == {k: v for k, v in NAMES.items() if k not in FIRST_WRITTEN_WHEN_USED}
    assert "_created" not in text
    for line in text.splitlines():
        if line and not line.startswith("#"):
            assert 'name="linux-cpu-x7k2p"' in line, line
            assert 'namespace="arc-runners"' in line, line
    # Labelled series exist from the start (zero), so rate() and dashboards see them.
    assert value(registry, "gha_capacity_pairs", state="broken") == 0
    assert (
        value(registry, "gha_capacity_placeholder_pods", role="placeholder-runner", phase="Pending")
        == 0
    )
    assert value(registry, "gha_capacity_hud_requests_total", result="timeout") == 0
    assert value(registry, "gha_capacity_stalls_total", cause="cloud") == 0
    assert value(registry, "gha_capacity_stalls_total", cause="time") == 0
    assert value(registry, "gha_capacity_probes_total", role="placeholder-runner") == 0
    assert value(registry, "gha_capacity_probes_total", role="placeholder-workflow") == 0


def test_a_recorded_pass() -> None:
    registry = CollectorRegistry()
    m = CapacityMetrics(registry, **BASE)
    observed = Observed(
        placeholders=(*pair(1), *pair(2), ph(3, Role.WORKFLOW, PodPhase.PENDING)),
        workflow_pods=(
            RealPod(name="r1-workflow", phase=PodPhase.RUNNING, bound=True),
            RealPod(name="r2-workflow", phase=PodPhase.PENDING, bound=False),  # no node yet
            RealPod(name="r3-workflow", phase=PodPhase.PENDING, bound=False, terminating=True),
        ),
    )
    plan = Plan(
        advertised=2,
        runner_side=2,
        workflow_side=2,
        desired_pairs=3,
        running_pairs=2,
        pending_pairs=0,
        broken=1,
    )
    m.record_pass(plan, observed, Demand(queued=1, source=DemandSource.FLOOR), proactive=2)
    m.record_advertised(2, changed=True)
    m.record_advertised(2, changed=False)
    m.record_demand(DemandResult.TIMEOUT, 0.5)
    m.record_create("quota")
    m.record_delete("timeout", 2)
    m.record_kube_error("create", "quota")
    m.record_reconcile(0.01, success_at=1234.0)

    assert value(registry, "gha_capacity_advertised") == 2
    assert value(registry, "gha_capacity_desired_pairs") == 3
    assert value(registry, "gha_capacity_pairs", state="running") == 2
    assert value(registry, "gha_capacity_pairs", state="broken") == 1
    pods = {"role": "placeholder-workflow"}
    assert value(registry, "gha_capacity_placeholder_pods", **pods, phase="Running") == 2
    assert value(registry, "gha_capacity_placeholder_pods", **pods, phase="Pending") == 1
    assert value(registry, "gha_capacity_queued_jobs") == 1
    assert value(registry, "gha_capacity_workflow_pods_unscheduled") == 1
    sources = {
        s.value: value(registry, "gha_capacity_demand_source", source=s.value) for s in DemandSource
    }
    assert sources == {"hud": 0, "github": 0, "webhook": 0, "stale": 0, "floor": 1, "disabled": 0}
    # On the floor there are no figures from the source: only what is claimed.
    parts = {p: value(registry, "gha_capacity_demand_jobs", part=p) for p in DEMAND_PARTS}
    assert parts == {
        "total": 0,
        "aged": 0,
        "fresh": 0,
        "share": 0,
        "claimed": 1,
        "started": 0,
        "planned": 1,
    }
    assert value(registry, "gha_capacity_proactive_capacity") == 2
    assert value(registry, "gha_capacity_signal_changes_total") == 1
    assert value(registry, "gha_capacity_hud_requests_total", result="timeout") == 1
    assert value(registry, "gha_capacity_hud_request_duration_seconds_count") == 1
    assert value(registry, "gha_capacity_pair_creates_total", result="quota") == 1
    assert value(registry, "gha_capacity_pair_deletes_total", reason="timeout") == 2
    assert value(registry, "gha_capacity_kube_errors_total", operation="create", kind="quota") == 1
    assert value(registry, "gha_capacity_reconcile_last_success_timestamp_seconds") == 1234.0
    assert "_created" not in page(registry)


def test_demand_parts_and_github_calls() -> None:
    registry = CollectorRegistry()
    m = CapacityMetrics(registry, **BASE)
    demand = Demand(
        queued=5,
        source=DemandSource.GITHUB,
        claim=Claim(total=9, aged=2, fresh=7, share=3),
        started_since=2,
    )
    m.record_pass(Plan(), Observed(), demand, proactive=0)
    parts = {p: value(registry, "gha_capacity_demand_jobs", part=p) for p in DEMAND_PARTS}
    want = {"total": 9, "aged": 2, "fresh": 7, "share": 3, "claimed": 5}
    assert parts == {**want, "started": 2, "planned": 3}
    # Handed more than its share: the peer is not taking its half, so the plan covers the
    # whole queue left.
    m.record_pass(Plan(), Observed(), replace(demand, started_since=4), proactive=0)
    parts = {p: value(registry, "gha_capacity_demand_jobs", part=p) for p in DEMAND_PARTS}
    assert parts == {**want, "started": 4, "planned": 5}
    assert "gha_capacity_demand_github_rate_limit_remaining" not in page(registry).replace(
        "# HELP gha_capacity_demand_github_rate_limit_remaining", ""
    ).replace("# TYPE gha_capacity_demand_github_rate_limit_remaining", "")
    outcome = DemandOutcome(result=DemandResult.OK, duration=1.0, queued=9, aged=2)
    m.record_reading(
        Reading(
            source="github",
            outcome=outcome,
            calls={"ok": 3, "not_modified": 50},
            rate_limit_remaining=4321,
        )
    )
    assert value(registry, "gha_capacity_demand_github_calls_total", result="ok") == 3
    assert value(registry, "gha_capacity_demand_github_calls_total", result="not_modified") == 50
    assert value(registry, "gha_capacity_demand_github_calls_total", result="error") == 0
    assert value(registry, "gha_capacity_demand_github_rate_limit_remaining") == 4321
    # HUD requests are counted one by one (two per read with sharding).
    m.record_reading(Reading(source="hud", outcome=outcome, requests=(outcome, outcome)))
    assert value(registry, "gha_capacity_hud_requests_total", result="ok") == 2


def test_a_pass_records_the_age_of_its_demand_value_from_the_start_of_its_read() -> None:
    registry = CollectorRegistry(auto_describe=True)
    m = CapacityMetrics(registry, **BASE)

    def ages() -> tuple[float | None, float | None]:
        return (
            value(registry, "gha_capacity_demand_age_seconds_count"),
            value(registry, "gha_capacity_demand_age_seconds_sum"),
        )

    good = DemandOutcome(result=DemandResult.OK, duration=2.0, queued=3)
    m.record_reading(Reading(source="hud", outcome=good, requests=(good,)))
    m.record_pass(
        Plan(), Observed(), Demand(queued=3, source=DemandSource.HUD, age=10.0), proactive=0
    )
    assert ages() == (1.0, 12.0)  # 10 s since the read ended, which took 2 s
    # A failed read leaves the value (and its read's duration) in use: held, still aging.
    failed = DemandOutcome(result=DemandResult.TIMEOUT, duration=9.0)
    m.record_reading(Reading(source="hud", outcome=failed, requests=(failed,)))
    held = Demand(queued=3, source=DemandSource.STALE, age=40.0)
    m.record_pass(Plan(), Observed(), held, proactive=0)
    assert ages() == (2.0, 54.0)
    # The floor, and no source at all, plan with no read: not counted.
    for demand in (
        Demand(queued=1, source=DemandSource.FLOOR, age=400.0),
        Demand(queued=1, source=DemandSource.FLOOR),
        Demand(queued=0, source=DemandSource.DISABLED),
    ):
        m.record_pass(Plan(), Observed(), demand, proactive=0)
    assert ages() == (2.0, 54.0)


def test_unregister_frees_the_names_for_a_new_monitor() -> None:
    registry = CollectorRegistry(auto_describe=True)
    CapacityMetrics(registry, **BASE).unregister()
    again = CapacityMetrics(registry, **BASE)
    again.record_advertised(5, changed=True)
    assert value(registry, "gha_capacity_advertised") == 5


def test_state_series_are_read_when_scraped() -> None:
    """The state series are built from the monitor's State at each scrape: a change made
    after registration (and after an earlier scrape) shows on the next page, and series of
    NodePools gone from the state are gone from the page."""
    registry = CollectorRegistry(auto_describe=True)
    m = CapacityMetrics(registry, **BASE)
    assert value(registry, "gha_capacity_advertised") == 0
    assert value(registry, "gha_capacity_nodepool_limit", nodepool="a", resource="cpu") is None
    m.state.advertised = 7
    m.state.nodepools = (NodePool(name="a", limits={"cpu": Fraction(8)}),)
    assert value(registry, "gha_capacity_advertised") == 7
    assert value(registry, "gha_capacity_nodepool_limit", nodepool="a", resource="cpu") == 8
    assert value(registry, "gha_capacity_nodepool_headroom", nodepool="a", resource="cpu") == 8
    m.record_nodepools([], None)
    assert "gha_capacity_nodepool_limit" not in page(registry)


def test_two_monitors_share_one_registry() -> None:
    """One page per registry: each runner set's series under its own labels, each family
    written once; the same runner set twice is refused; the last to leave frees the names."""
    registry = CollectorRegistry(auto_describe=True)
    cpu = CapacityMetrics(registry, **BASE)
    gpu = CapacityMetrics(registry, name="linux-gpu-q8w3e", namespace="arc-runners")
    cpu.record_advertised(3, changed=True)
    gpu.record_advertised(5, changed=True)
    gpu.record_create("quota")
    text = page(registry)
    assert text.count("# TYPE gha_capacity_advertised gauge") == 1
    assert value(registry, "gha_capacity_advertised") == 3
    gpu_labels = {"name": "linux-gpu-q8w3e", "namespace": "arc-runners"}
    assert registry.get_sample_value("gha_capacity_advertised", gpu_labels) == 5
    quota = {**gpu_labels, "result": "quota"}
    assert registry.get_sample_value("gha_capacity_pair_creates_total", quota) == 1
    assert value(registry, "gha_capacity_pair_creates_total", result="quota") is None
    with pytest.raises(ValueError, match="already registered"):
        CapacityMetrics(registry, **BASE)
    gpu.unregister()
    assert registry.get_sample_value("gha_capacity_advertised", gpu_labels) is None
    assert value(registry, "gha_capacity_advertised") == 3
    cpu.unregister()
    assert page(registry) == ""
