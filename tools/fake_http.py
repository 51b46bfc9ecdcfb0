"""Plumbing shared by the loopback fakes: a request log, fault injection and server lifecycle.

Every fake HTTP server of the tests (`fake_actions.FakeActions`, `fake_hud.FakeHUD`,
`fake_github_rest.FakeGitHubRest`, `fake_azure.FakeAzure`, the counting proxy, the unit tests'
small apiservers) is an aiohttp application served by one ``LoopbackServer`` on 127.0.0.1 with
an ephemeral port; the fakes share its ``async with`` lifecycle through ``LoopbackFake``.
The Actions and HUD fakes also pass every request through one middleware that records it
and, when a test has queued a fault for that route, applies the fault instead of (or on top
of) the real handler. Faults are consumed one per request, in the order they were queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Self

from aiohttp import web

UTF8_BOM = b"\xef\xbb\xbf"

# Headers worth asserting on. Kept small so the log stays readable in failure output.
RECORDED_HEADERS = (
    "Authorization",
    "Content-Type",
    "Accept",
    "User-Agent",
    "X-ScaleSetMaxCapacity",
    "x-hud-internal-bot",
)

# Routes whose name starts with this are the fakes' control API: never logged, never faulted.
CONTROL_ROUTE_PREFIX = "control_"

FaultKind = Literal["status", "slow", "drop", "truncate", "bom", "malformed", "mutate"]


@dataclass(frozen=True)
class Fault:
    """One injected misbehaviour for one request. Build with the class methods."""

    kind: FaultKind
    status: int = 500
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    # For "slow": sleep before the handler runs (the work happens late) or after it
    # (the work is done but the answer is late, e.g. an ack that lands after a client timeout).
    before_handler: bool = True
    # For "mutate": the handler's JSON answer goes through this function (e.g. to drop a key).
    transform: Callable[[Any], Any] | None = None

    @classmethod
    def server_error(cls, status: int = 500, message: str = "fake server error") -> Fault:
        return cls("status", status=status, body=_error_body("FakeServerError", message))

    @classmethod
    def rate_limited(cls, retry_after: int | str = 1) -> Fault:
        return cls(
            "status",
            status=429,
            body=_error_body("FakeRateLimit", "rate limited"),
            headers={"Retry-After": str(retry_after)},
        )

    @classmethod
    def unauthorized(cls) -> Fault:
        return cls("status", status=401, body=_error_body("FakeUnauthorized", "unauthorized"))

    @classmethod
    def status_code(
        cls, status: int, body: bytes = b"", headers: Mapping[str, str] | None = None
    ) -> Fault:
        return cls("status", status=status, body=body, headers=dict(headers or {}))

    @classmethod
    def slow(cls, seconds: float, *, before_handler: bool = True) -> Fault:
        return cls("slow", seconds=seconds, before_handler=before_handler)

    @classmethod
    def drop(cls) -> Fault:
        """Close the connection before any response byte is sent (handler never runs)."""
        return cls("drop")

    @classmethod
    def truncate(cls) -> Fault:
        """Run the handler, send headers and half the body, then close the connection."""
        return cls("truncate")

    @classmethod
    def bom(cls) -> Fault:
        """Run the handler and prefix its body with a UTF-8 byte-order mark."""
        return cls("bom")

    @classmethod
    def mutate(cls, transform: Callable[[Any], Any]) -> Fault:
        """Run the handler, then answer with ``transform(its JSON body)`` (same status)."""
        return cls("mutate", transform=transform)

    @classmethod
    def malformed(cls, body: bytes = b'{"messageId": 1, "body": ') -> Fault:
        """Answer 200 with a body that is not the JSON the client expects."""
        return cls("malformed", status=200, body=body)


def _error_body(type_name: str, message: str) -> bytes:
    return json.dumps({"typeName": type_name, "message": message}).encode()


@dataclass
class RecordedRequest:
    """One request as the fake saw it. `status` is 0 until a response was produced."""

    monotonic: float
    wall: float
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    route: str
    body: bytes = b""
    status: int = 0
    fault: str | None = None

    @property
    def auth_scheme(self) -> str:
        return self.headers.get("Authorization", "").partition(" ")[0]

    @property
    def auth_token(self) -> str:
        return self.headers.get("Authorization", "").partition(" ")[2]


class FaultPlan:
    """Per-route FIFO of faults still to apply."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[Fault]] = {}

    def add(self, route: str, fault: Fault, times: int = 1) -> None:
        if times < 1:
            raise ValueError(f"times must be >= 1, got {times}")
        self._queues.setdefault(route, deque()).extend([fault] * times)

    def take(self, route: str) -> Fault | None:
        queue = self._queues.get(route)
        if not queue:
            return None
        return queue.popleft()

    def pending(self, route: str) -> int:
        return len(self._queues.get(route, ()))

    def clear(self) -> None:
        self._queues.clear()


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Reject(Exception):
    """Raised by handlers to answer with `response` (an error status) and stop processing."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


class RecordingFaultMiddleware:
    """The aiohttp middleware: log the request, then apply a queued fault or run the handler."""

    def __init__(self, routes: frozenset[str], max_body: int = 64 * 1024) -> None:
        self.routes = routes
        self.requests: list[RecordedRequest] = []
        self.faults = FaultPlan()
        self._max_body = max_body

    def inject(self, route: str, fault: Fault, times: int = 1) -> None:
        if route not in self.routes:
            raise ValueError(f"unknown route {route!r}; known: {sorted(self.routes)}")
        self.faults.add(route, fault, times)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        route = request.match_info.route.name or "unmatched"
        if route.startswith(CONTROL_ROUTE_PREFIX):
            # The fakes' own control API is test plumbing, not traffic under test.
            return await _call(handler, request)
        body = await request.read() if request.body_exists else b""
        record = RecordedRequest(
            monotonic=time.monotonic(),
            wall=time.time(),
            method=request.method,
            path=request.path,
            query={k: v for k, v in request.query.items()},
            headers={h: request.headers[h] for h in RECORDED_HEADERS if h in request.headers},
            route=route,
            body=body[: self._max_body],
        )
        self.requests.append(record)
        fault = self.faults.take(route)
        record.fault = fault.kind if fault else None
        response = await self._respond(request, handler, fault)
        record.status = response.status
        return response

    async def _respond(
        self, request: web.Request, handler: Handler, fault: Fault | None
    ) -> web.StreamResponse:
        if fault is None:
            return await _call(handler, request)
        if fault.kind == "drop":
            return await _drop(request)
        if fault.kind == "status":
            return web.Response(
                status=fault.status,
                body=fault.body,
                headers=dict(fault.headers),
                content_type="application/json" if fault.body[:1] in (b"{", b"[") else None,
            )
        if fault.kind == "malformed":
            return web.Response(status=200, body=fault.body, content_type="application/json")
        if fault.kind == "slow" and fault.before_handler:
            await asyncio.sleep(fault.seconds)
            return await _call(handler, request)
        response = await _call(handler, request)
        if fault.kind == "slow":
            await asyncio.sleep(fault.seconds)
            return response
        payload = _body_of(response)
        if fault.kind == "mutate" and fault.transform is not None:
            changed = fault.transform(json.loads(payload))
            return _copy_with_body(response, json.dumps(changed, separators=(",", ":")).encode())
        if fault.kind == "bom":
            return _copy_with_body(response, UTF8_BOM + payload)
        # truncate
        return await _truncate(request, response, payload)


async def _call(handler: Handler, request: web.Request) -> web.StreamResponse:
    try:
        return await handler(request)
    except Reject as reject:
        return reject.response


def _body_of(response: web.StreamResponse) -> bytes:
    if isinstance(response, web.Response) and isinstance(response.body, bytes):
        return response.body
    return b""


def _copy_with_body(response: web.StreamResponse, body: bytes) -> web.Response:
    headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
    return web.Response(status=response.status, body=body, headers=headers)


async def _drop(request: web.Request) -> web.StreamResponse:
    transport = request.transport
    if transport is not None:
        transport.close()
    # The connection is gone; with handler cancellation on, this task is cancelled as soon as
    # aiohttp notices. The sleep only bounds the case where it does not.
    await asyncio.sleep(5)
    raise ConnectionResetError("fake dropped the connection")


async def _truncate(
    request: web.Request, response: web.StreamResponse, payload: bytes
) -> web.StreamResponse:
    stream = web.StreamResponse(status=response.status)
    for key, value in response.headers.items():
        if key.lower() not in ("content-length", "transfer-encoding"):
            stream.headers[key] = value
    stream.content_length = max(len(payload), 2)
    await stream.prepare(request)
    await stream.write(payload[: len(payload) // 2])
    transport = request.transport
    if transport is not None:
        transport.close()
    await asyncio.sleep(5)
    raise ConnectionResetError("fake truncated the response")


def json_response(
    payload: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(payload, separators=(",", ":")).encode(),
        content_type="application/json",
        charset="utf-8",
        headers=dict(headers or {}),
    )


class LoopbackServer:
    """Serve one aiohttp application on 127.0.0.1 with an ephemeral (or given) port; over
    TLS when given an ``ssl_context``. ``async with`` starts and stops it."""

    def __init__(
        self,
        app: web.Application,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._app = app
        self._host = host
        self._port = port
        self._ssl_context = ssl_context
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        if not self.port:
            raise RuntimeError("server not started")
        scheme = "https" if self._ssl_context is not None else "http"
        return f"{scheme}://{self._host}:{self.port}"

    async def start(self) -> None:
        # handler_cancellation: a client that hangs up cancels its handler, the way a real
        # server notices an abandoned long poll. Access logs are noise in test output.
        runner = web.AppRunner(
            self._app, handler_cancellation=True, access_log=None, shutdown_timeout=2.0
        )
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port, ssl_context=self._ssl_context)
        await site.start()
        self._runner = runner
        self.port = int(runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class LoopbackFake:
    """The lifecycle every loopback fake shares: ``async with Fake() as fake`` (or
    ``start()``/``stop()``) and ``url``. A fake sets ``_server`` (a ``LoopbackServer``) when
    it is built or started, and extends ``start``/``stop`` for its own background work."""

    _server: LoopbackServer | None = None

    async def start(self) -> None:
        assert self._server is not None
        await self._server.start()

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        """Scheme, host and port, e.g. http://127.0.0.1:41234."""
        if self._server is None:
            raise RuntimeError("server not started")
        return self._server.url
