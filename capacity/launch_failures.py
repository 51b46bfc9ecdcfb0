"""Karpenter's word that a NodePool could not launch a node, watched, for the stall check
(settings ``nodepools``; optional).

When the cloud has no capacity for a NodeClaim, Karpenter (v1.x,
pkg/controllers/nodeclaim/lifecycle/launch.go, ``launchNodeClaim``) publishes a Warning
Event with reason ``InsufficientCapacityError`` on the NodeClaim and deletes the claim. That
Event is the one trace the refusal leaves in the API: the claim is gone, its ``Launched``
condition was never set False, and the NodePool's status conditions do not change. Events of
a cluster-scoped object go to the ``default`` namespace (client-go's recorder), so this is
one list+watch of Events in ``nodepools.events_namespace``, field-selected on the reason and
the involved kind: the API server sends only those, a few a minute in a shortage and none
otherwise. The claim's NodePool is its name less the last ``-`` part (Karpenter names claims
``<nodepool>-`` plus a generated suffix: provisioning/scheduling/nodeclaimtemplate.go).

The policy uses the word to release a stalled pair after one launch time instead of two
(``policy.signal_stall_timeout``). The word only shortens a wait: an Event lost or late (the
recorder drops under load, an Event expires after an hour) costs time, never a wrong release.
So, like the NodePool reader: a 403 (deploy/rbac/role-karpenter-events.yaml not bound) or a
404 (no such namespace) is logged once and the stall is decided from time alone, looked at
again every ``RECHECK`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from base.kube import KubeError, Removed, Reset, Resource, Upserted
from capacity.cluster import Cluster
from capacity.contract import parse_expiry
from capacity.metrics import CapacityMetrics
from capacity.optional_watch import NotThere, follow_optional

log = logging.getLogger("capacity.launch_failures")

REASON = "InsufficientCapacityError"  # Karpenter's pkg/events/reason.go
KIND = "NodeClaim"
FIELD_SELECTOR = f"reason={REASON},involvedObject.kind={KIND}"
RECHECK = 300.0  # seconds between looks at Events that could not be read


def events_resource(namespace: str) -> Resource:
    return Resource(f"/api/v1/namespaces/{namespace}/events", "events", namespace)


@dataclass(frozen=True, slots=True)
class LaunchFailure:
    """One insufficient-capacity Event: the NodePool that could not launch, and when it last
    said so (epoch seconds)."""

    nodepool: str
    at: float


def nodepool_of(claim: str) -> str:
    """The NodePool of a NodeClaim named ``<nodepool>-<suffix>`` ("" if not of that form)."""
    pool, dash, suffix = claim.rpartition("-")
    return pool if dash and suffix else ""


def launch_failure_from(obj: dict[str, Any]) -> LaunchFailure | None:
    """A watched Event → LaunchFailure; None for any other Event (the selector should send
    none) or one whose claim or time cannot be read. The time is the latest the Event names:
    a repeat (``count`` > 1, or an events.k8s.io series) moves ``lastTimestamp`` or
    ``series.lastObservedTime`` on."""
    involved = obj.get("involvedObject") or {}
    if obj.get("reason") != REASON or involved.get("kind") != KIND:
        return None
    pool = nodepool_of(str(involved.get("name") or ""))
    series = obj.get("series") or {}
    stamps = (
        obj.get("lastTimestamp"),
        series.get("lastObservedTime"),
        obj.get("eventTime"),
        obj.get("firstTimestamp"),
        (obj.get("metadata") or {}).get("creationTimestamp"),
    )
    at = max(parse_expiry(s) for s in stamps)
    return LaunchFailure(pool, at) if pool and at > 0 else None


class LaunchFailures:
    """The insufficient-capacity Events as last seen, and when each NodePool last said it
    could not launch a node."""

    def __init__(
        self,
        kube: Cluster,
        namespace: str,
        *,
        metrics: CapacityMetrics,
        on_change: Callable[[], None],
        recheck: float = RECHECK,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.kube = kube
        self.metrics = metrics
        self.on_change = on_change
        self.resource = events_resource(namespace)
        self.recheck = recheck
        self._sleep = sleep
        self.failures: dict[str, LaunchFailure] = {}  # by Event name
        self.state = "starting"
        metrics.record_launch_failure_state(self.state)

    def _set_state(self, state: str) -> None:
        self.state = state
        self.metrics.record_launch_failure_state(state)

    async def run(self) -> None:
        """Follow the Events until cancelled; while they cannot be read, look again every
        ``recheck`` seconds."""
        await follow_optional(
            lambda: self.kube.informer(
                self.resource, launch_failure_from, field_selector=FIELD_SELECTOR
            ),
            self,
            recheck=self.recheck,
            sleep=self._sleep,
        )

    def take(self, event: Reset[LaunchFailure] | Upserted[LaunchFailure] | Removed) -> None:
        if isinstance(event, Reset):
            self.failures = dict(event.items)
            if self.state != "watching":
                log.info("reading NodePools' insufficient-capacity events")
                self._set_state("watching")
            changed = bool(self.failures)
        elif isinstance(event, Upserted):
            log.debug(  # a few a minute in a shortage; the stall itself is logged at info
                "a NodePool could not launch a node (insufficient capacity)",
                extra={"nodepool": event.item.nodepool},
            )
            self.failures[event.name] = event.item
            changed = True
        else:
            self.failures.pop(event.name, None)
            changed = False  # an old Event expired: nothing new to act on
        if changed:
            self.on_change()

    def retrying(self, error: KubeError) -> None:
        self.metrics.record_kube_error(f"watch {self.resource.plural}", error.kind.value)
        log.warning(
            "insufficient-capacity event watch failed, retrying", extra={"error": str(error)}
        )

    def not_there(self, state: NotThere, error: KubeError) -> None:
        """403 or 404, newly: say so once; stalls are decided from time alone."""
        reason = (
            "the listener may not read Karpenter's events (bind "
            "deploy/rbac/role-karpenter-events.yaml)"
            if state == "forbidden"
            else f"no namespace {self.resource.namespace}"
        )
        log.warning(
            f"insufficient-capacity events off: {reason}; stalled pairs are released on time alone",
            extra={"status": error.status},
        )
        self.failures.clear()
        self._set_state(state)
        self.on_change()

    def latest(self, nodepools: Iterable[str]) -> float | None:
        """When one of ``nodepools`` last said it could not launch a node (None: never, as
        far as the Events still held say)."""
        names = set(nodepools)
        times = [f.at for f in self.failures.values() if f.nodepool in names]
        return max(times) if times else None
