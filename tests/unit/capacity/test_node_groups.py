"""cluster-autoscaler node groups: the status document (capacity.node_groups), the room full
groups leave (policy.node_group_room), and the reader (capacity.node_group_watch) on an
in-memory cluster."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from base.kube import KubeError, Resource
from capacity.model import Observed, Placeholder, PodPhase, Role
from capacity.node_group_watch import NodeGroupRoom, status_from
from capacity.node_groups import NodeGroup, node_groups_from
from capacity.policy import node_group_room
from capacity.settings_pools import ClusterAutoscalerSettings
from tests.support.memory_cluster import MemoryCluster
from tests.unit.capacity.test_nodepool_watch import (
    Pokes,
    Rechecks,
    failing_cluster,
    optional_reader,
)

LABELS = {"name": "arc", "namespace": "ns"}
CONFIGMAPS = Resource.configmaps("kube-system")

# As cluster-autoscaler 1.36 writes it (clusterstate/api/types.go, marshalled as YAML).
STATUS = """\
time: 2026-11-25 16:00:01.123456789 +0000 UTC
autoscalerStatus: Running
clusterWide:
  health:
    status: Healthy
    nodeCounts:
      registered: {total: 3, ready: 3, notStarted: 0}
      longUnregistered: 0
      unregistered: 0
  scaleUp: {status: NoActivity}
  scaleDown: {status: NoCandidates}
nodeGroups:
- name: runners
  health:
    status: Healthy
    nodeCounts:
      registered: {total: 2, ready: 2, notStarted: 0}
      longUnregistered: 0
      unregistered: 0
    cloudProviderTarget: 2
    minSize: 0
    maxSize: 2
  scaleUp: {status: NoActivity}
  scaleDown: {status: NoCandidates}
- name: workflows
  health:
    status: Healthy
    nodeCounts:
      registered: {total: 1, ready: 1, notStarted: 0}
      longUnregistered: 0
      unregistered: 0
    cloudProviderTarget: 1
    minSize: 0
    maxSize: 5
  scaleUp: {status: InProgress}
  scaleDown: {status: NoCandidates}
"""


def configmap(text: str | None) -> dict[str, Any]:
    data = {} if text is None else {"status": text}
    return {"metadata": {"name": "cluster-autoscaler-status"}, "data": data}


def test_the_status_document_of_ca_1_36() -> None:
    groups = node_groups_from(yaml.safe_load(STATUS))
    assert groups["runners"] == NodeGroup(
        name="runners",
        health="Healthy",
        ready=2,
        registered=2,
        target=2,
        min_size=0,
        max_size=2,
        scale_up="NoActivity",
    )
    assert (groups["runners"].headroom, groups["runners"].full) == (0, True)
    assert (groups["workflows"].headroom, groups["workflows"].full) == (4, False)


def test_a_group_backing_off_is_full_whatever_its_size() -> None:
    group = NodeGroup("g", "Healthy", 1, 1, 1, 0, 5, "Backoff")
    assert group.headroom == 4
    assert group.full


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("Cluster-autoscaler status at 2026-11-25 ...", "status: not a structured document"),
        ("nodeGroups: {a: 1}", "status.nodeGroups: not a list"),
        ("nodeGroups: [{health: {}}]", "status.nodeGroups[0].name: missing"),
        (
            "nodeGroups: [{name: a, health: {maxSize: many}}]",
            "status.nodeGroups[0].health.maxSize: not a number",
        ),
        ("a: [", "while parsing a flow"),
    ],
)
def test_an_unreadable_status_names_the_field(text: str, error: str) -> None:
    got = status_from(configmap(text))
    assert got.groups == {}
    assert got.error.startswith(error), got.error
    assert "\n" not in got.error


def test_a_configmap_without_the_status_key() -> None:
    assert status_from(configmap(None)).error == "no data key 'status'"


# --- the room full groups leave -----------------------------------------------------------


def observed(runner_bound: int, workflow_bound: int, waiting: int = 0) -> Observed:
    pods: list[Placeholder] = []
    for role, n in ((Role.RUNNER, runner_bound), (Role.WORKFLOW, workflow_bound)):
        for i in range(n):
            pods.append(
                Placeholder(
                    name=f"{role.value}-{i}",
                    slot=str(i),
                    role=role,
                    phase=PodPhase.RUNNING,
                    node_name="n",
                )
            )
        for i in range(waiting):
            pods.append(
                Placeholder(
                    name=f"{role.value}-w{i}", slot=f"w{i}", role=role, phase=PodPhase.PENDING
                )
            )
    return Observed(placeholders=tuple(pods), synced=True)


def test_no_full_group_no_cap() -> None:
    room, peak = node_group_room({Role.RUNNER: False, Role.WORKFLOW: False}, observed(2, 2), {})
    assert (room, peak) == (None, {})


def test_a_full_group_admits_only_the_room_its_halves_left() -> None:
    full = {Role.RUNNER: False, Role.WORKFLOW: True}
    room, peak = node_group_room(full, observed(3, 3), {})
    # nothing left from its peak: one pair at a time, to find room left on existing nodes
    assert (room, peak) == (1, {Role.WORKFLOW: 3})
    room, _ = node_group_room(full, observed(3, 3, waiting=1), peak)
    assert room == 0  # the probe waits: nothing more until it lands or times out
    # two pairs expired: their room on the full group's nodes is there for replacements
    room, peak = node_group_room(full, observed(1, 1), peak)
    assert (room, peak) == (2, {Role.WORKFLOW: 3})
    # one replacement is on its way
    room, _ = node_group_room(full, observed(1, 1, waiting=1), peak)
    assert room == 1


@given(
    st.integers(0, 6),
    st.integers(0, 6),
    st.integers(0, 3),
    st.integers(0, 8),
    st.booleans(),
    st.booleans(),
)
def test_room_never_lets_a_full_half_exceed_its_peak(
    runners: int, workflows: int, waiting: int, last_peak: int, full_r: bool, full_w: bool
) -> None:
    full = {Role.RUNNER: full_r, Role.WORKFLOW: full_w}
    now = observed(runners, workflows, waiting)
    room, peak = node_group_room(full, now, {Role.RUNNER: last_peak, Role.WORKFLOW: last_peak})
    if not (full_r or full_w):
        assert room is None
        return
    assert room is not None
    assert room >= 0
    bound = {Role.RUNNER: runners, Role.WORKFLOW: workflows}
    for role in Role:
        if full[role]:
            # what holds room, waits and is admitted fits the peak, or is one probe alone
            within = bound[role] + waiting + room <= max(peak[role], bound[role] + waiting)
            assert within or (waiting == 0 and room == 1)


# --- the reader ---------------------------------------------------------------------------


def reader(
    cluster: MemoryCluster, rechecks: Rechecks | None = None, **settings: Any
) -> tuple[NodeGroupRoom, CollectorRegistry, Pokes]:
    return optional_reader(
        NodeGroupRoom, cluster, ClusterAutoscalerSettings(enabled=True, **settings), rechecks
    )


async def test_it_caps_nothing_until_it_knows_then_follows_the_status() -> None:
    cluster = MemoryCluster()
    cluster.add(CONFIGMAPS, configmap(STATUS))
    groups, registry, pokes = reader(cluster, runner=["runners"], workflow=["workflows"])
    assert groups.room(Observed(), commit=True) == 0  # not known yet
    task = asyncio.create_task(groups.run())
    try:
        await pokes.until(lambda: groups.state == "watching")
        # runners is full: no room beyond what its halves held, but one probe pair
        assert groups.full() == {Role.RUNNER: True, Role.WORKFLOW: False}
        assert groups.room(observed(2, 2, waiting=1), commit=True) == 0
        sample = registry.get_sample_value
        assert sample("gha_capacity_node_group_headroom", {**LABELS, "node_group": "runners"}) == 0
        assert (
            sample("gha_capacity_node_group_headroom", {**LABELS, "node_group": "workflows"}) == 4
        )
        assert (
            sample(
                "gha_capacity_node_group_size", {**LABELS, "node_group": "runners", "kind": "max"}
            )
            == 2
        )
        assert sample("gha_capacity_node_group_pair_room", LABELS) == 0
        # the operator raises the group's max size: CA's next status lifts the cap
        before = len(pokes)
        cluster.add(CONFIGMAPS, configmap(STATUS.replace("maxSize: 2", "maxSize: 4")))
        await pokes.until(lambda: len(pokes) > before)
        assert groups.room(observed(2, 2), commit=True) is None
        assert sample("gha_capacity_node_group_pair_room", LABELS) is None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_unnamed_halves_are_not_capped_but_groups_are_exported() -> None:
    cluster = MemoryCluster()
    cluster.add(CONFIGMAPS, configmap(STATUS))
    groups, registry, pokes = reader(cluster)
    task = asyncio.create_task(groups.run())
    try:
        await pokes.until(lambda: groups.state == "watching")
        assert groups.room(observed(1, 1), commit=True) is None
        assert (
            registry.get_sample_value(
                "gha_capacity_node_group_size",
                {**LABELS, "node_group": "workflows", "kind": "target"},
            )
            == 1
        )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.mark.parametrize(
    ("text", "state", "line"),
    [
        (
            None,
            "absent",
            "node group check off: no cluster-autoscaler status ConfigMap; placeholders are "
            "created as without it",
        ),
        (
            "Cluster-autoscaler status at ...",
            "unreadable",
            "node group check off: cluster-autoscaler status unreadable (status: not a "
            "structured document (cluster-autoscaler < 1.30?)); placeholders are created as "
            "without it",
        ),
    ],
)
async def test_no_status_or_an_old_one_costs_one_line_and_no_cap(
    text: str | None, state: str, line: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="capacity.node_groups")
    cluster = MemoryCluster()
    if text is not None:
        cluster.add(CONFIGMAPS, configmap(text))
    groups, _, pokes = reader(cluster, runner=["runners"])
    task = asyncio.create_task(groups.run())
    try:
        await pokes.until(lambda: groups.state == state)
        assert groups.room(observed(0, 0), commit=True) is None
        # CA (re)writes its status: the watch picks it up, no restart
        cluster.add(CONFIGMAPS, configmap(STATUS))
        await pokes.until(lambda: groups.state == "watching")
        assert groups.room(observed(0, 0, waiting=1), commit=True) == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [line]


@pytest.mark.parametrize(
    ("status", "line"),
    [
        (
            403,
            "node group check off: the listener may not read cluster-autoscaler's status (bind "
            "deploy/rbac/role-cluster-autoscaler-status.yaml); placeholders are created as "
            "without it",
        ),
        (
            404,
            "node group check off: no namespace kube-system; placeholders are created as "
            "without it",
        ),
    ],
)
async def test_403_and_404_cost_one_line_no_cap_and_a_look_again_later(
    status: int, line: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="capacity.node_groups")
    cluster = failing_cluster(*[KubeError("list configmaps", status, "nope")] * 2)
    rechecks = Rechecks()
    groups, _, _ = reader(cluster, rechecks, runner=["runners"])
    task = asyncio.create_task(groups.run())
    try:
        await rechecks.next_wait()
        assert groups.room(observed(0, 0), commit=True) is None
        rechecks.go.set()
        await rechecks.next_wait()  # looked again: still refused, nothing more said
        assert rechecks.waits == [300.0, 300.0]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [line]


def test_node_groups_need_the_setting() -> None:
    from capacity.settings import load_capacity_settings
    from capacity.settings_problems import CapacitySettingsError

    with pytest.raises(CapacitySettingsError, match=r"cluster_autoscaler\.runner: set, but"):
        load_capacity_settings(
            {
                "CAPACITY_WORKFLOW_RESOURCES": '{"requests": {"cpu": "1"}}',
                "CAPACITY_CLUSTER_AUTOSCALER__RUNNER": '["runners"]',
            }
        )
