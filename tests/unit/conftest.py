"""Fixtures shared by the unit tests (plain helpers live in ``listener_fixtures``), and the
unit tier's two rules made mechanical: no real sleep, no child process.

Virtual time: every test here runs with ``looptime`` (kopf's pytest plugin), so the event
loop's clock is virtual: ``asyncio.sleep``, ``asyncio.timeout``, a held poll or a retry's
back-off move the loop's time at once instead of waiting. The virtual clock starts at the real
``time.monotonic()`` so timers a fixture scheduled before the test body keep their order.
Float rounding depends on that start, so a wait that ends a hair early can hang at one clock
value and not at another: ``UNIT_CLOCK_OFFSET=<seconds>`` (0 to 5) starts every test's clock
that much later than the real one, to sweep a few values. (Not a fixed start: fixtures run on
the real clock, and a test starting far from it would jump past their timers, e.g. a loopback
server's keep-alive.)
Code that reads the time itself takes a clock (``FakeClock``, or the loop's ``time``).

The guards (``no_real_time``): ``time.sleep`` and starting a process raise ``RealTimeUsed``;
an async test whose loop is not virtual fails; an event loop a synchronous test makes (an
``asyncio.run`` in the code under test) is virtual too. ``test_no_real_time.py`` checks them.
"""

from __future__ import annotations

import asyncio
import os
import platform
import subprocess
import time
from collections.abc import AsyncIterator, Generator
from pathlib import Path
from typing import Any

import httpx
import looptime
import pytest
from pytest_asyncio import is_async_test

from base.http.client import make_client
from tests.unit.listener_fixtures import UA, FakeTime

UNIT = Path(__file__).parent

# azure-core's user agent reads platform.processor(), which runs `uname -p` once per process
# and caches it: ask here, before the guard, so the vault tests do not start a process.
platform.processor()


class RealTimeUsed(AssertionError):
    """A unit test slept in real time or started a process (both belong to integration)."""


def _clock_offset() -> float:
    raw = os.environ.get("UNIT_CLOCK_OFFSET", "0")
    try:
        offset = float(raw)
    except ValueError:
        offset = -1.0
    if not 0 <= offset <= 5:
        raise pytest.UsageError(f"UNIT_CLOCK_OFFSET: not a number of seconds from 0 to 5: {raw!r}")
    return offset


_clock_offset_s = 0.0


def pytest_configure(config: pytest.Config) -> None:
    global _clock_offset_s
    _clock_offset_s = _clock_offset()
    # On a fresh machine matplotlib's first import builds its font cache by running
    # fc-list, which no_real_time refuses: build it here, before any test patches Popen,
    # so a benchmark's figures can be drawn in any test, whatever ran before it.
    import matplotlib.font_manager  # noqa: F401


def _clock_start() -> float:
    return time.monotonic() + _clock_offset_s


def _in_unit(item: pytest.Item) -> bool:
    return UNIT in item.path.parents


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The hook sees the whole session's items: only the unit tier's run in virtual time.
    for item in items:
        if _in_unit(item):
            item.add_marker(pytest.mark.looptime(start=_clock_start))


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, Any, Any]:
    # Innermost wrapper: looptime has switched the test's loop to virtual time by now.
    if is_async_test(pyfuncitem) and _in_unit(pyfuncitem):
        policy = pyfuncitem.funcargs["event_loop_policy"]
        assert isinstance(policy, asyncio.AbstractEventLoopPolicy)
        loop = policy.get_event_loop()
        if not (isinstance(loop, looptime.LoopTimeEventLoop) and loop.looptime_on):
            raise RealTimeUsed(f"{pyfuncitem.nodeid}: the event loop's time is not virtual")
    return (yield)


def _refuse(what: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RealTimeUsed(f"{what} in the unit tier: make it an integration test")

    return refuse


def _virtual_loop() -> asyncio.AbstractEventLoop:
    return looptime.new_event_loop(start=_clock_start)


@pytest.fixture(autouse=True)
def no_real_time(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse real sleeps and child processes for the test's duration (fixtures included)."""
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        if seconds > 0:
            raise RealTimeUsed(f"time.sleep({seconds}) in the unit tier: take a clock and sleep")
        real_sleep(0)

    monkeypatch.setattr(time, "sleep", sleep)
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("subprocess.Popen"))
    for name in ("system", "fork", "posix_spawn", "posix_spawnp"):
        monkeypatch.setattr(os, name, _refuse(f"os.{name}"))
    if not is_async_test(request.node):
        # asyncio.run (3.11) makes its loop with this one; an async test's loop is
        # pytest-asyncio's, made virtual by looptime (and checked in pytest_pyfunc_call).
        monkeypatch.setattr(asyncio.events, "new_event_loop", _virtual_loop)


@pytest.fixture
def fake() -> FakeTime:
    """Fake time for code that takes ``sleep`` and ``clock``. Tests of the fake servers
    override ``fake`` with the server itself."""
    return FakeTime()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """The listener's own HTTP client (no proxy environment), for respx-mocked calls."""
    async with make_client(user_agent=UA, env={}) as c:
        yield c
