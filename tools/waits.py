"""Waiting for a condition (test infrastructure): the one ``eventually``.

Every wait in the tests and their tools is "check, and again until it holds or time runs
out": on the local control plane (a pod Running), on a fake (a session polled), on a listener
process (a log line), on Prometheus (an alert firing). ``eventually`` is that loop, with the
parts waits differ in as arguments:

- ``check`` returns something truthy once the condition holds (that value is returned), or
  is a plain predicate; sync or async;
- ``alive`` raises when what the wait depends on has ended (a listener process exited, a task
  failed), so a wait fails at once with the cause instead of at its deadline;
- ``detail`` adds what is useful on a timeout (a log tail, each site's state);
- ``wake`` is an ``asyncio.Event`` a fake sets on every change: the check runs again at once
  rather than at the next ``interval``;
- ``ignore`` are errors that count as "not yet" (an API server still starting).

``eventually_sync`` is the same loop for code outside an event loop (the local cluster's
start-up, cluster-autoscaler's harness). A timeout raises ``WaitFailed``, an AssertionError.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol, TypedDict, TypeVar, Unpack, overload

T = TypeVar("T")


class WaitFailed(AssertionError):
    """The condition did not hold in time, or what it waited on ended first."""


class _Deadline:
    """The part both loops share: between rounds, ``alive`` and the deadline, and the
    one-line failure."""

    def __init__(
        self,
        what: str,
        within: float | None,
        detail: Callable[[], str] | None,
        alive: Callable[[], None] | None,
        now: Callable[[], float],
    ) -> None:
        self.what = what
        self.within = within
        self.detail = detail
        self.alive = alive
        self.now = now
        self.at = None if within is None else now() + within
        self.last_error: BaseException | None = None

    def next_round(self) -> None:
        """Raise if what the wait depends on has ended or time has run out."""
        if self.alive is not None:
            self.alive()
        if self.at is None or self.now() < self.at:
            return
        assert self.within is not None
        error = f" (last error: {self.last_error})" if self.last_error is not None else ""
        extra = self.detail() if self.detail is not None else ""
        raise WaitFailed(
            f"timed out after {self.within:.0f}s waiting for {self.what}{error}{extra}"
        )


class _Options(TypedDict, total=False):
    """``eventually``'s keyword arguments, for its two typed faces (async or sync check)."""

    interval: float
    alive: Callable[[], None] | None
    detail: Callable[[], str] | None
    wake: asyncio.Event | None
    ignore: tuple[type[BaseException], ...]


@overload
async def eventually(
    check: Callable[[], Awaitable[T | None]],
    what: str,
    within: float | None = ...,
    **options: Unpack[_Options],
) -> T: ...


@overload
async def eventually(
    check: Callable[[], T | None],
    what: str,
    within: float | None = ...,
    **options: Unpack[_Options],
) -> T: ...


async def eventually(
    check: Callable[[], Any],
    what: str,
    within: float | None = 30.0,
    *,
    interval: float = 0.2,
    alive: Callable[[], None] | None = None,
    detail: Callable[[], str] | None = None,
    wake: asyncio.Event | None = None,
    ignore: tuple[type[BaseException], ...] = (),
) -> Any:
    """Run ``check`` until it returns something truthy and return that; fail naming ``what``
    after ``within`` seconds (None: no deadline, the caller bounds the wait)."""
    # The event loop's clock (monotonic, as the loop's own timers): a virtual-time loop in a
    # test moves the deadline with the sleeps.
    deadline = _Deadline(what, within, detail, alive, asyncio.get_running_loop().time)
    while True:
        if wake is not None:
            wake.clear()  # before the check: a change during it wakes the next round
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
        except ignore as exc:
            deadline.last_error, result = exc, None
        if result:
            return result
        deadline.next_round()
        if wake is None:
            await asyncio.sleep(interval)
        else:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await wake.wait()


def eventually_sync(
    check: Callable[[], T | None],
    what: str,
    within: float = 30.0,
    *,
    interval: float = 0.1,
    alive: Callable[[], None] | None = None,
    detail: Callable[[], str] | None = None,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """``eventually`` for code that runs outside an event loop (it blocks the thread)."""
    deadline = _Deadline(what, within, detail, alive, time.monotonic)
    while True:
        try:
            result = check()
        except ignore as exc:
            deadline.last_error, result = exc, None
        if result:
            return result
        deadline.next_round()
        time.sleep(interval)


# --- waits while listener processes run ----------------------------------------------------


class _Process(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def returncode(self) -> int | None: ...
    def log_tail(self, lines: int = ...) -> str: ...


def exited(process: _Process | None, what: str) -> None:
    """Raise ``WaitFailed`` (with its log tail, which says why) if ``process`` has exited."""
    if process is not None and process.returncode is not None:
        raise WaitFailed(
            f"{process.name} exited ({process.returncode}) waiting for {what}:\n"
            f"{process.log_tail(20)}"
        )


class _Site(Protocol):
    @property
    def listener(self) -> Any: ...
    @property
    def spec(self) -> Any: ...
    def view(self) -> Any: ...


async def wait_until(
    predicate: Callable[[], bool],
    what: str,
    within: float,
    sites: Sequence[_Site] = (),
    *,
    interval: float = 0.1,
) -> None:
    """``eventually`` for the demos and the benchmarks, which watch several sites at once: a
    wait fails as soon as one of their listeners exits, instead of running into its deadline
    with the cause lost; a timeout names each site's state."""

    def alive() -> None:
        for site in sites:
            exited(site.listener, what)

    def views() -> str:
        return "".join(f"\n  {site.spec.name}: {site.view()}" for site in sites)

    await eventually(predicate, what, within, interval=interval, alive=alive, detail=views)


async def timed_ramp(
    wait: Awaitable[object], process: _Process, say: Callable[[str], None]
) -> tuple[bool, float]:
    """Await ``wait`` (a ramp to a benchmark's target) and time it: (reached, seconds). A
    timeout is a result (said, and the target not reached); ``process`` exiting is not."""
    started = time.monotonic()
    try:
        await wait
    except WaitFailed as exc:
        if process.returncode is not None:
            raise
        say(str(exc))
        return False, time.monotonic() - started
    return True, time.monotonic() - started


@contextlib.asynccontextmanager
async def running(work: Coroutine[Any, Any, T]) -> AsyncIterator[asyncio.Task[T]]:
    """Run ``work`` as a task for the block (a reader, a loop), cancelled and awaited at its
    end; what the block waits for happens while it runs."""
    task = asyncio.create_task(work)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
