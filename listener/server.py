"""The listener's HTTP server: the metrics page and the Kubernetes probes.

The metrics page is what ARC's listener serves (``promhttp.HandlerFor`` on a private
registry, at exactly ``metrics_endpoint``): the Prometheus text format, plus the handler's own
``promhttp_metric_handler_errors_total{cause="encoding"|"gathering"}`` counter.

The probes are ours:

* ``/readyz`` — every registered component (the long poll, the capacity reconcile) has
  succeeded within its max age.
* ``/healthz`` — fails only when a component is stale far past its max age (a wedged loop),
  so the kubelet restarts the pod; a component that is merely late keeps the pod alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from base.exposition import GoStyleCollector

log = logging.getLogger("listener.server")

DEFAULT_METRICS_ENDPOINT: Final = "/metrics"
SHUTDOWN_TIMEOUT: Final = 5.0
# A component this many max-ages overdue is considered wedged: liveness fails.
DEFAULT_LIVENESS_FACTOR: Final = 3.0

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_HANDLER_ERRORS_HELP: Final = (
    "Total number of internal errors encountered by the promhttp metric handler."
)


# --------------------------------------------------------------------------- health


@dataclass
class _Component:
    max_age: float
    live_max_age: float
    added: float
    last_success: float | None = None


class Health:
    """Last-success times of the listener's loops, judged against per-component max ages.

    ``clock`` must be the clock the ``now`` values given to :meth:`mark` come from.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        liveness_factor: float = DEFAULT_LIVENESS_FACTOR,
    ) -> None:
        if liveness_factor < 1:
            raise ValueError("liveness_factor must be at least 1")
        self._clock = clock
        self._liveness_factor = liveness_factor
        self._components: dict[str, _Component] = {}
        self._failing: dict[str, str] = {}  # condition → why it fails (readiness only)

    def add(self, component: str, max_age: float, *, live_max_age: float | None = None) -> None:
        """Register ``component``. Until its first success its age counts from now."""
        if max_age <= 0:
            raise ValueError(f"max_age of {component!r} must be positive")
        live = max_age * self._liveness_factor if live_max_age is None else live_max_age
        if live < max_age:
            raise ValueError(f"live_max_age of {component!r} must be at least its max_age")
        self._components[component] = _Component(
            max_age=max_age, live_max_age=live, added=self._clock()
        )

    def set_failing(self, condition: str, reason: str | None) -> None:
        """Fail readiness with ``reason`` until called again with None (e.g. while the
        apiserver cannot be patched). Liveness is not affected: waiting is not wedged."""
        if reason is None:
            self._failing.pop(condition, None)
        else:
            self._failing[condition] = reason

    def mark(self, component: str, now: float) -> None:
        """Record a success of ``component`` at ``now``. Unknown names raise KeyError."""
        self._components[component].last_success = now

    def _report(self, now: float, *, live: bool) -> tuple[bool, dict[str, object]]:
        healthy = True
        details: dict[str, object] = {}
        for name, comp in sorted(self._components.items()):
            since: float | None
            if live:
                limit = comp.live_max_age
                since = comp.added if comp.last_success is None else comp.last_success
            else:
                limit = comp.max_age
                since = comp.last_success
            age = None if since is None else max(0.0, now - since)
            ok = age is not None and age <= limit
            healthy = healthy and ok
            details[name] = {
                "ok": ok,
                "age_seconds": None if age is None else round(age, 3),
                "max_age_seconds": limit,
            }
        if not live:
            for name, reason in sorted(self._failing.items()):
                healthy = False
                details[name] = {"ok": False, "error": reason}
        return healthy, details

    def ready(self) -> tuple[bool, dict[str, object]]:
        """Every component succeeded within its max age."""
        return self._report(self._clock(), live=False)

    def live(self) -> tuple[bool, dict[str, object]]:
        """No component is overdue past its liveness limit (counted from registration)."""
        return self._report(self._clock(), live=True)


# --------------------------------------------------------------------------- metrics handler

# One handler-errors counter per registry, however many apps are built on it.
_handler_errors: weakref.WeakKeyDictionary[CollectorRegistry, Counter] = weakref.WeakKeyDictionary()


def handler_errors(registry: CollectorRegistry) -> Counter:
    """promhttp's ``promhttp_metric_handler_errors_total``, registered once per registry.

    Both ``cause`` children exist from the start, so the page shows them at 0 as Go's does.
    """
    counter = _handler_errors.get(registry)
    if counter is None:
        counter = Counter(
            "promhttp_metric_handler_errors",
            _HANDLER_ERRORS_HELP,
            ["cause"],
            registry=None,
        )
        counter.labels("encoding")
        counter.labels("gathering")
        registry.register(GoStyleCollector([counter]))
        _handler_errors[registry] = counter
    return counter


def _metrics_handler(registry: CollectorRegistry) -> _Handler:
    errors = handler_errors(registry)

    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            body = generate_latest(registry)
        except Exception as exc:
            errors.labels("gathering").inc()
            log.error("gathering metrics failed", extra={"error": str(exc)})
            return web.Response(status=500, text=f"error gathering metrics: {exc}\n")
        response = web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4})
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            response.enable_compression(web.ContentCoding.gzip)
        return response

    return handle


def _probe_handler(check: Callable[[], tuple[bool, dict[str, object]]]) -> _Handler:
    async def handle(_request: web.Request) -> web.StreamResponse:
        ok, details = check()
        body = json.dumps({"status": "ok" if ok else "failing", "components": details})
        return web.Response(
            status=200 if ok else 503, text=body + "\n", content_type="application/json"
        )

    return handle


def build_app(
    *, registry: CollectorRegistry | None, metrics_endpoint: str, health: Health
) -> web.Application:
    """The aiohttp application: the metrics page (when ``registry`` is given) and probes.

    ``metrics_endpoint`` is matched exactly, like Go's ServeMux pattern; an empty one means
    ``/metrics`` (ARC's default).
    """
    app = web.Application()
    if registry is not None:
        endpoint = metrics_endpoint or DEFAULT_METRICS_ENDPOINT
        if not endpoint.startswith("/"):
            endpoint = "/" + endpoint
        app.router.add_get(endpoint, _metrics_handler(registry))
    app.router.add_get("/healthz", _probe_handler(health.live))
    app.router.add_get("/readyz", _probe_handler(health.ready))
    return app


# --------------------------------------------------------------------------- serving


def parse_addr(addr: str) -> tuple[str, int]:
    """A Go listen address → (host, port).

    ``":8080"`` gives host ``""``: every interface, IPv4 and IPv6, as Go listens for it.
    """
    host, sep, port_text = addr.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"listen address {addr!r} must be host:port or :port")
    return host.removeprefix("[").removesuffix("]"), int(port_text)


async def serve(
    app: web.Application,
    addr: str,
    stop: asyncio.Event,
    *,
    started: Callable[[int], None] | None = None,
) -> None:
    """Serve ``app`` on ``addr`` until ``stop`` is set; then shut down within 5 s.

    ``started`` is called with the bound port (useful with port 0).
    """
    host, port = parse_addr(addr)
    # aiohttp waits up to shutdown_timeout for in-flight handlers, then up to as long again
    # for them to finish cancelling: half the budget less a margin keeps both inside it. The
    # hard cap below is the backstop.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=(SHUTDOWN_TIMEOUT - 1.0) / 2)
    await runner.setup()
    try:
        # No host: asyncio binds the IPv4 and the IPv6 wildcard (one socket each), so the
        # page is reachable in IPv6-only clusters too, as ARC's is.
        site = web.TCPSite(runner, host or None, port)
        await site.start()
        bound = runner.addresses[0][1] if runner.addresses else port
        log.info("http server listening", extra={"addr": f"{host}:{bound}"})
        if started is not None:
            started(bound)
        await stop.wait()
    finally:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(SHUTDOWN_TIMEOUT):
                await runner.cleanup()
        log.info("http server stopped", extra={"addr": addr})
