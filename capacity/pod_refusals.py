"""Karpenter's word that it has no node for a placeholder, watched, for the confirmed-shortage
hold (settings ``nodepools``; optional).

After a NodePool's launch is refused (``capacity.launch_failures``), Karpenter's next
scheduling run (seconds later) either finds another way to place the Pending pod (another
instance type, zone or NodePool: a new NodeClaim) or none. When it finds none it publishes
a Warning Event with reason ``FailedScheduling`` on the pod, from the component
``karpenter`` (v1.x, pkg/controllers/provisioning/scheduling ``PodFailedToScheduleEvent``,
at most one per pod every 5 minutes). That Event, on a half still Pending, is the
difference between a shortage and a refusal that a retry on another type will cover: the
policy then holds new pairs at once (``policy._short_roles``) instead of a minute after the
half's creation, and counts it as the pools' word for that half's stall. It comes also
where the half's own NodePool was never refused: the provider stopped offering the type
after another NodePool's refusal.

One list+watch of Events in the placeholder namespace, field-selected on the reason, the
involved kind and the source, so the API server sends Karpenter's few and not the
scheduler's (kube-scheduler publishes ``FailedScheduling`` too, for every Pending pod). As
with the insufficient-capacity Events, the word only shortens a wait (``capacity.event_watch``):
a 403 (the Role's ``events`` rule not granted) or a 404 turns it off with one log line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from capacity.event_watch import EventReader, event_time

REASON = "FailedScheduling"  # Karpenter's pkg/events/reason.go (the scheduler's too)
KIND = "Pod"
SOURCE = "karpenter"  # the component Karpenter's recorder names (operator.AppName)
FIELD_SELECTOR = f"reason={REASON},involvedObject.kind={KIND},source={SOURCE}"


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
    at = event_time(obj)
    return PodRefusal(pod, at) if pod and at > 0 else None


def latest_per_pod(refusals: Iterable[PodRefusal]) -> dict[str, float]:
    """Per pod name, its latest refusal (``Params.refused_at``)."""
    by_pod: dict[str, float] = {}
    for refusal in refusals:
        by_pod[refusal.pod] = max(refusal.at, by_pod.get(refusal.pod, 0.0))
    return by_pod


class PodRefusals(EventReader[PodRefusal]):
    """Karpenter's ``FailedScheduling`` Events in the placeholder namespace, as last seen."""

    FIELD_SELECTOR = FIELD_SELECTOR
    WATCHING = "reading Karpenter's scheduling failures of placeholders"
    SEEN = "Karpenter found no node for a pod"
    FAILED = "scheduling-failure event watch failed, retrying"
    OFF = "scheduling-failure events off"
    FORBIDDEN = (
        "the listener may not read events in its placeholder namespace (the Role's "
        "events rule: deploy/rbac/role.yaml)"
    )
    WITHOUT = "a shortage is confirmed on time alone"

    @staticmethod
    def parse(obj: dict[str, Any]) -> PodRefusal | None:
        return pod_refusal_from(obj)

    def record_state(self, state: str) -> None:
        self.metrics.record_pod_refusal_state(state)

    def describe(self, item: PodRefusal) -> dict[str, Any]:
        return {"pod": item.pod}

    def latest(self) -> dict[str, float]:
        """`latest_per_pod` over the Events held."""
        return latest_per_pod(self.items.values())
