"""The advertised value, passed on to the listener: a drop at once, a rise once confirmed.

The view's three pod watches are not in order with each other, so for a moment it can count a
real pod and the placeholder that pod pushed out. A drop is published at once; a rise only as
far as the same plan on the pods read at one revision (``View.read_pods``) confirms it, at
most once per ``confirm_interval`` (a rise that must wait for that, or whose read failed, is
tried again when the interval is over).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from base.kube import KubeError, KubeErrorKind
from capacity.metrics import CapacityMetrics
from capacity.view import Pods, View

# The reconciler's logger: these lines were the reconciler's own, and log filters name it.
log = logging.getLogger("capacity.reconciler")


class Publisher:
    """Publishes the advertised value and confirms its rises. ``advertised(now, pods)`` is
    the value planned on the view, or with ``pods`` on those pods in place of the watches'."""

    def __init__(
        self,
        *,
        view: View,
        advertised: Callable[[float, Pods | None], int],
        set_max_capacity: Callable[[int], None],
        metrics: CapacityMetrics,
        clock: Callable[[], float],
        confirm_interval: float,
        confirm_timeout: float,
    ) -> None:
        self.view = view
        self._advertised = advertised
        self._set_max_capacity = set_max_capacity
        self.metrics = metrics
        self.clock = clock
        self.published: int | None = None
        # Rises: at most one read per confirm_interval (loop time), each within
        # confirm_timeout; a rise not published yet is retried at _rise_retry_at.
        self.confirm_interval = confirm_interval
        self.confirm_timeout = confirm_timeout
        self._confirmed_at = float("-inf")
        self._rise_retry_at: float | None = None
        self._confirming = asyncio.Lock()

    def publish(self, value: int) -> None:
        """Pass the advertised value on (every pass; the receiver ignores repeats)."""
        changed = value != self.published
        if changed:
            log.info("advertised capacity changed", extra={"from": self.published, "to": value})
        self.published = value
        self._set_max_capacity(value)
        self.metrics.record_advertised(value, changed=changed)

    async def offer(self, value: int) -> None:
        """Publish ``value`` planned on the view: a drop or a repeat at once, a rise only as
        far as the pods read at one revision confirm it."""
        current = self.published if self.published is not None else 0
        if value <= current:
            self._rise_retry_at = None
            self.publish(value)
            return
        async with self._confirming:
            loop = asyncio.get_running_loop()
            wait = self._confirmed_at + self.confirm_interval - loop.time()
            if wait > 0:
                self._rise_retry_at = loop.time() + wait
                return
            self._confirmed_at = loop.time()
            try:
                async with asyncio.timeout(self.confirm_timeout):
                    pods = await self.view.read_pods()
            except (KubeError, TimeoutError) as exc:
                kind = (exc.kind if isinstance(exc, KubeError) else KubeErrorKind.TRANSPORT).value
                log.warning("rise not confirmed: pods not read", extra={"error": str(exc)})
                self.metrics.record_kube_error("list pods", kind)
                self.metrics.record_rise_check("failed")
                self._rise_retry_at = loop.time() + self.confirm_interval
                return
            now = self.clock()
            fresh = self._advertised(now, pods)
            # The view as it is now: a drop seen while the pods were read still counts, and
            # a rise seen meanwhile waits for the next read.
            seen = self._advertised(now, None)
            # Lowered: the read, taken after the watches gave `value`, has less.
            self.metrics.record_rise_check("confirmed" if fresh >= value else "lowered")
            if fresh < value:
                log.info(
                    "rise lowered by a read at one revision",
                    extra={"watches": value, "read": fresh, "published": self.published},
                )
            self._rise_retry_at = loop.time() + self.confirm_interval if fresh < seen else None
            confirmed = min(fresh, seen)
            if confirmed != self.published:
                self.publish(confirmed)

    def rise_wait(self) -> float | None:
        """Seconds until a rise waiting to be confirmed is tried again; None if none waits."""
        if self._rise_retry_at is None:
            return None
        return max(0.0, self._rise_retry_at - asyncio.get_running_loop().time())

    def settled(self) -> None:
        """The view's value is the published one: no rise waits any more."""
        self._rise_retry_at = None
