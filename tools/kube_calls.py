"""Kubernetes API calls the way a controller makes them (test infrastructure for the runner
stand-in and the e2e sites' placeholder watch): retried for as long as the failure passes by
itself (the apiserver restarts, throttles, answers 5xx), and list+watch forever with a relist
when the watch's version expires.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import aiohttp
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

API_TIMEOUT = 15.0  # seconds, for every call
_WATCH_SECONDS = 120
_RETRY_FIRST, _RETRY_MAX = 0.2, 2.0  # backoff between attempts of a failed API call

T = TypeVar("T")

# An apiserver that has just started refuses writes with 403 until its admission plugins'
# caches have synced: NamespaceLifecycle says "not yet ready to handle request", Priority
# says a PriorityClass that exists was not found. Behind a load balancer, /readyz keeps
# clients away until then; the local cluster's clients reach it directly, so these pass by
# themselves. (A PriorityClass that is really missing is then retried, not failed: the
# stand-in logs every retry.)
_STARTING_UP = ("not yet ready to handle request", "no PriorityClass with name")


def transient(exc: BaseException) -> bool:
    """Whether an API call failed for a reason that passes by itself: no connection (the
    apiserver restarts), a client deadline, throttling, a server error, or an apiserver
    still starting up (above)."""
    if isinstance(exc, ApiException):
        if exc.status == 403:
            raw = exc.body or b""
            body = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
            return any(sign in body for sign in _STARTING_UP)
        return exc.status in (0, 429) or (exc.status or 0) >= 500
    return isinstance(exc, aiohttp.ClientError | OSError | TimeoutError)


async def retrying(
    call: Callable[[], Awaitable[T]],
    *,
    on_retry: Callable[[BaseException], None] = lambda _exc: None,
    first: float = _RETRY_FIRST,
    cap: float = _RETRY_MAX,
) -> T:
    """``await call()`` until it succeeds or fails for a non-transient reason (raised).
    No attempt limit, like a controller's work queue: cancel the caller to stop."""
    delay = first
    while True:
        try:
            return await call()
        except Exception as exc:
            if not transient(exc):
                raise
            on_retry(exc)
        await asyncio.sleep(delay)
        delay = min(cap, delay * 2)


async def watch_objects(
    api: client.ApiClient,
    list_call: Callable[..., Awaitable[Any]],
    args: tuple[Any, ...],
    selector: Mapping[str, str],
    on_event: Callable[[str, dict[str, Any]], None],
    on_list: Callable[[list[dict[str, Any]]], None],
) -> None:
    """List, then watch from the list's resourceVersion, forever; relist when the version
    expires (410). Objects reach the callbacks as plain dicts (camelCase keys)."""
    while True:
        listed = await list_call(*args, **selector, _request_timeout=API_TIMEOUT)
        body = listed
        if not isinstance(body, dict):
            body = api.sanitize_for_serialization(listed)
        on_list(list(body.get("items") or []))
        version = body["metadata"]["resourceVersion"]
        while True:
            stream = watch.Watch()
            try:
                async for event in stream.stream(
                    list_call,
                    *args,
                    **selector,
                    resource_version=version,
                    timeout_seconds=_WATCH_SECONDS,
                    allow_watch_bookmarks=True,
                ):
                    obj = event["raw_object"]
                    version = obj.get("metadata", {}).get("resourceVersion", version)
                    if event["type"] != "BOOKMARK":
                        on_event(event["type"], obj)
            except ApiException as exc:
                if exc.status == 410:
                    break  # too old: relist
                raise
            finally:
                await stream.close()
