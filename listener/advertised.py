"""The advertised capacity: the value sent to GitHub as ``X-ScaleSetMaxCapacity``.

This is the seam between the capacity monitor and the long-poll loop (in ARC's Go listener
it is ``listener.SetMaxRunners``). The monitor calls :meth:`AdvertisedCapacity.set_max_capacity`
whenever the scheduler-confirmed capacity changes; the loop reads :attr:`value` when it
starts a poll and waits on :meth:`wait_changed` so it can abandon a poll that carries a stale
header.

Invariant: the value is always ``0 <= value <= max_runners``. ``max_runners`` is fixed for the
life of the process: ARC restarts the listener with a new config when the scale set's
``maxRunners`` changes, and the new process starts from the new cap.
"""

from __future__ import annotations

import asyncio

from listener.config import MAX_INT32


class AdvertisedCapacity:
    """The current ``X-ScaleSetMaxCapacity`` value and a change notification.

    Without a monitor (capacity-awareness disabled) nobody calls ``set_max_capacity`` and the
    value is ``max_runners``, exactly what ARC's listener sends.
    """

    def __init__(self, max_runners: int, *, confirmed: int | None = None) -> None:
        self._max_runners = _check(max_runners, "max_runners")
        # None: no monitor, send max_runners as ARC does. A number: scheduler-confirmed.
        self._confirmed = confirmed
        self._version = 0
        self._changed = asyncio.Event()

    @property
    def max_runners(self) -> int:
        return self._max_runners

    @property
    def value(self) -> int:
        """What to send on the next poll: the confirmed capacity clamped to the cap."""
        if self._confirmed is None:
            return self._max_runners
        return min(self._confirmed, self._max_runners)

    @property
    def version(self) -> int:
        """Increases on every change of :attr:`value`; lets waiters detect missed changes."""
        return self._version

    def set_max_capacity(self, capacity: int) -> None:
        """Record the capacity the scheduler has confirmed (called by the capacity monitor)."""
        self._update(confirmed=max(0, int(capacity)))

    async def wait_changed(self, since_version: int) -> int:
        """Wait until :attr:`version` differs from ``since_version``; return the new version."""
        while self._version == since_version:
            await self._changed.wait()
        return self._version

    def _update(self, *, confirmed: int) -> None:
        before = self.value
        self._confirmed = confirmed
        if self.value != before:
            self._version += 1
            # Wake every current waiter, then start a fresh event for the next change: the
            # setter stays synchronous, so callers need not be coroutines.
            fired, self._changed = self._changed, asyncio.Event()
            fired.set()


def _check(value: int, field: str) -> int:
    if not 0 <= value <= MAX_INT32:
        raise ValueError(f"{field} must be between 0 and {MAX_INT32}, got {value}")
    return value
