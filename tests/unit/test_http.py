"""listener.http's ARC retry policy and the bounded 409 wait. The client factory as the listener
uses it is test_http_client.py; error bodies and the error tree are test_http_errors.py.
"""

from __future__ import annotations

import asyncio
import email.utils
import json

import httpx
import pytest
import respx

from base.http.client import make_client
from base.http.errors import TransportError
from listener import http
from listener.errors import (
    ActionsHTTPError,
    RetriesExhaustedError,
    UnauthorizedError,
)
from listener.http import send
from tests.unit.listener_fixtures import (
    UA,
    FakeTime,
    ok_response,
    read_head,
    serve,
)

URL = "https://api.example.test/thing?token-in-query=s3cr3t-query"


def get(client: httpx.AsyncClient, url: str = URL) -> httpx.Request:
    return client.build_request("GET", url)


# --- retry policy ------------------------------------------------------------------------------


@respx.mock
async def test_success_needs_one_attempt(client: httpx.AsyncClient, fake: FakeTime) -> None:
    route = respx.get(URL).respond(200, json={"ok": True})
    response = await send(client, lambda: get(client), sleep=fake.sleep)
    assert response.json() == {"ok": True}
    assert route.call_count == 1
    assert fake.sleeps == []


@respx.mock
async def test_500_then_success(client: httpx.AsyncClient, fake: FakeTime) -> None:
    route = respx.get(URL).mock(side_effect=[httpx.Response(500), httpx.Response(200)])
    response = await send(client, lambda: get(client), sleep=fake.sleep)
    assert response.status_code == 200
    assert route.call_count == 2
    assert fake.sleeps == [1.0]


@pytest.mark.parametrize("status", [500, 502, 503, 504, 599, 429])
@respx.mock
async def test_retryable_status_exhausted_raises_not_returns(
    client: httpx.AsyncClient, fake: FakeTime, status: int
) -> None:
    route = respx.get(URL).respond(status, text="busy", headers={"Content-Type": "text/plain"})
    with pytest.raises(RetriesExhaustedError, match="giving up after 5 attempts") as info:
        await send(client, lambda: get(client), sleep=fake.sleep)
    assert route.call_count == 5
    assert fake.sleeps == [1.0, 2.0, 4.0, 8.0]
    assert info.value.status == status
    assert isinstance(info.value.last_error, ActionsHTTPError)
    assert info.value.last_error.message == "busy"


@pytest.mark.parametrize("status", [501, 400, 404, 409, 422, 401, 403])
@respx.mock
async def test_non_retryable_statuses_are_returned_at_once(
    client: httpx.AsyncClient, fake: FakeTime, status: int
) -> None:
    route = respx.get(URL).respond(status)
    response = await send(client, lambda: get(client), sleep=fake.sleep)
    assert response.status_code == status
    assert route.call_count == 1
    assert fake.sleeps == []


@pytest.mark.parametrize("status", [401, 403])
@respx.mock
async def test_auth_errors_are_retried_only_when_asked(
    client: httpx.AsyncClient, fake: FakeTime, status: int
) -> None:
    route = respx.get(URL).mock(side_effect=[httpx.Response(status), httpx.Response(201)])
    response = await send(client, lambda: get(client), retry_auth_errors=True, sleep=fake.sleep)
    assert response.status_code == 201
    assert route.call_count == 2


@respx.mock
async def test_auth_errors_exhausted(client: httpx.AsyncClient, fake: FakeTime) -> None:
    respx.get(URL).respond(401, json={"message": "Bad credentials"})
    with pytest.raises(RetriesExhaustedError) as info:
        await send(client, lambda: get(client), retry_auth_errors=True, sleep=fake.sleep)
    assert isinstance(info.value.last_error, UnauthorizedError)


@pytest.mark.parametrize("status", [429, 503])
@respx.mock
async def test_retry_after_seconds_is_honoured(
    client: httpx.AsyncClient, fake: FakeTime, status: int
) -> None:
    respx.get(URL).mock(
        side_effect=[httpx.Response(status, headers={"Retry-After": "7"}), httpx.Response(200)]
    )
    await send(client, lambda: get(client), sleep=fake.sleep, clock=fake.clock)
    assert fake.sleeps == [7.0]


@respx.mock
async def test_retry_after_http_date_is_honoured(client: httpx.AsyncClient, fake: FakeTime) -> None:
    when = email.utils.formatdate(fake.now + 12, usegmt=True)
    respx.get(URL).mock(
        side_effect=[httpx.Response(429, headers={"Retry-After": when}), httpx.Response(200)]
    )
    await send(client, lambda: get(client), sleep=fake.sleep, clock=fake.clock)
    assert fake.sleeps == [12.0]


@pytest.mark.parametrize(
    ("status", "header", "expected"),
    [
        (500, "7", 1.0),  # only 429 and 503 carry a meaningful Retry-After
        (429, "soon", 1.0),  # unparseable: normal backoff
        (429, "-5", 1.0),
        (429, "100000", http.RETRY_AFTER_MAX),
        (503, "Thu, 01 Jan 2015 00:00:00 GMT", 0.0),  # in the past: retry at once
    ],
)
@respx.mock
async def test_retry_after_edge_cases(
    client: httpx.AsyncClient, fake: FakeTime, status: int, header: str, expected: float
) -> None:
    respx.get(URL).mock(
        side_effect=[httpx.Response(status, headers={"Retry-After": header}), httpx.Response(200)]
    )
    await send(client, lambda: get(client), sleep=fake.sleep, clock=fake.clock)
    assert fake.sleeps == [expected]


@pytest.mark.parametrize("method", ["POST", "PATCH", "DELETE"])
@respx.mock
async def test_bodies_are_replayed_on_every_attempt(
    client: httpx.AsyncClient, fake: FakeTime, method: str
) -> None:
    route = respx.route(method=method, url=URL).mock(
        side_effect=[httpx.Response(502), httpx.Response(500), httpx.Response(200)]
    )
    payload = json.dumps([101, 102]).encode()
    response = await send(
        client,
        lambda: client.build_request(
            method, URL, content=payload, headers={"Content-Type": "application/json"}
        ),
        sleep=fake.sleep,
    )
    assert response.status_code == 200
    assert [call.request.content for call in route.calls] == [payload] * 3
    assert {call.request.headers["Content-Type"] for call in route.calls} == {"application/json"}


@pytest.mark.parametrize(
    "error",
    [
        httpx.ConnectError("connection refused"),
        httpx.ReadTimeout("read timed out"),
        httpx.ConnectTimeout("connect timed out"),
        httpx.RemoteProtocolError("server disconnected"),
        httpx.ReadError("connection reset"),
    ],
)
@respx.mock
async def test_transport_errors_are_retried(
    client: httpx.AsyncClient, fake: FakeTime, error: Exception
) -> None:
    route = respx.get(URL).mock(side_effect=[error, httpx.Response(200)])
    response = await send(client, lambda: get(client), sleep=fake.sleep)
    assert response.status_code == 200
    assert route.call_count == 2


@respx.mock
async def test_transport_errors_exhausted(client: httpx.AsyncClient, fake: FakeTime) -> None:
    route = respx.get(URL).mock(side_effect=httpx.ConnectError("connection refused"))
    with pytest.raises(RetriesExhaustedError, match="giving up after 5 attempts") as info:
        await send(client, lambda: get(client), sleep=fake.sleep)
    assert route.call_count == 5
    assert info.value.status is None
    assert isinstance(info.value.last_error, TransportError)
    assert "connection refused" in str(info.value)


@pytest.mark.parametrize(
    "error",
    [httpx.UnsupportedProtocol("ftp"), httpx.LocalProtocolError("bad header")],
)
@respx.mock
async def test_request_errors_are_not_retried(
    client: httpx.AsyncClient, fake: FakeTime, error: Exception
) -> None:
    route = respx.get(URL).mock(side_effect=error)
    with pytest.raises(TransportError) as info:
        await send(client, lambda: get(client), sleep=fake.sleep)
    assert route.call_count == 1
    assert not info.value.transient


@respx.mock
async def test_each_attempt_has_a_deadline(client: httpx.AsyncClient, fake: FakeTime) -> None:
    calls = 0

    async def stall(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.sleep(30)
        return httpx.Response(200)

    respx.get(URL).mock(side_effect=stall)
    response = await send(client, lambda: get(client), sleep=fake.sleep, deadline=0.05)
    assert response.status_code == 200
    assert calls == 2
    assert fake.sleeps == [1.0]


@respx.mock
async def test_cancellation_propagates_without_retry_and_client_stays_usable(
    client: httpx.AsyncClient, fake: FakeTime
) -> None:
    started = asyncio.Event()

    async def hold(request: httpx.Request) -> httpx.Response:
        started.set()
        await asyncio.sleep(3600)
        return httpx.Response(200)

    respx.get(URL).mock(side_effect=hold)
    respx.get("https://api.example.test/after").respond(204)
    task = asyncio.create_task(send(client, lambda: get(client), sleep=fake.sleep))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fake.sleeps == []
    after = await send(client, lambda: get(client, "https://api.example.test/after"))
    assert after.status_code == 204


async def test_cancelling_a_real_held_request_leaves_the_connection_pool_usable() -> None:
    """Against a real socket: the abandoned long poll must not poison the pool."""
    held = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await read_head(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            if head[0].startswith("GET /hold"):
                held.set()
                await asyncio.sleep(3600)
            writer.write(ok_response(b"fine"))
            await writer.drain()

    async with (
        serve(handler) as port,
        make_client(user_agent=UA, env={}) as client,
    ):
        base = f"http://127.0.0.1:{port}"
        task = asyncio.create_task(
            send(client, lambda: client.build_request("GET", f"{base}/hold"))
        )
        await asyncio.wait_for(held.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(3):
            response = await asyncio.wait_for(
                send(client, lambda: client.build_request("GET", f"{base}/next")), 5
            )
            assert response.text == "fine"


# --- bounded 409 retry -------------------------------------------------------------------------


@respx.mock
async def test_retry_on_conflict_until_success(client: httpx.AsyncClient, fake: FakeTime) -> None:
    route = respx.post(URL).mock(
        side_effect=[httpx.Response(409), httpx.Response(409), httpx.Response(200)]
    )

    async def call() -> httpx.Response:
        return await send(client, lambda: client.build_request("POST", URL), sleep=fake.sleep)

    response, waited = await http.retry_on_conflict(
        call, give_up_after=300, sleep=fake.sleep, clock=fake.clock, jitter=lambda: 0.5
    )
    assert response.status_code == 200
    assert route.call_count == 3
    assert fake.sleeps == [4.5, 4.5]
    assert waited == 9.0


@respx.mock
async def test_retry_on_conflict_follows_the_lease_then_backs_off(
    client: httpx.AsyncClient, fake: FakeTime
) -> None:
    route = respx.post(URL).respond(409)

    async def call() -> httpx.Response:
        return await send(client, lambda: client.build_request("POST", URL), sleep=fake.sleep)

    response, waited = await http.retry_on_conflict(
        call, give_up_after=200, lease=30, sleep=fake.sleep, clock=fake.clock, jitter=lambda: 0.0
    )
    assert response.status_code == 409
    # 5 s steps up to 15 s before the lease ends, 2 s steps until 10 s after it, then 5 s
    # doubling (to 60 s); the last wait lands on the deadline.
    assert fake.sleeps == [5.0, 5.0, 5.0] + [2.0] * 13 + [5.0, 10.0, 20.0, 40.0, 60.0, 24.0]
    assert waited == 200
    assert route.call_count == len(fake.sleeps) + 1


def test_conflict_wait_never_skips_the_near_window() -> None:
    # A far step that would cross into the near window stops at its start.
    assert http.conflict_wait(43.5, 0, lease=60) == 1.5
    assert http.conflict_wait(45.0, 0, lease=60) == 2.0
    assert http.conflict_wait(69.9, 0, lease=60) == 2.0
    assert http.conflict_wait(70.0, 1, lease=60) == 5.0
    assert http.conflict_wait(0.0, 0, lease=10) == 2.0  # a short lease: near from the start


@respx.mock
async def test_retry_on_conflict_waits_are_capped_and_jittered(
    client: httpx.AsyncClient, fake: FakeTime
) -> None:
    respx.post(URL).respond(409)

    async def call() -> httpx.Response:
        return await send(client, lambda: client.build_request("POST", URL), sleep=fake.sleep)

    await http.retry_on_conflict(call, give_up_after=1000, sleep=fake.sleep, clock=fake.clock)
    assert all(0 <= s <= 60 for s in fake.sleeps)
    assert max(fake.sleeps[:-1]) >= 48  # reached the cap, less at most 20 %
    assert len(set(fake.sleeps)) > 3  # jittered
    assert sum(fake.sleeps) == pytest.approx(1000)


@respx.mock
async def test_retry_on_conflict_zero_budget_tries_once(
    client: httpx.AsyncClient, fake: FakeTime
) -> None:
    route = respx.post(URL).respond(409)

    async def call() -> httpx.Response:
        return await send(client, lambda: client.build_request("POST", URL))

    response, waited = await http.retry_on_conflict(
        call, give_up_after=0, sleep=fake.sleep, clock=fake.clock
    )
    assert (response.status_code, waited, route.call_count, fake.sleeps) == (409, 0, 1, [])
