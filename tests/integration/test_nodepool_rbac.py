"""deploy/rbac/clusterrole-nodepools.yaml on the real control plane with Karpenter's CRDs,
impersonating a listener's ServiceAccount (as in test_shipped_rbac.py): the reader of
NodePool limits works with it, each verb is needed, it grants no writes, and without it the
reader says so in one line and imposes no cap."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import CollectorRegistry

from base.kube import Kube
from capacity.metrics import CapacityMetrics
from capacity.model import Observed
from capacity.nodepool_watch import RESOURCE, NodePoolLimits
from capacity.settings_pools import NodePoolSettings
from tests.support.deploy_cluster_kit import (
    apply,
    as_listener,
    assert_each_verb_needed,
    cluster_rbac_per_test,
    dynamic,
    granted_listener,
    status_of,
    watch_status,
)
from tools.localcluster import LocalCluster
from tools.localcluster.karpenter import GENERAL_TYPES, Karpenter, nodepool_manifest
from tools.waits import eventually, running

pytestmark = pytest.mark.cluster

VERBS = ("get", "list", "watch")


@pytest.fixture
def pool(karpenter: Karpenter, nodepools: Callable[[dict[str, Any]], str], namespace: str) -> str:
    """A NodePool with a limit (it launches nothing: no pod asks for it)."""
    return nodepools(
        nodepool_manifest(
            f"np-{namespace}", owner=namespace, types=[GENERAL_TYPES[0]], limits={"cpu": "4"}
        )
    )


@pytest.fixture
async def grant(
    kube_api: client.ApiClient, controller_namespace: str, tmp_path: Path
) -> AsyncIterator[Callable[[tuple[str, ...]], Any]]:
    """Apply the per-test ClusterRole (with the given verbs) and its binding."""
    applied: list[dict[str, Any]] = []

    async def make(verbs: tuple[str, ...] = VERBS) -> None:
        bodies = cluster_rbac_per_test(
            "clusterrole-nodepools.yaml", controller_namespace, controller_namespace, verbs
        )
        async with dynamic(kube_api, tmp_path) as dyn:
            for body in bodies:
                await apply(dyn, body, None, dry_run=False)
        applied[:] = bodies

    yield make
    rbac = client.RbacAuthorizationV1Api(kube_api)
    if applied:
        role, binding = applied
        with contextlib.suppress(ApiException):
            await rbac.delete_cluster_role_binding(binding["metadata"]["name"])
        with contextlib.suppress(ApiException):
            await rbac.delete_cluster_role(role["metadata"]["name"])


def reader(api: client.ApiClient) -> tuple[NodePoolLimits, list[int]]:
    pokes: list[int] = []
    metrics = CapacityMetrics(CollectorRegistry(), name="arc-cpu", namespace="arc-runners")
    limits = NodePoolLimits(
        Kube(api, request_timeout=15.0),
        NodePoolSettings(enabled=True),
        metrics=metrics,
        on_change=lambda: pokes.append(1),
    )
    return limits, pokes


async def test_the_reader_works_with_the_cluster_role(
    local_cluster: LocalCluster, controller_namespace: str, pool: str, grant: Any
) -> None:
    async with granted_listener(
        local_cluster, controller_namespace, grant, f"{RESOURCE.path}/{pool}"
    ) as api:
        assert await watch_status(api, RESOURCE.path, {}) == 200
        limits, pokes = reader(api)
        async with running(limits.run()):

            async def seen() -> bool:
                return limits.state == "watching" and pool in limits.pools

            await eventually(seen, "the NodePool read as the listener", within=15)
            assert limits.pools[pool].limits["cpu"] == 4
            assert pokes
            # The limit changes: the watch (not a poll) brings it in.
            local_cluster.rest.request(
                "PATCH",
                f"{RESOURCE.path}/{pool}",
                {"spec": {"limits": {"cpu": "6"}}},
                content_type="application/merge-patch+json",
            )

            async def raised() -> bool:
                return limits.pools[pool].limits["cpu"] == 6

            await eventually(raised, "the raised limit seen", within=15)
            kube = limits.kube
            assert isinstance(kube, Kube)
            assert kube.requests["list nodepools.karpenter.sh"] == 1  # one list, then watch


async def test_it_grants_no_writes(
    local_cluster: LocalCluster, controller_namespace: str, pool: str, grant: Any
) -> None:
    async with granted_listener(
        local_cluster, controller_namespace, grant, f"{RESOURCE.path}/{pool}"
    ) as api:
        patch = {"spec": {"limits": {"cpu": "100"}}}
        assert await status_of(api, "PATCH", f"{RESOURCE.path}/{pool}", body=patch) == 403
        assert await status_of(api, "DELETE", f"{RESOURCE.path}/{pool}") == 403


@pytest.mark.parametrize("missing", VERBS)
async def test_each_verb_is_needed(
    local_cluster: LocalCluster, controller_namespace: str, pool: str, grant: Any, missing: str
) -> None:
    await grant(tuple(v for v in VERBS if v != missing))
    checks = {
        "get": lambda api: status_of(api, "GET", f"{RESOURCE.path}/{pool}"),
        "list": lambda api: status_of(api, "GET", RESOURCE.path),
        "watch": lambda api: watch_status(api, RESOURCE.path, {}),
    }
    await assert_each_verb_needed(local_cluster, controller_namespace, checks, missing)


@pytest.mark.parametrize("how", ["no binding", "list only"])
async def test_without_it_the_reader_logs_one_line_and_caps_nothing(
    local_cluster: LocalCluster,
    controller_namespace: str,
    pool: str,
    grant: Any,
    how: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if how == "list only":  # the list passes, the watch is refused
        await grant(("list",))
    caplog.set_level(logging.INFO, logger="capacity.nodepools")
    async with as_listener(local_cluster, controller_namespace) as api:
        if how == "list only":

            async def listed() -> bool:
                return await status_of(api, "GET", RESOURCE.path) == 200

            await eventually(listed, "list nodepools allowed", within=15)
        limits, _ = reader(api)
        async with running(limits.run()):

            async def gave_up() -> bool:
                return limits.state == "forbidden"

            # It stops watching on 403 and only looks again minutes later.
            await eventually(gave_up, "the reader to give up on 403", within=30)
    assert limits.state == "forbidden"
    assert limits.room(Observed(), None, commit=True) is None
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "NodePool limits off: the listener may not read them (bind "
        "deploy/rbac/clusterrole-nodepools.yaml); placeholders are created as without them"
    ]
