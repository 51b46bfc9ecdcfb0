"""A coalescing trigger: many pokes, one wake-up. The view pokes one per change that matters;
the signal and reconcile loops wait on theirs, so a burst of events becomes one pass."""

from __future__ import annotations

import asyncio

from base.tasks import CLOCK_RESOLUTION


class Trigger:
    """Coalesces pokes: ``wait`` returns once pokes have been quiet for ``idle`` seconds, or
    ``max_delay`` after the first unhandled poke, whichever is first (a burst of events
    leads to one pass; a steady stream still gets a pass every ``max_delay``)."""

    def __init__(self, *, idle: float, max_delay: float) -> None:
        self.idle = idle
        self.max_delay = max_delay
        self._event = asyncio.Event()
        self._first = 0.0
        self._last = 0.0

    def poke(self) -> None:
        now = asyncio.get_running_loop().time()
        if not self._event.is_set():
            self._first = now
            self._event.set()
        self._last = now

    @property
    def pending(self) -> bool:
        return self._event.is_set()

    async def wait(self, within: float | None = None) -> bool:
        """True after a (coalesced) poke; False when ``within`` seconds passed without one."""
        try:
            async with asyncio.timeout(within):
                await self._event.wait()
        except TimeoutError:
            return False
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            quiet_at = self._last + self.idle
            latest = self._first + self.max_delay
            left = min(quiet_at, latest) - now
            if left <= CLOCK_RESOLUTION:
                break
            await asyncio.sleep(left)
        self._event.clear()
        return True
