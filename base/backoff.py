"""Exponential backoff: the one formula every wait between attempts uses.

The callers differ only in their numbers and in how they spread the wait: ARC's HTTP retry
policy waits exactly 1-2-4-8 s (the conformance suite compares these waits with ARC's), a
session conflict adds up to 20% so listeners restarted together do not retry in lock-step,
and Kubernetes watches and patches wait between half and all of the delay so many clients
behind one recovering apiserver do not reconnect at the same instant.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


def exponential(attempt: int, *, base: float, cap: float) -> float:
    """The wait before retry ``attempt`` (1 = the first retry): ``base`` doubling per
    attempt, never more than ``cap``."""
    return min(cap, base * 2.0 ** max(0, attempt - 1))


def half_jitter(delay: float) -> float:
    """A random wait between half of ``delay`` and all of it."""
    return random.uniform(delay / 2, delay)


def no_jitter(delay: float) -> float:
    return delay


@dataclass
class Backoff:
    """Counts failures in a row; :meth:`next` is the wait after the newest one."""

    base: float
    cap: float
    jitter: Callable[[float], float] = field(default=no_jitter)
    failures: int = 0

    def next(self) -> float:
        self.failures += 1
        return self.jitter(exponential(self.failures, base=self.base, cap=self.cap))

    def reset(self) -> None:
        self.failures = 0


@dataclass
class BackoffGate:
    """Closed for ``backoff``'s next wait after a failure, open again after it; a success
    resets the backoff. Several failures while closed count once (one pass's failures)."""

    backoff: Backoff
    until: float = 0.0

    def open(self, now: float) -> bool:
        return now >= self.until

    def failed(self, now: float) -> float:
        """Close the gate; the seconds until it opens."""
        if now < self.until:
            return self.until - now
        delay = self.backoff.next()
        self.until = now + delay
        return delay

    def succeeded(self) -> None:
        self.backoff.reset()
        self.until = 0.0
