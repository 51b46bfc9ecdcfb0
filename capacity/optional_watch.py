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
from typing import Literal, TypeVar

from base.kube import Failed, KubeError, Removed, Reset, Upserted, WatchEvent

T = TypeVar("T")

NotThere = Literal["forbidden", "absent"]
_NOT_THERE: dict[int, NotThere] = {403: "forbidden", 404: "absent"}


async def follow_optional(
    events: Callable[[], AsyncIterator[WatchEvent[T]]],
    *,
    take: Callable[[Reset[T] | Upserted[T] | Removed], None],
    not_there: Callable[[NotThere, KubeError], None],
    retrying: Callable[[KubeError], None],
    recheck: float,
    sleep: Callable[[float], Awaitable[None]],
) -> None:
    """Follow ``events()`` until cancelled. Each list or change goes to ``take``; a 403 or
    404 goes to ``not_there`` once per look, ends that watch and, after ``recheck`` seconds,
    a new one starts; any other failure goes to ``retrying`` (the informer retries it)."""
    while True:
        stream = events()
        try:
            async for event in stream:
                if not isinstance(event, Failed):
                    take(event)
                    continue
                state = _NOT_THERE.get(event.error.status)
                if state is None:
                    retrying(event.error)
                    continue
                not_there(state, event.error)
                break
        finally:
            close = getattr(stream, "aclose", None)  # end the watch stream now, not at GC
            if close is not None:
                await close()
        await sleep(recheck)
