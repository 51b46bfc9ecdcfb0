"""Metrics page and probes (listener/server.py), through aiohttp and a real loopback port; the
readiness and liveness rules themselves are in test_health.py."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.metrics_core import Metric

from listener.github_target import parse_github_target
from listener.metrics import ListenerMetrics
from listener.server import Health, build_app, handler_errors, parse_addr, serve
from tests.support.fake_clock import FakeClock

# --------------------------------------------------------------------------- the app


def metrics_registry() -> tuple[CollectorRegistry, ListenerMetrics]:
    registry = CollectorRegistry(auto_describe=True)
    metrics = ListenerMetrics(
        registry,
        None,
        target=parse_github_target("https://github.com/acme"),
        scale_set_name="linux",
        scale_set_namespace="runners",
    )
    return registry, metrics


Client = TestClient[web.Request, web.Application]
MakeClient = Callable[[web.Application], Awaitable[Client]]


@pytest.fixture
async def client_for() -> AsyncIterator[MakeClient]:
    clients: list[Client] = []

    async def make(app: web.Application) -> Client:
        client = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


async def test_metrics_page_is_the_registry_in_text_format(client_for: MakeClient) -> None:
    registry, metrics = metrics_registry()
    metrics.record_static(0, 5)
    health = Health(FakeClock())
    client = await client_for(
        build_app(registry=registry, metrics_endpoint="/metrics", health=health)
    )

    response = await client.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    body = await response.text()
    assert body == generate_latest(registry).decode()
    assert 'gha_max_runners{enterprise="",name="linux"' in body
    assert 'promhttp_metric_handler_errors_total{cause="gathering"} 0.0' in body


async def test_metrics_path_is_matched_exactly(client_for: MakeClient) -> None:
    registry, _ = metrics_registry()
    client = await client_for(
        build_app(registry=registry, metrics_endpoint="/custom/path", health=Health(FakeClock()))
    )
    assert (await client.get("/custom/path")).status == 200
    for other in ("/metrics", "/custom/path/", "/custom/pathx", "/custom"):
        assert (await client.get(other)).status == 404, other


async def test_empty_endpoint_means_slash_metrics(client_for: MakeClient) -> None:
    registry, _ = metrics_registry()
    client = await client_for(
        build_app(registry=registry, metrics_endpoint="", health=Health(FakeClock()))
    )
    assert (await client.get("/metrics")).status == 200


async def test_probe_only_app_has_no_metrics(client_for: MakeClient) -> None:
    client = await client_for(
        build_app(registry=None, metrics_endpoint="/metrics", health=Health(FakeClock()))
    )
    assert (await client.get("/metrics")).status == 404
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200


async def test_probe_status_codes_and_bodies(client_for: MakeClient) -> None:
    clock = FakeClock()
    health = Health(clock)
    health.add("poll", max_age=60)
    client = await client_for(build_app(registry=None, metrics_endpoint="", health=health))

    ready = await client.get("/readyz")
    assert ready.status == 503
    assert ready.headers["Content-Type"].startswith("application/json")
    assert json.loads(await ready.text()) == {
        "status": "failing",
        "components": {"poll": {"ok": False, "age_seconds": None, "max_age_seconds": 60}},
    }
    assert (await client.get("/healthz")).status == 200

    health.mark("poll", clock.now)
    clock.now += 12.5
    ready = await client.get("/readyz")
    assert ready.status == 200
    assert json.loads(await ready.text())["components"]["poll"]["age_seconds"] == 12.5

    clock.now += 1000
    assert (await client.get("/readyz")).status == 503
    live = await client.get("/healthz")
    assert live.status == 503
    assert json.loads(await live.text())["status"] == "failing"


async def test_metrics_page_is_gzipped_on_request(client_for: MakeClient) -> None:
    registry, metrics = metrics_registry()
    metrics.record_desired_runners(2)
    client = await client_for(
        build_app(registry=registry, metrics_endpoint="/metrics", health=Health(FakeClock()))
    )
    response = await client.get("/metrics", headers={"Accept-Encoding": "gzip"})
    assert response.headers.get("Content-Encoding") == "gzip"
    assert "gha_desired_runners" in await response.text()


class Broken:
    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        raise RuntimeError("collector exploded")


async def test_gathering_error_is_a_500_and_is_counted(client_for: MakeClient) -> None:
    registry, _ = metrics_registry()
    client = await client_for(
        build_app(registry=registry, metrics_endpoint="/metrics", health=Health(FakeClock()))
    )
    broken = Broken()
    registry.register(broken)
    response = await client.get("/metrics")
    assert response.status == 500
    assert "collector exploded" in await response.text()
    registry.unregister(broken)
    body = await (await client.get("/metrics")).text()
    assert 'promhttp_metric_handler_errors_total{cause="gathering"} 1.0' in body
    assert 'promhttp_metric_handler_errors_total{cause="encoding"} 0.0' in body


def test_building_two_apps_on_one_registry_registers_the_counter_once() -> None:
    registry = CollectorRegistry(auto_describe=True)
    health = Health(FakeClock())
    build_app(registry=registry, metrics_endpoint="/metrics", health=health)
    build_app(registry=registry, metrics_endpoint="/other", health=health)
    assert handler_errors(registry) is handler_errors(registry)
    text = generate_latest(registry).decode()
    assert text.count("# TYPE promhttp_metric_handler_errors_total counter") == 1


def test_other_registered_metrics_keep_their_created_series() -> None:
    # The _created filter is per collector: nothing process-wide was switched off.
    registry = CollectorRegistry()
    handler_errors(registry)
    Gauge("unrelated", "x", registry=registry).set(1)
    from prometheus_client import Counter

    Counter("other", "x", registry=registry).inc()
    text = generate_latest(registry).decode()
    assert "other_created" in text
    assert "promhttp_metric_handler_errors_created" not in text


# --------------------------------------------------------------------------- addresses


@pytest.mark.parametrize(
    ("addr", "expected"),
    [
        (":8080", ("", 8080)),  # every interface, IPv4 and IPv6
        ("0.0.0.0:8080", ("0.0.0.0", 8080)),
        ("127.0.0.1:9090", ("127.0.0.1", 9090)),
        ("localhost:0", ("localhost", 0)),
        ("[::1]:8080", ("::1", 8080)),
    ],
)
def test_parse_addr(addr: str, expected: tuple[str, int]) -> None:
    assert parse_addr(addr) == expected


@pytest.mark.parametrize("addr", ["8080", "", "host:", ":http", ":70000", ":-1"])
def test_parse_addr_rejects(addr: str) -> None:
    with pytest.raises(ValueError, match="must be host:port or :port"):
        parse_addr(addr)


# --------------------------------------------------------------------------- serve


async def start(app: web.Application, stop: asyncio.Event) -> tuple[asyncio.Task[None], int]:
    bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(app, "127.0.0.1:0", stop, started=bound.set_result))
    port = await asyncio.wait_for(bound, 5)
    return task, port


async def test_serve_on_a_real_port_and_stop_promptly() -> None:
    registry, metrics = metrics_registry()
    metrics.record_desired_runners(4)
    health = Health()
    health.add("poll", max_age=60)
    health.mark("poll", time.monotonic())
    app = build_app(registry=registry, metrics_endpoint="/metrics", health=health)
    stop = asyncio.Event()
    task, port = await start(app, stop)

    # Keep a keep-alive connection open across the shutdown: it must not delay it.
    session = aiohttp.ClientSession()
    try:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
            assert response.status == 200
            assert "gha_desired_runners" in await response.text()
        async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
            assert response.status == 200

        loop = asyncio.get_running_loop()  # its time is virtual: aiohttp's waits are measured
        began = loop.time()
        stop.set()
        await asyncio.wait_for(task, 6)
        elapsed = loop.time() - began
        assert elapsed < 5.0
    finally:
        await session.close()

    with (
        pytest.raises(ConnectionRefusedError),
        socket.create_connection(("127.0.0.1", port), timeout=1),
    ):
        pass


async def test_serve_stops_within_budget_with_a_request_in_flight() -> None:
    app = build_app(registry=None, metrics_endpoint="", health=Health())
    entered = asyncio.Event()

    async def slow(_request: web.Request) -> web.Response:
        entered.set()
        await asyncio.sleep(30)
        return web.Response(text="late")

    app.router.add_get("/slow", slow)
    stop = asyncio.Event()
    task, port = await start(app, stop)
    async with aiohttp.ClientSession() as session:
        request = asyncio.create_task(session.get(f"http://127.0.0.1:{port}/slow"))
        await asyncio.wait_for(entered.wait(), 5)
        loop = asyncio.get_running_loop()  # virtual time: the drain budget costs none
        began = loop.time()
        stop.set()
        await asyncio.wait_for(task, 8)
        elapsed = loop.time() - began
        request.cancel()
        with pytest.raises((asyncio.CancelledError, aiohttp.ClientError)):
            await request
    assert elapsed < 4.5  # aiohttp drains for 2 s, cancels for up to 2 s


async def test_serve_fails_when_the_port_is_taken() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        app = build_app(registry=None, metrics_endpoint="", health=Health())
        with pytest.raises(OSError, match=r"(?i)address already in use"):
            await asyncio.wait_for(serve(app, f"127.0.0.1:{port}", asyncio.Event()), 5)


def free_dual_stack_port() -> int:
    """A port free on both the IPv4 and the IPv6 wildcard address (bound and released)."""
    for _ in range(20):
        with socket.socket(socket.AF_INET6) as v6:
            v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            v6.bind(("::", 0))
            port: int = v6.getsockname()[1]
            with socket.socket(socket.AF_INET) as v4:
                try:
                    v4.bind(("0.0.0.0", port))
                except OSError:
                    continue
                return port
    raise RuntimeError("no port free on both families")


@pytest.mark.skipif(not socket.has_ipv6, reason="this Python has no IPv6 support")
async def test_port_only_address_serves_ipv4_and_ipv6_like_go() -> None:
    # Go's net.Listen("tcp", ":8080") accepts on every IPv4 *and* IPv6 address; binding
    # 0.0.0.0 only would leave the metrics page and probes unreachable in an IPv6-only
    # cluster, where the pod (and so Prometheus and the kubelet) only has an IPv6 address.
    with socket.socket(socket.AF_INET6) as probe:
        try:
            probe.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback on this machine")
    port = free_dual_stack_port()
    app = build_app(registry=None, metrics_endpoint="", health=Health())
    stop = asyncio.Event()
    bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(app, f":{port}", stop, started=bound.set_result))
    try:
        assert await asyncio.wait_for(bound, 5) == port
        async with aiohttp.ClientSession() as session:
            for host in ("127.0.0.1", "[::1]"):
                async with session.get(f"http://{host}:{port}/readyz") as response:
                    assert response.status == 200, host
    finally:
        stop.set()
        await asyncio.wait_for(task, 6)
