"""The priority ladder on the real kube-scheduler (docs/capacity-model.md §2).

    20  arc-workflow          workflow pods
    10  placeholder-workflow  preemptionPolicy Never
     0  arc-runner            runner pods
   -10  placeholder-runner    preemptionPolicy Never

The hazard: when a workflow pod needs room, the scheduler's preemption picks victims of the
*lowest* priority first. On a node holding a running runner pod (0) and a workflow placeholder
(10), it keeps the placeholder and evicts the runner pod — killing a job — unless the runner
pod is protected by a PodDisruptionBudget, which the scheduler tries not to violate (it
reprieves PDB-protected victims first and prefers nodes with fewer violations).

These tests use the shipped manifests (priorityclasses/ and deploy/pdb-runners.yaml), so they
prove what users install, and they assert the outcome both ways: the failure without the
budget and the fix with it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tools.capacity_kit import apply_ladder, read_pod
from tools.localcluster.testkit import pod_manifest
from tools.waits import eventually

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
RUNNER_LABELS = {"actions-ephemeral-runner": "True", "app.kubernetes.io/component": "runner"}


@pytest.fixture
async def ladder(kube_api: client.ApiClient) -> dict[str, int]:
    """The four PriorityClasses from priorityclasses/, created once per cluster."""
    return await apply_ladder(kube_api)


def _runner_pdb_manifest() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load((ROOT / "deploy" / "pdb-runners.yaml").read_text())
    return manifest


@pytest.fixture
async def runner_pdb(kube_api: client.ApiClient, namespace: str) -> str:
    """deploy/pdb-runners.yaml applied to the test's namespace."""
    body = _runner_pdb_manifest()
    policy = client.PolicyV1Api(kube_api)
    await policy.create_namespaced_pod_disruption_budget(namespace, body)
    name: str = body["metadata"]["name"]
    return name  # deleted with the namespace


class Scene:
    """Creates ladder pods on the test's reserved nodes and reports what survived."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.core = core
        self.ns = namespace

    async def create(
        self, name: str, priority_class: str, *, cpu: str = "1", runner: bool = False
    ) -> None:
        manifest = pod_manifest(
            name,
            owner=self.ns,
            cpu=cpu,
            priority_class=priority_class,
            labels=RUNNER_LABELS if runner else None,
        )
        await self.core.create_namespaced_pod(self.ns, manifest)

    async def running(self, *names: str) -> dict[str, str]:
        """Wait until every named pod is Running; return pod → node."""
        nodes: dict[str, str] = {}
        for name in names:

            async def check(name: str = name) -> client.V1Pod | None:
                pod = await read_pod(self.core, self.ns, name)
                return pod if pod is not None and pod.status.phase == "Running" else None

            pod = await eventually(check, f"{name} Running", within=30)
            nodes[name] = pod.spec.node_name
        return nodes

    async def gone(self, name: str) -> None:
        async def check() -> bool:
            pod = await read_pod(self.core, self.ns, name)
            return pod is None

        await eventually(check, f"{name} preempted", within=30)

    async def alive(self, name: str) -> bool:
        pod = await read_pod(self.core, self.ns, name)
        return pod is not None and pod.metadata.deletion_timestamp is None


@pytest.fixture
def scene(kube_api: client.ApiClient, namespace: str, ladder: dict[str, int]) -> Scene:
    del ladder
    return Scene(client.CoreV1Api(kube_api), namespace)


async def test_hazard_workflow_pod_evicts_running_runner_on_same_node(
    scene: Scene, fake_nodes: Callable[..., dict[str, Any]]
) -> None:
    """Without a budget the workflow pod takes the runner pod's place, not the placeholder's."""
    fake_nodes(cpu="2", memory="8Gi")
    await scene.create("runner", "arc-runner", runner=True)
    await scene.create("ph-workflow", "placeholder-workflow")
    await scene.running("runner", "ph-workflow")

    await scene.create("workflow", "arc-workflow")
    await scene.gone("runner")
    await scene.running("workflow")
    assert await scene.alive("ph-workflow"), "the placeholder should have survived"


async def test_runner_pdb_steers_preemption_onto_the_placeholder_same_node(
    scene: Scene, fake_nodes: Callable[..., dict[str, Any]], runner_pdb: str
) -> None:
    del runner_pdb
    fake_nodes(cpu="2", memory="8Gi")
    await scene.create("runner", "arc-runner", runner=True)
    await scene.create("ph-workflow", "placeholder-workflow")
    await scene.running("runner", "ph-workflow")

    await scene.create("workflow", "arc-workflow")
    await scene.gone("ph-workflow")
    await scene.running("workflow")
    assert await scene.alive("runner"), "the budget should have protected the runner pod"


async def test_hazard_across_nodes_and_the_budget_fix(
    scene: Scene, fake_nodes: Callable[..., dict[str, Any]], kube_api: client.ApiClient
) -> None:
    """Runner pod alone on node A, workflow placeholder alone on node B (both full).

    Without a budget the scheduler prefers the node whose highest victim priority is lowest:
    node A, the runner. With the budget it prefers the node with no violation: node B.
    """
    for _ in range(2):
        fake_nodes(cpu="1", memory="4Gi")
    await scene.create("runner-a", "arc-runner", runner=True)
    await scene.create("ph-workflow-b", "placeholder-workflow")
    placed = await scene.running("runner-a", "ph-workflow-b")
    assert placed["runner-a"] != placed["ph-workflow-b"]

    await scene.create("workflow-1", "arc-workflow")
    await scene.gone("runner-a")
    assert (await scene.running("workflow-1"))["workflow-1"] == placed["runner-a"]
    assert await scene.alive("ph-workflow-b")

    # Reset: a new runner on the node the workflow pod did not take, then the budget.
    await scene.core.delete_namespaced_pod("workflow-1", scene.ns, grace_period_seconds=0)
    await scene.gone("workflow-1")
    await scene.create("runner-c", "arc-runner", runner=True)
    await scene.running("runner-c")
    body = _runner_pdb_manifest()
    await client.PolicyV1Api(kube_api).create_namespaced_pod_disruption_budget(scene.ns, body)

    await scene.create("workflow-2", "arc-workflow")
    await scene.gone("ph-workflow-b")
    await scene.running("workflow-2")
    assert await scene.alive("runner-c"), "the budget should have protected the runner pod"


async def test_workflow_pod_prefers_a_runner_placeholder_over_its_workflow_placeholder(
    scene: Scene, fake_nodes: Callable[..., dict[str, Any]]
) -> None:
    """A workflow pod evicts the lowest victim it can: another slot's placeholder-runner (-10)
    rather than the workflow placeholder (10) reserved for it. The monitor must count sides
    separately to stay right after this (tests/integration/test_capacity_*)."""
    fake_nodes(cpu="2", memory="8Gi")
    await scene.create("ph-runner", "placeholder-runner")
    await scene.create("ph-workflow", "placeholder-workflow")
    await scene.running("ph-runner", "ph-workflow")

    await scene.create("workflow", "arc-workflow")
    await scene.gone("ph-runner")
    await scene.running("workflow")
    assert await scene.alive("ph-workflow")


async def test_runner_pod_cannot_evict_a_workflow_placeholder(
    scene: Scene, fake_nodes: Callable[..., dict[str, Any]]
) -> None:
    """The runner pod (0) may only take placeholder-runner (-10) room; the workflow
    placeholder (10) keeps protecting the workflow pod's resources during the hand-off."""
    fake_nodes(cpu="2", memory="8Gi")
    await scene.create("ph-runner", "placeholder-runner")
    await scene.create("ph-workflow", "placeholder-workflow")
    await scene.running("ph-runner", "ph-workflow")

    await scene.create("runner", "arc-runner", runner=True)
    await scene.gone("ph-runner")
    await scene.running("runner")
    assert await scene.alive("ph-workflow")
