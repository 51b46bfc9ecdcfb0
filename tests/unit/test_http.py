"""The Actions client's HTTP: base.http.client's factory (TLS, proxies, User-Agent) as the
listener uses it, and listener.http's ARC retry policy.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import importlib.metadata
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import respx

from base.http import client as base_client
from base.http.client import make_client
from base.http.errors import TransportError
from base.http.proxy import ProxySettings
from listener import http
from listener.errors import (
    ActionsHTTPError,
    RetriesExhaustedError,
    SessionConflictError,
    UnauthorizedError,
)
from listener.http import error_from_response, send, user_agent
from tests.unit.listener_fixtures import (
    UA,
    CertificateAuthority,
    FakeTime,
    ok_response,
    read_head,
    serve,
)

URL = "https://api.example.test/thing?token-in-query=s3cr3t-query"


def get(client: httpx.AsyncClient, url: str = URL) -> httpx.Request:
    return client.build_request("GET", url)


# --- User-Agent and client defaults ------------------------------------------------------------


def test_user_agent_keeps_arcs_json_shape_and_says_what_we_are() -> None:
    ua = user_agent(42, arc_version="0.14.2")
    assert " " not in ua
    doc = json.loads(ua)
    assert list(doc) == [
        "system",
        "version",
        "commit_sha",
        "scale_set_id",
        "subsystem",
        "build_version",
        "build_commit_sha",
        "kind",
    ]
    # The deployment is ARC (its controller, at the version the operator says it runs); the
    # listener is this one, with this package's version: never an ARC release that does not
    # exist.
    assert doc["system"] == "actions-runner-controller"
    assert doc["version"] == "0.14.2"
    assert doc["subsystem"] == "capacity-listener"
    assert doc["build_version"] == importlib.metadata.version("capacity-listener")
    assert doc["kind"] == "scaleset"
    assert doc["scale_set_id"] == 42


def test_user_agent_without_a_known_arc_version_says_unknown() -> None:
    doc = json.loads(user_agent(7))
    assert (doc["version"], doc["commit_sha"]) == ("unknown", "unknown")
    assert doc["version"] != doc["build_version"]


@respx.mock
async def test_client_sends_user_agent_and_no_accept_header(client: httpx.AsyncClient) -> None:
    route = respx.get("https://api.example.test/x").respond(200)
    await send(client, lambda: client.build_request("GET", "https://api.example.test/x"))
    request = route.calls.last.request
    assert request.headers["User-Agent"] == UA
    assert "Accept" not in request.headers
    assert request.extensions["timeout"] == base_client.DEFAULT_TIMEOUT.as_dict()


def test_long_poll_timeout_outlasts_the_servers_hold() -> None:
    long_read = http.LONG_POLL_TIMEOUT.read
    default_read = base_client.DEFAULT_TIMEOUT.read
    assert long_read is not None
    assert default_read is not None
    assert long_read >= 70
    assert default_read <= 30
    assert long_read < http.LONG_POLL_DEADLINE


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


# --- error bodies ------------------------------------------------------------------------------


def _response(status: int, content: bytes, headers: dict[str, str]) -> httpx.Response:
    request = httpx.Request("POST", URL, headers={"Authorization": "Bearer s3cr3t-header-token"})
    return httpx.Response(status, content=content, headers=headers, request=request)


def test_error_from_json_body_with_bom_and_ids() -> None:
    body = (
        b"\xef\xbb\xbf"
        + json.dumps(
            {
                "$id": "1",
                "innerException": None,
                "message": "The actions runner scaleset linux already has an active session.",
                "typeName": "GitHub.Actions.Runtime.WebApi.RunnerScaleSetSessionConflictException, "
                "GitHub.Actions.Runtime.WebApi",
                "typeKey": "RunnerScaleSetSessionConflictException",
                "errorCode": 0,
            }
        ).encode()
    )
    error = error_from_response(
        _response(
            409,
            body,
            {
                "Content-Type": "application/json",
                "ActivityId": "act-123",
                "X-GitHub-Request-Id": "GH:REQ:1",
            },
        )
    )
    assert error.status == 409
    assert error.type_name.startswith("GitHub.Actions.Runtime.WebApi.RunnerScaleSetSession")
    assert error.message == "The actions runner scaleset linux already has an active session."
    assert (error.activity_id, error.github_request_id) == ("act-123", "GH:REQ:1")
    text = str(error)
    assert text.startswith("POST https://api.example.test/thing: status 409: GitHub.Actions")
    assert text.endswith("(activity_id=act-123, github_request_id=GH:REQ:1)")


def test_error_from_text_plain_body() -> None:
    error = error_from_response(
        _response(400, b"line one\nline two", {"Content-Type": "text/plain; charset=utf-8"})
    )
    assert (error.type_name, error.message) == ("", "line one\nline two")
    assert "\n" not in str(error)
    assert str(error).endswith("status 400: line one line two")


def test_error_from_unparseable_body_keeps_a_short_excerpt() -> None:
    html = b"<html>" + b"x" * 5000 + b"</html>"
    error = error_from_response(_response(502, html, {"Content-Type": "text/html"}))
    prefix = "POST https://api.example.test/thing: status 502: "
    assert str(error).startswith(prefix + "<html>xxx")
    assert len(str(error)) <= len(prefix) + 300
    assert str(error).endswith("…")
    assert len(error.message) <= 2000


def test_error_for_401_is_unauthorized() -> None:
    error = error_from_response(_response(401, b"{}", {}))
    assert isinstance(error, UnauthorizedError)
    assert str(error) == "POST https://api.example.test/thing: status 401"


def test_errors_never_contain_tokens_from_headers_or_query() -> None:
    error = error_from_response(_response(500, b'{"message": "boom"}', {}))
    exhausted = RetriesExhaustedError("POST", base_client.redact_url(httpx.URL(URL)), 5, error)
    for text in (str(error), repr(error), str(exhausted), repr(exhausted)):
        assert "s3cr3t" not in text


def test_redact_url_drops_credentials_and_query() -> None:
    url = httpx.URL("https://user:pw@queue.example/_apis/q?sessionId=1&token=t#frag")
    assert base_client.redact_url(url) == "https://queue.example/_apis/q"


# --- TLS ---------------------------------------------------------------------------------------


@asynccontextmanager
async def _tls_server(context: ssl.SSLContext) -> AsyncIterator[int]:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await read_head(reader)
            writer.write(ok_response(b"secure"))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async with serve(handler, tls=context) as port:
        yield port


async def test_server_root_ca_is_trusted_in_addition_to_the_system_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeTime
) -> None:
    system_ca = CertificateAuthority.create("system-ca")
    private_ca = CertificateAuthority.create("private-ca")
    bundle = tmp_path / "system.pem"
    bundle.write_text(system_ca.pem)
    # OpenSSL's default verify paths honour SSL_CERT_FILE: this stands in for the system store.
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    async with make_client(user_agent=UA, root_ca_pem=private_ca.pem, env={}) as client:
        for ca in (system_ca, private_ca):
            async with _tls_server(ca.server_context(tmp_path)) as port:
                url = f"https://127.0.0.1:{port}/"
                response = await send(client, functools.partial(client.build_request, "GET", url))
                assert response.text == "secure"


async def test_untrusted_certificate_fails_at_once_without_retries(
    tmp_path: Path, fake: FakeTime
) -> None:
    stranger = CertificateAuthority.create("stranger")
    async with (
        make_client(user_agent=UA, env={}) as client,
        _tls_server(stranger.server_context(tmp_path)) as port,
    ):
        url = f"https://127.0.0.1:{port}/"
        with pytest.raises(TransportError, match="TLS certificate verification failed"):
            await send(client, lambda: client.build_request("GET", url), sleep=fake.sleep)
    assert fake.sleeps == []


def test_invalid_root_ca_is_one_line_naming_the_setting() -> None:
    with pytest.raises(ValueError, match=r"^server_root_ca: not a valid PEM certificate bundle$"):
        make_client(user_agent=UA, root_ca_pem="-----BEGIN CERTIFICATE-----\nnope\n", env={})


# --- proxies -----------------------------------------------------------------------------------

PROXY_ENV = {
    "https_proxy": "http://user:pa55@proxy.corp:3128",
    "http_proxy": "proxy.corp:8080",
    "no_proxy": "internal.example, .svc.local,10.0.0.0/8,192.168.1.5, ghes.corp:8443,[fd00::1]",
}


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://api.github.com/x", "http://user:pa55@proxy.corp:3128"),
        ("http://api.github.com/x", "http://proxy.corp:8080"),
        ("https://internal.example/x", None),  # bare name matches itself
        ("https://a.b.internal.example/x", None),  # ...and subdomains
        ("https://notinternal.example/x", "http://user:pa55@proxy.corp:3128"),
        ("https://svc.local/x", "http://user:pa55@proxy.corp:3128"),  # ".x" is subdomains only
        ("https://api.svc.local/x", None),
        ("https://10.20.30.40/x", None),  # CIDR (httpx's own handling misses this)
        ("https://11.0.0.1/x", "http://user:pa55@proxy.corp:3128"),
        ("https://192.168.1.5/x", None),
        ("https://192.168.1.6/x", "http://user:pa55@proxy.corp:3128"),
        ("https://ghes.corp:8443/x", None),  # port-qualified entry
        ("https://ghes.corp/x", "http://user:pa55@proxy.corp:3128"),
        ("https://[fd00::1]/x", None),
        ("https://localhost:8443/x", None),  # never proxied
        ("https://127.0.0.2/x", None),  # loopback is never proxied
        ("https://[::1]/x", None),
        ("https://INTERNAL.EXAMPLE/x", None),
    ],
)
def test_proxy_selection_follows_go_rules(url: str, expected: str | None) -> None:
    assert ProxySettings.from_env(PROXY_ENV).proxy_for(url) == expected


def test_no_proxy_star_disables_proxies() -> None:
    settings = ProxySettings.from_env({**PROXY_ENV, "no_proxy": "foo, *"})
    assert settings.proxy_for("https://api.github.com/") is None


def test_upper_case_variables_win_like_go() -> None:
    settings = ProxySettings.from_env(
        {"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2", "NO_PROXY": ""}
    )
    assert settings.https_proxy == "http://upper:1"
    settings = ProxySettings.from_env({"HTTPS_PROXY": "", "https_proxy": "http://lower:2"})
    assert settings.https_proxy == "http://lower:2"


def test_no_proxy_without_proxy_means_direct() -> None:
    assert ProxySettings.from_env({}).proxy_for("https://api.github.com/") is None


def test_all_proxy_is_ignored_like_go() -> None:
    settings = ProxySettings.from_env({"ALL_PROXY": "http://p:1", "all_proxy": "http://p:1"})
    assert settings.proxy_for("https://api.github.com/") is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"https_proxy": "socks5://p:1080"}, r"^https_proxy: unsupported proxy scheme 'socks5'"),
        ({"http_proxy": "http://"}, r"^http_proxy: "),
    ],
)
def test_bad_proxy_settings_are_one_line(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_client(user_agent=UA, env=env)


def test_proxy_errors_never_echo_credentials() -> None:
    with pytest.raises(ValueError, match="https_proxy") as info:
        make_client(user_agent=UA, env={"https_proxy": "socks5://user:topsecret@p:1080"})
    assert "topsecret" not in str(info.value)


async def test_requests_really_go_through_the_proxy_with_credentials() -> None:
    seen: list[list[str]] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await read_head(reader)
        seen.append(head)
        if head[0].startswith("CONNECT"):
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        else:
            writer.write(ok_response(b"via proxy"))
        await writer.drain()
        writer.close()

    async with serve(proxy) as port:
        env = {
            "http_proxy": f"http://alice:wonder@127.0.0.1:{port}",
            "https_proxy": f"http://alice:wonder@127.0.0.1:{port}",
        }
        async with make_client(user_agent=UA, env=env) as client:
            response = await send(
                client, lambda: client.build_request("GET", "http://api.example.test/x?y=1")
            )
            assert response.text == "via proxy"
            fake = FakeTime()
            with pytest.raises(RetriesExhaustedError):
                await send(
                    client,
                    lambda: client.build_request("GET", "https://api.example.test/x"),
                    sleep=fake.sleep,
                )
    assert seen[0][0] == "GET http://api.example.test/x?y=1 HTTP/1.1"
    headers = {line.split(":", 1)[0].lower(): line.split(":", 1)[1].strip() for line in seen[0][1:]}
    assert headers["proxy-authorization"] == "Basic YWxpY2U6d29uZGVy"  # alice:wonder
    # HTTPS goes through a CONNECT tunnel; a proxy refusal is a (retried) transport failure.
    assert seen[1][0] == "CONNECT api.example.test:443 HTTP/1.1"
    assert len(seen) == 6


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


# --- the error tree ----------------------------------------------------------------------------


def test_session_conflict_error_explains_itself_on_one_line() -> None:
    error = SessionConflictError(
        409,
        "GitHub.Actions.Runtime.WebApi.RunnerScaleSetSessionConflictException",
        "The actions runner scaleset linux already has an active session.",
        "act-1",
        method="POST",
        url="https://pipelines.example/_apis/runtime/runnerscalesets/7/sessions",
        waited=300,
    )
    text = str(error)
    assert "\n" not in text
    assert text.startswith("POST https://pipelines.example/_apis/runtime/runnerscalesets/7/")
    assert "status 409" in text
    assert "already has an active session" in text
    assert "still conflicting after 300 s" in text
    assert isinstance(error, ActionsHTTPError)
    assert error.status == 409
