"""base/kube.py against the real local control plane: pod create/delete semantics, error
classification, and the list+watch informer (label selection, 410 relist, apiserver restart)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client

from base.kube import (
    Failed,
    Kube,
    KubeError,
    KubeErrorKind,
    Removed,
    Reset,
    Resource,
    Upserted,
    WatchEvent,
)
from tools.capacity_kit import compact_etcd, restart_apiserver
from tools.localcluster import LocalCluster
from tools.localcluster.testkit import pod_manifest
from tools.waits import eventually

pytestmark = pytest.mark.cluster


def name_of(obj: dict[str, Any]) -> str | None:
    return str(obj["metadata"]["name"])


class Recorder:
    """Consumes an informer in a task and keeps every event."""

    def __init__(self, events: AsyncIterator[WatchEvent[Any]]) -> None:
        self.events: list[WatchEvent[Any]] = []
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._run(events))

    async def _run(self, events: AsyncIterator[WatchEvent[Any]]) -> None:
        async for event in events:
            self.events.append(event)
            self._changed.set()

    async def wait_for(self, match: Callable[[WatchEvent[Any]], bool], within: float = 30) -> Any:
        seen = 0

        def found() -> WatchEvent[Any] | None:
            nonlocal seen
            for event in self.events[seen:]:
                if match(event):
                    return event
            seen = len(self.events)
            return None

        return await eventually(found, "a matching watch event", within, wake=self._changed)

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def test_create_and_delete_are_idempotent(kube_api: client.ApiClient, namespace: str) -> None:
    kube = Kube(kube_api)
    manifest = pod_manifest("p1", owner=namespace)
    assert await kube.create_pod(namespace, manifest) is True
    assert await kube.create_pod(namespace, manifest) is False  # 409 AlreadyExists

    pod = await client.CoreV1Api(kube_api).read_namespaced_pod("p1", namespace)
    # A uid precondition that does not match leaves the pod alone.
    assert await kube.delete_pod(namespace, "p1", uid="not-the-uid") is False
    await client.CoreV1Api(kube_api).read_namespaced_pod("p1", namespace)
    assert await kube.delete_pod(namespace, "p1", uid=pod.metadata.uid) is True
    assert await kube.delete_pod(namespace, "p1") is False  # already gone (404)
    assert kube.requests["create pods"] == 2
    assert kube.requests["delete pods"] == 3


async def test_errors_are_one_line_and_classified(
    kube_api: client.ApiClient, namespace: str
) -> None:
    kube = Kube(kube_api)
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_resource_quota(
        namespace,
        {"metadata": {"name": "tiny"}, "spec": {"hard": {"pods": "1"}}},
    )
    assert await kube.create_pod(namespace, pod_manifest("a", owner=namespace))

    async def quota_applies() -> None:
        while True:
            try:
                await kube.create_pod(namespace, pod_manifest("b", owner=namespace))
            except KubeError as exc:
                raise exc
            await kube.delete_pod(namespace, "b")
            await asyncio.sleep(0.2)  # the quota controller has not counted yet

    with pytest.raises(KubeError) as quota:
        await asyncio.wait_for(quota_applies(), 30)
    assert quota.value.kind == KubeErrorKind.QUOTA
    assert quota.value.status == 403
    assert "exceeded quota" in str(quota.value)
    assert "\n" not in str(quota.value)

    bad = pod_manifest("Not_A_Valid_Name", owner=namespace)
    with pytest.raises(KubeError) as invalid:
        await kube.create_pod(namespace, bad)
    assert invalid.value.kind == KubeErrorKind.INVALID
    assert invalid.value.status == 422

    assert await kube.get_node("no-such-node") is None


async def test_forbidden_names_the_missing_permission(
    local_cluster: LocalCluster, kube_api: client.ApiClient, namespace: str
) -> None:
    # A service account without any role: every call is forbidden.
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
    token = await core.create_namespaced_service_account_token(
        "nobody", namespace, {"spec": {"expirationSeconds": 600}}
    )
    config = client.Configuration()
    config.host = kube_api.configuration.host
    config.verify_ssl = False
    config.api_key = {"BearerToken": token.status.token}
    config.api_key_prefix = {"BearerToken": "Bearer"}
    async with client.ApiClient(config) as api:
        kube = Kube(api)
        with pytest.raises(KubeError) as denied:
            await kube.create_pod(namespace, pod_manifest("x", owner=namespace))
    assert denied.value.kind == KubeErrorKind.FORBIDDEN
    assert f"'create' on pods in namespace {namespace}" in str(denied.value)


async def test_informer_lists_watches_and_selects_on_the_server(
    kube_api: client.ApiClient, namespace: str
) -> None:
    kube = Kube(kube_api)
    ours = {"team": "ours"}
    await kube.create_pod(namespace, pod_manifest("before", owner=namespace, labels=ours))
    await kube.create_pod(namespace, pod_manifest("unrelated", owner=namespace))
    rec = Recorder(kube.informer(Resource.pods(namespace), name_of, label_selector="team=ours"))
    try:
        reset = await rec.wait_for(lambda e: isinstance(e, Reset))
        assert reset.items == {"before": "before"}
        await kube.create_pod(namespace, pod_manifest("after", owner=namespace, labels=ours))
        await rec.wait_for(lambda e: isinstance(e, Upserted) and e.name == "after")
        await kube.delete_pod(namespace, "before")
        await rec.wait_for(lambda e: isinstance(e, Removed) and e.name == "before")
        assert not any(
            isinstance(e, Upserted | Reset) and "unrelated" in str(e) for e in rec.events
        )
    finally:
        await rec.stop()
    assert kube.requests["list pods"] == 1
    assert kube.requests["watch pods"] == 1


async def test_a_list_at_a_revision_reads_the_collection_as_it_was(
    kube_api: client.ApiClient, namespace: str
) -> None:
    """What a rise is confirmed with: lists at the revision of an earlier list, also when
    they take several pages (the continue token carries the revision)."""
    kube = Kube(kube_api, list_page=1)
    pods = Resource.pods(namespace)
    for name in ("a", "b"):
        await kube.create_pod(namespace, pod_manifest(name, owner=namespace))
    before, version = await kube.list_objects(pods, name_of)
    await kube.delete_pod(namespace, "a")
    await kube.create_pod(namespace, pod_manifest("c", owner=namespace))

    async def a_gone() -> bool:
        return "a" not in (await kube.list_objects(pods, name_of))[0]

    await eventually(a_gone, "pod a deleted")
    now, _ = await kube.list_objects(pods, name_of)
    then, then_version = await kube.list_objects(pods, name_of, resource_version=version)
    assert set(before) == {"a", "b"}
    assert set(now) == {"b", "c"}
    assert set(then) == {"a", "b"}  # two pages, both at the first list's revision
    assert then_version == version


@pytest.mark.restarts_apiserver
async def test_informer_relists_after_410(
    local_cluster: LocalCluster, kube_api: client.ApiClient, namespace: str
) -> None:
    kube = Kube(kube_api)
    core = client.CoreV1Api(kube_api)
    stale = (await core.list_namespaced_pod(namespace)).metadata.resource_version
    await kube.create_pod(namespace, pod_manifest("p", owner=namespace))
    # A young apiserver's watch cache still holds every event, so make the resourceVersion
    # really expire, as it does in production: etcd compacts, and the restarted apiserver's
    # cache starts after it. A watch from `stale` then gets 410 Gone; the informer must
    # relist, not fail or stop.
    await compact_etcd(local_cluster)
    await restart_apiserver(local_cluster, downtime=0)
    rec = Recorder(kube.informer(Resource.pods(namespace), name_of, since=stale))
    try:
        reset = await rec.wait_for(lambda e: isinstance(e, Reset))
        assert reset.items == {"p": "p"}
        await kube.create_pod(namespace, pod_manifest("q", owner=namespace))
        await rec.wait_for(lambda e: isinstance(e, Upserted) and e.name == "q")
    finally:
        await rec.stop()
    assert not any(isinstance(e, Failed) for e in rec.events)  # a relist, not a failure
    assert kube.requests["list pods"] == 1
    assert kube.requests["watch pods"] == 2  # the stale one, then the one after the list


@pytest.mark.restarts_apiserver
async def test_informer_survives_an_apiserver_restart(
    local_cluster: LocalCluster, kube_api: client.ApiClient, namespace: str
) -> None:
    kube = Kube(kube_api)
    rec = Recorder(kube.informer(Resource.pods(namespace), name_of))
    try:
        await rec.wait_for(lambda e: isinstance(e, Reset))
        await restart_apiserver(local_cluster)
        await kube.create_pod(namespace, pod_manifest("after-restart", owner=namespace))
        # Seen either as an event or in a relist (the restarted apiserver's watch cache may
        # no longer reach back to the informer's resourceVersion).
        await rec.wait_for(
            lambda e: (
                (isinstance(e, Upserted) and e.name == "after-restart")
                or (isinstance(e, Reset) and "after-restart" in e.items)
            ),
            90,
        )
    finally:
        await rec.stop()
    assert any(isinstance(e, Failed) for e in rec.events)  # it did see the outage
    assert kube.requests["watch pods"] >= 2
