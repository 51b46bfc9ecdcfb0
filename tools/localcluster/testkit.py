"""Small helpers for tests on the local control plane (no Kubernetes client in here)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Label and NoSchedule taint that reserve fake nodes for one test (value: its namespace).
OWNER_KEY = "localcluster.test/owner"
# Never pulled: kwok fakes the container runtime, but the API server wants an image name.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def node_reservation(owner: str) -> dict[str, Any]:
    """add_node() keyword arguments that reserve a node for ``owner``."""
    return {
        "labels": {OWNER_KEY: owner},
        "taints": [{"key": OWNER_KEY, "value": owner, "effect": "NoSchedule"}],
    }


def placement(owner: str) -> dict[str, Any]:
    """Pod spec fields that put a pod on (only) the nodes reserved for ``owner``."""
    return {
        "nodeSelector": {OWNER_KEY: owner},
        "tolerations": [
            {"key": OWNER_KEY, "operator": "Equal", "value": owner, "effect": "NoSchedule"}
        ],
    }


def pod_manifest(
    name: str,
    *,
    owner: str,
    cpu: str = "100m",
    memory: str = "64Mi",
    priority_class: str | None = None,
    labels: Mapping[str, str] | None = None,
    owner_references: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A minimal pod for a fake node reserved for ``owner``."""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": PAUSE_IMAGE,
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
        "terminationGracePeriodSeconds": 0,
        **placement(owner),
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    metadata: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
    if owner_references:
        metadata["ownerReferences"] = owner_references
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
