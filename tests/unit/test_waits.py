"""The one wait of the tests (tools/waits.py), without real time: interval 0 and
a deadline of 0 seconds."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tools.waits import WaitFailed, eventually, eventually_sync, running, timed_ramp


async def test_it_returns_what_the_check_returned_once_truthy() -> None:
    calls = itertools.count(1)

    async def third() -> str | None:
        return "ready" if next(calls) == 3 else None

    assert await eventually(third, "the third call", interval=0) == "ready"
    assert await eventually(lambda: 7, "a plain predicate") == 7


async def test_a_timeout_names_what_it_waited_for_the_detail_and_the_last_error() -> None:
    def refuses() -> bool:
        raise ConnectionError("refused")

    with pytest.raises(WaitFailed) as caught:
        await eventually(
            refuses, "the server", 0, detail=lambda: "; log: x", ignore=(ConnectionError,)
        )
    assert (
        str(caught.value)
        == "timed out after 0s waiting for the server (last error: refused); log: x"
    )
    with pytest.raises(WaitFailed, match="waiting for sync"):
        eventually_sync(lambda: False, "sync", 0)


async def test_alive_fails_the_wait_at_once_and_other_errors_pass_through() -> None:
    def ended() -> None:
        raise WaitFailed("listener exited")

    with pytest.raises(WaitFailed, match="listener exited"):
        await eventually(lambda: False, "never", None, alive=ended)

    def broken() -> bool:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        await eventually(broken, "a bug", None)


async def test_wake_rechecks_at_once_instead_of_after_the_interval() -> None:
    wake = asyncio.Event()
    state = {"done": False}

    async def change() -> None:
        state["done"] = True
        wake.set()

    # An hour's interval: only the wake-up ends this wait (the timeout only bounds a failure).
    async with running(change()), asyncio.timeout(5):
        assert await eventually(lambda: state["done"], "the change", None, interval=3600, wake=wake)


async def test_running_cancels_the_task_at_the_end_of_the_block() -> None:
    async with running(asyncio.Event().wait()) as task:
        await asyncio.sleep(0)
    assert task.cancelled()


class _Listener:
    name = "listener"

    def __init__(self, returncode: int | None) -> None:
        self.returncode = returncode

    def log_tail(self, lines: int = 20) -> str:
        del lines
        return ""


async def test_a_timed_ramp_says_a_timeout_and_reports_the_target_missed() -> None:
    said: list[str] = []
    assert (await timed_ramp(asyncio.sleep(0), _Listener(None), said.append))[0] is True
    missed = eventually(lambda: False, "10 pairs", 0)
    assert (await timed_ramp(missed, _Listener(None), said.append))[0] is False
    assert said == ["timed out after 0s waiting for 10 pairs"]
    # A listener that exited is a failure, not a missed target.
    with pytest.raises(WaitFailed):
        await timed_ramp(eventually(lambda: False, "10 pairs", 0), _Listener(1), said.append)
