"""Karpenter NodePools, watched, for the limit check (settings ``nodepools``; optional).

One cluster-scoped list+watch of ``nodepools.karpenter.sh`` (``base.kube``'s informer; a
handful of objects, so no selector is needed). Every change pokes the view, so a raised
limit leads to new pairs within one reconcile pass, without polling.

Never required: a 403 (the ClusterRole in deploy/rbac/clusterrole-nodepools.yaml is not
bound) or a 404 (no Karpenter, so no such resource) is logged once, the watch stops, and the
monitor plans exactly as without the setting. The NodePools are looked at again every
``RECHECK`` seconds, so a ClusterRole bound or Karpenter installed later takes effect without
restarting the listener (logged once more, when it does). Other failures (apiserver trouble)
are retried by the informer; until the first list has answered, no pair is created, so a
start-up never creates pairs the limits would have refused.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from fractions import Fraction

from base.kube import KubeError, Removed, Reset, Resource, Upserted
from capacity import policy
from capacity.cluster import Cluster
from capacity.metrics import CapacityMetrics
from capacity.model import Observed, Role
from capacity.nodepools import (
    GROUP,
    PLURAL,
    VERSION,
    NodePool,
    PoolMemory,
    nodepool_from,
    requests_of,
    resolve,
)
from capacity.optional_watch import NotThere, follow_optional
from capacity.settings_pools import NodePoolSettings
from capacity.specs import HalfShape

log = logging.getLogger("capacity.nodepools")

RESOURCE = Resource.cluster(GROUP, VERSION, PLURAL)
# Seconds between looks at NodePools that could not be read: cheap (one list), and soon
# enough after an operator binds the ClusterRole.
RECHECK = 300.0


class NodePoolLimits:
    """The NodePools as last seen, and the room their limits leave for new pairs."""

    def __init__(
        self,
        kube: Cluster,
        settings: NodePoolSettings,
        *,
        metrics: CapacityMetrics,
        on_change: Callable[[], None],
        resource: Resource | None = None,
        recheck: float = RECHECK,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.metrics = metrics
        self.on_change = on_change
        self.resource = resource or RESOURCE
        self.recheck = recheck
        self._sleep = sleep
        self.pools: dict[str, NodePool] = {}
        self.state = "starting"
        self.memory = PoolMemory()
        metrics.record_nodepool_state(self.state)

    def _set_state(self, state: str) -> None:
        self.state = state
        self.metrics.record_nodepool_state(state)

    async def run(self) -> None:
        """Follow the NodePools until cancelled; while they cannot be read, look again every
        ``recheck`` seconds."""
        await follow_optional(
            lambda: self.kube.informer(self.resource, nodepool_from),
            self,
            recheck=self.recheck,
            sleep=self._sleep,
        )

    def take(self, event: Reset[NodePool] | Upserted[NodePool] | Removed) -> None:
        if isinstance(event, Reset):
            changed = self.pools != event.items or self.state != "watching"
            self.pools = dict(event.items)
            if self.state != "watching":
                log.info("reading NodePool limits", extra={"nodepools": len(self.pools)})
                self._set_state("watching")
        elif isinstance(event, Upserted):
            changed = self.pools.get(event.name) != event.item
            self.pools[event.name] = event.item
        else:
            changed = self.pools.pop(event.name, None) is not None
        if changed:
            self.on_change()

    def retrying(self, error: KubeError) -> None:
        self.metrics.record_kube_error(f"watch {self.resource.plural}", error.kind.value)
        log.warning("NodePool watch failed, retrying", extra={"error": str(error)})

    def not_there(self, state: NotThere, error: KubeError) -> None:
        """403 or 404, newly: say so once and cap nothing (looked at again later). A 404 is
        logged at info: the setting is on by default, and a cluster without Karpenter is a
        normal place to run."""
        forbidden = state == "forbidden"
        reason = (
            "the listener may not read them (bind deploy/rbac/clusterrole-nodepools.yaml)"
            if forbidden
            else "the cluster has no Karpenter NodePool resource"
        )
        log.log(
            logging.WARNING if forbidden else logging.INFO,
            f"NodePool limits off: {reason}; placeholders are created as without them",
            extra={"status": error.status},
        )
        self.pools.clear()
        self._set_state(state)
        self.metrics.record_nodepools((), None)
        self.on_change()

    def placement(self, shapes: Mapping[Role, HalfShape]) -> dict[Role, tuple[NodePool, ...]]:
        """The pools each half can land on (named in the settings, else resolved)."""
        named: Mapping[Role, list[str] | None] = {
            Role.RUNNER: self.settings.runner,
            Role.WORKFLOW: self.settings.workflow,
        }
        return {
            role: resolve(self.pools.values(), shape.node_selector, shape.tolerations, named[role])
            for role, shape in shapes.items()
        }

    def room(
        self, observed: Observed, shapes: Mapping[Role, HalfShape] | None, *, commit: bool
    ) -> int | None:
        """New pairs the limits admit (None: no cap). ``shapes`` are the two halves' requests
        and scheduling (None: not known yet, no runner set). ``commit`` (a reconcile pass,
        not the signal path) keeps the check's memory and records the metrics."""
        if self.state == "starting":
            return 0  # not known yet: create nothing the limits might refuse
        if self.state != "watching" or shapes is None:
            return None
        placement = self.placement(shapes)
        requests: dict[Role, dict[str, Fraction]] = {
            role: requests_of(shape.requests) for role, shape in shapes.items()
        }
        room, memory = policy.nodepool_room(placement, requests, observed, self.memory)
        if commit:
            self.memory = memory
            relevant = {p.name: p for found in placement.values() for p in found}
            self.metrics.record_nodepools([relevant[name] for name in sorted(relevant)], room)
        return room
