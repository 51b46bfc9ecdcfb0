"""cluster-autoscaler node groups, watched, for the full-group check (settings
``cluster_autoscaler``; optional).

One list+watch of a single ConfigMap, ``cluster-autoscaler-status`` in ``kube-system``
(field-selected by name, so a Role with ``resourceNames`` is enough: deploy/rbac/). CA
rewrites it about every scan interval (10 s by default); every change pokes the view.

Never required, like the NodePool reader: a 403 (the Role is not bound) or a 404 (no such
namespace) is logged once, the watch stops, and the monitor plans exactly as without the
setting; it looks again every ``RECHECK`` seconds. A ConfigMap that is missing (no CA), or
that holds no structured status (CA older than 1.30 writes text), imposes no cap either,
with one log line. Until the first list has answered, no pair is created.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import yaml

from base.kube import KubeError, Removed, Reset, Resource, Upserted
from capacity import policy
from capacity.cluster import Cluster
from capacity.metrics import CapacityMetrics
from capacity.model import Observed, Role
from capacity.node_groups import DATA_KEY, NodeGroup, node_groups_from
from capacity.optional_watch import NotThere, follow_optional
from capacity.settings_pools import ClusterAutoscalerSettings

log = logging.getLogger("capacity.node_groups")

RECHECK = 300.0  # seconds between looks at a status that could not be read


@dataclass(frozen=True, slots=True)
class Status:
    """The ConfigMap as read: its node groups, or why they could not be read."""

    groups: dict[str, NodeGroup]
    error: str = ""


def status_from(obj: dict[str, Any]) -> Status:
    text = (obj.get("data") or {}).get(DATA_KEY)
    if not isinstance(text, str):
        return Status({}, f"no data key {DATA_KEY!r}")
    try:
        return Status(node_groups_from(yaml.safe_load(text)))
    except (yaml.YAMLError, ValueError) as exc:
        return Status({}, str(exc).splitlines()[0])


class NodeGroupRoom:
    """The node groups as last seen, and the room full groups leave for new pairs."""

    def __init__(
        self,
        kube: Cluster,
        settings: ClusterAutoscalerSettings,
        *,
        metrics: CapacityMetrics,
        on_change: Callable[[], None],
        recheck: float = RECHECK,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.metrics = metrics
        self.on_change = on_change
        self.resource = Resource.configmaps(settings.status_namespace)
        self.recheck = recheck
        self._sleep = sleep
        self.groups: dict[str, NodeGroup] = {}
        self.state = "starting"
        self.peak: dict[Role, int] = {}
        metrics.record_node_group_state(self.state)

    def _set_state(self, state: str, reason: str = "") -> None:
        if state == self.state:
            return
        if reason:
            log.warning(
                f"node group check off: {reason}; placeholders are created as without it",
                extra={
                    "configmap": f"{self.settings.status_namespace}/"
                    f"{self.settings.status_configmap}"
                },
            )
        elif state == "watching":
            log.info("reading cluster-autoscaler node groups", extra={"groups": len(self.groups)})
        self.state = state
        self.metrics.record_node_group_state(state)

    async def run(self) -> None:
        """Follow the status until cancelled; while it cannot be read, look again every
        ``recheck`` seconds."""
        await follow_optional(
            lambda: self.kube.informer(
                self.resource,
                status_from,
                field_selector=f"metadata.name={self.settings.status_configmap}",
            ),
            self,
            recheck=self.recheck,
            sleep=self._sleep,
        )

    def take(self, event: Reset[Status] | Upserted[Status] | Removed) -> None:
        if isinstance(event, Reset):
            self._take(event.items.get(self.settings.status_configmap))
        elif isinstance(event, Upserted):
            self._take(event.item)
        else:
            self._take(None)

    def _take(self, status: Status | None) -> None:
        if status is None or status.error:
            self.groups = {}
            if status is None:
                self._set_state("absent", "no cluster-autoscaler status ConfigMap")
            else:
                self._set_state(
                    "unreadable", f"cluster-autoscaler status unreadable ({status.error})"
                )
            self.metrics.record_node_groups((), None)
        else:
            self.groups = status.groups
            self._set_state("watching")
        self.on_change()

    def retrying(self, error: KubeError) -> None:
        self.metrics.record_kube_error("watch configmaps", error.kind.value)
        log.warning("node group watch failed, retrying", extra={"error": str(error)})

    def not_there(self, state: NotThere, error: KubeError) -> None:
        """403 or 404, newly: say so once and cap nothing (looked at again later)."""
        reason = (
            "the listener may not read cluster-autoscaler's status (bind "
            "deploy/rbac/role-cluster-autoscaler-status.yaml)"
            if state == "forbidden"
            else f"no namespace {self.settings.status_namespace}"
        )
        self.groups = {}
        self._set_state(state, reason)
        self.metrics.record_node_groups((), None)
        self.on_change()

    def full(self) -> dict[Role, bool]:
        """Per half: whether every node group it is named to land on is full (a named group
        missing from CA's status counts as full: CA cannot scale it up)."""
        named = {Role.RUNNER: self.settings.runner, Role.WORKFLOW: self.settings.workflow}
        return {
            role: names is not None
            and all(name not in self.groups or self.groups[name].full for name in names)
            for role, names in named.items()
        }

    def room(self, observed: Observed, *, commit: bool) -> int | None:
        """New pairs full node groups admit (None: no cap). ``commit`` (a reconcile pass,
        not the signal path) keeps the peak and records the metrics."""
        if self.state == "starting":
            return 0  # not known yet: create nothing a full group might refuse
        if self.state != "watching":
            return None
        room, peak = policy.node_group_room(self.full(), observed, self.peak)
        if commit:
            self.peak = peak
            self.metrics.record_node_groups(
                [self.groups[name] for name in sorted(self.groups)], room
            )
        return room
