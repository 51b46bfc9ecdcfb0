"""``run_until``: each way the race can end, and that no task is ever left behind."""

from __future__ import annotations

import asyncio

import pytest

from base.tasks import INTERRUPTED, run_until


def others() -> set[asyncio.Task[object]]:
    """Every task but the test's own: what a call left behind."""
    return {task for task in asyncio.all_tasks() if task is not asyncio.current_task()}


class Work:
    """A piece of work that records how it ended."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False

    async def __call__(self, result: str = "done") -> str:
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return result


async def test_the_work_finishing_first_returns_its_result() -> None:
    stop = asyncio.Event()
    assert await run_until(asyncio.sleep(0, result="done"), stop.wait()) == "done"
    assert others() == set()  # the stop waiter ended too


async def test_the_event_first_cancels_the_work() -> None:
    stop = asyncio.Event()
    work = Work()

    async def stop_once_started() -> None:
        await work.started.wait()
        stop.set()

    stopper = asyncio.ensure_future(stop_once_started())
    assert await run_until(work(), stop.wait()) is INTERRUPTED
    await stopper
    assert work.cancelled
    assert others() == set()


async def test_an_event_already_set_interrupts_at_once() -> None:
    stop = asyncio.Event()
    stop.set()
    assert await run_until(asyncio.Event().wait(), stop.wait()) is INTERRUPTED
    assert others() == set()


async def test_a_timer_is_an_interrupt_like_any_other() -> None:
    work = Work()

    async def timer() -> None:
        await work.started.wait()
        await asyncio.sleep(0)

    assert await run_until(work(), timer()) is INTERRUPTED
    assert work.cancelled
    assert others() == set()


async def test_the_first_of_several_interrupts_ends_the_work() -> None:
    stop, changed = asyncio.Event(), asyncio.Event()
    asyncio.get_running_loop().call_soon(changed.set)
    assert await run_until(asyncio.Event().wait(), stop.wait(), changed.wait()) is INTERRUPTED
    assert not stop.is_set()
    assert others() == set()  # the waiter on the other event was cancelled and awaited


async def test_the_works_error_is_raised() -> None:
    async def fail() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await run_until(fail(), asyncio.Event().wait())
    assert others() == set()


async def test_a_result_that_came_before_the_cancel_counts() -> None:
    """The interrupt fires first and the work's answer comes before the cancel lands: the
    answer is returned, not dropped."""
    stop = asyncio.Event()
    work = Work()

    async def both_at_once() -> None:
        await work.started.wait()
        stop.set()
        work.release.set()

    setter = asyncio.ensure_future(both_at_once())
    assert await run_until(work("answer"), stop.wait()) == "answer"
    await setter
    assert not work.cancelled
    assert others() == set()


async def test_an_error_that_came_before_the_cancel_is_raised() -> None:
    stop = asyncio.Event()

    async def fail() -> None:
        stop.set()
        raise RuntimeError("late")

    with pytest.raises(RuntimeError, match="late"):
        await run_until(fail(), stop.wait())
    assert others() == set()


async def test_an_interrupt_that_raises_cancels_the_work_and_raises() -> None:
    work = Work()

    async def broken() -> None:
        await work.started.wait()
        raise ValueError("interrupt failed")

    with pytest.raises(ValueError, match="interrupt failed"):
        await run_until(work(), broken())
    assert work.cancelled
    assert others() == set()


async def test_the_callers_cancellation_cancels_everything_and_propagates() -> None:
    work = Work()
    stop = asyncio.Event()
    caller = asyncio.ensure_future(run_until(work(), stop.wait()))
    await work.started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert work.cancelled
    assert not stop.is_set()
    assert others() == set()


async def test_a_second_cancellation_still_waits_for_the_work_to_end() -> None:
    """The work takes a while to wind down and the caller is cancelled again meanwhile:
    the call still returns only once the work has ended."""
    started, winding_down, finish = asyncio.Event(), asyncio.Event(), asyncio.Event()
    ended: list[str] = []

    async def slow_to_cancel() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            winding_down.set()
            await finish.wait()
            ended.append("work")
            raise

    caller = asyncio.ensure_future(run_until(slow_to_cancel(), asyncio.Event().wait()))
    await started.wait()
    caller.cancel()
    await winding_down.wait()
    caller.cancel()
    await asyncio.sleep(0)
    assert not caller.done()  # still waiting for the work
    finish.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert ended == ["work"]
    assert others() == set()


async def test_under_a_timeout_the_cancellation_becomes_its_timeout_error() -> None:
    """asyncio.timeout cancels the caller; run_until passes it on so the timeout can tell
    its own cancellation and raise TimeoutError."""
    work = Work()

    async def expire(deadline: asyncio.Timeout) -> None:
        await work.started.wait()
        deadline.reschedule(asyncio.get_running_loop().time())

    async def bounded() -> None:
        async with asyncio.timeout(None) as deadline:
            expiry.append(asyncio.ensure_future(expire(deadline)))
            await run_until(work(), asyncio.Event().wait())

    expiry: list[asyncio.Future[None]] = []
    with pytest.raises(TimeoutError):
        await bounded()
    await expiry[0]
    assert work.cancelled
    assert others() == set()
