"""One list+watch the monitor can do without: followed while it can be read, looked at again
every ``recheck`` seconds while it cannot.

The NodePool limit check (``capacity.nodepool_watch``) and the cluster-autoscaler node-group
check (``capacity.node_group_watch``) are both optional: a 403 (the operator has not bound
the role) or a 404 (no Karpenter, no such namespace) turns the check off rather than failing
the listener, and a role bound or a product installed later is picked up without a restart.
This module owns that loop; each check keeps what it does with the events and how it words
the switch-off.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Literal, Protocol, TypeVar

from base.kube import Failed, KubeError, Removed, Reset, Upserted, WatchEvent

T = TypeVar("T")

NotThere = Literal["forbidden", "absent"]
_NOT_THERE: dict[int, NotThere] = {403: "forbidden", 404: "absent"}


class OptionalCheck(Protocol[T]):
    """What a check does with its watch (NodePoolLimits, NodeGroupRoom)."""

    @property
    def state(self) -> str:
        """The check's state: "forbidden" or "absent" after a 403 or 404, else its own."""
        ...

    def take(self, event: Reset[T] | Upserted[T] | Removed) -> None:
        """A list or a change."""

    def not_there(self, state: NotThere, error: KubeError) -> None:
        """A 403 or 404 that changes ``state``: say so once, cap nothing."""

    def retrying(self, error: KubeError) -> None:
        """Any other failure (the informer retries it)."""


async def follow_optional(
    events: Callable[[], AsyncIterator[WatchEvent[T]]],
    check: OptionalCheck[T],
    *,
    recheck: float,
    sleep: Callable[[float], Awaitable[None]],
) -> None:
    """Follow ``events()`` into ``check`` until cancelled. A 403 or 404 ends that watch and,
    after ``recheck`` seconds, a new one starts; only one that changes the check's state is
    passed on, so a look again answered as before costs no log line and no re-plan."""
    while True:
        stream = events()
        try:
            async for event in stream:
                if not isinstance(event, Failed):
                    check.take(event)
                    continue
                state = _NOT_THERE.get(event.error.status)
                if state is None:
                    check.retrying(event.error)
                    continue
                if state != check.state:
                    check.not_there(state, event.error)
                break
        finally:
            close = getattr(stream, "aclose", None)  # end the watch stream now, not at GC
            if close is not None:
                await close()
        await sleep(recheck)
