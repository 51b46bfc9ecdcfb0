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
recorder drops under load, an Event expires after an hour) costs time, never a wrong release
(``capacity.event_watch``): a 403 (deploy/rbac/role-karpenter-events.yaml not bound) or a 404
(no such namespace) is logged once and the stall is decided from time alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from capacity.event_watch import EventReader, event_time

REASON = "InsufficientCapacityError"  # Karpenter's pkg/events/reason.go
KIND = "NodeClaim"
FIELD_SELECTOR = f"reason={REASON},involvedObject.kind={KIND}"


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
    none) or one whose claim or time cannot be read (`event_time`: the latest it names)."""
    involved = obj.get("involvedObject") or {}
    if obj.get("reason") != REASON or involved.get("kind") != KIND:
        return None
    pool = nodepool_of(str(involved.get("name") or ""))
    at = event_time(obj)
    return LaunchFailure(pool, at) if pool and at > 0 else None


class LaunchFailures(EventReader[LaunchFailure]):
    """The insufficient-capacity Events as last seen, and when each NodePool last said it
    could not launch a node."""

    FIELD_SELECTOR = FIELD_SELECTOR
    WATCHING = "reading NodePools' insufficient-capacity events"
    SEEN = "a NodePool could not launch a node (insufficient capacity)"
    FAILED = "insufficient-capacity event watch failed, retrying"
    OFF = "insufficient-capacity events off"
    FORBIDDEN = (
        "the listener may not read Karpenter's events (bind deploy/rbac/role-karpenter-events.yaml)"
    )
    WITHOUT = "stalled pairs are released on time alone"

    @staticmethod
    def parse(obj: dict[str, Any]) -> LaunchFailure | None:
        return launch_failure_from(obj)

    def record_state(self, state: str) -> None:
        self.metrics.record_launch_failure_state(state)

    def describe(self, item: LaunchFailure) -> dict[str, Any]:
        return {"nodepool": item.nodepool}

    @property
    def failures(self) -> dict[str, LaunchFailure]:
        """The Events held, by name."""
        return self.items

    def latest(self, nodepools: Iterable[str]) -> float | None:
        """When one of ``nodepools`` last said it could not launch a node (None: never, as
        far as the Events still held say)."""
        names = set(nodepools)
        times = [f.at for f in self.items.values() if f.nodepool in names]
        return max(times) if times else None
