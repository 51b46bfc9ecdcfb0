"""The unit tier's guards (tests/unit/conftest.py): virtual time, no real sleep, no process.

Each check would fail if its guard were removed: a real ``time.sleep`` or process start
would go through, and an hour's ``asyncio.sleep`` would take an hour (past the timeout).
"""

from __future__ import annotations

import asyncio
import subprocess
import time

import looptime
import pytest

from tests.unit.conftest import RealTimeUsed

HOUR = 3600.0


def test_time_sleep_is_refused() -> None:
    with pytest.raises(RealTimeUsed, match=r"time\.sleep\(0\.01\)"):
        time.sleep(0.01)
    time.sleep(0)  # a bare yield is no wait


def test_starting_a_process_is_refused() -> None:
    with pytest.raises(RealTimeUsed, match=r"subprocess\.Popen"):
        subprocess.run(["true"], check=True)


async def test_an_async_tests_loop_runs_in_virtual_time() -> None:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, looptime.LoopTimeEventLoop)
    started = loop.time()
    await asyncio.sleep(HOUR)
    assert loop.time() - started == pytest.approx(HOUR)


def test_a_sync_tests_asyncio_run_is_virtual_too() -> None:
    async def an_hour() -> float:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.sleep(HOUR)
        return loop.time() - started

    assert asyncio.run(an_hour()) == pytest.approx(HOUR)
