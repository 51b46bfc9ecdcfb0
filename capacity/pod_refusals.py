"""Karpenter's word that it has no node for a placeholder, watched, for the confirmed-shortage
hold (settings ``nodepools``; optional).

After a NodePool's launch is refused (``capacity.launch_failures``), Karpenter's next
scheduling run (seconds later) either finds another way to place the Pending pod (another
instance type, zone or NodePool: a new NodeClaim) or none. When it finds none it publishes
a Warning Event with reason ``FailedScheduling`` on the pod, from the component
``karpenter`` (v1.x, pkg/controllers/provisioning/scheduling ``PodFailedToScheduleEvent``,
at most one per pod every 5 minutes). That Event, on a half still Pending after its pools'
refusal, is the difference between a shortage and a refusal that a retry on another type
will cover: the policy then holds new pairs at once (``policy._short_roles``) instead of a
minute after the half's creation.

One list+watch of Events in the placeholder namespace, field-selected on the reason, the
involved kind and the source, so the API server sends Karpenter's few and not the
scheduler's (kube-scheduler publishes ``FailedScheduling`` too, for every Pending pod). As
with the insufficient-capacity Events, the word only shortens a wait: an Event lost or late
costs time, never a wrong deletion; a 403 (the Role's ``events`` rule not granted) or a 404
turns it off with one log line, and it is looked at again every ``RECHECK`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from base.kube import KubeError, Removed, Reset, Upserted
from capacity.cluster import Cluster
from capacity.contract import parse_expiry
from capacity.launch_failures import events_resource
from capacity.metrics import CapacityMetrics
from capacity.optional_watch import NotThere, follow_optional

log = logging.getLogger("capacity.pod_refusals")

REASON = "FailedScheduling"  # Karpenter's pkg/events/reason.go (the scheduler's too)
KIND = "Pod"
SOURCE = "karpenter"  # the component Karpenter's recorder names (operator.AppName)
FIELD_SELECTOR = f"reason={REASON},involvedObject.kind={KIND},source={SOURCE}"
RECHECK = 300.0  # seconds between looks at Events that could not be read


@dataclass(frozen=True, slots=True)
class PodRefusal:
    """Karpenter found no node for a pod: its name and when it last said so (epoch s)."""

    pod: str
    at: float


def pod_refusal_from(obj: dict[str, Any]) -> PodRefusal | None:
    """A watched Event → PodRefusal; None for any other Event (the selector should send none:
    the scheduler's ``FailedScheduling`` is refused here too) or one without a pod or time."""
    involved = obj.get("involvedObject") or {}
    source = (obj.get("source") or {}).get("component") or obj.get("reportingComponent")
    if obj.get("reason") != REASON or involved.get("kind") != KIND or source != SOURCE:
        return None
    pod = str(involved.get("name") or "")
    series = obj.get("series") or {}
    stamps = (
        obj.get("lastTimestamp"),
        series.get("lastObservedTime"),
        obj.get("eventTime"),
        obj.get("firstTimestamp"),
        (obj.get("metadata") or {}).get("creationTimestamp"),
    )
    at = max(parse_expiry(s) for s in stamps)
    return PodRefusal(pod, at) if pod and at > 0 else None


def latest_per_pod(refusals: Iterable[PodRefusal]) -> dict[str, float]:
    """Per pod name, its latest refusal (``Params.refused_at``)."""
    by_pod: dict[str, float] = {}
    for refusal in refusals:
        by_pod[refusal.pod] = max(refusal.at, by_pod.get(refusal.pod, 0.0))
    return by_pod


class PodRefusals:
    """Karpenter's ``FailedScheduling`` Events in the placeholder namespace, as last seen."""

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
        self.refusals: dict[str, PodRefusal] = {}  # by Event name
        self.state = "starting"
        metrics.record_pod_refusal_state(self.state)

    def _set_state(self, state: str) -> None:
        self.state = state
        self.metrics.record_pod_refusal_state(state)

    async def run(self) -> None:
        """Follow the Events until cancelled; while they cannot be read, look again every
        ``recheck`` seconds."""
        await follow_optional(
            lambda: self.kube.informer(
                self.resource, pod_refusal_from, field_selector=FIELD_SELECTOR
            ),
            self,
            recheck=self.recheck,
            sleep=self._sleep,
        )

    def take(self, event: Reset[PodRefusal] | Upserted[PodRefusal] | Removed) -> None:
        if isinstance(event, Reset):
            self.refusals = dict(event.items)
            if self.state != "watching":
                log.info("reading Karpenter's scheduling failures of placeholders")
                self._set_state("watching")
            changed = bool(self.refusals)
        elif isinstance(event, Upserted):
            log.debug("Karpenter found no node for a pod", extra={"pod": event.item.pod})
            self.refusals[event.name] = event.item
            changed = True
        else:
            self.refusals.pop(event.name, None)
            changed = False  # an old Event expired: nothing new to act on
        if changed:
            self.on_change()

    def retrying(self, error: KubeError) -> None:
        self.metrics.record_kube_error(f"watch {self.resource.plural}", error.kind.value)
        log.warning("scheduling-failure event watch failed, retrying", extra={"error": str(error)})

    def not_there(self, state: NotThere, error: KubeError) -> None:
        """403 or 404, newly: say so once; a shortage is then confirmed on time alone."""
        reason = (
            "the listener may not read events in its placeholder namespace (the Role's "
            "events rule: deploy/rbac/role.yaml)"
            if state == "forbidden"
            else f"no namespace {self.resource.namespace}"
        )
        log.warning(
            f"scheduling-failure events off: {reason}; a shortage is confirmed on time alone",
            extra={"status": error.status},
        )
        self.refusals.clear()
        self._set_state(state)
        self.on_change()

    def latest(self) -> dict[str, float]:
        """`latest_per_pod` over the Events held."""
        return latest_per_pod(self.refusals.values())
