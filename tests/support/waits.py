"""Waiting on a condition while listener processes run (test infrastructure).

The demos and the benchmarks watch several sites at once: a wait fails as soon as one of
their listeners exits (with its log tail, which says why), instead of running into its
deadline with the cause lost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from tests.support.e2e_site import Site


class WaitFailed(RuntimeError):
    """A listener exited, or the condition did not hold in time."""


async def wait_until(
    predicate: Callable[[], bool],
    what: str,
    within: float,
    sites: Sequence[Site] = (),
    *,
    interval: float = 0.1,
) -> None:
    """Poll ``predicate`` every ``interval`` seconds until it holds; raise ``WaitFailed`` if a
    listener of ``sites`` exits or ``within`` seconds pass (naming each site's state)."""
    deadline = time.monotonic() + within
    while not predicate():
        for site in sites:
            listener = site.listener
            if listener is not None and listener.returncode is not None:
                raise WaitFailed(
                    f"{listener.name} exited ({listener.returncode}) waiting for {what}:\n"
                    f"{listener.log_tail(20)}"
                )
        if time.monotonic() > deadline:
            views = "".join(f"\n  {site.spec.name}: {site.view()}" for site in sites)
            raise WaitFailed(f"timed out after {within:.0f}s waiting for {what}{views}")
        await asyncio.sleep(interval)
