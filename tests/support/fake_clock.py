"""The one fake clock of the tests (test infrastructure).

Code that reads the time or sleeps takes a ``clock`` callable and a ``sleep`` coroutine
(the listener's scaler and HTTP retries, the capacity monitor, the health checks); the tests
hand it one ``FakeClock``: the instance is the clock (``clock=fake``), ``fake.sleep`` the
sleep. Sleeping moves the clock at once and is recorded, so a test asserts the waits a
retry chose without spending them, and the unit tier never sleeps for real.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass
class FakeClock:
    """A clock the test moves (``now``), and an ``asyncio.sleep`` stand-in that moves it."""

    now: float = 1_800_000_000.0
    sleeps: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)  # still yield, like the real thing
