"""cluster-autoscaler node groups on the real control plane, without CA itself: its status
ConfigMap written as CA 1.36 writes it (the real CA writing it is the opt-in tier,
tests/cluster_autoscaler). deploy/rbac/role-cluster-autoscaler-status.yaml, impersonating a
listener's ServiceAccount: the reader works with it, it opens nothing else, each verb is
needed; and the monitor creates no burst of pairs a full group cannot back."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from prometheus_client import CollectorRegistry

from base.kube import Kube
from capacity.metrics import CapacityMetrics
from capacity.model import Observed
from capacity.node_group_watch import NodeGroupRoom
from capacity.settings_pools import ClusterAutoscalerSettings
from tests.integration.test_capacity_monitor import RUNNER_SET, Scene, settings
from tests.support.deploy_cluster_kit import (
    apply,
    as_listener,
    assert_each_verb_needed,
    bind_to,
    dynamic,
    granted_listener,
    status_of,
    watch_status,
    with_verbs,
)
from tests.support.deploy_files import DEPLOY, yaml_docs
from tests.unit.capacity.test_node_groups import STATUS
from tools.capacity_kit import apply_ladder, create_runner_set, runner_pod_spec
from tools.localcluster import LocalCluster
from tools.waits import eventually, running

pytestmark = pytest.mark.cluster

VERBS = ("get", "list", "watch")
NAME = "cluster-autoscaler-status"


def status_configmap(text: str) -> dict[str, Any]:
    return {"metadata": {"name": NAME}, "data": {"status": text}}


def path(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/configmaps" + (f"/{name}" if name else "")


@pytest.fixture
async def status_ns(kube_api: client.ApiClient, namespace: str) -> str:
    """The test's namespace stands in for kube-system (one per test, so tests never share
    a status): CA's status, and an unrelated ConfigMap the Role must not open."""
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_config_map(namespace, status_configmap(STATUS))
    await core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "other"}, "data": {"secret-ish": "x"}}
    )
    return namespace


@pytest.fixture
async def grant(
    kube_api: client.ApiClient, controller_namespace: str, status_ns: str, tmp_path: Path
) -> Callable[..., Any]:
    """Apply the shipped Role and RoleBinding (with the given verbs) in the status namespace,
    bound to the controller namespace, as deploy/README.md says."""

    async def make(verbs: tuple[str, ...] = VERBS) -> None:
        role, binding = yaml_docs(DEPLOY / "rbac" / "role-cluster-autoscaler-status.yaml")
        async with dynamic(kube_api, tmp_path) as dyn:
            for body in (with_verbs(role, verbs), bind_to(binding, controller_namespace)):
                await apply(dyn, body, status_ns, dry_run=False)

    return make


def reader(api: client.ApiClient, status_ns: str) -> NodeGroupRoom:
    return NodeGroupRoom(
        Kube(api, request_timeout=15.0),
        ClusterAutoscalerSettings(enabled=True, runner=["runners"], status_namespace=status_ns),
        metrics=CapacityMetrics(CollectorRegistry(), name="arc-cpu", namespace="arc-runners"),
        on_change=lambda: None,
    )


async def test_the_reader_works_with_the_role_and_it_opens_nothing_else(
    local_cluster: LocalCluster, controller_namespace: str, status_ns: str, grant: Any
) -> None:
    async with granted_listener(
        local_cluster, controller_namespace, grant, path(status_ns, NAME)
    ) as api:
        groups = reader(api, status_ns)
        async with running(groups.run()):

            async def seen() -> bool:
                return groups.state == "watching" and "runners" in groups.groups

            await eventually(seen, "the node groups read as the listener", within=15)
            assert groups.groups["runners"].full
            kube = groups.kube
            assert isinstance(kube, Kube)
            assert kube.requests["list configmaps"] == 1  # one list, then watch
        # nothing else in the namespace, and no writes
        assert await status_of(api, "GET", path(status_ns, "other")) == 403
        assert await status_of(api, "GET", path(status_ns)) == 403  # a list without the name
        assert await status_of(api, "PATCH", path(status_ns, NAME), body={"data": {}}) == 403
        assert await status_of(api, "DELETE", path(status_ns, NAME)) == 403


@pytest.mark.parametrize("missing", VERBS)
async def test_each_verb_is_needed(
    local_cluster: LocalCluster,
    controller_namespace: str,
    status_ns: str,
    grant: Any,
    missing: str,
) -> None:
    await grant(tuple(v for v in VERBS if v != missing))
    by_name = {"fieldSelector": f"metadata.name={NAME}"}
    checks = {
        "get": lambda api: status_of(api, "GET", path(status_ns, NAME)),
        "list": lambda api: status_of(api, "GET", path(status_ns), query=by_name),
        "watch": lambda api: watch_status(api, path(status_ns), by_name),
    }
    await assert_each_verb_needed(local_cluster, controller_namespace, checks, missing)


async def test_without_it_the_reader_logs_one_line_and_caps_nothing(
    local_cluster: LocalCluster,
    controller_namespace: str,
    status_ns: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="capacity.node_groups")
    async with as_listener(local_cluster, controller_namespace) as api:
        groups = reader(api, status_ns)
        async with running(groups.run()):

            async def gave_up() -> bool:
                return groups.state == "forbidden"

            await eventually(gave_up, "the reader to give up on 403", within=30)
    assert groups.room(Observed(), commit=True) is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        "node group check off: the listener may not read cluster-autoscaler's status (bind "
        "deploy/rbac/role-cluster-autoscaler-status.yaml); placeholders are created as "
        "without it"
    ]


# --- the monitor with a full node group ---------------------------------------------------


@pytest.fixture
async def scene(
    kube_api: client.ApiClient, namespace: str, fake_nodes: Callable[..., dict[str, Any]]
) -> AsyncIterator[Scene]:
    await apply_ladder(kube_api)
    s = Scene(kube_api, namespace, fake_nodes)
    await create_runner_set(
        kube_api, namespace, RUNNER_SET, runner_pod_spec(namespace, cpu="1", memory="1Gi")
    )
    yield s
    await s.crash_runs()


async def test_a_full_group_gets_pairs_one_at_a_time_and_a_raised_max_lifts_the_cap(
    scene: Scene, status_ns: str
) -> None:
    # Room for two pairs on the existing node; the runner group is at its max size (2 of
    # 2), so no node can come for more. Five pairs wanted, up to three in flight.
    scene.node(cpu=4)
    ca = ClusterAutoscalerSettings(
        enabled=True, runner=["runners"], workflow=["runners"], status_namespace=status_ns
    )
    run = scene.start(settings(proactive_capacity=5, max_pending_pairs=3, cluster_autoscaler=ca))
    await run.advertises(2, within=60)

    async def held() -> bool:
        return run.metric("gha_capacity_nodepool_held_pairs") >= 2

    await eventually(held, "pairs held back by the full group", 30)
    pending = [p for p in await scene.placeholders() if p.status.phase == "Pending"]
    assert len(pending) <= 2  # one probe pair at most, not max_pending_pairs
    assert run.metric("gha_capacity_node_group_headroom", node_group="runners") == 0
    assert max(v for _, v in run.values) == 2

    # The operator raises the group's max size: CA's next status lifts the cap at once.
    raised = STATUS.replace("maxSize: 2", "maxSize: 6")
    await scene.core.patch_namespaced_config_map(NAME, status_ns, {"data": {"status": raised}})

    async def lifted() -> bool:
        return run.metric("gha_capacity_node_group_pair_room") == -1  # absent: no cap

    await eventually(lifted, "the cap lifted", 30)

    async def burst() -> bool:
        pods = await scene.placeholders()
        return sum(1 for p in pods if p.status.phase == "Pending") >= 4

    await eventually(burst, "three pairs in flight again", 30)
    await run.close()
