"""The seam between the capacity monitor and Kubernetes: the few operations the view, the
reconciler and the monitor use, as a Protocol.

``base.kube.Kube`` implements it against a real apiserver. Tests implement it in memory
(``tests/support/memory_cluster.py``) to check the monitor's own logic — create gate and
backoff, expectations, the shutdown budget, adopt/sweep, the signal loop — in milliseconds;
what Kubernetes itself does (scheduling, preemption, garbage collection, watch semantics)
stays tested on the real control plane.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol, TypeVar

from base.kube import NodeState, Projection, Resource, WatchEvent

T = TypeVar("T")


class Cluster(Protocol):
    """What the capacity monitor needs from the cluster (see ``base.kube.Kube`` for the
    semantics each call must keep)."""

    async def create_pod(self, namespace: str, manifest: Mapping[str, Any]) -> bool:
        """Create a pod: True if created, False if one of that name exists; KubeError else."""
        ...

    async def delete_pod(self, namespace: str, name: str, *, uid: str | None = None) -> bool:
        """Delete a pod at once: True if deleted, False if gone (or, with ``uid``, another
        pod by now); KubeError else."""
        ...

    async def get_node(self, name: str) -> NodeState | None:
        """A node's schedulability, None if it does not exist."""
        ...

    async def get_role_uid(self, namespace: str, name: str) -> str | None:
        """The uid of Role ``name`` (ARC's listener Role, the placeholders' owner), None if
        it does not exist; KubeError else (e.g. 403 without the RBAC rule)."""
        ...

    async def get_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        """A ConfigMap's data, None if it does not exist; KubeError else."""
        ...

    async def patch_config_map(self, namespace: str, name: str, data: Mapping[str, str]) -> bool:
        """Merge data into a ConfigMap: True if done, False if it does not exist; KubeError
        else."""
        ...

    async def create_config_map(
        self, namespace: str, name: str, data: Mapping[str, str], labels: Mapping[str, str]
    ) -> bool:
        """Create a ConfigMap: True if created, False if it exists; KubeError else."""
        ...

    async def list_objects(
        self,
        resource: Resource,
        project: Projection[T],
        *,
        label_selector: str = "",
        field_selector: str = "",
        resource_version: str = "",
    ) -> tuple[dict[str, T], str]:
        """Every matching object (projected; None skipped) and the list's resourceVersion: a
        consistent read, or with ``resource_version`` the collection exactly at that
        revision; KubeError else."""
        ...

    def informer(
        self,
        resource: Resource,
        project: Projection[T],
        *,
        label_selector: str = "",
        field_selector: str = "",
    ) -> AsyncIterator[WatchEvent[T]]:
        """List, then watch, forever: Reset after every (re)list, then Upserted/Removed;
        failures as Failed (retried by the implementation)."""
        ...
