"""base.http: the pure header readers, the error tree's one-line messages, and one capped GET
(respx)."""

from __future__ import annotations

import email.utils
from collections.abc import AsyncIterator

import httpx
import pytest
import respx

from base.http.client import get_capped, plain_client
from base.http.errors import HTTPError, StatusError, TooLargeError, TransportError, one_line
from base.http.headers import RateLimit, rate_limit, rate_limited, retry_after

NOW = 1_700_000_000.0
URL = "https://api.example.test/thing?token-in-query=s3cr3t"


# --- headers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("7", 7.0),
        (" 12 ", 12.0),
        (email.utils.formatdate(NOW + 30, usegmt=True), 30.0),
        (email.utils.formatdate(NOW - 30, usegmt=True), 0.0),  # in the past: now
        ("Thu, 01 Jan 2026 00:00:00 -0000", None),  # no zone: not an HTTP date
        ("soon", None),
        ("-5", None),
        ("", None),
    ],
)
def test_retry_after(value: str, expected: float | None) -> None:
    assert retry_after(httpx.Headers({"Retry-After": value}), NOW) == expected


def test_retry_after_absent() -> None:
    assert retry_after(httpx.Headers(), NOW) is None


def test_rate_limit_headers() -> None:
    headers = httpx.Headers({"X-RateLimit-Remaining": "12", "X-RateLimit-Reset": "1700000060"})
    assert rate_limit(headers) == RateLimit(12, 1_700_000_060.0)
    assert rate_limit(httpx.Headers({"X-RateLimit-Remaining": "many"})) == RateLimit(None, None)


@pytest.mark.parametrize(
    ("status", "headers", "limited"),
    [
        (429, {}, True),
        (403, {"Retry-After": "60"}, True),
        (403, {"X-RateLimit-Remaining": "0"}, True),
        (403, {"X-RateLimit-Remaining": "5"}, False),  # a plain permission refusal
        (500, {"Retry-After": "60"}, False),
    ],
)
def test_rate_limited(status: int, headers: dict[str, str], limited: bool) -> None:
    assert rate_limited(status, httpx.Headers(headers)) is limited


# --- the error tree ----------------------------------------------------------------------------


def test_errors_are_one_line_under_one_root() -> None:
    errors: list[HTTPError] = [
        StatusError(502, method="GET", url="https://h/p"),
        TransportError(
            "GET", "https://h/p", "ConnectError:\nrefused\n" + "x" * 500, transient=True
        ),
        TooLargeError("GET", "https://h/p", "over 10 bytes"),
    ]
    for error in errors:
        assert "\n" not in str(error)
    assert str(errors[0]) == "GET https://h/p: status 502"
    assert len(str(errors[1])) < 330
    assert str(errors[2]) == "GET https://h/p: response too large (over 10 bytes)"
    assert one_line("a\n b", limit=3) == "a b"
    assert one_line("abcdef", limit=4) == "abc…"


# --- one capped GET ----------------------------------------------------------------------------


async def test_get_capped_reads_a_200_body() -> None:
    with respx.mock() as router:
        router.get(URL).respond(200, content=b"[1]", headers={"ETag": "e1"})
        async with plain_client(5.0) as client:
            answer = await get_capped(client, URL, max_bytes=10, deadline=5.0)
    assert (answer.status, answer.headers["etag"], answer.body) == (200, "e1", b"[1]")


async def test_get_capped_does_not_read_other_bodies() -> None:
    with respx.mock() as router:
        router.get(URL).respond(500, content=b"x" * 100)
        async with plain_client(5.0) as client:
            answer = await get_capped(client, URL, max_bytes=10, deadline=5.0)
    assert (answer.status, answer.body) == (500, b"")


async def test_get_capped_abandons_a_body_over_the_cap() -> None:
    sent = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        while True:
            sent += 1
            yield b"x" * 100

    with respx.mock() as router:
        router.get(URL).mock(return_value=httpx.Response(200, content=endless()))
        async with plain_client(5.0) as client:
            with pytest.raises(TooLargeError) as info:
                await get_capped(client, URL, max_bytes=1000, deadline=5.0)
    assert info.value.reason == "over 1000 bytes"
    assert "s3cr3t" not in str(info.value)
    assert sent < 20


async def test_get_capped_refuses_a_declared_size_over_the_cap() -> None:
    with respx.mock() as router:
        router.get(URL).respond(200, content=b"x" * 100)
        async with plain_client(5.0) as client:
            with pytest.raises(TooLargeError, match=r"declared 100 bytes"):
                await get_capped(client, URL, max_bytes=10, deadline=5.0)


async def test_get_capped_tells_timeouts_from_other_failures() -> None:
    with respx.mock() as router:
        route = router.get(URL)
        async with plain_client(5.0) as client:
            route.mock(side_effect=httpx.ReadTimeout("slow"))
            with pytest.raises(TransportError) as timed_out:
                await get_capped(client, URL, max_bytes=10, deadline=5.0)
            route.mock(side_effect=httpx.ConnectError("refused"))
            with pytest.raises(TransportError) as refused:
                await get_capped(client, URL, max_bytes=10, deadline=5.0)
    assert (timed_out.value.timed_out, timed_out.value.kind) == (True, "ReadTimeout")
    assert (refused.value.timed_out, refused.value.kind) == (False, "ConnectError")
    assert str(refused.value) == "GET https://api.example.test/thing: ConnectError: refused"
