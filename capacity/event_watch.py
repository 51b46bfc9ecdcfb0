"""One optional list+watch of Kubernetes Events, field-selected so the API server sends only
the few that say something (Karpenter's insufficient-capacity Events on NodeClaims,
``capacity.launch_failures``; its scheduling failures of our placeholders,
``capacity.pod_refusals``).

An Event only shortens a wait: one lost or late (the recorder drops under load, an Event
expires after an hour) costs time, never a wrong deletion. So, like the NodePool reader, a
403 (the rule not granted) or a 404 (no such namespace) is logged once and the reader holds
nothing, looked at again every ``RECHECK`` seconds (``capacity.optional_watch``). Each
reader says what its Events are, how one is parsed and how its state and switch-off read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Generic, TypeVar

from base.kube import KubeError, Removed, Reset, Resource, Upserted
from capacity.cluster import Cluster
from capacity.contract import parse_expiry
from capacity.metrics import CapacityMetrics
from capacity.optional_watch import NotThere, follow_optional

T = TypeVar("T")

RECHECK = 300.0  # seconds between looks at Events that could not be read


def events_resource(namespace: str) -> Resource:
    return Resource(f"/api/v1/namespaces/{namespace}/events", "events", namespace)


def event_time(obj: dict[str, Any]) -> float:
    """The latest time an Event names (epoch seconds; 0 if none): a repeat (``count`` > 1,
    or an events.k8s.io series) moves ``lastTimestamp`` or ``series.lastObservedTime`` on."""
    series = obj.get("series") or {}
    stamps = (
        obj.get("lastTimestamp"),
        series.get("lastObservedTime"),
        obj.get("eventTime"),
        obj.get("firstTimestamp"),
        (obj.get("metadata") or {}).get("creationTimestamp"),
    )
    return max(parse_expiry(s) for s in stamps)


class EventReader(Generic[T]):
    """The Events one field selector lets through, parsed, as last seen (``items``, by Event
    name). A subclass names its selector, parser, log lines and state metric."""

    FIELD_SELECTOR: ClassVar[str]
    WATCHING: ClassVar[str]  # the info line when the Events are first read
    SEEN: ClassVar[str]  # the debug line for a new one
    FAILED: ClassVar[str]  # the warning when the watch fails and is retried
    # The one warning for a 403 or 404: "<OFF>: <FORBIDDEN or no namespace …>; <WITHOUT>".
    OFF: ClassVar[str]
    FORBIDDEN: ClassVar[str]
    WITHOUT: ClassVar[str]

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
        self.items: dict[str, T] = {}
        self.state = "starting"
        self.record_state(self.state)

    # --- what a subclass says -------------------------------------------------------------

    @staticmethod
    def parse(obj: dict[str, Any]) -> T | None:
        """A watched Event → its item; None for any other."""
        raise NotImplementedError

    def record_state(self, state: str) -> None:
        """The reader's state metric."""
        raise NotImplementedError

    def off_line(self, state: NotThere) -> str:
        """The one warning for a 403 or 404."""
        reason = (
            self.FORBIDDEN if state == "forbidden" else f"no namespace {self.resource.namespace}"
        )
        return f"{self.OFF}: {reason}; {self.WITHOUT}"

    def describe(self, item: T) -> dict[str, Any]:
        """The fields of the debug line for a new item."""
        return {}

    @property
    def log(self) -> logging.Logger:
        return logging.getLogger(type(self).__module__)

    # --- the watch --------------------------------------------------------------------------

    def _set_state(self, state: str) -> None:
        self.state = state
        self.record_state(state)

    async def run(self) -> None:
        """Follow the Events until cancelled; while they cannot be read, look again every
        ``recheck`` seconds."""
        await follow_optional(
            lambda: self.kube.informer(
                self.resource, self.parse, field_selector=self.FIELD_SELECTOR
            ),
            self,
            recheck=self.recheck,
            sleep=self._sleep,
        )

    def take(self, event: Reset[T] | Upserted[T] | Removed) -> None:
        if isinstance(event, Reset):
            self.items = dict(event.items)
            if self.state != "watching":
                self.log.info(self.WATCHING)
                self._set_state("watching")
            changed = bool(self.items)
        elif isinstance(event, Upserted):
            # A few a minute at most; what they lead to is logged at info where it acts.
            self.log.debug(self.SEEN, extra=self.describe(event.item))
            self.items[event.name] = event.item
            changed = True
        else:
            self.items.pop(event.name, None)
            changed = False  # an old Event expired: nothing new to act on
        if changed:
            self.on_change()

    def retrying(self, error: KubeError) -> None:
        self.metrics.record_kube_error(f"watch {self.resource.plural}", error.kind.value)
        self.log.warning(self.FAILED, extra={"error": str(error)})

    def not_there(self, state: NotThere, error: KubeError) -> None:
        """403 or 404, newly: say so once; hold nothing."""
        self.log.warning(self.off_line(state), extra={"status": error.status})
        self.items.clear()
        self._set_state(state)
        self.on_change()
