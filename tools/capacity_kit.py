"""Helpers shared by the capacity monitor's integration tests and its benchmark: ARC-like
objects (EphemeralRunnerSet, runner and workflow pods), the priority ladder, and an
apiserver restart on a harness-started cluster."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import itertools
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from base.arc import ARC_GROUP, ARC_VERSION
from tools.localcluster import LocalCluster
from tools.localcluster.testkit import PAUSE_IMAGE, placement
from tools.waits import WaitFailed, eventually, eventually_sync

ROOT = Path(__file__).resolve().parents[1]

SCALE_SET_LABEL = "actions.github.com/scale-set-name"
LADDER = {
    "arc-workflow": 20,
    "placeholder-workflow": 10,
    "arc-runner": 0,
    "placeholder-runner": -10,
}


async def apply_ladder(api: client.ApiClient) -> dict[str, int]:
    """Create the PriorityClasses from priorityclasses/ (kept if they already exist)."""
    sched = client.SchedulingV1Api(api)
    values: dict[str, int] = {}
    for path in sorted((ROOT / "priorityclasses").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "PriorityClass":
                continue
            try:
                await sched.create_priority_class(doc)
            except ApiException as exc:
                if exc.status != 409:  # already created by an earlier test
                    raise
            values[doc["metadata"]["name"]] = int(doc["value"])
    if values != LADDER:
        raise AssertionError(f"priorityclasses/ defines {values}, expected {LADDER}")
    return values


async def read_pod(core: client.CoreV1Api, ns: str, name: str) -> client.V1Pod | None:
    """The pod, or None once it is gone."""
    try:
        pod: client.V1Pod = await core.read_namespaced_pod(name, ns)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return pod


async def wait_running(
    core: client.CoreV1Api, ns: str, name: str, within: float = 30.0
) -> client.V1Pod:
    """The pod once it is Running; fails naming it after ``within`` seconds."""

    async def running() -> client.V1Pod | None:
        pod = await read_pod(core, ns, name)
        return pod if pod is not None and pod.status.phase == "Running" else None

    return await eventually(running, f"pod {ns}/{name} Running", within)


def runner_pod_spec(owner: str, *, cpu: str = "1", memory: str = "1Gi") -> dict[str, Any]:
    """An ARC runner pod template (spec.ephemeralRunnerSpec.spec) placed on the test's
    reserved nodes."""
    return {
        "containers": [
            {
                "name": "runner",
                "image": "ghcr.io/actions/actions-runner:latest",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
        **placement(owner),
    }


async def create_runner_set(
    api: client.ApiClient,
    namespace: str,
    name: str,
    pod_spec: dict[str, Any],
    *,
    generate_name: bool = False,
) -> dict[str, Any]:
    """An EphemeralRunnerSet named ``name``, or, with ``generate_name``, named by the API
    server ``<name>-xxxxx`` as ARC 0.14 names it (generateName on the AutoscalingRunnerSet's
    name)."""
    crd = client.CustomObjectsApi(api)
    meta = {"generateName": f"{name}-"} if generate_name else {"name": name}
    body = {
        "apiVersion": f"{ARC_GROUP}/{ARC_VERSION}",
        "kind": "EphemeralRunnerSet",
        "metadata": meta,
        "spec": {
            "replicas": 0,
            "patchID": 0,
            "ephemeralRunnerSpec": {
                "githubConfigUrl": "https://github.com/acme",
                "githubConfigSecret": "github-config",
                "runnerScaleSetId": 1,
                "spec": pod_spec,
            },
        },
    }
    created: dict[str, Any] = await crd.create_namespaced_custom_object(
        ARC_GROUP, ARC_VERSION, namespace, "ephemeralrunnersets", body
    )
    return created


async def delete_runner_set(api: client.ApiClient, namespace: str, name: str) -> None:
    crd = client.CustomObjectsApi(api)
    await crd.delete_namespaced_custom_object(
        ARC_GROUP,
        ARC_VERSION,
        namespace,
        "ephemeralrunnersets",
        name,
        body={"propagationPolicy": "Background"},
    )


async def create_ephemeral_runner(
    api: client.ApiClient, namespace: str, name: str, scale_set: str, phase: str | None = None
) -> None:
    crd = client.CustomObjectsApi(api)
    await crd.create_namespaced_custom_object(
        ARC_GROUP,
        ARC_VERSION,
        namespace,
        "ephemeralrunners",
        {
            "apiVersion": f"{ARC_GROUP}/{ARC_VERSION}",
            "kind": "EphemeralRunner",
            "metadata": {"name": name, "labels": {SCALE_SET_LABEL: scale_set}},
            "spec": {
                "githubConfigUrl": "https://github.com/acme",
                "githubConfigSecret": "github-config",
                "runnerScaleSetId": 1,
                "spec": {"containers": [{"name": "runner", "image": PAUSE_IMAGE}]},
            },
        },
    )
    if phase:
        await crd.patch_namespaced_custom_object_status(
            ARC_GROUP,
            ARC_VERSION,
            namespace,
            "ephemeralrunners",
            name,
            {"status": {"phase": phase}},
            _content_type="application/merge-patch+json",
        )


def real_pod(
    name: str,
    *,
    owner: str,
    priority_class: str,
    cpu: str,
    memory: str,
    labels: dict[str, str],
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": PAUSE_IMAGE,
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
            "priorityClassName": priority_class,
            "terminationGracePeriodSeconds": 0,
            **placement(owner),
        },
    }


def runner_pod(name: str, *, owner: str, scale_set: str, cpu: str, memory: str) -> dict[str, Any]:
    """A runner pod labelled as ARC labels them."""
    return real_pod(
        name,
        owner=owner,
        priority_class="arc-runner",
        cpu=cpu,
        memory=memory,
        labels={
            SCALE_SET_LABEL: scale_set,
            "actions-ephemeral-runner": "True",
            "app.kubernetes.io/component": "runner",
        },
    )


def workflow_pod(runner: str, *, owner: str, cpu: str, memory: str) -> dict[str, Any]:
    """The workflow pod ARC's kubernetes-mode hook creates for ``runner``."""
    return real_pod(
        f"{runner}-workflow",
        owner=owner,
        priority_class="arc-workflow",
        cpu=cpu,
        memory=memory,
        labels={"runner-pod": runner},
    )


# --- apiserver restart --------------------------------------------------------------------


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _stop_apiserver(cluster: LocalCluster, downtime: float) -> None:
    """SIGTERM kube-apiserver and wait for it to exit (it closes its watches within the
    harness's --shutdown-watch-termination-grace-period and exits in a second or two), then
    stay down for ``downtime`` seconds counted from its exit."""
    comp = next(c for c in cluster.components if c.name == "kube-apiserver")
    old = comp.proc
    assert old is not None
    os.killpg(old.pid, signal.SIGTERM)
    try:
        old.wait(timeout=30)
    except subprocess.TimeoutExpired:  # a graceful stop that hangs: not what a test wants
        os.killpg(old.pid, signal.SIGKILL)
        old.wait(timeout=5)
    time.sleep(downtime)


def _start_apiserver(cluster: LocalCluster) -> None:
    # From the event loop's (main) thread: the parent-death signal follows the *thread* that
    # forked, and a worker thread of asyncio.to_thread ends with the test's event loop.
    comp = next(c for c in cluster.components if c.name == "kube-apiserver")
    with comp.log.open("ab") as log:
        # The harness stops whatever comp.proc is at teardown, so the new process is its.
        comp.proc = subprocess.Popen(
            comp.argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cluster.workdir,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )


def _wait_apiserver_ready(cluster: LocalCluster) -> None:
    eventually_sync(
        lambda: cluster.rest.get("/readyz") == "ok",
        "kube-apiserver to come back",
        90,
        interval=0.2,
        ignore=(httpx.HTTPError, OSError, RuntimeError),
    )


async def restart_apiserver(cluster: LocalCluster, downtime: float = 2.0) -> int | None:
    """Stop kube-apiserver, keep it down for ``downtime`` seconds, start it again with the
    same flags (same etcd: resourceVersions carry over) and wait until it is ready. Returns
    the old process's exit status (0: it stopped by itself on SIGTERM; -9: it had to be
    killed)."""
    status = await stop_apiserver(cluster, downtime)
    await start_apiserver(cluster)
    return status


async def stop_apiserver(cluster: LocalCluster, downtime: float = 0.0) -> int | None:
    """Stop kube-apiserver (connections are refused from then on); return after
    ``downtime`` more seconds with the old process's exit status. Bring it back with
    :func:`start_apiserver`."""
    import pytest

    if not cluster.components:
        pytest.skip("restarting the apiserver needs a harness-started cluster")
    old = next(c for c in cluster.components if c.name == "kube-apiserver").proc
    await asyncio.to_thread(_stop_apiserver, cluster, downtime)
    return None if old is None else old.returncode


async def start_apiserver(cluster: LocalCluster) -> None:
    """Start kube-apiserver again with the same flags and wait until it is ready, and until
    the controller manager works again.

    After a long outage kube-controller-manager's watches are in backoff and it can take it
    tens of seconds to create a new namespace's `default` ServiceAccount; the test that
    restarted the apiserver waits for that here, so the next test's namespace does not."""
    _start_apiserver(cluster)
    await asyncio.to_thread(_wait_apiserver_ready, cluster)
    probe = await asyncio.to_thread(cluster.create_namespace, "after-restart", 180.0)
    await asyncio.to_thread(cluster.delete_namespace, probe)


# --- etcd compaction ----------------------------------------------------------------------


async def compact_etcd(cluster: LocalCluster) -> int:
    """Compact etcd at its current revision (what kube-apiserver does every 5 minutes), so a
    watch from any older resourceVersion gets 410 Gone. Returns the revision."""
    import pytest

    port = cluster.ports.get("etcd_client")
    if not port:
        pytest.skip("compacting etcd needs a harness-started cluster")
    base = f"http://127.0.0.1:{port}/v3"
    async with httpx.AsyncClient(timeout=10) as http:
        # Any range read answers with the store's current revision in its header.
        head = await http.post(f"{base}/kv/range", json={"key": "AA==", "limit": 1})
        head.raise_for_status()
        revision = int(head.json()["header"]["revision"])
        done = await http.post(
            f"{base}/kv/compaction", json={"revision": revision, "physical": True}
        )
        done.raise_for_status()
    return revision


async def wait_gc_knows_runner_sets(api: client.ApiClient, namespace: str) -> None:
    """Wait until the garbage collector follows ownerReferences to EphemeralRunnerSets.

    Its discovery of a newly installed CRD runs every 30 s, and dependents created before
    that are retried with a growing backoff. Proven the direct way: a throwaway runner set
    with a ConfigMap dependent is deleted until the dependent goes with it."""
    core = client.CoreV1Api(api)
    attempts = itertools.count(1)

    async def probe() -> bool:
        name = f"gc-probe-{next(attempts)}"
        owner = await create_runner_set(api, namespace, name, {"containers": []})
        ref = {
            "apiVersion": f"{ARC_GROUP}/{ARC_VERSION}",
            "kind": "EphemeralRunnerSet",
            "name": name,
            "uid": owner["metadata"]["uid"],
        }
        await core.create_namespaced_config_map(
            namespace, {"metadata": {"name": name, "ownerReferences": [ref]}}
        )
        await delete_runner_set(api, namespace, name)

        async def gone() -> bool:
            try:
                await core.read_namespaced_config_map(name, namespace)
            except ApiException as exc:
                if exc.status == 404:
                    return True
                raise
            return False

        with contextlib.suppress(WaitFailed):
            return await eventually(gone, f"ConfigMap {name} collected", 10, interval=0.5)
        return False

    await eventually(probe, "the garbage collector to follow EphemeralRunnerSet owners", 120)
