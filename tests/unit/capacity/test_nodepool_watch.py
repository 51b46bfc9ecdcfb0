"""The NodePool reader (``capacity.nodepool_watch``) on an in-memory cluster: it follows the
watch, caps nothing until it knows, and on 403/404 says so once, caps nothing and looks again
now and then."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from prometheus_client import CollectorRegistry

from base.kube import KubeError
from capacity.metrics import CapacityMetrics
from capacity.model import Observed, Role
from capacity.nodepool_watch import RESOURCE, NodePoolLimits
from capacity.settings_pools import NodePoolSettings
from capacity.specs import HalfShape
from tests.support.memory_cluster import MemoryCluster
from tools.waits import eventually

R = TypeVar("R")
LABELS = {"name": "arc", "namespace": "ns"}


def failing_cluster(*errors: KubeError) -> MemoryCluster:
    """Every list+watch answers with ``errors`` (one Failed each), then as usual."""
    cluster = MemoryCluster()
    cluster.fail_informers.extend(errors)
    return cluster


def nodepool(name: str, cpu: str, *, used: str = "0", pool: str = "runners") -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {"metadata": {"labels": {"pool": pool}}, "spec": {}},
            "limits": {"cpu": cpu},
        },
        "status": {"resources": {"cpu": used}},
    }


def template() -> dict[Role, HalfShape]:
    """The two halves' shapes: 1 CPU each, runner pool and workflow pool by label."""
    return {
        Role.RUNNER: HalfShape(requests={"cpu": "1"}, node_selector={"pool": "runners"}),
        Role.WORKFLOW: HalfShape(requests={"cpu": "1"}, node_selector={"pool": "workflows"}),
    }


class Pokes(list[int]):
    """on_change calls, with an event to wait on."""

    def __init__(self) -> None:
        super().__init__()
        self.event = asyncio.Event()

    def __call__(self) -> None:
        self.append(1)
        self.event.set()

    async def until(self, check: Any, within: float = 2.0) -> None:
        await eventually(check, "a poke", within, wake=self.event)


Reader = tuple[NodePoolLimits, CollectorRegistry, Pokes]


class Rechecks:
    """The reader's sleep between looks at unreadable NodePools: recorded, and held until
    the test lets the next look happen."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.asked = asyncio.Event()
        self.go = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.asked.set()
        await self.go.wait()
        self.go.clear()

    async def next_wait(self) -> None:
        async with asyncio.timeout(2):
            await self.asked.wait()
        self.asked.clear()


def optional_reader(
    make: Callable[..., R], cluster: MemoryCluster, settings: Any, rechecks: Rechecks | None
) -> tuple[R, CollectorRegistry, Pokes]:
    """An optional check (``NodePoolLimits``, ``NodeGroupRoom``) on ``cluster``, with its
    metrics, its pokes and its sleeps between looks."""
    registry = CollectorRegistry()
    pokes = Pokes()
    check = make(
        cluster,
        settings,
        metrics=CapacityMetrics(registry, name="arc", namespace="ns"),
        on_change=pokes,
        sleep=rechecks or Rechecks(),
    )
    return check, registry, pokes


def reader(cluster: MemoryCluster, rechecks: Rechecks | None = None, **settings: Any) -> Reader:
    return optional_reader(
        NodePoolLimits, cluster, NodePoolSettings(enabled=True, **settings), rechecks
    )


async def test_it_caps_nothing_until_the_first_list_then_follows_the_watch() -> None:
    cluster = MemoryCluster()
    cluster.add(RESOURCE, nodepool("runners", "4"))
    limits, registry, pokes = reader(cluster)
    assert limits.room(Observed(), template(), commit=True) == 0  # not known yet
    task = asyncio.create_task(limits.run())
    try:
        await pokes.until(lambda: limits.state == "watching")
        assert limits.room(Observed(), template(), commit=True) == 4
        assert (
            registry.get_sample_value(
                "gha_capacity_nodepool_headroom",
                {**LABELS, "nodepool": "runners", "resource": "cpu"},
            )
            == 4
        )
        before = len(pokes)
        cluster.add(RESOURCE, nodepool("runners", "6"))  # the limit is raised
        await pokes.until(lambda: len(pokes) > before)
        assert limits.room(Observed(), template(), commit=True) == 6
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_named_pools_win_over_resolution() -> None:
    cluster = MemoryCluster()
    cluster.add(RESOURCE, nodepool("runners", "4"))
    cluster.add(RESOURCE, nodepool("other", "2", pool="elsewhere"))
    limits, _, pokes = reader(cluster, runner=["other"])
    task = asyncio.create_task(limits.run())
    try:
        await pokes.until(lambda: limits.state == "watching")
        placement = limits.placement(template())
        assert [p.name for p in placement[Role.RUNNER]] == ["other"]
        assert placement[Role.WORKFLOW] == ()  # nothing admits pool=workflows
        assert limits.room(Observed(), template(), commit=True) == 2
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.mark.parametrize(
    ("status", "state", "line", "level"),
    [
        (
            403,
            "forbidden",
            "NodePool limits off: the listener may not read them (bind "
            "deploy/rbac/clusterrole-nodepools.yaml); placeholders are created as without them",
            logging.WARNING,
        ),
        (
            404,
            "absent",
            "NodePool limits off: the cluster has no Karpenter NodePool resource; "
            "placeholders are created as without them",
            logging.INFO,  # on by default: no Karpenter is a normal place to run
        ),
    ],
)
async def test_unreadable_nodepools_cost_one_line_and_no_cap(
    status: int, state: str, line: str, level: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="capacity.nodepools")
    cluster = failing_cluster(*[KubeError("list nodepools", status, "nope")] * 3)
    rechecks = Rechecks()
    limits, registry, pokes = reader(cluster, rechecks)
    task = asyncio.create_task(limits.run())
    try:
        await rechecks.next_wait()  # the watch stopped; it will look again later
        rechecks.go.set()
        await rechecks.next_wait()  # looked again: still unreadable
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert rechecks.waits == [300.0, 300.0]
    assert [(r.getMessage(), r.levelno) for r in caplog.records] == [(line, level)]  # once
    assert len(pokes) == 1
    assert limits.state == state
    assert limits.room(Observed(), template(), commit=True) is None
    assert pokes  # the reconciler re-plans without the cap at once
    assert registry.get_sample_value("gha_capacity_nodepool_state", {**LABELS, "state": state}) == 1
    assert registry.get_sample_value("gha_capacity_nodepool_pair_room", LABELS) is None


async def test_a_role_bound_later_is_picked_up_without_a_restart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="capacity.nodepools")
    cluster = failing_cluster(KubeError("list nodepools", 403, "forbidden"))
    cluster.add(RESOURCE, nodepool("runners", "4"))
    rechecks = Rechecks()
    limits, _, pokes = reader(cluster, rechecks)
    task = asyncio.create_task(limits.run())
    try:
        await rechecks.next_wait()
        assert limits.state == "forbidden"
        assert limits.room(Observed(), template(), commit=True) is None
        rechecks.go.set()  # meanwhile, the ClusterRole was bound
        await pokes.until(lambda: limits.state == "watching")
        assert limits.room(Observed(), template(), commit=True) == 4
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert [r.getMessage() for r in caplog.records][-1] == "reading NodePool limits"


async def test_other_failures_are_retried_and_hold_creates() -> None:
    cluster = failing_cluster(KubeError("list nodepools", 0, "connection refused"))
    cluster.add(RESOURCE, nodepool("runners", "4"))
    limits, registry, pokes = reader(cluster)
    task = asyncio.create_task(limits.run())
    try:
        await pokes.until(lambda: limits.state == "watching")
        assert (
            registry.get_sample_value(
                "gha_capacity_kube_errors_total",
                {**LABELS, "operation": "watch nodepools.karpenter.sh", "kind": "transport"},
            )
            == 1
        )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# --- the monitor with the reader ------------------------------------------------------------


async def test_the_monitor_creates_only_what_the_limits_hold_then_more_after_a_raise() -> None:
    """The wiring: settings → reader → reconciler → plan. Both halves (runner 500m from the
    runner template, workflow 1 CPU) land on the one NodePool: 1.5 CPU a pair."""
    from tests.unit.capacity.test_monitor_logic import NS, Running, start

    cluster = MemoryCluster()
    cluster.add(RESOURCE, nodepool("any", "2"))
    scene = start(cluster, proactive=4, nodepools=NodePoolSettings(enabled=True))
    limits = scene.monitor.nodepools
    assert limits is not None
    async with Running(scene):
        await scene.reconciler.reconcile_once()
        assert scene.placeholders() == []  # the NodePools are not read yet: nothing

        task = asyncio.create_task(limits.run())
        try:
            await scene.settle()
            assert limits.state == "watching"
            plan = await scene.reconciler.reconcile_once()
            assert len(plan.creates) == 1  # 2 CPU hold one pair
            assert plan.held_by_nodepools == 3
            cluster.add(RESOURCE, nodepool("any", "4"))  # raised
            await scene.settle()
            plan = await scene.reconciler.reconcile_once()
            assert len(plan.creates) == 1  # 4 CPU hold two pairs in all
            assert plan.held_by_nodepools == 2
            assert len(scene.cluster.pods(NS)) == 4
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
