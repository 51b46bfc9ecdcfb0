"""Karpenter's insufficient-capacity Events (capacity.launch_failures): the Event as
Karpenter v1 writes it, the reader on an in-memory cluster, and the monitor's per-half word
for the policy (Params.cannot_launch_at)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client import CollectorRegistry

from base.kube import KubeError
from capacity.contract import parse_expiry
from capacity.event_watch import events_resource
from capacity.launch_failures import (
    FIELD_SELECTOR,
    LaunchFailure,
    LaunchFailures,
    launch_failure_from,
    nodepool_of,
)
from capacity.model import Role, StallCause
from capacity.nodepool_watch import RESOURCE as NODEPOOLS
from capacity.settings_pools import NodePoolSettings
from tests.support.memory_cluster import MemoryCluster

if TYPE_CHECKING:
    from tests.unit.capacity.test_monitor_logic import Scene
from tests.unit.capacity.test_nodepool_watch import (
    LABELS,
    Pokes,
    Rechecks,
    failing_cluster,
    nodepool,
    optional_reader,
)

EVENTS = events_resource("default")
AT = "2026-11-27T20:00:03Z"


def ice_event(claim: str, *, name: str = "", last: str = AT, **changes: Any) -> dict[str, Any]:
    """A core/v1 Event as Karpenter v1.8's recorder (client-go's) writes it for a NodeClaim
    the cloud had no capacity for (nodeclaim/lifecycle/events.go,
    InsufficientCapacityErrorEvent)."""
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": name or f"{claim}.187c1a2b3d4e5f60",
            "namespace": "default",
            "creationTimestamp": "2026-11-27T20:00:03Z",
            "resourceVersion": "4711",
        },
        "involvedObject": {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "name": claim,
            "uid": "0b1e6c52-6f1e-4a43-9d0e-3c2f5a0e9b11",
            "resourceVersion": "4702",
        },
        "reason": "InsufficientCapacityError",
        "message": f"NodeClaim {claim} event: creating instance, insufficient capacity, all "
        "requested instance types were unavailable during launch",
        "source": {"component": "karpenter"},
        "firstTimestamp": "2026-11-27T20:00:03Z",
        "lastTimestamp": last,
        "count": 1,
        "type": "Warning",
        "eventTime": None,
        "reportingComponent": "karpenter",
        "reportingInstance": "",
    }
    event.update(changes)
    return event


def test_the_event_karpenter_writes_names_its_nodepool_and_time() -> None:
    assert launch_failure_from(ice_event("workflows-x7k2p")) == LaunchFailure(
        "workflows", parse_expiry(AT)
    )


def test_a_repeated_event_counts_from_its_last_time() -> None:
    later = "2026-11-27T20:01:40Z"
    found = launch_failure_from(ice_event("workflows-x7k2p", last=later, count=3))
    assert found is not None
    assert found.at == parse_expiry(later)
    series = ice_event(
        "workflows-x7k2p", lastTimestamp=None, series={"lastObservedTime": later, "count": 2}
    )
    found = launch_failure_from(series)
    assert found is not None
    assert found.at == parse_expiry(later)


@pytest.mark.parametrize(
    "event",
    [
        ice_event("workflows-x7k2p", reason="NodeClassNotReady"),
        ice_event("workflows-x7k2p", involvedObject={"kind": "Pod", "name": "workflows-x7k2p"}),
        ice_event("nodash"),  # not a name Karpenter gives a claim: no NodePool to blame
        ice_event(
            "workflows-x7k2p",
            lastTimestamp=None,
            firstTimestamp=None,
            metadata={"name": "e"},
        ),  # no time at all
    ],
    ids=["other reason", "other kind", "no nodepool in the name", "no time"],
)
def test_other_or_unreadable_events_are_not_a_word(event: dict[str, Any]) -> None:
    assert launch_failure_from(event) is None


@pytest.mark.parametrize(
    ("claim", "pool"),
    [
        ("workflows-x7k2p", "workflows"),
        ("gpu-a100-spot-4h9zq", "gpu-a100-spot"),
        ("workflows", ""),
        ("workflows-", ""),
    ],
)
def test_a_claims_nodepool_is_its_name_less_the_generated_suffix(claim: str, pool: str) -> None:
    assert nodepool_of(claim) == pool


def reader(
    cluster: MemoryCluster, rechecks: Rechecks | None = None
) -> tuple[LaunchFailures, CollectorRegistry, Pokes]:
    return optional_reader(LaunchFailures, cluster, "default", rechecks)


async def test_it_follows_the_events_the_selector_lets_through() -> None:
    cluster = MemoryCluster()
    cluster.add(EVENTS, ice_event("workflows-x7k2p"))
    cluster.add(EVENTS, ice_event("workflows-aaaaa", reason="Nominated", name="other"))
    failures, registry, pokes = reader(cluster)
    assert failures.latest(["workflows"]) is None  # not read yet
    task = asyncio.create_task(failures.run())
    try:
        await pokes.until(lambda: failures.state == "watching")
        assert list(failures.failures) == ["workflows-x7k2p.187c1a2b3d4e5f60"]
        assert failures.latest(["workflows"]) == parse_expiry(AT)
        assert failures.latest(["runners"]) is None
        state = {**LABELS, "state": "watching"}
        assert registry.get_sample_value("gha_capacity_launch_failure_state", state) == 1
        # another refusal a minute later: the reconciler is poked, the latest time moves on
        before = len(pokes)
        cluster.add(EVENTS, ice_event("workflows-b8c9d", last="2026-11-27T20:01:03Z"))
        await pokes.until(lambda: len(pokes) > before)
        assert failures.latest(["runners", "workflows"]) == parse_expiry("2026-11-27T20:01:03Z")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_the_selector_is_what_the_api_server_filters_on() -> None:
    assert FIELD_SELECTOR == "reason=InsufficientCapacityError,involvedObject.kind=NodeClaim"


@pytest.mark.parametrize(
    ("status", "state", "line"),
    [
        (
            403,
            "forbidden",
            "insufficient-capacity events off: the listener may not read Karpenter's events "
            "(bind deploy/rbac/role-karpenter-events.yaml); stalled pairs are released on "
            "time alone",
        ),
        (
            404,
            "absent",
            "insufficient-capacity events off: no namespace default; stalled pairs are "
            "released on time alone",
        ),
    ],
)
async def test_403_and_404_cost_one_line_and_leave_time_alone(
    status: int, state: str, line: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="capacity.launch_failures")
    cluster = failing_cluster(*[KubeError("list events", status, "nope")] * 2)
    rechecks = Rechecks()
    failures, registry, _ = reader(cluster, rechecks)
    task = asyncio.create_task(failures.run())
    try:
        await rechecks.next_wait()
        assert failures.state == state
        assert failures.latest(["workflows"]) is None
        rechecks.go.set()
        await rechecks.next_wait()  # looked again: still refused, nothing more said
        assert rechecks.waits == [300.0, 300.0]
        sample = registry.get_sample_value
        assert sample("gha_capacity_launch_failure_state", {**LABELS, "state": state}) == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [line]


def test_an_invalid_events_namespace_is_named() -> None:
    with pytest.raises(ValueError, match="invalid namespace 'Not_A_Namespace'"):
        NodePoolSettings(enabled=True, events_namespace="Not_A_Namespace")


# --- the monitor with the reader ------------------------------------------------------------


async def test_the_monitor_gives_the_policy_each_halfs_word() -> None:
    """The wiring: an insufficient-capacity Event for a NodePool a half lands on is that
    half's word (both halves land on the one pool here); one for another pool is nobody's."""
    from tests.unit.capacity.test_monitor_logic import Running, start

    cluster = MemoryCluster()
    cluster.add(NODEPOOLS, nodepool("any", "100"))
    cluster.add(EVENTS, ice_event("elsewhere-x7k2p"))
    scene = start(cluster, proactive=1, nodepools=NodePoolSettings(enabled=True))
    limits, failures = scene.monitor.nodepools, scene.monitor.launch_failures
    assert limits is not None
    assert failures is not None
    async with Running(scene):
        tasks = [asyncio.create_task(limits.run()), asyncio.create_task(failures.run())]
        try:
            await scene.settle()
            assert failures.state == "watching"
            assert scene.monitor.params().cannot_launch_at == {}
            cluster.add(EVENTS, ice_event("any-b8c9d"))
            await scene.settle()
            said = parse_expiry(AT)
            assert scene.monitor.params().cannot_launch_at == {
                Role.RUNNER: said,
                Role.WORKFLOW: said,
            }
            # at least eight launches seen: the shorter timeout is known too
            scene.reconciler.launch_times.extend([20.0] * 8)
            assert scene.monitor.params().signal_stall_timeout == 60.0
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def test_without_nodepools_or_with_no_namespace_the_events_are_not_read() -> None:
    from tests.unit.capacity.test_monitor_logic import start

    without = NodePoolSettings(enabled=False)
    assert start(MemoryCluster(), proactive=1, nodepools=without).monitor.launch_failures is None
    off = NodePoolSettings(enabled=True, events_namespace="")
    assert start(MemoryCluster(), proactive=1, nodepools=off).monitor.launch_failures is None


def _at(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@contextlib.asynccontextmanager
async def _first_pair_with_the_word_read(cluster: MemoryCluster) -> AsyncIterator[Scene]:
    """A listener reading the NodePools and their insufficient-capacity Events, eight
    launches of 20 s seen, its first pair just made (at NOW, both halves Pending)."""
    from tests.unit.capacity.test_monitor_logic import Running, start

    cluster.add(NODEPOOLS, nodepool("any", "100"))
    scene = start(cluster, proactive=1, nodepools=NodePoolSettings(enabled=True))
    limits, failures = scene.monitor.nodepools, scene.monitor.launch_failures
    assert limits is not None
    assert failures is not None
    scene.reconciler.launch_times.extend([20.0] * 8)
    async with Running(scene):
        tasks = [asyncio.create_task(limits.run()), asyncio.create_task(failures.run())]
        try:
            await scene.settle()
            assert len((await scene.reconciler.reconcile_once()).creates) == 1
            await scene.settle()
            yield scene
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.parametrize("word", [True, False], ids=["with the word", "time alone"])
async def test_a_stall_on_the_word_is_released_after_one_launch_and_counted(
    word: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Through the reconciler: the runner half Running, the workflow half Pending, eight
    launches of 20 s seen. With an insufficient-capacity Event for the pool after the pair
    was made, the pair goes after one launch (the 60 s floor), counted with cause=cloud;
    without it, it waits for the time-only timeout (the 180 s floor), cause=time."""
    from tests.unit.capacity.test_monitor_logic import NOW, NS, RUNNER_SET

    caplog.set_level(logging.INFO, logger="capacity.reconciler")
    cluster = MemoryCluster()
    async with _first_pair_with_the_word_read(cluster) as scene:
        (runner,) = scene.placeholders(Role.RUNNER)
        cluster.set_phase(NS, runner, "Running")
        if word:
            cluster.add(EVENTS, ice_event("any-b8c9d", last=_at(NOW + 5)))
        await scene.settle()
        scene.clock.now = NOW + 61
        plan = await scene.reconciler.reconcile_once()
        if word:
            assert plan.stalls == (StallCause.CLOUD,)
        else:
            assert plan.stalls == ()
            scene.clock.now = NOW + 181
            plan = await scene.reconciler.reconcile_once()
            assert plan.stalls == (StallCause.TIME,)
    cause = "cloud" if word else "time"
    sample = scene.registry.get_sample_value
    assert (
        sample("gha_capacity_stalls_total", {"name": RUNNER_SET, "namespace": NS, "cause": cause})
        == 1
    )
    lines = [r for r in caplog.records if r.getMessage() == "pair released as stalled"]
    assert [r.__dict__["cause"] for r in lines] == [cause]


async def test_a_backed_off_node_group_is_its_halfs_word_while_it_lasts() -> None:
    """cluster-autoscaler: while every named group of a half is full or backing off after a
    failed scale-up, that half's word is now; once CA's status says otherwise, no word."""
    from capacity.settings_pools import ClusterAutoscalerSettings
    from tests.unit.capacity.test_monitor_logic import NOW, Running, start
    from tests.unit.capacity.test_node_groups import CONFIGMAPS, STATUS, configmap

    backing_off = STATUS.replace("scaleUp: {status: InProgress}", "scaleUp: {status: Backoff}")
    assert backing_off != STATUS
    cluster = MemoryCluster()
    cluster.add(CONFIGMAPS, configmap(backing_off))
    ca = ClusterAutoscalerSettings(enabled=True, workflow=["workflows"])
    scene = start(cluster, proactive=1, cluster_autoscaler=ca)
    groups = scene.monitor.node_groups
    assert groups is not None
    assert scene.monitor.params().cannot_launch_at == {}  # CA's status not read yet
    async with Running(scene):
        task = asyncio.create_task(groups.run())
        try:
            await scene.settle()
            scene.clock.now = NOW + 30
            assert scene.monitor.params().cannot_launch_at == {Role.WORKFLOW: NOW + 30}
            cluster.add(CONFIGMAPS, configmap(STATUS))  # the back-off is over
            await scene.settle()
            assert scene.monitor.params().cannot_launch_at == {}
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


@pytest.mark.parametrize(
    ("word", "whole_after", "sampled"),
    [
        (True, 50.0, False),  # refused during the launch and longer than any seen: left out
        (True, 15.0, True),  # refused, but no longer than the sample's longest: counted
        (False, 50.0, True),  # no word: a slow launch is a launch
    ],
    ids=["a shortage", "a refusal and a launch", "time alone"],
)
async def test_a_launch_that_waited_out_a_refusal_is_left_out_of_the_launch_sample(
    word: bool, whole_after: float, sampled: bool
) -> None:
    """Through the reconciler: eight launches of 20 s seen, a pair made, an
    insufficient-capacity Event for its pool 5 s later (or none), the pair whole after
    ``whole_after`` s. Every launch is in the histogram; one that waited out the refusal and
    took longer than any launch in the sample stays out of the sample the stall and hold
    timeouts come from, so one shortage cannot stretch the next one's stall timeout."""
    from tests.unit.capacity.test_monitor_logic import NOW, NS, launches

    cluster = MemoryCluster()
    async with _first_pair_with_the_word_read(cluster) as scene:
        if word:
            cluster.add(EVENTS, ice_event("any-b8c9d", last=_at(NOW + 5)))
        scene.clock.now = NOW + whole_after
        for pod in scene.placeholders():
            cluster.set_phase(NS, pod, "Running")
        await scene.settle()
        plan = await scene.reconciler.reconcile_once()
        assert plan.stalls == ()
        assert launches(scene) == (1.0, whole_after)
        expected = [20.0] * 8 + ([whole_after] if sampled else [])
        assert list(scene.reconciler.launch_times) == expected


async def test_a_confirmed_shortage_is_logged_once_and_its_end_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Both halves of the first pair Pending, their one pool's insufficient-capacity Event
    after it was made: a minute on, the shortage of both halves is confirmed (one log line,
    however many passes see it); once they get their nodes, one line says it is over."""
    from tests.unit.capacity.test_monitor_logic import NOW, NS

    caplog.set_level(logging.INFO, logger="capacity.reconciler")
    cluster = MemoryCluster()
    async with _first_pair_with_the_word_read(cluster) as scene:
        cluster.add(EVENTS, ice_event("any-b8c9d", last=_at(NOW + 5)))
        await scene.settle()
        scene.clock.now = NOW + 61
        for _ in range(3):
            plan = await scene.reconciler.reconcile_once()
            assert plan.short_roles == (Role.RUNNER, Role.WORKFLOW)
        for role in Role:
            (half,) = scene.placeholders(role)
            cluster.set_phase(NS, half, "Running")
        await scene.settle()
        plan = await scene.reconciler.reconcile_once()
        assert plan.short_roles == ()
    said = [(r.getMessage(), r.__dict__["short"]) for r in caplog.records if "short" in r.__dict__]
    assert [m for m in said if m[0].startswith("shortage")] == [
        ("shortage confirmed, new pairs held", "placeholder-runner,placeholder-workflow"),
        ("shortage over", ""),
    ]
