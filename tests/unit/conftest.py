"""Fixtures shared by the unit tests (plain helpers live in ``listener_fixtures``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from base.http.client import make_client
from tests.unit.listener_fixtures import UA, FakeTime


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
