"""A sampler: ``sample()`` every ``interval`` seconds in a task, from ``start()`` until
``stop()`` (test infrastructure: the Karpenter timelines and NodeClaim logs)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Self


class Sampler:
    """Subclasses set ``interval`` and define ``sample()``."""

    interval: float
    _task: asyncio.Task[None] | None = None

    async def sample(self) -> object:
        raise NotImplementedError

    def start(self) -> Self:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=type(self).__name__)
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            await self._sample_once()
            await asyncio.sleep(self.interval)

    async def _sample_once(self) -> None:
        """One sample of the loop; a subclass may choose which failures it survives."""
        await self.sample()
