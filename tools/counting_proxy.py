"""A counting proxy in front of the apiserver (test infrastructure for the benchmarks): the
listener gets a kubeconfig that points at it (``proxied_kubeconfig``), and every request it
makes is recorded by verb and resource, watches streamed through and counted while open.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import aiohttp
import yaml
from aiohttp import web

from tools.fake_http import LoopbackServer
from tools.localcluster import LocalCluster


class CountingProxy:
    """Plain-HTTP proxy in front of the apiserver that records every request (watches are
    streamed through). The listener gets a kubeconfig that points here."""

    _HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "host"})

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.requests: list[tuple[float, str, str]] = []  # (monotonic, verb, resource)
        self.open_watches: Counter[str] = Counter()  # resource -> watch streams open now
        self._server: LoopbackServer | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> str:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=False, limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=False,
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._server = LoopbackServer(app)
        await self._server.start()
        return self._server.url

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop()
        if self._session is not None:
            await self._session.close()

    @staticmethod
    def classify(method: str, path: str, query: Mapping[str, str]) -> tuple[str, str]:
        parts = [p for p in path.split("/") if p]
        # /api/v1/... or /apis/<group>/<version>/...
        rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            rest = rest[2:]
        resource = rest[0] if rest else "/"
        named = len(rest) >= 2
        if len(rest) >= 3:
            resource = f"{resource}/{rest[2]}"  # a subresource, e.g. ephemeralrunners/status
        verb = method.lower()
        if method == "GET":
            watching = query.get("watch") in ("1", "true")
            verb = "watch" if watching else ("get" if named else "list")
        elif method == "DELETE" and not named:
            verb = "deletecollection"
        elif method == "POST":
            verb = "create"
        return verb, resource

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        verb, resource = self.classify(request.method, request.path, request.query)
        self.requests.append((time.monotonic(), verb, resource))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in self._HOP}
        body = await request.read()
        if verb == "watch":
            self.open_watches[resource] += 1
        try:
            async with self._session.request(
                request.method,
                self.upstream + request.path_qs,
                headers=headers,
                data=body or None,
            ) as upstream:
                response = web.StreamResponse(
                    status=upstream.status,
                    headers={
                        k: v for k, v in upstream.headers.items() if k.lower() not in self._HOP
                    },
                )
                await response.prepare(request)
                with contextlib.suppress(ConnectionResetError, aiohttp.ClientConnectionResetError):
                    async for chunk in upstream.content.iter_any():
                        await response.write(chunk)
                    await response.write_eof()
                return response
        finally:
            if verb == "watch":
                self.open_watches[resource] -= 1

    def window(self, start: float, end: float) -> Counter[tuple[str, str]]:
        return Counter((v, r) for t, v, r in self.requests if start <= t < end)


def proxied_kubeconfig(cluster: LocalCluster, proxy_url: str, path: Path) -> Path:
    """A copy of the cluster's kubeconfig whose server is the proxy (same credentials)."""
    cfg = yaml.safe_load(cluster.kubeconfig.read_text())
    for entry in cfg["clusters"]:
        entry["cluster"] = {"server": proxy_url}
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return path
