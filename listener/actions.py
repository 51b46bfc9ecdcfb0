"""Actions-service client: message session, long poll, ack, acquirejobs, scale set
(docs/wire-protocol.md §3).

Two kinds of calls:

- *Admin* calls (session create/refresh/delete, acquirejobs, scale set) go to
  ``{actions service url}/_apis/runtime/runnerscalesets/...`` with ``api-version=6.0-preview``
  in the query and the admin token from :class:`~listener.github_auth.GitHubAuth`, which
  refreshes it when due. acquirejobs then swaps in the message-queue token, as ARC does.
- *Queue* calls (GET and DELETE message) go to the session's ``messageQueueUrl`` exactly as
  given, with the message-queue token. A 401 there means the queue token expired: the
  session is refreshed (PATCH) and the call repeated; if the new queue token is refused too,
  the admin token is renewed through the whole auth chain, the session refreshed once more
  and the call repeated a last time (ARC gives up after the first refresh). An admin call
  refused with 401 is repeated once with a renewed admin token.

Transport retries come from :func:`listener.http.send`; the only other retries here are the
401 renewals above, the bounded waits at session create on a 409 (another session is live;
ARC exits and the pod crash-loops until it expires) and on a 404 (the scale set is gone; ARC
crash-loops for good), and one new session when the service answers 404 for the current one
on a refresh, a poll or an ack (it evicted the session; ARC exits).

:meth:`ActionsClient.get_message` may be cancelled at any point (the loop abandons a poll when
the advertised capacity changes); nothing is half-updated by that and the client stays usable.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from base.http.client import URL, Client, Request, Response, redact_url
from base.http.errors import HTTPError
from listener.errors import (
    ProtocolError,
    ScaleSetGoneError,
    SessionConflictError,
)
from listener.github_auth import AdminConnection
from listener.http import (
    DEFAULT_DEADLINE,
    GONE_TIMEOUT,
    LONG_POLL_DEADLINE,
    LONG_POLL_TIMEOUT,
    SESSION_LEASE,
    Clock,
    Sleep,
    error_from_response,
    retry_on_conflict,
    retry_while_gone,
    send,
)
from listener.wire import (
    Message,
    ScaleSetInfo,
    Session,
    WireError,
    decode_json,
    parse_acquired_jobs,
    parse_message,
    parse_scale_set,
    parse_session,
)

log = logging.getLogger(__name__)

API_VERSION = "6.0-preview"
NIL_SESSION_ID = "00000000-0000-0000-0000-000000000000"
MAX_CAPACITY_HEADER = "X-ScaleSetMaxCapacity"
_SCALE_SETS = "_apis/runtime/runnerscalesets"

T = TypeVar("T")


class AdminConnectionSource(Protocol):
    """``GitHubAuth``: hands out a fresh-enough admin connection."""

    async def admin_connection(self) -> AdminConnection: ...

    async def renew_admin_connection(self) -> AdminConnection:
        """Run the whole auth chain now, whatever the current token's ``exp`` says."""
        ...


def admin_url(base: str, path: str) -> URL:
    """``url.JoinPath(base, path)`` plus ``api-version`` when absent; keys sorted like Go's."""
    url = URL(base)
    params = list(url.params.multi_items())
    if not any(key == "api-version" for key, _ in params):
        params.append(("api-version", API_VERSION))
    params.sort(key=lambda item: item[0])  # Go's url.Values.Encode; stable for repeated keys
    return url.copy_with(path=f"{url.path.rstrip('/')}/{path.lstrip('/')}", params=params)


def service_generation(message_queue_url: str) -> str:
    """Which generation of the Actions service a session is on, from its queue URL.

    ``broker``: GitHub.com's current service (``…/rest/scalesets/message``, no query; jobs
    are assigned directly up to ``X-ScaleSetMaxCapacity``, there is no acquire step).
    ``pipelines``: the ARC-era service and GHES (``…/messagequeues/{id}/messages?sessionId=``;
    jobs may be offered with ``JobAvailable`` and acquired). Anything else is ``unknown``.
    The listener handles both the same way; this is for the start-up log line only.
    """
    path = URL(message_queue_url).path.rstrip("/")
    if path.endswith("/scalesets/message"):
        return "broker"
    if "/messagequeues/" in path:
        return "pipelines"
    return "unknown"


def _constant(value: int) -> Callable[[], int]:
    return lambda: value


def _json_body(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _parsed(parse: Callable[[bytes], T], response: Response) -> T:
    try:
        return parse(response.content)
    except WireError as exc:
        where = f"{response.request.method} {redact_url(response.request.url)}"
        raise ProtocolError(f"{where}: {exc}") from None


def _first_line(response: Response) -> str:
    """The start of a response body, for a log line (bodies here carry no secrets)."""
    lines = response.content[:120].decode("utf-8", "replace").splitlines()
    return lines[0] if lines else ""


class ActionsClient:
    """One scale set's session with the Actions service (like scaleset's session client)."""

    def __init__(
        self,
        client: Client,
        auth: AdminConnectionSource,
        scale_set_id: int,
        *,
        sleep: Sleep = asyncio.sleep,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
        on_secret: Callable[[str], None] = lambda _secret: None,
    ) -> None:
        """``on_secret`` gets every message-queue token (e.g. to mask it in logs)."""
        self._client = client
        self._auth = auth
        self._scale_set_id = scale_set_id
        self._sleep = sleep
        self._clock = clock
        self._wall_clock = wall_clock
        self._on_secret = on_secret
        self._session: Session | None = None
        self._refresh_lock = asyncio.Lock()
        self._create_args: tuple[str, float, float, float] = ("", 0.0, SESSION_LEASE, 0.0)
        self._recreating: asyncio.Task[Session] | None = None
        self._acquire_404_seen = False

    @property
    def session(self) -> Session | None:
        """The current session (replaced on every refresh), or None."""
        return self._session

    def _require_session(self) -> Session:
        if self._session is None:
            raise RuntimeError("no message session: call create_session first")
        return self._session

    # --- admin calls -------------------------------------------------------------------------

    async def _admin(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        queue_token: str | None = None,
    ) -> Response:
        connection = await self._auth.admin_connection()
        response = await self._send_admin(connection, method, path, body, queue_token)
        if response.status_code == 401 and queue_token is None:
            # The admin token was refused although its exp is still ahead (revoked, or the
            # service rotated its keys). ARC exits here; one fresh token is cheaper than a
            # pod restart and a 409 on the next session.
            log.info("admin token refused; running the auth chain again")
            connection = await self._auth.renew_admin_connection()
            response = await self._send_admin(connection, method, path, body, queue_token)
        return response

    async def _send_admin(
        self,
        connection: AdminConnection,
        method: str,
        path: str,
        body: bytes | None,
        queue_token: str | None,
    ) -> Response:
        url = admin_url(connection.actions_url, path)
        headers = {
            # ARC sends the content type even on requests without a body.
            "Content-Type": "application/json",
            "Authorization": f"Bearer {queue_token or connection.admin_token}",
        }
        return await send(
            self._client,
            lambda: self._client.build_request(method, url, content=body, headers=headers),
            sleep=self._sleep,
            clock=self._wall_clock,
        )

    async def create_session(
        self,
        owner: str,
        *,
        conflict_timeout: float,
        lease: float = SESSION_LEASE,
        gone_timeout: float = GONE_TIMEOUT,
    ) -> Session:
        """Create the message session; a 409 is retried for up to ``conflict_timeout`` s, on
        a schedule that follows the blocking session's ``lease``, and a 404 (the scale set
        is gone) for up to ``gone_timeout`` s (listener.http). The same settings serve when
        the session has to be created again (:meth:`_recreate_session`)."""
        self._create_args = (owner, conflict_timeout, lease, gone_timeout)
        return await self._create_session()

    async def _create_session(self) -> Session:
        owner, conflict_timeout, lease, gone_timeout = self._create_args
        path = f"{_SCALE_SETS}/{self._scale_set_id}/sessions"
        body = _json_body({"sessionId": NIL_SESSION_ID, "ownerName": owner})
        waited = 0.0

        async def post() -> Response:
            nonlocal waited
            response, waited = await retry_on_conflict(
                lambda: self._admin("POST", path, body=body),
                give_up_after=conflict_timeout,
                lease=lease,
                sleep=self._sleep,
                clock=self._clock,
            )
            return response

        response, gone_for = await retry_while_gone(
            post,
            give_up_after=gone_timeout,
            on_first=self._report_gone,
            sleep=self._sleep,
            clock=self._clock,
        )
        if response.status_code in (404, 409):
            error = error_from_response(response)
            kind = ScaleSetGoneError if response.status_code == 404 else SessionConflictError
            raise kind(
                error.status,
                error.type_name,
                error.message,
                error.activity_id,
                error.github_request_id,
                method=error.method,
                url=error.url,
                waited=gone_for if response.status_code == 404 else waited,
            )
        if response.status_code != 200:
            raise error_from_response(response)
        try:
            session = parse_session(response.content)
        except WireError as exc:
            await self._discard_unusable_session(response.content)
            where = f"{response.request.method} {redact_url(response.request.url)}"
            raise ProtocolError(f"{where}: {exc}") from None
        return self._store(session)

    def _report_gone(self, response: Response) -> None:
        log.error(
            "the runner scale set no longer exists on the Actions service (404 on session "
            "create); ARC's controller must register it again. Checking again until "
            "LISTENER_SCALE_SET_GONE_TIMEOUT, then exiting",
            extra={
                "scale_set_id": self._scale_set_id,
                "error": str(error_from_response(response)),
            },
        )

    async def _recreate_session(self, seen: Session, why: str) -> Session:
        """The service no longer knows the session ``seen`` (it was evicted): create a new
        one in its place. Callers that saw the same session share one create."""
        async with self._refresh_lock:
            current = self._session
            if current is not None and current.session_id != seen.session_id:
                return current
            task = self._start_recreate(seen, why)
        return await asyncio.shield(task)

    def _start_recreate(self, gone: Session, why: str) -> asyncio.Task[Session]:
        """The create as a task of its own, awaited shielded: the loop cancels polls when the
        capacity changes, and a create cancelled half-way could leave a session on the
        service that nobody holds (the next create would meet a 409). A cancelled caller's
        create finishes anyway; the next call waits for it (:meth:`_session_or_pending`)."""
        if self._recreating is None or self._recreating.done():
            self._recreating = asyncio.create_task(
                self._create_session_in_place(gone, why), name="recreate-session"
            )
        return self._recreating

    async def _session_or_pending(self) -> Session:
        if self._session is None and self._recreating is not None:
            return await asyncio.shield(self._recreating)
        return self._require_session()

    async def _create_session_in_place(self, gone: Session, why: str) -> Session:
        log.warning(
            "message session no longer exists on the service; creating a new one",
            extra={"session_id": gone.session_id, "why": why},
        )
        self._session = None  # gone: nothing to DELETE at shutdown unless a new one comes
        session = await self._create_session()
        log.info("session created again", extra={"session_id": session.session_id})
        return session

    async def _discard_unusable_session(self, body: bytes) -> None:
        """DELETE a session the service created but we cannot use (e.g. no statistics).

        Otherwise it stays until the service expires it and the next pod meets a 409. Best
        effort: the error that made the session unusable is the one reported.
        """
        try:
            fields = decode_json(body)
            raw_id = {str(k).lower(): v for k, v in fields.items()}.get("sessionid")
            session_id = uuid.UUID(str(raw_id))
        except (WireError, AttributeError, ValueError):
            return  # no session id to delete by
        if session_id.int == 0:
            return
        path = f"{_SCALE_SETS}/{self._scale_set_id}/sessions/{session_id}"
        try:
            response = await self._admin("DELETE", path)
        except HTTPError as exc:
            log.warning("could not delete the unusable session", extra={"error": str(exc)})
            return
        if response.status_code != 204:
            log.warning(
                "could not delete the unusable session",
                extra={"error": str(error_from_response(response))},
            )
        else:
            log.info("deleted the unusable session", extra={"session_id": str(session_id)})

    def _store(self, session: Session) -> Session:
        self._on_secret(session.message_queue_access_token)
        self._session = session
        return session

    async def refresh_session(self) -> Session:
        """PATCH the session: new message-queue token; replaces the stored session."""
        session = self._require_session()
        path = f"{_SCALE_SETS}/{self._scale_set_id}/sessions/{session.session_id}"
        response = await self._admin("PATCH", path)
        if response.status_code == 404:
            # Evicted on the service's side (actions/scaleset #123: "session ID that doesn't
            # exist"); ARC exits here, every ~50 minutes for some organisations.
            # The caller holds the refresh lock, so the create is started here directly.
            return await asyncio.shield(self._start_recreate(session, "404 on session refresh"))
        if response.status_code != 200:
            raise error_from_response(response)
        previous = session.statistics
        return self._store(_parsed(lambda b: parse_session(b, previous=previous), response))

    async def delete_session(self) -> None:
        """DELETE the session (204). Does nothing when there is no session."""
        session = self._session
        if session is None:
            return
        path = f"{_SCALE_SETS}/{self._scale_set_id}/sessions/{session.session_id}"
        response = await self._admin("DELETE", path)
        if response.status_code != 204:
            raise error_from_response(response)
        self._session = None

    async def get_scale_set(self, scale_set_id: int) -> ScaleSetInfo:
        """GET the runner scale set by id (its name and labels)."""
        response = await self._admin("GET", f"{_SCALE_SETS}/{scale_set_id}")
        if response.status_code != 200:
            raise error_from_response(response)
        return _parsed(parse_scale_set, response)

    async def acquire_jobs(self, request_ids: Sequence[int]) -> list[int]:
        """Acquire ``JobAvailable`` requests; returns the ids the service granted.

        A partial grant is not an error. Built as an admin call (so the admin token may be
        refreshed and ``api-version`` is added) but authorised with the queue token.
        """
        if not request_ids:
            return []
        path = f"{_SCALE_SETS}/{self._scale_set_id}/acquirejobs"
        body = _json_body([int(i) for i in request_ids])
        response = await self._with_queue_token(
            lambda session: self._admin(
                "POST", path, body=body, queue_token=session.message_queue_access_token
            )
        )
        if response.status_code == 404:
            # The broker service (GitHub.com today) assigns jobs directly and has no acquire
            # endpoint: its router answers 404 to it. A JobAvailable is then not ours to take;
            # the job stays with the service, which assigns it up to the header. Exiting here
            # (ARC does) would crash-loop the listener on every such message.
            level = logging.DEBUG if self._acquire_404_seen else logging.WARNING
            self._acquire_404_seen = True
            log.log(
                level,
                "acquirejobs answered 404; the service assigns jobs directly, none acquired",
                extra={"requested": len(request_ids), "body": _first_line(response)},
            )
            return []
        if response.status_code != 200:
            raise error_from_response(response)
        return _parsed(parse_acquired_jobs, response)

    # --- queue calls ---------------------------------------------------------------------------

    async def _with_queue_token(
        self,
        call: Callable[[Session], Awaitable[Response]],
        *,
        recreate_on_404: bool = False,
    ) -> Response:
        """Make a call authorised by the queue token; on 401 refresh the session and retry.

        ARC refreshes once and gives up when the new token is refused too. Here a second 401
        first gets a fresh admin token through the whole auth chain (the refresh may have been
        made with an admin token the service no longer honours), then one more refresh and
        one more try; a third 401 is returned to the caller. With ``recreate_on_404`` (the
        message-queue calls), a 404 means the service evicted the session: a new one is
        created and the call made once more (ARC exits). A refresh answered 404 does the
        same (:meth:`refresh_session`).
        """
        session = await self._session_or_pending()
        response = await call(session)
        for renew_admin in (False, True):
            if response.status_code != 401:
                break
            session = await self._refresh_after_401(session, renew_admin=renew_admin)
            response = await call(session)
        if response.status_code == 404 and recreate_on_404:
            method = response.request.method
            session = await self._recreate_session(session, f"404 on {method} message")
            response = await call(session)
        return response

    async def _refresh_after_401(self, seen: Session, *, renew_admin: bool = False) -> Session:
        # Calls that failed with the same token share one PATCH: whoever gets the lock second
        # finds a session that is already newer than the one it used.
        async with self._refresh_lock:
            current = self._require_session()
            if current.message_queue_access_token != seen.message_queue_access_token:
                return current
            if renew_admin:
                log.info("refreshed queue token refused too; renewing the admin token first")
                await self._auth.renew_admin_connection()
            else:
                log.info("message queue token expired; refreshing the session")
            return await self.refresh_session()

    async def _poll(
        self, session: Session, last_message_id: int, max_capacity: Callable[[], int]
    ) -> Response:
        url = URL(session.message_queue_url)
        if last_message_id > 0:
            url = url.copy_set_param("lastMessageId", str(last_message_id))
        headers = {
            "Accept": f"application/json; api-version={API_VERSION}",
            "Authorization": f"Bearer {session.message_queue_access_token}",
        }

        def build() -> Request:
            # The capacity is read as each attempt is built, so a retry (or the poll after a
            # token refresh) carries the value of that moment.
            return self._client.build_request(
                "GET",
                url,
                headers={**headers, MAX_CAPACITY_HEADER: str(max_capacity())},
                timeout=LONG_POLL_TIMEOUT,
            )

        return await send(
            self._client,
            build,
            sleep=self._sleep,
            clock=self._wall_clock,
            deadline=LONG_POLL_DEADLINE,
        )

    async def get_message(
        self, last_message_id: int, max_capacity: int | Callable[[], int]
    ) -> Message | None:
        """Long-poll for the next message; None when the service answers 202 (nothing new).

        ``lastMessageId`` is sent only when ``last_message_id > 0``; ``max_capacity`` is the
        ``X-ScaleSetMaxCapacity`` header value, or a function called for it each time a
        request is built. Safe to cancel.
        """
        if isinstance(max_capacity, int):
            max_capacity = _constant(max_capacity)
        capacity = max_capacity
        response = await self._with_queue_token(
            lambda session: self._poll(session, last_message_id, capacity), recreate_on_404=True
        )
        if response.status_code == 202:
            return None
        if response.status_code != 200:
            raise error_from_response(response)
        return _parsed(parse_message, response)

    async def _ack(self, session: Session, message_id: int) -> Response:
        url = URL(session.message_queue_url)
        url = url.copy_with(path=f"{url.path}/{message_id}")  # the queue URL's query is kept
        headers = {
            "Content-Type": "application/json",
            "Authorization": f"Bearer {session.message_queue_access_token}",
        }
        return await send(
            self._client,
            lambda: self._client.build_request("DELETE", url, headers=headers),
            sleep=self._sleep,
            clock=self._wall_clock,
            deadline=DEFAULT_DEADLINE,
        )

    async def delete_message(self, message_id: int) -> None:
        """Ack (DELETE) a message: 204 expected."""
        response = await self._with_queue_token(
            lambda session: self._ack(session, message_id), recreate_on_404=True
        )
        if response.status_code != 204:
            raise error_from_response(response)
