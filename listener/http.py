"""ARC's HTTP policy for GitHub and the Actions service: its User-Agent, its error bodies, the
single retry policy (ARC's, see docs/wire-protocol.md §2) and the session-create waits.

The mechanism (client construction with TLS, Go's proxy rules and deadlines; one attempt
under a deadline; the error tree) is :mod:`base.http`; this module decides what to do with
what comes back. Everything that talks to GitHub or the Actions service goes through
:func:`send`; no other module retries an HTTP call.

Retry policy (:func:`send`): 5 attempts; waits 1, 2, 4, 8 s (capped at 30 s) or the server's
``Retry-After`` on 429/503; retries transport failures except certificate and request errors,
429 and every 5xx except 501; request bodies are rebuilt and replayed for every attempt;
exhaustion raises :class:`RetriesExhaustedError` instead of returning the last response.
Deliberate difference: ``Retry-After`` is capped at ``RETRY_AFTER_MAX`` (Go does not cap it).

This module is the tenacity layer for HTTP calls; the client factory and Go's proxy rules live
in base/http.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    RetryError,
    retry_if_exception,
    retry_if_result,
    stop_after_attempt,
)

from base.backoff import exponential
from base.http.client import (
    Client,
    Request,
    Response,
    Timeout,
    package_version,
    redact_url,
    send_once,
)
from base.http.errors import HTTPError, TransportError
from base.http.headers import retry_after
from listener.errors import (
    ActionsHTTPError,
    RetriesExhaustedError,
    UnauthorizedError,
    is_retryable_status,
)
from listener.wire import WireError, decode_json

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
"""``asyncio.sleep``-compatible; injected so tests take no wall time."""

Clock = Callable[[], float]
"""Seconds; ``time.time`` for wall-clock uses, ``time.monotonic`` for elapsed-time uses."""

ATTEMPTS = 5  # ARC: RetryMax 4
RETRY_WAIT_MIN = 1.0
RETRY_WAIT_MAX = 30.0
RETRY_AFTER_MAX = 300.0  # a server asking for longer than Go's per-attempt limit is not obeyed

# The service holds a long poll for about 50 s before answering 202; the read limit leaves
# ample room for that and for a slow first byte after it.
LONG_POLL_TIMEOUT = Timeout(30.0, connect=10.0, read=90.0)

DEFAULT_DEADLINE = 60.0
"""Upper bound on one whole attempt (connect, send, wait, read the body), in seconds."""
LONG_POLL_DEADLINE = 120.0

_AUTH_STATUSES = frozenset({401, 403})
_RETRY_AFTER_STATUSES = frozenset({429, 503})
_DISTRIBUTION = "capacity-listener"
_MAX_ERROR_BODY = 2000


# --- User-Agent --------------------------------------------------------------------------------


def user_agent(scale_set_id: int, *, arc_version: str = "") -> str:
    """The User-Agent: ARC's compact JSON document, filled in honestly.

    GitHub parses this shape (field names and order as ARC's scaleset client writes them), so
    it is kept. The values say what is really talking: ``system`` is the ARC deployment and
    ``version`` the ARC release it runs (``LISTENER_ARC_VERSION``; ``unknown`` when not
    given; its commit is not known here), while ``subsystem`` and ``build_version`` name this
    listener and its own version where ARC would put ``ghalistener`` and the scaleset module.
    """
    return json.dumps(
        {
            "system": "actions-runner-controller",
            "version": arc_version or "unknown",
            "commit_sha": "unknown",
            "scale_set_id": scale_set_id,
            "subsystem": _DISTRIBUTION,
            "build_version": package_version(),
            "build_commit_sha": "unknown",
            "kind": "scaleset",
        },
        separators=(",", ":"),
    )


# --- errors ------------------------------------------------------------------------------------


def error_from_response(response: Response) -> ActionsHTTPError:
    """Build the error for an unexpected status (docs/wire-protocol.md §2)."""
    type_name, message = _error_body(response)
    cls = UnauthorizedError if response.status_code == 401 else ActionsHTTPError
    return cls(
        response.status_code,
        type_name,
        message,
        response.headers.get("ActivityId", ""),
        response.headers.get("X-GitHub-Request-Id", ""),
        method=response.request.method,
        url=redact_url(response.request.url),
    )


def _error_body(response: Response) -> tuple[str, str]:
    # A proxy or load balancer can answer with a whole HTML page; keep a bounded excerpt.
    raw = response.content[:_MAX_ERROR_BODY].removeprefix(b"\xef\xbb\xbf")
    text = raw.decode("utf-8", "replace").strip()
    if "text/plain" in response.headers.get("Content-Type", "") or not text:
        return "", text
    try:
        body = decode_json(response.content)
    except WireError:
        return "", text
    if not isinstance(body, dict):
        return "", text
    folded = {str(k).lower(): v for k, v in body.items()}
    type_name, message = folded.get("typename"), folded.get("message")
    return (
        type_name[:_MAX_ERROR_BODY] if isinstance(type_name, str) else "",
        message[:_MAX_ERROR_BODY] if isinstance(message, str) else "",
    )


# --- retry policy ------------------------------------------------------------------------------


async def send(
    client: Client,
    build_request: Callable[[], Request],
    *,
    retry_auth_errors: bool = False,
    sleep: Sleep = asyncio.sleep,
    clock: Clock = time.time,
    deadline: float = DEFAULT_DEADLINE,
) -> Response:
    """Send with ARC's retry policy; returns the first non-retryable response.

    ``build_request`` is called once per attempt so bodies and headers are fresh (and the
    same). ``retry_auth_errors`` also retries 401/403 (runner-registration only, where a new
    registration token may take a moment to become valid). ``clock`` (wall seconds) is only
    used to turn an HTTP-date ``Retry-After`` into a wait.

    Raises TransportError for a non-retryable transport failure and RetriesExhaustedError
    when every attempt failed. Cancellation propagates untouched and leaves ``client`` usable.
    """
    first = build_request()
    method, url = first.method, redact_url(first.url)
    pending = [first]

    def retryable_status(response: Response) -> bool:
        status = response.status_code
        return is_retryable_status(status) or (retry_auth_errors and status in _AUTH_STATUSES)

    def wait(state: RetryCallState) -> float:
        outcome = state.outcome
        if outcome is not None and not outcome.failed:
            response: Response = outcome.result()
            if response.status_code in _RETRY_AFTER_STATUSES:
                asked = retry_after(response.headers, clock())
                if asked is not None:
                    return min(asked, RETRY_AFTER_MAX)
        return exponential(state.attempt_number, base=RETRY_WAIT_MIN, cap=RETRY_WAIT_MAX)

    def before_sleep(state: RetryCallState) -> None:
        outcome = state.outcome
        if outcome is None:
            return
        if outcome.failed:
            what = str(outcome.exception())
        else:
            what = f"{method} {url}: status {outcome.result().status_code}"
        delay = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "%s; retrying in %.1f s (attempt %d of %d)",
            what,
            delay,
            state.attempt_number + 1,
            ATTEMPTS,
        )

    async def attempt() -> Response:
        request = pending.pop() if pending else build_request()
        return await send_once(client, request, deadline=deadline)

    retrying = AsyncRetrying(
        stop=stop_after_attempt(ATTEMPTS),
        wait=wait,
        retry=(
            retry_if_exception(lambda e: isinstance(e, TransportError) and e.transient)
            | retry_if_result(retryable_status)
        ),
        sleep=sleep,
        before_sleep=before_sleep,
    )
    try:
        response: Response = await retrying(attempt)
    except RetryError as exc:
        last = exc.last_attempt
        if last.failed:
            error = last.exception()
            assert isinstance(error, HTTPError)
        else:
            error = error_from_response(last.result())
        raise RetriesExhaustedError(method, url, ATTEMPTS, error) from error
    return response


SESSION_LEASE = 60.0
"""How long the service keeps a session whose owner went silent (seconds; the default of
``LISTENER_SESSION_LEASE``). GitHub does not document it; about a minute is what the loop's
keep-alive already assumes."""

_FAR_STEP = 5.0  # between retries while the old session's lease is far from over
_NEAR_STEP = 2.0  # around the moment it runs out
_NEAR_BEFORE = 15.0  # the near window opens this long before the latest possible expiry...
_NEAR_AFTER = 10.0  # ...and closes this long after it (the service's sweep may lag)
_AFTER_BASE = 5.0  # then: a live listener holds the session, back off from here...
_AFTER_CAP = 60.0  # ...to this


def conflict_wait(elapsed: float, after_attempts: int, *, lease: float) -> float:
    """The wait before the next session create, ``elapsed`` seconds after the first 409.

    A 409 means some session is live. If its owner is dead (SIGKILL, node loss), the
    service expires it ``lease`` seconds after it last heard from it, which was before our
    first 409: so it ends at the latest ``lease`` after that, usually a few seconds earlier
    (the time the pod took to come back). The schedule follows that: a retry every 5 s
    while the end is far, every 2 s from ``_NEAR_BEFORE`` before it to ``_NEAR_AFTER`` after
    it, so a new session follows the old one's expiry within one step; after that the
    session evidently belongs to a live listener (or the lease is longer than configured)
    and the waits grow from 5 s to 60 s. ``after_attempts`` counts the tries made after the
    near window (1 = the first). A far wait never jumps past the start of the near window.
    """
    near_from = max(0.0, lease - _NEAR_BEFORE)
    if elapsed < near_from:
        return min(_FAR_STEP, near_from - elapsed)
    if elapsed < lease + _NEAR_AFTER:
        return _NEAR_STEP
    return exponential(after_attempts, base=_AFTER_BASE, cap=_AFTER_CAP)


async def retry_on_conflict(
    call: Callable[[], Awaitable[Response]],
    *,
    give_up_after: float,
    lease: float = SESSION_LEASE,
    sleep: Sleep = asyncio.sleep,
    clock: Clock = time.monotonic,
    jitter: Callable[[], float] | None = None,
) -> tuple[Response, float]:
    """Repeat ``call`` while it answers 409, for at most ``give_up_after`` seconds.

    Used for session create: a dead listener's session blocks a new one until the service
    expires it, and ARC's answer (exit and be recreated at once) only produces a crash loop.
    The waits follow the old session's lease (:func:`conflict_wait`), each up to 20% shorter
    at random (so listeners restarted together do not retry in lock-step, and a wait never
    overshoots its step), and never past the deadline; the last try happens at the
    deadline. The 409 says nothing about when the session ends (no ``Retry-After``, no
    expiry in the body), hence the lease. Returns the final response (still 409 when we gave
    up) and the seconds spent.
    """
    start = clock()
    spread = jitter if jitter is not None else random.random
    after_near = [0]  # tries made after the near window, for the back-off's exponent

    def elapsed() -> float:
        return clock() - start

    def wait(_state: RetryCallState) -> float:
        now = elapsed()
        if now >= lease + _NEAR_AFTER:
            after_near[0] += 1
        step = conflict_wait(now, after_near[0], lease=lease)
        return max(0.0, min(step * (1.0 - 0.2 * spread()), give_up_after - now))

    def before_sleep(state: RetryCallState) -> None:
        delay = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "session conflict (409): another session is active for this scale set; "
            "retrying in %.1f s (%.0f s of %.0f s used)",
            delay,
            elapsed(),
            give_up_after,
        )

    retrying = AsyncRetrying(
        stop=lambda _state: elapsed() >= give_up_after,
        wait=wait,
        retry=retry_if_result(lambda response: response.status_code == 409),
        sleep=sleep,
        before_sleep=before_sleep,
    )

    async def attempt() -> Response:
        # tenacity only awaits what it can tell is a coroutine function; ``call`` may be a
        # plain lambda returning an awaitable.
        return await call()

    try:
        response: Response = await retrying(attempt)
    except RetryError as exc:
        response = exc.last_attempt.result()
    return response, elapsed()


GONE_TIMEOUT = 600.0
"""Seconds to keep re-checking a scale set the service answers 404 for (the default of
``LISTENER_SCALE_SET_GONE_TIMEOUT``)."""


async def retry_while_gone(
    call: Callable[[], Awaitable[Response]],
    *,
    give_up_after: float,
    on_first: Callable[[Response], None],
    sleep: Sleep = asyncio.sleep,
    clock: Clock = time.monotonic,
) -> tuple[Response, float]:
    """Repeat ``call`` while it answers 404, for at most ``give_up_after`` seconds, waiting
    5 s doubling to 60 s; ``on_first`` sees the first 404 (the one log line).

    Used for session create, whose 404 means the scale set is gone. That is usually for
    good (deleted on GitHub's side; only ARC's controller can register it again), but it has
    also been answered for a while during an Actions-service outage. Exiting at once would
    make the controller recreate the pod at once, over and over, each time running the whole
    auth chain; waiting bounds that to one restart per ``give_up_after`` and rides out a
    transient 404. Returns the final response (still 404 when we gave up) and the seconds
    spent.
    """
    start = clock()

    def elapsed() -> float:
        return clock() - start

    told = False

    retrying = AsyncRetrying(
        stop=lambda _state: elapsed() >= give_up_after,
        wait=lambda state: min(
            exponential(state.attempt_number, base=_AFTER_BASE, cap=_AFTER_CAP),
            max(0.0, give_up_after - elapsed()),
        ),
        retry=retry_if_result(lambda response: response.status_code == 404),
        sleep=sleep,
    )

    async def attempt() -> Response:
        nonlocal told
        response = await call()
        if response.status_code == 404 and not told:
            told = True
            on_first(response)
        return response

    try:
        response: Response = await retrying(attempt)
    except RetryError as exc:
        response = exc.last_attempt.result()
    return response, elapsed()
