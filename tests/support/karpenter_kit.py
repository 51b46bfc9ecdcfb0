"""The capacity monitor on Karpenter-provisioned nodes: a scene (runner set, NodePools, one
monitor) and a timeline that samples what happens, for the Karpenter integration tests.

Every placeholder half and every real pod asks for 900m CPU / 1Gi: the general 2-CPU type
(1.9 CPU allocatable) holds two halves, the 4-CPU workflow type (3.9) holds four.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client

from capacity.settings import CapacitySettings
from capacity.settings_values import Resources, Toleration
from tests.support.monitor_scene import ROLE_LABEL, MonitorScene, ScaleSet
from tools.capacity_kit import (
    SCALE_SET_LABEL,
    create_ephemeral_runner,
    real_pod,
)
from tools.localcluster.karpenter import NODEPOOL_LABEL, Karpenter
from tools.localcluster.testkit import OWNER_KEY
from tools.sampling import Sampler

SCALE_SET = "linux-cpu"
RUNNER_SET = "linux-cpu-k8rp7"
LABEL = "linux.2xlarge"
HALF = {"cpu": "900m", "memory": "1Gi"}
POOL_KEY = "capacity-test/pool"

# Timings observed by the tests, printed at the end of the session (conftest).
TIMINGS: list[dict[str, Any]] = []


def record_timings(scenario: str, **values: float | int | None) -> None:
    TIMINGS.append(
        {
            "scenario": scenario,
            **{k: round(v, 2) if isinstance(v, float) else v for k, v in values.items()},
        }
    )


def selector(owner: str, pool: str) -> dict[str, str]:
    return {OWNER_KEY: owner, POOL_KEY: pool}


def toleration(owner: str) -> dict[str, str]:
    return {"key": OWNER_KEY, "operator": "Equal", "value": owner, "effect": "NoSchedule"}


def on_pool(owner: str, pool: str) -> dict[str, Any]:
    """Pod spec fields that put a pod on the nodes of the test's NodePool ``pool``."""
    return {"nodeSelector": selector(owner, pool), "tolerations": [toleration(owner)]}


def runner_template(owner: str, pool: str) -> dict[str, Any]:
    """The runner pod template of the test's EphemeralRunnerSet."""
    return {
        "containers": [
            {
                "name": "runner",
                "image": "ghcr.io/actions/actions-runner:latest",
                "resources": {"requests": dict(HALF)},
            }
        ],
        **on_pool(owner, pool),
    }


def settings(owner: str, workflow_pool: str, **overrides: Any) -> CapacitySettings:
    values: dict[str, Any] = {
        "enabled": True,
        "proactive_capacity": 1,
        "recalculate_interval": 1.0,
        "placeholder_ready_timeout": 60.0,
        "workflow_resources": Resources(requests=HALF),
        "workflow_node_selector": selector(owner, workflow_pool),
        "workflow_tolerations": [Toleration.model_validate(toleration(owner))],
        "downscale_delay": 0.0,
        "max_pending_pairs": 4,
    }
    values.update(overrides)
    return CapacitySettings(**values)


def pod_on_pool(
    name: str,
    owner: str,
    pool: str,
    *,
    priority_class: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    pod = real_pod(
        name,
        owner=owner,
        priority_class=priority_class or "arc-runner",
        labels=labels or {},
        **HALF,
    )
    pod["spec"].update(on_pool(owner, pool))
    if priority_class is None:
        del pod["spec"]["priorityClassName"]
    if annotations:
        pod["metadata"]["annotations"] = annotations
    return pod


@dataclass
class Sample:
    at: float
    advertised: int
    nodeclaims: int
    ready_nodes: int
    running: dict[str, int]  # role -> Running, non-terminating placeholders
    pending: int


@dataclass
class Timeline(Sampler):
    """Samples the cluster every ``interval`` s while a test runs: what the monitor
    advertises (read first), then NodeClaims, Ready nodes and placeholders of the test."""

    scene: Scene
    interval: float = 0.25
    samples: list[Sample] = field(default_factory=list)
    nodeclaims_seen: set[str] = field(default_factory=set)
    placeholders_seen: set[str] = field(default_factory=set)

    async def sample(self) -> Sample:
        s = self.scene
        at = time.monotonic()
        advertised = (s.run.advertised if s.run else None) or 0
        claims = await asyncio.to_thread(s.all_nodeclaims)
        self.nodeclaims_seen |= {c["metadata"]["name"] for c in claims}
        nodes = await asyncio.to_thread(s.all_nodes)
        ready = sum(1 for n in nodes if _ready(n))
        pods = await s.placeholders()
        self.placeholders_seen |= {p.metadata.name for p in pods}
        running: dict[str, int] = {}
        for p in pods:
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None:
                role = p.metadata.labels[ROLE_LABEL]
                running[role] = running.get(role, 0) + 1
        pending = sum(1 for p in pods if p.status.phase == "Pending")
        sample = Sample(at, advertised, len(claims), ready, running, pending)
        self.samples.append(sample)
        return sample

    def first(self, what: Callable[[Sample], bool], since: float = 0.0) -> float | None:
        return next((x.at for x in self.samples if x.at >= since and what(x)), None)

    def never_above_running_pairs(self) -> None:
        """The model's promise: nothing advertised that is not Running (sampled: the value
        is read before the pods, and in these phases Running pods only increase)."""
        for x in self.samples:
            pairs = min(
                x.running.get("placeholder-runner", 0), x.running.get("placeholder-workflow", 0)
            )
            assert x.advertised <= pairs + self.scene.real_jobs, (
                f"advertised {x.advertised} with {x.running} Running at {x.at}"
            )


def _ready(node: dict[str, Any]) -> bool:
    conds = node.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


class Scene(MonitorScene):
    """One test's runner set, NodePools and monitor on Karpenter."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        karpenter: Karpenter,
        nodepools: Callable[[dict[str, Any]], str],
    ) -> None:
        super().__init__(api, namespace, ScaleSet(SCALE_SET, RUNNER_SET, ("self-hosted", LABEL)))
        self.karpenter = karpenter
        self._nodepools = nodepools
        self.pools: list[str] = []
        self.real_jobs = 0

    def pool_name(self, role: str) -> str:
        return f"{role}-{self.ns}"

    def nodepool(self, manifest: dict[str, Any]) -> str:
        self.pools.append(self._nodepools(manifest))
        return self.pools[-1]

    def all_nodeclaims(self) -> list[dict[str, Any]]:
        return [c for p in self.pools for c in self.karpenter.nodeclaims(p)]

    def all_nodes(self) -> list[dict[str, Any]]:
        return [n for p in self.pools for n in self.karpenter.nodes(p)]

    def node_pool_of(self, node_name: str) -> str | None:
        for n in self.all_nodes():
            if n["metadata"]["name"] == node_name:
                return str(n["metadata"]["labels"].get(NODEPOOL_LABEL))
        return None

    async def job(self, runner: str, pool: str) -> None:
        """What ARC does when a job is assigned: an EphemeralRunner and its runner pod."""
        await create_ephemeral_runner(self.api, self.ns, runner, SCALE_SET, phase="Running")
        labels = {
            SCALE_SET_LABEL: SCALE_SET,
            "actions-ephemeral-runner": "True",
            "app.kubernetes.io/component": "runner",
        }
        await self.create(
            pod_on_pool(runner, self.ns, pool, priority_class="arc-runner", labels=labels)
        )
        self.real_jobs += 1
