"""Karpenter's scheduling failures of placeholders (capacity.pod_refusals): the Event as
Karpenter v1 writes it, the kube-scheduler's look-alike left out, and the reader on an
in-memory cluster."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from base.kube import KubeError
from capacity.contract import parse_expiry
from capacity.event_watch import events_resource
from capacity.pod_refusals import (
    FIELD_SELECTOR,
    PodRefusal,
    PodRefusals,
    latest_per_pod,
    pod_refusal_from,
)
from tests.support.memory_cluster import MemoryCluster
from tests.unit.capacity.test_nodepool_watch import (
    LABELS,
    Rechecks,
    failing_cluster,
    optional_reader,
)

EVENTS = events_resource("runners")
AT = "2026-11-29T01:00:12Z"


def refusal_event(
    pod: str, *, name: str = "", last: str = AT, component: str = "karpenter", **changes: Any
) -> dict[str, Any]:
    """A core/v1 Event as Karpenter v1.8's recorder (client-go's, component "karpenter")
    writes it for a pod its scheduling run could not place
    (provisioning/scheduling/events.go, PodFailedToScheduleEvent)."""
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": name or f"{pod}.188a1b2c3d4e5f60",
            "namespace": "runners",
            "creationTimestamp": AT,
            "resourceVersion": "5120",
        },
        "involvedObject": {
            "kind": "Pod",
            "namespace": "runners",
            "name": pod,
            "uid": "3f1c9a52-0d3e-4b8e-9a61-2b7f0c1d2e3f",
            "apiVersion": "v1",
        },
        "reason": "FailedScheduling",
        "message": 'Failed to schedule pod, incompatible with nodepool "workflows", '
        "daemonset overhead={}, no instance type satisfied resources",
        "source": {"component": component},
        "firstTimestamp": AT,
        "lastTimestamp": last,
        "count": 1,
        "type": "Warning",
    }
    event.update(changes)
    return event


def test_karpenters_event_names_the_pod_and_when() -> None:
    found = pod_refusal_from(refusal_event("arc-ph-3-w"))
    assert found == PodRefusal("arc-ph-3-w", parse_expiry(AT))
    # events.k8s.io's writers leave source empty and name reportingComponent.
    modern = refusal_event("arc-ph-4-w", source={}, reportingComponent="karpenter")
    assert pod_refusal_from(modern) == PodRefusal("arc-ph-4-w", parse_expiry(AT))


@pytest.mark.parametrize(
    "event",
    [
        # kube-scheduler's FailedScheduling: every Pending pod gets one ("0/3 nodes are
        # available"), which says nothing of whether a node is coming.
        refusal_event("arc-ph-3-w", component="default-scheduler"),
        refusal_event("arc-ph-3-w", reason="Nominated"),
        refusal_event("arc-ph-3-w", involvedObject={"kind": "NodeClaim", "name": "x"}),
        refusal_event("", involvedObject={"kind": "Pod"}),
        refusal_event(
            "arc-ph-3-w",
            lastTimestamp=None,
            firstTimestamp=None,
            metadata={"name": "e"},
        ),
    ],
)
def test_any_other_event_is_no_refusal(event: dict[str, Any]) -> None:
    assert pod_refusal_from(event) is None


def test_the_latest_refusal_per_pod() -> None:
    refusals = [PodRefusal("a", 10.0), PodRefusal("a", 30.0), PodRefusal("b", 20.0)]
    assert latest_per_pod(refusals) == {"a": 30.0, "b": 20.0}


def test_the_selector_asks_for_karpenters_alone() -> None:
    assert FIELD_SELECTOR == "reason=FailedScheduling,involvedObject.kind=Pod,source=karpenter"


async def test_it_follows_the_events_and_pokes_on_a_new_one() -> None:
    cluster = MemoryCluster()
    cluster.add(EVENTS, refusal_event("arc-ph-1-w"))
    cluster.add(EVENTS, refusal_event("arc-ph-1-w", component="default-scheduler", name="s"))
    refusals, registry, pokes = optional_reader(PodRefusals, cluster, "runners", None)
    assert refusals.latest() == {}  # not read yet
    task = asyncio.create_task(refusals.run())
    try:
        await pokes.until(lambda: refusals.state == "watching")
        assert refusals.latest() == {"arc-ph-1-w": parse_expiry(AT)}
        state = {**LABELS, "state": "watching"}
        assert registry.get_sample_value("gha_capacity_pod_refusal_state", state) == 1
        before = len(pokes)
        cluster.add(EVENTS, refusal_event("arc-ph-2-w", last="2026-11-29T01:00:40Z"))
        await pokes.until(lambda: len(pokes) > before)
        assert refusals.latest()["arc-ph-2-w"] == parse_expiry("2026-11-29T01:00:40Z")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_403_costs_one_line_and_leaves_the_minute_floor(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="capacity.pod_refusals")
    cluster = failing_cluster(*[KubeError("list events", 403, "nope")] * 2)
    rechecks = Rechecks()
    refusals, registry, _ = optional_reader(PodRefusals, cluster, "runners", rechecks)
    task = asyncio.create_task(refusals.run())
    try:
        await rechecks.next_wait()
        assert refusals.state == "forbidden"
        assert refusals.latest() == {}
        rechecks.go.set()
        await rechecks.next_wait()  # looked again: still refused, nothing more said
        state = {**LABELS, "state": "forbidden"}
        assert registry.get_sample_value("gha_capacity_pod_refusal_state", state) == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        "scheduling-failure events off: the listener may not read events in its placeholder "
        "namespace (the Role's events rule: deploy/rbac/role.yaml); a shortage is confirmed "
        "on time alone"
    ]
