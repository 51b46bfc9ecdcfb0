"""The local control plane is real: scheduling, preemption, garbage collection, watches and
ARC's CRDs behave as on a cluster, because they are the real components."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from base.arc import ARC_GROUP, ARC_VERSION
from tools.capacity_kit import read_pod, wait_running
from tools.localcluster import LocalCluster
from tools.localcluster.testkit import PAUSE_IMAGE, pod_manifest
from tools.waits import eventually

pytestmark = pytest.mark.cluster

MERGE_PATCH = "application/merge-patch+json"
RUNNER_IMAGE = "ghcr.io/actions/actions-runner:latest"


# --- helpers ----------------------------------------------------------------------------


async def wait_gone(core: client.CoreV1Api, ns: str, name: str, what: str = "") -> None:
    async def gone() -> bool:
        return await read_pod(core, ns, name) is None

    await eventually(gone, what or f"pod {ns}/{name} to disappear")


def scheduled_condition(pod: client.V1Pod) -> client.V1PodCondition | None:
    for cond in pod.status.conditions or []:
        if cond.type == "PodScheduled":
            return cond
    return None


async def wait_unschedulable(core: client.CoreV1Api, ns: str, name: str) -> client.V1Pod:
    async def unschedulable() -> client.V1Pod | None:
        pod = await read_pod(core, ns, name)
        cond = scheduled_condition(pod) if pod else None
        if cond is not None and cond.status == "False" and cond.reason == "Unschedulable":
            return pod
        return None

    return await eventually(unschedulable, f"pod {ns}/{name} PodScheduled=False/Unschedulable")


# --- scheduling and kwok --------------------------------------------------------------------


async def test_pod_runs_on_fake_node_and_oversized_pod_stays_pending(
    kube_api: client.ApiClient, namespace: str, fake_nodes: Callable[..., dict[str, Any]]
) -> None:
    core = client.CoreV1Api(kube_api)
    node = fake_nodes(cpu="2", memory="4Gi")
    node_name = node["metadata"]["name"]
    assert node["status"]["allocatable"]["cpu"] == "2"  # kwok kept our capacity

    await core.create_namespaced_pod(namespace, pod_manifest("fits", owner=namespace, cpu="1"))
    await core.create_namespaced_pod(namespace, pod_manifest("huge", owner=namespace, cpu="64"))

    running = await wait_running(core, namespace, "fits")
    assert running.spec.node_name == node_name
    assert running.status.pod_ip  # kwok's pod-ready stage filled in the status

    pending = await wait_unschedulable(core, namespace, "huge")
    assert pending.status.phase == "Pending"
    assert pending.spec.node_name is None
    condition = scheduled_condition(pending)
    assert condition is not None
    assert "Insufficient cpu" in (condition.message or "")


# --- priority and preemption ----------------------------------------------------------------

LADDER = (("t-minus10", -10, "Never"), ("t-0", 0, None), ("t-10", 10, "Never"), ("t-20", 20, None))


@pytest.fixture
async def priority_classes(kube_api: client.ApiClient) -> AsyncIterator[dict[str, str]]:
    """Test-local PriorityClasses, named uniquely so nothing else in the cluster uses them."""
    sched = client.SchedulingV1Api(kube_api)
    suffix = uuid.uuid4().hex[:6]
    names = {}
    for base, value, policy in LADDER:
        name = f"{base}-{suffix}"
        body: dict[str, Any] = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        if policy:
            body["preemptionPolicy"] = policy
        await sched.create_priority_class(body)
        names[base] = name
    yield names
    for name in names.values():
        await sched.delete_priority_class(name)


async def test_preemption_follows_priority_and_policy(
    kube_api: client.ApiClient,
    namespace: str,
    fake_nodes: Callable[..., dict[str, Any]],
    priority_classes: dict[str, str],
) -> None:
    core = client.CoreV1Api(kube_api)
    pc = priority_classes
    fake_nodes(cpu="2", memory="4Gi")

    async def create(name: str, cls: str, cpu: str = "1") -> None:
        await core.create_namespaced_pod(
            namespace, pod_manifest(name, owner=namespace, cpu=cpu, priority_class=pc[cls])
        )

    # Fill the node: one -10 pod, one 10 pod.
    await create("low", "t-minus10")
    await create("mid", "t-10")
    low = await wait_running(core, namespace, "low")
    await wait_running(core, namespace, "mid")
    assert low.spec.priority == -10  # Priority admission resolved the class

    # A 0 pod preempts the -10 pod, not the 10 pod; the victim really disappears.
    await create("zero", "t-0")
    await wait_gone(core, namespace, "low", "the -10 pod to be preempted")
    await wait_running(core, namespace, "zero")
    mid = await read_pod(core, namespace, "mid")
    assert mid is not None
    assert mid.metadata.deletion_timestamp is None

    # Another 0 pod cannot preempt 0 or 10, and a 10 pod with preemptionPolicy Never
    # preempts nobody even though a 0 pod is below it.
    await create("zero-b", "t-0")
    await create("never", "t-10")
    for name in ("zero-b", "never"):
        pod = await wait_unschedulable(core, namespace, name)
        assert not pod.status.nominated_node_name, f"{name} was nominated for preemption"
    for name in ("mid", "zero"):
        pod = await read_pod(core, namespace, name)
        assert pod is not None
        assert pod.metadata.deletion_timestamp is None, f"{name} was preempted"
        assert pod.status.phase == "Running"

    # Free everything but the 10 pod; a 20 pod that needs the whole node preempts it.
    for name in ("zero", "zero-b", "never"):
        await core.delete_namespaced_pod(name, namespace)
    for name in ("zero", "zero-b", "never"):
        await wait_gone(core, namespace, name)
    await create("top", "t-20", cpu="2")
    await wait_gone(core, namespace, "mid", "the 10 pod to be preempted by the 20 pod")
    top = await wait_running(core, namespace, "top")
    assert top.spec.priority == 20


# --- garbage collection ---------------------------------------------------------------------


def owner_ref(obj: client.V1ConfigMap) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": obj.metadata.name,
        "uid": obj.metadata.uid,
    }


async def read_cm(core: client.CoreV1Api, ns: str, name: str) -> client.V1ConfigMap | None:
    try:
        cm: client.V1ConfigMap = await core.read_namespaced_config_map(name, ns)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return cm


async def test_garbage_collector_follows_owner_references(
    kube_api: client.ApiClient,
    local_cluster: LocalCluster,
    namespace: str,
    fake_nodes: Callable[..., dict[str, Any]],
) -> None:
    core = client.CoreV1Api(kube_api)
    fake_nodes()
    owner = await core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "owner"}, "data": {"k": "v"}}
    )
    ref = owner_ref(owner)
    await core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "dependent", "ownerReferences": [ref]}}
    )
    await core.create_namespaced_pod(
        namespace, pod_manifest("dependent-pod", owner=namespace, owner_references=[ref])
    )
    await wait_running(core, namespace, "dependent-pod")

    # A dependent whose owner reference names an object in another namespace: the owner
    # is looked up in the dependent's namespace, not found, and the dependent collected.
    other = local_cluster.create_namespace("t-other")
    try:
        await core.create_namespaced_config_map(
            other, {"metadata": {"name": "cross-ns", "ownerReferences": [ref]}}
        )

        async def cross_gone() -> bool:
            return await read_cm(core, other, "cross-ns") is None

        await eventually(cross_gone, "cross-namespace dependent to be collected")
        # ...while its would-be owner and the same-namespace dependents are untouched.
        assert await read_cm(core, namespace, "owner") is not None
        assert await read_cm(core, namespace, "dependent") is not None
        assert await read_pod(core, namespace, "dependent-pod") is not None
    finally:
        local_cluster.delete_namespace(other)

    await core.delete_namespaced_config_map("owner", namespace)

    async def dependents_gone() -> bool:
        cm = await read_cm(core, namespace, "dependent")
        pod = await read_pod(core, namespace, "dependent-pod")
        return cm is None and pod is None

    await eventually(dependents_gone, "dependents of the deleted owner to be collected")


# --- watches --------------------------------------------------------------------------------


async def test_label_selected_watch_and_relist_after_410(
    kube_api: client.ApiClient, local_cluster: LocalCluster, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    selector = f"w={uuid.uuid4().hex[:8]}"
    key, value = selector.split("=")

    listed = await core.list_namespaced_config_map(namespace, label_selector=selector)
    events: list[tuple[str, str]] = []

    async def consume(rv: str) -> None:
        async with watch.Watch() as w:
            async for ev in w.stream(
                core.list_namespaced_config_map,
                namespace,
                label_selector=selector,
                resource_version=rv,
                timeout_seconds=30,
            ):
                events.append((ev["type"], ev["object"].metadata.name))
                if ev["type"] == "DELETED":
                    return

    task = asyncio.create_task(consume(listed.metadata.resource_version))
    await core.create_namespaced_config_map(namespace, {"metadata": {"name": "other"}})
    await core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "seen", "labels": {key: value}}}
    )
    await core.patch_namespaced_config_map("seen", namespace, {"data": {"x": "1"}})
    await core.delete_namespaced_config_map("seen", namespace)
    await asyncio.wait_for(task, timeout=30)
    assert events == [("ADDED", "seen"), ("MODIFIED", "seen"), ("DELETED", "seen")]

    # A resourceVersion older than anything the server keeps: 410 Gone, then relist.
    # PodTemplates bypass the watch cache (see the harness), so after compacting etcd
    # (the API server does it every few minutes) a watch from "1" is genuinely expired.
    template = {"template": {"spec": {"containers": [{"name": "m", "image": PAUSE_IMAGE}]}}}
    await core.create_namespaced_pod_template(
        namespace, {"metadata": {"name": "old", "labels": {key: value}}, **template}
    )
    assert local_cluster.compact_storage() is not None, "needs etcd access (use `up` clusters)"

    async def watch_templates(rv: str, until: str) -> list[tuple[str, str]]:
        seen: list[tuple[str, str]] = []
        async with watch.Watch() as w:
            async for ev in w.stream(
                core.list_namespaced_pod_template,
                namespace,
                label_selector=selector,
                resource_version=rv,
                timeout_seconds=30,
            ):
                seen.append((ev["type"], ev["object"].metadata.name))
                if ev["type"] == until:
                    break
        return seen

    with pytest.raises(ApiException) as gone:
        await watch_templates("1", "DELETED")
    assert gone.value.status == 410

    relisted = await core.list_namespaced_pod_template(namespace, label_selector=selector)
    assert [t.metadata.name for t in relisted.items] == ["old"]
    watching = asyncio.create_task(watch_templates(relisted.metadata.resource_version, "DELETED"))
    await core.create_namespaced_pod_template(
        namespace, {"metadata": {"name": "new", "labels": {key: value}}, **template}
    )
    await core.delete_namespaced_pod_template("new", namespace)
    assert await asyncio.wait_for(watching, timeout=30) == [
        ("ADDED", "new"),
        ("DELETED", "new"),
    ]


# --- ARC CRDs -------------------------------------------------------------------------------


def runner_spec() -> dict[str, Any]:
    return {
        "githubConfigUrl": "https://github.com/acme",
        "githubConfigSecret": "github-config",
        "runnerScaleSetId": 1,
        "spec": {"containers": [{"name": "runner", "image": RUNNER_IMAGE}]},
    }


async def test_ers_and_er_merge_patches_round_trip(
    kube_api: client.ApiClient, namespace: str
) -> None:
    crd = client.CustomObjectsApi(kube_api)
    ers_args = (ARC_GROUP, ARC_VERSION, namespace, "ephemeralrunnersets")
    er_args = (ARC_GROUP, ARC_VERSION, namespace, "ephemeralrunners")

    await crd.create_namespaced_custom_object(
        *ers_args,
        {
            "apiVersion": f"{ARC_GROUP}/{ARC_VERSION}",
            "kind": "EphemeralRunnerSet",
            "metadata": {"name": "set"},
            "spec": {"replicas": 1, "patchID": 1, "ephemeralRunnerSpec": runner_spec()},
        },
    )
    patched = await crd.patch_namespaced_custom_object(
        *ers_args, "set", {"spec": {"patchID": 3, "replicas": 2}}, _content_type=MERGE_PATCH
    )
    assert (patched["spec"]["patchID"], patched["spec"]["replicas"]) == (3, 2)
    read = await crd.get_namespaced_custom_object(*ers_args, "set")
    assert (read["spec"]["patchID"], read["spec"]["replicas"]) == (3, 2)
    assert read["spec"]["ephemeralRunnerSpec"]["runnerScaleSetId"] == 1  # merge, not replace

    # null removes replicas (the Go type reads it as 0); patchID 0 is kept as a value.
    await crd.patch_namespaced_custom_object(
        *ers_args, "set", {"spec": {"patchID": 0, "replicas": None}}, _content_type=MERGE_PATCH
    )
    read = await crd.get_namespaced_custom_object(*ers_args, "set")
    assert "replicas" not in read["spec"]
    assert read["spec"]["patchID"] == 0

    await crd.create_namespaced_custom_object(
        *er_args,
        {
            "apiVersion": f"{ARC_GROUP}/{ARC_VERSION}",
            "kind": "EphemeralRunner",
            "metadata": {"name": "set-runner-abcde"},
            "spec": runner_spec(),
        },
    )
    status = {
        "jobDisplayName": "build",
        "jobId": "j-1",
        "jobRepositoryName": "acme/app",
        "jobRequestId": 101,
        "jobWorkflowRef": "acme/app/.github/workflows/ci.yml@refs/heads/main",
        "workflowRunId": 9,
    }
    # The main resource ignores status (status subresource); only /status changes it.
    await crd.patch_namespaced_custom_object(
        *er_args, "set-runner-abcde", {"status": status}, _content_type=MERGE_PATCH
    )
    read = await crd.get_namespaced_custom_object(*er_args, "set-runner-abcde")
    assert not read.get("status")

    patched = await crd.patch_namespaced_custom_object_status(
        *er_args, "set-runner-abcde", {"status": status}, _content_type=MERGE_PATCH
    )
    assert patched["status"] == status
    read = await crd.get_namespaced_custom_object_status(*er_args, "set-runner-abcde")
    assert read["status"] == status
    assert read["spec"]["githubConfigUrl"] == "https://github.com/acme"
