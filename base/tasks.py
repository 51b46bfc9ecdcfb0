"""Racing work against a stop event: the one way a task waits for "done or stopping".

A stop event is how every long-running part of the process learns of SIGTERM. Waiting on
``stop.wait()`` next to other work needs a throwaway task that must always be cancelled
afterwards, and cancelling the work must still honour a result that arrived first; both
are easy to get subtly wrong when written inline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


async def first_of(
    stop: asyncio.Event, *tasks: asyncio.Future[Any], within: float | None = None
) -> bool:
    """Wait until one of ``tasks`` is done, ``stop`` is set or ``within`` seconds pass.
    Returns whether ``stop`` is set; the tasks are left as they are."""
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({*tasks, stopping}, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    return stop.is_set()


async def cancel(task: asyncio.Future[Any]) -> bool:
    """Cancel ``task`` and wait until it has ended. False when it finished first (its result
    or exception is then still there to be read)."""
    task.cancel()
    await asyncio.wait({task})
    return task.cancelled()


async def unless_stopped(work: Awaitable[T], stop: asyncio.Event) -> T | None:
    """Await ``work`` unless ``stop`` is set first (then cancel it and return None)."""
    task = asyncio.ensure_future(work)
    await first_of(stop, task)
    if not task.done() and await cancel(task):
        return None
    return task.result()
