"""Karpenter (the provider-neutral core, kwok cloud provider) on the local control plane.

``start_karpenter(cluster, artifacts)`` installs Karpenter's CRDs, a static tainted system node
(with no node at all the scheduler backs off for long after "no nodes available", which delays
every pod Karpenter provisions for), a default ``KWOKNodeClass``, a small instance-types file,
and starts the binary as one more component of the cluster (stopped by PID with the rest).

Karpenter's Nodes carry kwok's annotation, so the harness's kwok makes them Ready and runs
their pods. The binary is our own ``main`` (``go/karpenter``): a test takes capacity away at
run time with ``Karpenter.set_capacity`` (the file it writes is read on every call).

NodePools are per test (``nodepool_manifest``): they put their test's reservation label and
taint on every node they make, so the pods of ``testkit.placement(owner)`` land only there.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from capacity.settings_values import parse_duration

from .build import KarpenterArtifacts
from .harness import STATE_FILE, LocalCluster
from .ports import free_ports
from .rest import KubeError, wait_for
from .testkit import OWNER_KEY

KARPENTER_GROUP = "karpenter.sh"
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"
NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
NODECLASSES = "/apis/karpenter.kwok.sh/v1alpha1/kwoknodeclasses"
NODE_CLASS = "default"
SYSTEM_NODE = "localcluster-system"
SYSTEM_TAINT = {"key": "localcluster.test/system", "value": "true", "effect": "NoSchedule"}
NODEPOOL_LABEL = "karpenter.sh/nodepool"
DISRUPTED_TAINT = "karpenter.sh/disrupted"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE = "test-zone-a"
# Slack on top of the launch and registration delays before a NodeClaim deleted unregistered
# can no longer produce a Node (the provider retries its create with a backoff).
LATE_NODE_MARGIN = 5.0

# A few general types and one that only workflow pools list. Price per CPU is the same for the
# general ones, so Karpenter's choice follows packing, not price. Allocatable is capacity
# minus the kwok provider's fixed overhead (100m CPU, 10Mi).
GENERAL_TYPES = ("c-2x", "c-4x")
WORKFLOW_TYPE = "w-4x"
_TYPES: tuple[tuple[str, str, str, float], ...] = (
    ("c-2x", "2", "4Gi", 0.10),
    ("c-4x", "4", "8Gi", 0.20),
    (WORKFLOW_TYPE, "4", "16Gi", 0.40),
)


def instance_types() -> list[dict[str, Any]]:
    """The instance-types file's content (the kwok provider's JSON shape)."""
    return [
        {
            "name": name,
            "architecture": "amd64",
            "operatingSystems": ["linux"],
            "resources": {
                "cpu": cpu,
                "memory": memory,
                "pods": "20",
                "ephemeral-storage": "20Gi",
            },
            "offerings": [
                {
                    "Price": price,
                    "Available": True,
                    "Requirements": [
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": ["on-demand"],
                        },
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [ZONE]},
                    ],
                }
            ],
        }
        for name, cpu, memory, price in _TYPES
    ]


def nodepool_manifest(
    name: str,
    *,
    owner: str,
    types: Sequence[str],
    labels: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    consolidate_after: str = "Never",
    consolidation_policy: str = "WhenEmptyOrUnderutilized",
    budgets: Sequence[Mapping[str, str]] = ({"nodes": "100%"},),
) -> dict[str, Any]:
    """A NodePool whose nodes are reserved for ``owner`` (label + NoSchedule taint) and
    offer only ``types``."""
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"labels": {OWNER_KEY: owner, **(labels or {})}},
            "spec": {
                "nodeClassRef": {
                    "group": "karpenter.kwok.sh",
                    "kind": "KWOKNodeClass",
                    "name": NODE_CLASS,
                },
                "requirements": [
                    {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": list(types)},
                    {
                        "key": "karpenter.sh/capacity-type",
                        "operator": "In",
                        "values": ["on-demand"],
                    },
                ],
                "taints": [{"key": OWNER_KEY, "value": owner, "effect": "NoSchedule"}],
                "expireAfter": "Never",
            },
        },
        "disruption": {
            "consolidationPolicy": consolidation_policy,
            "consolidateAfter": consolidate_after,
            "budgets": [dict(b) for b in budgets],
        },
    }
    if limits:
        spec["limits"] = dict(limits)
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": spec,
    }


@dataclass
class Karpenter:
    """A running Karpenter and the knobs tests turn."""

    cluster: LocalCluster
    capacity_file: Path
    pid: int
    # {"low", "high", "seed"}: each launch waits a delay drawn from [low, high] s (our main).
    launch_delay: dict[str, float] | None = field(default=None)
    # Seconds a type stays reported unavailable after a launch of it was refused (0: never).
    insufficient_ttl: float = 0.0
    # The last capacity written, kept when only the launch delay changes.
    _unavailable: list[str] = field(default_factory=list, init=False, repr=False)
    _insufficient: list[str] = field(default_factory=list, init=False, repr=False)

    def set_capacity(
        self, *, unavailable: Iterable[str] = (), insufficient: Iterable[str] = ()
    ) -> None:
        """Tell the fake cloud which types it cannot supply. ``unavailable``: offerings
        reported unavailable (Karpenter does not try them); ``insufficient``: launches fail
        with Karpenter's insufficient-capacity error. Applies from Karpenter's next call.
        The launch delay set with ``set_launch_delay`` is kept."""
        body: dict[str, Any] = {
            "unavailable": sorted(unavailable),
            "insufficientCapacity": sorted(insufficient),
        }
        if self.launch_delay is not None:
            body["launchDelay"] = self.launch_delay
        if self.insufficient_ttl > 0:
            body["insufficientCapacityTTL"] = self.insufficient_ttl
        self._unavailable, self._insufficient = body["unavailable"], body["insufficientCapacity"]
        tmp = self.capacity_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(body))
        tmp.replace(self.capacity_file)  # never a half-written file

    def set_launch_delay(self, low: float, high: float, seed: int) -> None:
        """Every launch that gets capacity boots for a delay drawn uniformly from [low, high]
        seconds (seeded) before its Node registers: a per-node provisioning delay, which the
        KWOKNodeClass's single ``nodeRegistrationDelay`` cannot give. The launch itself
        returns at once, as a cloud's does, so Karpenter goes on provisioning while nodes
        boot. ``high`` 0: none."""
        self.launch_delay = None if high <= 0 else {"low": low, "high": high, "seed": seed}
        self.set_capacity(unavailable=self._unavailable, insufficient=self._insufficient)

    def set_insufficient_capacity_ttl(self, seconds: float) -> None:
        """After a launch of a type is refused, report the type unavailable for ``seconds``,
        as a real provider caches offerings that ran out (AWS: 180 s), so Karpenter does not
        retry it on every provisioning pass. 0: never (every pass retries)."""
        self.insufficient_ttl = max(0.0, seconds)
        self.set_capacity(unavailable=self._unavailable, insufficient=self._insufficient)

    def set_registration_delay(self, delay: str) -> None:
        """How long the fake cloud takes from launch to a Node object (e.g. "0s", "20s")."""
        self.cluster.rest.request(
            "PATCH",
            f"{NODECLASSES}/{NODE_CLASS}",
            {"spec": {"nodeRegistrationDelay": delay}},
            content_type="application/merge-patch+json",
        )

    def ensure_node_class(self, name: str, registration_delay: str) -> None:
        """A KWOKNodeClass ``name`` whose nodes register ``registration_delay`` after launch
        (on top of the launch delay): a NodePool that references it is a slower pool, e.g.
        GPU nodes with a long boot and image pull."""
        body = {
            "apiVersion": "karpenter.kwok.sh/v1alpha1",
            "kind": "KWOKNodeClass",
            "metadata": {"name": name},
            "spec": {"nodeRegistrationDelay": registration_delay},
        }
        try:
            self.cluster.rest.request("POST", NODECLASSES, body)
        except KubeError as exc:
            if exc.status != 409:
                raise
            self.cluster.rest.request(
                "PATCH",
                f"{NODECLASSES}/{name}",
                {"spec": body["spec"]},
                content_type="application/merge-patch+json",
            )

    def create_nodepool(self, manifest: Mapping[str, Any]) -> str:
        self.cluster.rest.request("POST", NODEPOOLS, dict(manifest))
        return str(manifest["metadata"]["name"])

    def patch_nodepool(self, name: str, patch: Mapping[str, Any]) -> None:
        self.cluster.rest.request(
            "PATCH",
            f"{NODEPOOLS}/{name}",
            dict(patch),
            content_type="application/merge-patch+json",
        )

    def nodes(self, nodepool: str) -> list[dict[str, Any]]:
        """The Nodes Karpenter made for ``nodepool`` (any state)."""
        found = self.cluster.rest.request(
            "GET", "/api/v1/nodes", params={"labelSelector": f"{NODEPOOL_LABEL}={nodepool}"}
        )
        return list(found.get("items", []))

    def nodeclaims(self, nodepool: str) -> list[dict[str, Any]]:
        found = self.cluster.rest.request(
            "GET", NODECLAIMS, params={"labelSelector": f"{NODEPOOL_LABEL}={nodepool}"}
        )
        return list(found.get("items", []))

    def delete_nodepool(self, name: str, timeout: float = 120.0) -> None:
        """Delete a NodePool and wait until Karpenter has removed its nodes, including the
        late Nodes of NodeClaims deleted before they registered (see ``_delete_node``)."""
        try:
            self.cluster.rest.request("DELETE", f"{NODEPOOLS}/{name}")
        except KubeError as exc:
            if exc.status != 404:
                raise
        # NodeClaim name -> until when its Node may still appear (wall clock), for every
        # NodeClaim seen before it registered; listed before the delete, which removes an
        # unregistered NodeClaim at once.
        unregistered: dict[str, float] = {}
        window = self._launch_window()

        def note_unregistered(claims: list[dict[str, Any]]) -> None:
            for claim in claims:
                if not (claim.get("status") or {}).get("nodeName"):
                    created = timestamp(claim["metadata"].get("creationTimestamp")) or time.time()
                    unregistered.setdefault(claim["metadata"]["name"], created + window)

        note_unregistered(self.nodeclaims(name))
        # The garbage collector would delete the pool's NodeClaims (they are its dependents),
        # but only once its discovery has seen Karpenter's CRDs, up to 30 s after they were
        # installed. Deleting them directly starts Karpenter's termination at once.
        self.cluster.rest.request(
            "DELETE", NODECLAIMS, params={"labelSelector": f"{NODEPOOL_LABEL}={name}"}
        )

        def removed() -> bool:
            claims = self.nodeclaims(name)
            note_unregistered(claims)
            if claims:
                return False
            nodes = self.nodes(name)
            for node in nodes:
                self._delete_node(node["metadata"]["name"])
            now = time.time()
            return not nodes and all(until <= now for until in unregistered.values())

        wait_for(removed, timeout, f"nodes of NodePool {name} removed")

    def _launch_window(self) -> float:
        """The longest a launch can take from NodeClaim to Node here: the launch delay's upper
        bound, the longest registration delay of any NodeClass, and a margin for a loaded
        machine."""
        launch = self.launch_delay["high"] if self.launch_delay else 0.0
        classes = self.cluster.rest.request("GET", NODECLASSES).get("items", [])
        registration = max(
            (parse_duration(c["spec"].get("nodeRegistrationDelay") or "0s") for c in classes),
            default=0.0,
        )
        return launch + registration + LATE_NODE_MARGIN

    def _delete_node(self, node: str) -> None:
        # The kwok cloud provider creates a launched NodeClaim's Node in a goroutine after the
        # registration delay, whether or not the NodeClaim still exists by then; nothing in
        # Karpenter removes such a Node (a real cloud's garbage collection would terminate the
        # instance). Only the pool's own Nodes with no NodeClaim left get here.
        try:
            self.cluster.rest.request("DELETE", f"/api/v1/nodes/{node}")
        except KubeError as exc:
            if exc.status != 404:
                raise

    def check_alive(self) -> None:
        """Raise ClusterError if Karpenter has exited: without it no node comes or goes,
        and a run would go on measuring a cluster that cannot scale."""
        self.cluster.check_alive("karpenter")

    def log_tail(self, lines: int = 30) -> str:
        comp = next(c for c in self.cluster.components if c.name == "karpenter")
        return comp.log_tail(lines)


def _ensure(cluster: LocalCluster, path: str, body: Mapping[str, Any]) -> None:
    try:
        cluster.rest.request("POST", path, dict(body))
    except KubeError as exc:
        if exc.status != 409:
            raise


def start_karpenter(
    cluster: LocalCluster,
    art: KarpenterArtifacts,
    *,
    registration_delay: str = "0s",
    log_level: str = "info",
) -> Karpenter:
    """Install what Karpenter needs on ``cluster`` and start it as one of its components."""
    if cluster.log_dir is None:
        raise RuntimeError("Karpenter runs only on a cluster this process started")
    cluster.install_crds(art.crd_dir)
    if not cluster.rest.exists(f"/api/v1/nodes/{SYSTEM_NODE}"):
        cluster.add_node(SYSTEM_NODE, cpu="2", memory="4Gi", taints=[SYSTEM_TAINT])
    _ensure(
        cluster,
        NODECLASSES,
        {
            "apiVersion": "karpenter.kwok.sh/v1alpha1",
            "kind": "KWOKNodeClass",
            "metadata": {"name": NODE_CLASS},
            "spec": {"nodeRegistrationDelay": registration_delay},
        },
    )
    state = cluster.workdir / "karpenter"
    state.mkdir(exist_ok=True)
    types_file = state / "instance-types.json"
    types_file.write_text(json.dumps(instance_types(), indent=1) + "\n")
    capacity_file = state / "capacity.json"
    capacity_file.write_text("{}")
    metrics_port, health_port = free_ports(2)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "KUBECONFIG": str(cluster.kubeconfig),
        "DISABLE_LEADER_ELECTION": "true",
        "METRICS_PORT": str(metrics_port),
        "HEALTH_PROBE_PORT": str(health_port),
        "LOG_LEVEL": log_level,
        "INSTANCE_TYPES_FILE_PATH": str(types_file),
        "KARPENTER_CAPACITY_FILE": str(capacity_file),
    }
    cluster.ports.update(karpenter_metrics=metrics_port, karpenter_health=health_port)
    comp = cluster.add_component(
        "karpenter", [str(art.binary)], env, f"http://127.0.0.1:{health_port}/readyz"
    )
    assert comp.pid is not None
    return Karpenter(cluster=cluster, capacity_file=capacity_file, pid=comp.pid)


def karpenter_state(k: Karpenter) -> dict[str, Any]:
    """What ``up --karpenter`` records beside the cluster's state for ``attach_karpenter``."""
    return {"capacity_file": str(k.capacity_file), "pid": k.pid}


def attach_karpenter(cluster: LocalCluster) -> Karpenter | None:
    """The Karpenter of a cluster started by ``up --karpenter`` (None if it has none)."""
    state_file = cluster.kubeconfig.parent / STATE_FILE
    try:
        recorded = json.loads(state_file.read_text()).get("karpenter")
    except (OSError, ValueError):
        return None
    if not recorded:
        return None
    return Karpenter(cluster, Path(recorded["capacity_file"]), int(recorded["pid"]))


def timestamp(value: str | None) -> float | None:
    """An object's RFC 3339 time (``creationTimestamp``) in epoch seconds; None if absent."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
