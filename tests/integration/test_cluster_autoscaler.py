"""The capacity model on the real cluster-autoscaler (1.36, its kwok cloud provider) on the
local control plane: opt-in (``make test-cluster-autoscaler``, CLUSTER_AUTOSCALER_SRC; see
tests/support/cluster_autoscaler.py), skipped with one line without a CA source tree.

Each test starts its own CA with two node groups of 4-CPU nodes reserved for its namespace,
``runners`` and ``workflows``; the two placeholder halves (1 CPU each) select one group each.
CA runs with short timers (scan 1 s, ``--scale-down-unneeded-time`` 5 s instead of 10
minutes) so that scale-down happens within a test. The numbers each test prints are what the
docs/benchmarks.md's table reports.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from capacity.settings import CapacitySettings
from capacity.settings_pools import ClusterAutoscalerSettings
from capacity.settings_values import Resources
from tests.support import cluster_autoscaler as ca_kit
from tests.support.cluster_autoscaler import GROUP_LABEL, TO_BE_DELETED, ClusterAutoscaler, Group
from tests.support.monitor_scene import MonitorScene, ScaleSet
from tools.capacity_kit import (
    ROOT,
    apply_ladder,
    create_runner_set,
    runner_pod,
    runner_pod_spec,
)
from tools.localcluster import LocalCluster
from tools.localcluster.testkit import (
    OWNER_KEY,
    node_reservation,
    pod_manifest,
)
from tools.waits import eventually

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(ca_kit.skip_reason() is not None, reason=ca_kit.skip_reason() or ""),
]

SCALE_SET = "linux-cpu"
RUNNER_SET = "linux-cpu-x7k2p"
HALF = {"cpu": "1", "memory": "1Gi"}
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"


def report(what: str, **numbers: float) -> None:
    print(json.dumps({"measure": what, **{k: round(v, 2) for k, v in numbers.items()}}))


@pytest.fixture(scope="module")
def ca_binary() -> Any:
    return ca_kit.ensure_built()


@pytest.fixture
def start_ca(
    local_cluster: LocalCluster, namespace: str, ca_binary: Any
) -> Iterator[Callable[..., ClusterAutoscaler]]:
    started: list[ClusterAutoscaler] = []

    def start(*groups: Group, flags: tuple[str, ...] = ()) -> ClusterAutoscaler:
        ca = ClusterAutoscaler(
            local_cluster,
            namespace,
            groups or (Group("runners"), Group("workflows")),
            extra_flags=flags,
        )
        started.append(ca)
        ca.start(ca_binary)
        ca_kit.wait_status(ca)
        return ca

    yield start
    for ca in started:
        ca.stop()


class Scene(MonitorScene):
    def __init__(self, api: client.ApiClient, namespace: str, cluster: LocalCluster) -> None:
        super().__init__(api, namespace, ScaleSet(SCALE_SET, RUNNER_SET, ("self-hosted",)))
        self.cluster = cluster

    def spare(self, group: str, cpu: str = "4") -> str:
        """A node by hand, in no node group: room CA may move pods to. An empty node is a
        removal candidate itself and no destination for CA, so a small pod that CA cannot
        move (no owner) keeps it."""
        name = f"spare-{self.ns}-{group}"[:63]
        reservation = node_reservation(self.ns)
        reservation["labels"][GROUP_LABEL] = group
        self.cluster.add_node(name, cpu=cpu, memory="8Gi", pods=50, **reservation)
        pin = pod_manifest(f"pin-{group}", owner=self.ns)
        pin["spec"]["nodeName"] = name
        self.cluster.rest.request("POST", f"/api/v1/namespaces/{self.ns}/pods", pin)
        return name


@pytest.fixture
async def scene(
    kube_api: client.ApiClient, namespace: str, local_cluster: LocalCluster
) -> AsyncIterator[Scene]:
    await apply_ladder(kube_api)
    s = Scene(kube_api, namespace, local_cluster)
    await create_runner_set(kube_api, namespace, RUNNER_SET, runner_pod_spec(namespace, **HALF))
    yield s
    await s.crash_runs()
    for group in ("runners", "workflows"):
        name = f"spare-{namespace}-{group}"[:63]
        if local_cluster.rest.exists(f"/api/v1/nodes/{name}"):
            local_cluster.remove_node(name)


def settings(ns: str, **overrides: Any) -> CapacitySettings:
    values: dict[str, Any] = {
        "enabled": True,
        "proactive_capacity": 1,
        "recalculate_interval": 1.0,
        "placeholder_ready_timeout": 60.0,
        "workflow_resources": Resources(requests=HALF),
        "downscale_delay": 0.0,
        "max_pending_pairs": 2,
        "node_checks": True,
        "node_selector": {OWNER_KEY: ns, GROUP_LABEL: "runners"},
        "workflow_node_selector": {OWNER_KEY: ns, GROUP_LABEL: "workflows"},
    }
    values.update(overrides)
    return CapacitySettings(**values)


def taints(node: dict[str, Any]) -> set[str]:
    return {t["key"] for t in node["spec"].get("taints") or []}


# --- the tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("annotated", [True, False], ids=["safe-to-evict", "annotation-removed"])
async def test_pairs_scale_up_both_groups_and_an_idle_placeholder_node_goes(
    scene: Scene, start_ca: Callable[..., ClusterAutoscaler], annotated: bool
) -> None:
    ca = start_ca()
    started = time.monotonic()
    run = scene.start(settings(scene.ns))
    await run.advertises(1, within=120)
    scale_up = time.monotonic() - started
    # Both halves made CA add a node, one per group (the runner half at priority -10, on
    # CA's default expendable-pods cutoff, counts).
    (runner_node,) = ca.nodes("runners")
    (workflow_node,) = ca.nodes("workflows")
    placed = {
        p.metadata.labels["capacity-listener.dev/role"]: p for p in await scene.placeholders()
    }
    assert placed["placeholder-runner"].spec.node_name == runner_node["metadata"]["name"]
    assert placed["placeholder-workflow"].spec.node_name == workflow_node["metadata"]["name"]
    report("scale-up", pair_advertised_after_start_s=scale_up)

    if not annotated:
        for pod in placed.values():
            await scene.core.patch_namespaced_pod(
                pod.metadata.name, scene.ns, {"metadata": {"annotations": {SAFE_TO_EVICT: None}}}
            )

    # Room elsewhere: CA's node holds one 1-CPU placeholder of 4 CPUs (25 %, under the 50 %
    # threshold) that fits on the spare, so it is unneeded.
    spare = scene.spare("runners")
    added = time.monotonic()
    name = runner_node["metadata"]["name"]

    if not annotated:
        # CA says why it keeps the node, again and again; it is never tainted or removed.
        pod = placed["placeholder-runner"].metadata.name
        line = f"Node {name} cannot be removed: {scene.ns}/{pod} is not replicated"

        async def refused() -> bool:
            return ca.count(line) >= 5

        await eventually(refused, "CA refusing the node 5 times", 120)
        node = scene.cluster.rest.get(f"/api/v1/nodes/{name}")
        assert TO_BE_DELETED not in taints(node)
        assert run.advertised == 1
        await run.close()
        return

    tainted_at: list[float] = []

    async def tainted_or_gone() -> bool:
        try:
            node = scene.cluster.rest.get(f"/api/v1/nodes/{name}")
        except Exception:
            return True
        if TO_BE_DELETED in taints(node) and not tainted_at:
            tainted_at.append(time.monotonic())
        return bool(tainted_at)

    await eventually(tainted_or_gone, "CA tainting its idle runner node", 180, interval=0.05)
    assert tainted_at, "the node went without the taint being seen"

    async def gone() -> bool:
        return not scene.cluster.rest.exists(f"/api/v1/nodes/{name}")

    await eventually(gone, "CA removing its idle runner node", 120)
    removed = time.monotonic()
    dropped = run.first_time(0, tainted_at[0])
    assert dropped is not None
    # The pair came back on the node that stays.
    await run.advertises(1, within=60)
    on = {p.spec.node_name for p in await scene.placeholders() if p.status.phase == "Running"}
    assert spare in on
    report(
        "scale-down",
        node_removed_after_room_appeared_s=removed - added,
        taint_after_room_appeared_s=tainted_at[0] - added,
        header_drop_after_taint_s=dropped - tainted_at[0],
    )
    await run.close()


@pytest.mark.parametrize("pdb", [True, False], ids=["pdb", "no-pdb"])
async def test_a_running_runner_pod_under_the_pdb_is_not_evicted(
    scene: Scene, start_ca: Callable[..., ClusterAutoscaler], pdb: bool
) -> None:
    # Worst case for the runner: CA treats pods of custom controllers (an EphemeralRunner)
    # as replicated, so only the PDB stands between its drain and the job.
    ca = start_ca(flags=("--skip-nodes-with-custom-controller-pods=false",))
    if pdb:
        body = yaml.safe_load((ROOT / "deploy" / "pdb-runners.yaml").read_text())
        await client.PolicyV1Api(scene.api).create_namespaced_pod_disruption_budget(scene.ns, body)
    crd = client.CustomObjectsApi(scene.api)
    runner = await crd.create_namespaced_custom_object(
        "actions.github.com",
        "v1alpha1",
        scene.ns,
        "ephemeralrunners",
        {
            "apiVersion": "actions.github.com/v1alpha1",
            "kind": "EphemeralRunner",
            "metadata": {"name": "job-runner"},
            "spec": {
                "githubConfigUrl": "https://github.com/acme",
                "githubConfigSecret": "github-config",
                "runnerScaleSetId": 1,
                "spec": {"containers": [{"name": "runner", "image": "pause"}]},
            },
        },
    )
    pod = runner_pod("job-runner", owner=scene.ns, scale_set=SCALE_SET, **HALF)
    pod["spec"]["nodeSelector"][GROUP_LABEL] = "runners"
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "actions.github.com/v1alpha1",
            "kind": "EphemeralRunner",
            "name": "job-runner",
            "uid": runner["metadata"]["uid"],
            "controller": True,
        }
    ]
    await scene.core.create_namespaced_pod(scene.ns, pod)

    async def running() -> bool:
        got = await scene.core.read_namespaced_pod("job-runner", scene.ns)
        return bool(got.status.phase == "Running")

    await eventually(running, "CA's node for the runner pod", 120)
    (node,) = ca.nodes("runners")
    name = node["metadata"]["name"]
    scene.spare("runners")  # room to move it to: the node is unneeded

    if pdb:
        line = (
            f"Node {name} cannot be removed: not enough pod disruption budget to move "
            f"{scene.ns}/job-runner"
        )

        async def refused() -> bool:
            return ca.count(line) >= 5

        await eventually(refused, "CA refusing to drain the runner's node 5 times", 120)
        got = await scene.core.read_namespaced_pod("job-runner", scene.ns)
        assert got.status.phase == "Running"
        assert got.metadata.deletion_timestamp is None
    else:

        async def evicted() -> bool:
            pods = await scene.core.list_namespaced_pod(scene.ns)
            return not any(
                p.metadata.name == "job-runner" and p.metadata.deletion_timestamp is None
                for p in pods.items
            )

        await eventually(evicted, "the unprotected runner pod evicted by CA", 120)


async def test_a_full_group_keeps_pairs_pending_and_the_header_down(
    scene: Scene, start_ca: Callable[..., ClusterAutoscaler]
) -> None:
    # The runner group may have one node (room for four runner halves); five pairs wanted.
    ca = start_ca(Group("runners", max_size=1), Group("workflows"))
    groups = ClusterAutoscalerSettings(
        enabled=True, runner=["runners"], workflow=["workflows"], status_namespace=scene.ns
    )
    run = scene.start(
        settings(scene.ns, proactive_capacity=5, max_pending_pairs=3, cluster_autoscaler=groups)
    )
    await run.advertises(4, within=180)

    async def full_seen() -> bool:
        return run.metric("gha_capacity_node_group_headroom", node_group="runners") == 0

    await eventually(full_seen, "CA's status read: the runner group full", 60)

    async def held() -> bool:
        return run.metric("gha_capacity_nodepool_held_pairs") >= 1

    await eventually(held, "a pair held back by the full group", 60)
    pending = [p for p in await scene.placeholders() if p.status.phase == "Pending"]
    assert len(pending) <= 2  # at most the one probe pair
    assert len(ca.nodes("runners")) == 1
    assert max(v for _, v in run.values) == 4
    await run.close()
