"""base.http.client's factory as the listener uses it: User-Agent and client defaults, TLS
with a root CA, Go's proxy rules."""

from __future__ import annotations

import asyncio
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
    RetriesExhaustedError,
)
from listener.http import send, user_agent
from tests.unit.listener_fixtures import (
    UA,
    CertificateAuthority,
    FakeTime,
    ok_response,
    read_head,
    serve,
)

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
