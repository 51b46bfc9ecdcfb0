"""Running work until something makes it unnecessary: the one way a task races anything.

Every place in the listener that must stop waiting when something else happens (SIGTERM's
stop event, a change of the advertised capacity, the patch going through, a keep-alive
interval running out) awaits :func:`run_until`, so the rules below hold everywhere and are
written once: waiting next to other work needs throwaway tasks that must always end, and
cancelling the work must still honour a result that arrived first; both are easy to get
subtly wrong inline.

A deadline whose expiry is a *failure* (a network call's, a shutdown step's budget) is not a
race in this sense: it is ``asyncio.timeout`` around the call, and its ``TimeoutError`` is
handled like any other error of that call.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable
from typing import Any, Final, TypeVar

T = TypeVar("T")


class Interrupted(enum.Enum):
    """The type of :data:`INTERRUPTED` (an enum so that ``is`` narrows a result's type)."""

    INTERRUPTED = "interrupted"


# A wait this close to its end is over: a clock that rounds to its resolution (the unit
# tier's virtual one) can end a timer a hair early, and a 1e-12 s sleep would never let it
# move on. The view's Trigger, the loop's rise wait and the fake Actions service use it.
CLOCK_RESOLUTION: Final = 1e-6

INTERRUPTED: Final = Interrupted.INTERRUPTED
"""What :func:`run_until` returns when an interrupt ended the work."""


async def run_until(work: Awaitable[T], *interrupts: Awaitable[object]) -> T | Interrupted:
    """Run ``work`` until the first of ``interrupts`` completes (e.g. ``stop.wait()``,
    ``asyncio.sleep(t)``, any coroutine that returns when the work should end).

    - ``work`` ends first: its result is returned, or its exception raised.
    - An interrupt completes first: ``work`` is cancelled and awaited, and
      :data:`INTERRUPTED` is returned. A work that finished before the cancel landed still
      counts: its result is returned (or its exception raised), never dropped.
    - An interrupt raises first: ``work`` is cancelled and awaited, and that exception is
      raised.
    - The caller is cancelled: ``work`` and the interrupts are cancelled and awaited, then
      ``CancelledError`` propagates.

    No task started here outlives the call, whichever way it ends (also when the caller is
    cancelled again while the work winds down).
    """
    task = asyncio.ensure_future(work)
    watchers = [asyncio.ensure_future(interrupt) for interrupt in interrupts]
    try:
        await asyncio.wait([task, *watchers], return_when=asyncio.FIRST_COMPLETED)
    finally:
        await _end([task, *watchers])
    if not task.cancelled():
        return task.result()
    for watcher in watchers:
        error = None if watcher.cancelled() else watcher.exception()
        if error is not None:
            raise error
    return INTERRUPTED


async def _end(tasks: list[asyncio.Future[Any]]) -> None:
    """Cancel ``tasks`` and wait until every one has ended; re-raise a cancellation of the
    caller that arrived meanwhile only then, so nothing is left running behind it."""
    pending = {task for task in tasks if not task.done()}
    for task in pending:
        task.cancel()
    cancelled = False
    while pending:
        try:
            _, pending = await asyncio.wait(pending)
        except asyncio.CancelledError:
            cancelled = True
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: an outcome nobody reads is not logged as lost
    if cancelled:
        raise asyncio.CancelledError
