"""TEST INFRASTRUCTURE — an in-memory ``capacity.cluster.Cluster`` for fast tests of the
capacity monitor's own logic.

It keeps pods, EphemeralRunners, EphemeralRunnerSets and nodes as plain JSON dicts, serves
label- and field-selected informers from them (a Reset, then an Upserted or Removed per
change, in order), and lets a test play the cluster's part: ``set_phase`` for the scheduler
and kubelet, ``remove`` for preemption or eviction. Failures are injected per operation
(``fail_creates``, ``fail_deletes``, ``fail_informers``), deletes can be made to hang
(``hold_deletes``) and watches to lag (``hold_events``, or only some: ``lag_selectors``).
Lists (``list_objects``) read the current objects, or with a resourceVersion the objects at
that revision: every change is one revision, kept in a log.

What it does not do is Kubernetes' own work — no scheduling, no preemption, no garbage
collection — which is tested on the real control plane.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from base.kube import (
    Failed,
    KubeError,
    NodeState,
    Projection,
    Removed,
    Reset,
    Resource,
    Upserted,
    WatchEvent,
)

T = TypeVar("T")
Json = dict[str, Any]


def _selector_matches(selector: str, labels: Mapping[str, str]) -> bool:
    """Kubernetes equality-based label selectors: ``k=v``, ``k!=v``, ``k``, ``!k``."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.rstrip("=")) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


# Field selectors the API server names other than by the object's path (core/v1 Events:
# ``source`` selects on ``source.component``).
_FIELD_PATHS = {"source": "source.component"}


def _field_matches(selector: str, obj: Json) -> bool:
    for term in filter(None, selector.split(",")):
        path, value = term.split("=", 1)
        path = _FIELD_PATHS.get(path, path)
        found: Any = obj
        for key in path.split("."):  # metadata.name, reason, involvedObject.kind, ...
            found = found.get(key) if isinstance(found, dict) else None
        if found != value:
            return False
    return True


@dataclass
class _Watcher:
    path: str
    label_selector: str
    field_selector: str
    queue: asyncio.Queue[tuple[str, Json]] = field(default_factory=asyncio.Queue)

    def wants(self, obj: Json) -> bool:
        labels = obj["metadata"].get("labels") or {}
        return _selector_matches(self.label_selector, labels) and _field_matches(
            self.field_selector, obj
        )


class MemoryCluster:
    """Objects by collection path (``Resource.path``) and name."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock  # creationTimestamp of new objects
        self.objects: dict[str, dict[str, Json]] = {}
        self.nodes: dict[str, NodeState] = {}
        # Roles by (namespace, name) -> uid: ARC's listener Role, the placeholders' owner.
        self.roles: dict[tuple[str, str], str] = {}
        # ConfigMaps' data by (namespace, name): the warm pool's hour-of-week profile.
        self.config_maps: dict[tuple[str, str], dict[str, str]] = {}
        self.fail_config_maps: list[KubeError] = []  # raised by the next writes, in order
        self._watchers: list[_Watcher] = []
        self._uids = itertools.count(1)
        self.fail_creates: list[KubeError] = []  # raised by the next creates, in order
        self.fail_deletes: list[KubeError] = []
        # each answered by the next informer (list+watch) as one Failed, before it lists
        self.fail_informers: list[KubeError] = []
        self.hold_deletes: asyncio.Event | None = None  # set: deletes wait for it
        # set: watches deliver changes only once it is set (a watch that lags behind)
        self.hold_events: asyncio.Event | None = None
        # label selector -> event: only the watches with exactly that selector lag until it
        # is set (one stream behind the others, as separate watches can be)
        self.lag_selectors: dict[str, asyncio.Event] = {}
        self.fail_lists: list[KubeError] = []  # raised by the next list_objects, in order
        self.lists: list[str] = []  # every list_objects call: "<path> <selector> @<version>"
        # Every change in order: (collection path, name, the object or None when deleted);
        # its length is the current resourceVersion.
        self._log: list[tuple[str, str, Json | None]] = []
        self.creates: list[str] = []  # every create_pod call, by pod name
        self.deletes: list[str] = []  # every delete_pod call, by pod name

    # --- the Cluster protocol -----------------------------------------------------------

    async def create_pod(self, namespace: str, manifest: Mapping[str, Any]) -> bool:
        name = str(manifest["metadata"]["name"])
        self.creates.append(name)
        if self.fail_creates:
            raise self.fail_creates.pop(0)
        pods = self.objects.setdefault(Resource.pods(namespace).path, {})
        if name in pods:
            return False
        pod = copy.deepcopy(dict(manifest))
        pod["metadata"]["namespace"] = namespace
        pod["metadata"]["uid"] = f"uid-{next(self._uids)}"
        pod["metadata"]["creationTimestamp"] = self.clock()
        pod["status"] = {"phase": "Pending"}
        self._put(Resource.pods(namespace).path, pod)
        return True

    async def delete_pod(self, namespace: str, name: str, *, uid: str | None = None) -> bool:
        self.deletes.append(name)
        if self.hold_deletes is not None:
            await self.hold_deletes.wait()
        if self.fail_deletes:
            raise self.fail_deletes.pop(0)
        path = Resource.pods(namespace).path
        pod = self.objects.get(path, {}).get(name)
        if pod is None or (uid and pod["metadata"]["uid"] != uid):
            return False
        self._drop(path, name)
        return True

    async def get_node(self, name: str) -> NodeState | None:
        return self.nodes.get(name)

    async def get_role_uid(self, namespace: str, name: str) -> str | None:
        return self.roles.get((namespace, name))

    async def get_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        found = self.config_maps.get((namespace, name))
        return None if found is None else dict(found)

    async def patch_config_map(self, namespace: str, name: str, data: Mapping[str, str]) -> bool:
        if self.fail_config_maps:
            raise self.fail_config_maps.pop(0)
        found = self.config_maps.get((namespace, name))
        if found is None:
            return False
        found.update(data)
        return True

    async def create_config_map(
        self, namespace: str, name: str, data: Mapping[str, str], labels: Mapping[str, str]
    ) -> bool:
        del labels
        if (namespace, name) in self.config_maps:
            return False
        self.config_maps[(namespace, name)] = dict(data)
        return True

    async def list_objects(
        self,
        resource: Resource,
        project: Projection[T],
        *,
        label_selector: str = "",
        field_selector: str = "",
        resource_version: str = "",
    ) -> tuple[dict[str, T], str]:
        self.lists.append(f"{resource.path} {label_selector} @{resource_version}")
        if self.fail_lists:
            raise self.fail_lists.pop(0)
        if resource_version:
            objects: dict[str, Json] = {}
            for path, name, obj in self._log[: int(resource_version)]:
                if path != resource.path:
                    continue
                if obj is None:
                    objects.pop(name, None)
                else:
                    objects[name] = obj
        else:
            objects = self.objects.get(resource.path, {})
        selector = _Watcher(resource.path, label_selector, field_selector)
        items: dict[str, T] = {}
        for name, obj in objects.items():
            kept = project(copy.deepcopy(obj)) if selector.wants(obj) else None
            if kept is not None:
                items[name] = kept
        return items, resource_version or str(len(self._log))

    async def informer(
        self,
        resource: Resource,
        project: Projection[T],
        *,
        label_selector: str = "",
        field_selector: str = "",
    ) -> AsyncIterator[WatchEvent[T]]:
        while self.fail_informers:
            yield Failed(self.fail_informers.pop(0), 0.0)
            await asyncio.sleep(0)
        watcher = _Watcher(resource.path, label_selector, field_selector)
        self._watchers.append(watcher)
        try:
            items: dict[str, T] = {}
            for name, obj in self.objects.get(resource.path, {}).items():
                kept = project(copy.deepcopy(obj)) if watcher.wants(obj) else None
                if kept is not None:
                    items[name] = kept
            yield Reset(items)
            while True:
                kind, obj = await watcher.queue.get()
                if self.hold_events is not None:
                    await self.hold_events.wait()
                lag = self.lag_selectors.get(label_selector)
                if lag is not None:
                    await lag.wait()
                name = obj["metadata"]["name"]
                kept = project(copy.deepcopy(obj)) if kind != "DELETED" else None
                yield Removed(name) if kept is None else Upserted(name, kept)
        finally:
            self._watchers.remove(watcher)

    # --- playing the cluster's part -----------------------------------------------------

    def add(self, resource: Resource, obj: Json) -> Json:
        """Store any object (a uid is added when missing)."""
        stored = copy.deepcopy(obj)
        stored["metadata"].setdefault("uid", f"uid-{next(self._uids)}")
        stored["metadata"].setdefault("namespace", resource.namespace)
        self._put(resource.path, stored)
        return stored

    def pods(self, namespace: str) -> dict[str, Json]:
        return self.objects.get(Resource.pods(namespace).path, {})

    def set_phase(self, namespace: str, name: str, phase: str, node: str = "node-1") -> None:
        """What the scheduler and the kubelet would do: bind the pod and set its phase."""
        pod = copy.deepcopy(self.pods(namespace)[name])
        pod["status"] = {"phase": phase}
        if phase != "Pending":
            pod["spec"]["nodeName"] = node
        self._put(Resource.pods(namespace).path, pod)

    def remove(self, namespace: str, name: str) -> None:
        """A pod disappears by itself (preempted, evicted, garbage-collected)."""
        self._drop(Resource.pods(namespace).path, name)

    def _put(self, path: str, obj: Json) -> None:
        existed = obj["metadata"]["name"] in self.objects.get(path, {})
        self.objects.setdefault(path, {})[obj["metadata"]["name"]] = obj
        self._log.append((path, obj["metadata"]["name"], copy.deepcopy(obj)))
        self._publish(path, "MODIFIED" if existed else "ADDED", obj)

    def _drop(self, path: str, name: str) -> None:
        obj = self.objects.get(path, {}).pop(name, None)
        if obj is not None:
            self._log.append((path, name, None))
            self._publish(path, "DELETED", obj)

    def _publish(self, path: str, kind: str, obj: Json) -> None:
        for watcher in self._watchers:
            if watcher.path != path:
                continue
            if watcher.wants(obj):
                watcher.queue.put_nowait((kind, copy.deepcopy(obj)))
            elif kind == "MODIFIED":  # no longer selected: gone from this watch
                watcher.queue.put_nowait(("DELETED", copy.deepcopy(obj)))
