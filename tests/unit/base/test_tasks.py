from __future__ import annotations

import asyncio

import pytest

from base.tasks import cancel, first_of, unless_stopped


async def test_first_of_returns_when_a_task_is_done() -> None:
    stop = asyncio.Event()
    task = asyncio.ensure_future(asyncio.sleep(0, result="x"))
    assert await first_of(stop, task) is False
    assert task.done()


async def test_first_of_returns_true_when_stopped() -> None:
    stop = asyncio.Event()
    never = asyncio.ensure_future(asyncio.Event().wait())
    asyncio.get_running_loop().call_soon(stop.set)
    assert await first_of(stop, never) is True
    assert not never.done()  # left as it was
    never.cancel()


async def test_first_of_gives_up_after_within() -> None:
    stop = asyncio.Event()
    never = asyncio.ensure_future(asyncio.Event().wait())
    assert await first_of(stop, never, within=0.01) is False
    assert not never.done()
    never.cancel()


async def test_first_of_leaves_no_stop_waiter_behind() -> None:
    stop = asyncio.Event()
    task = asyncio.ensure_future(asyncio.sleep(0))
    await first_of(stop, task)
    await asyncio.sleep(0)
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert others == []


async def test_cancel_reports_a_result_that_came_first() -> None:
    task = asyncio.ensure_future(asyncio.sleep(0, result=7))
    await asyncio.wait([task])
    assert await cancel(task) is False
    assert task.result() == 7


async def test_cancel_cancels_work_in_flight() -> None:
    task = asyncio.ensure_future(asyncio.Event().wait())
    assert await cancel(task) is True
    assert task.cancelled()


async def test_unless_stopped_returns_the_result() -> None:
    assert await unless_stopped(asyncio.sleep(0, result="done"), asyncio.Event()) == "done"


async def test_unless_stopped_cancels_on_stop() -> None:
    stop = asyncio.Event()
    started = asyncio.Event()

    async def work() -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    async def stop_soon() -> None:
        await started.wait()
        stop.set()

    stopper = asyncio.ensure_future(stop_soon())
    assert await unless_stopped(work(), stop) is None
    await stopper


async def test_unless_stopped_raises_the_works_error() -> None:
    async def fail() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await unless_stopped(fail(), asyncio.Event())
