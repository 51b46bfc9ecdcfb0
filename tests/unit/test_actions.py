"""listener.actions: sessions, long poll, ack, acquirejobs, scale set
(docs/wire-protocol.md §3).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
import respx

from base.http.client import make_client
from listener.actions import ActionsClient, admin_url, service_generation
from listener.config import TokenCredentials
from listener.errors import (
    ActionsHTTPError,
    ProtocolError,
    RetriesExhaustedError,
    SessionConflictError,
    UnauthorizedError,
)
from listener.github_auth import AdminConnection, GitHubAuth
from listener.github_target import parse_github_target
from listener.http import LONG_POLL_TIMEOUT
from tests.unit.listener_fixtures import (
    SESSION_ID,
    STATISTICS,
    UA,
    FakeTime,
    admin_jwt,
    ok_response,
    read_head,
    serve,
    session_json,
)

ACTIONS = "https://pipelines.example/tenant/"
SCALE_SETS = "https://pipelines.example/tenant/_apis/runtime/runnerscalesets"
SESSIONS = f"{SCALE_SETS}/7/sessions"
API = {"api-version": "6.0-preview"}
QUEUE = "https://queue.example/_apis/q"
ADMIN_TOKEN = "admin-token-abc"


class StubAuth:
    """Stands in for GitHubAuth; counts how often a connection was asked for."""

    def __init__(self, actions_url: str = ACTIONS) -> None:
        self.calls = 0
        self.renewals = 0
        self.connection = AdminConnection(actions_url, ADMIN_TOKEN, expires_at=2e9)

    async def admin_connection(self) -> AdminConnection:
        self.calls += 1
        return self.connection

    async def renew_admin_connection(self) -> AdminConnection:
        self.renewals += 1
        self.connection = AdminConnection(
            self.connection.actions_url, f"{ADMIN_TOKEN}-{self.renewals}", expires_at=2e9
        )
        return self.connection


@pytest.fixture
def auth() -> StubAuth:
    return StubAuth()


@pytest.fixture
def actions(client: httpx.AsyncClient, auth: StubAuth, fake: FakeTime) -> ActionsClient:
    return ActionsClient(client, auth, 7, sleep=fake.sleep, clock=fake.clock, wall_clock=fake.clock)


def message_json(message_id: int = 42, jobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "messageType": "RunnerScaleSetJobMessages",
        "statistics": STATISTICS,
        "body": json.dumps(jobs or []),
    }


async def with_session(actions: ActionsClient) -> None:
    route = respx.post(SESSIONS, params=API).respond(200, json=session_json())
    await actions.create_session("listener-pod", conflict_timeout=0)
    route.reset()
    respx.routes.clear()


# --- URLs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        (
            "https://p.example/t/",
            "https://p.example/t/_apis/runtime/runnerscalesets/7/sessions?api-version=6.0-preview",
        ),
        (
            "https://p.example/t",
            "https://p.example/t/_apis/runtime/runnerscalesets/7/sessions?api-version=6.0-preview",
        ),
        (
            "https://p.example/t?z=1&a=2",
            "https://p.example/t/_apis/runtime/runnerscalesets/7/sessions"
            "?a=2&api-version=6.0-preview&z=1",
        ),
        (
            "https://p.example/t?api-version=7.0",
            "https://p.example/t/_apis/runtime/runnerscalesets/7/sessions?api-version=7.0",
        ),
    ],
)
def test_admin_url_joins_path_and_sorts_query_like_go(base: str, expected: str) -> None:
    assert str(admin_url(base, "_apis/runtime/runnerscalesets/7/sessions")) == expected


# --- create session -----------------------------------------------------------------------------


@respx.mock
async def test_create_session_request_and_result(actions: ActionsClient, auth: StubAuth) -> None:
    route = respx.post(SESSIONS, params=API).respond(
        200, content=b"\xef\xbb\xbf" + json.dumps(session_json()).encode()
    )
    session = await actions.create_session("listener-pod", conflict_timeout=0)

    assert session.session_id == SESSION_ID
    assert session.message_queue_access_token == "queue-token-1"
    assert session.statistics.total_assigned_jobs == 2
    assert actions.session is session
    assert auth.calls == 1
    request = route.calls.last.request
    assert str(request.url) == f"{SESSIONS}?api-version=6.0-preview"
    assert request.content == (
        b'{"sessionId":"00000000-0000-0000-0000-000000000000","ownerName":"listener-pod"}'
    )
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Authorization"] == f"Bearer {ADMIN_TOKEN}"
    assert request.headers["User-Agent"] == UA


@respx.mock
async def test_create_session_409_then_success(actions: ActionsClient, fake: FakeTime) -> None:
    route = respx.post(SESSIONS, params=API).mock(
        side_effect=[
            httpx.Response(409, json={"message": "already has an active session"}),
            httpx.Response(409, json={"message": "already has an active session"}),
            httpx.Response(200, json=session_json()),
        ]
    )
    session = await actions.create_session("listener-pod", conflict_timeout=300)
    assert session.session_id == SESSION_ID
    assert route.call_count == 3
    assert len(fake.sleeps) == 2
    assert all(4 <= s <= 5 for s in fake.sleeps)  # the far step, up to 20 % shorter
    # Every attempt sends the same body.
    assert len({call.request.content for call in route.calls}) == 1


@pytest.mark.parametrize("expires_after", [45.0, 50.0, 55.0, 58.5, 60.0])
@respx.mock
async def test_create_session_409_follows_the_old_sessions_lease(
    actions: ActionsClient, fake: FakeTime, expires_after: float
) -> None:
    """A SIGKILLed listener's session lives until the service's lease runs out, at most a
    lease (60 s by default) after our first 409: near that moment the retries come every
    ≤ 2 s, so the new session follows the old one's expiry by ≤ 3 s instead of landing on
    an exponential step (the old 5-10-20 s schedule made it 35-42 s for a 30 s wait)."""
    start = fake.now

    def answer(_request: httpx.Request) -> httpx.Response:
        if fake.now - start < expires_after:
            return httpx.Response(409, json={"message": "already has an active session"})
        return httpx.Response(200, json=session_json())

    respx.post(SESSIONS, params=API).mock(side_effect=answer)
    await actions.create_session("listener-pod", conflict_timeout=600)
    assert fake.now - start - expires_after <= 3.0


@pytest.mark.parametrize("expires_after", [0.5, 7.0, 21.0, 33.0])
@respx.mock
async def test_create_session_409_early_expiry_is_found_within_one_far_step(
    actions: ActionsClient, fake: FakeTime, expires_after: float
) -> None:
    # The old listener may have died a while before we started; its lease then ends early.
    start = fake.now

    def answer(_request: httpx.Request) -> httpx.Response:
        if fake.now - start < expires_after:
            return httpx.Response(409)
        return httpx.Response(200, json=session_json())

    respx.post(SESSIONS, params=API).mock(side_effect=answer)
    await actions.create_session("listener-pod", conflict_timeout=600)
    assert fake.now - start - expires_after <= 5.0


@respx.mock
async def test_create_session_409_backs_off_once_the_lease_is_over(
    actions: ActionsClient, fake: FakeTime
) -> None:
    # A session that outlives the lease belongs to a live listener (or the lease is longer
    # than configured): the retries thin out again instead of hammering the service.
    route = respx.post(SESSIONS, params=API).respond(409)
    with pytest.raises(SessionConflictError):
        await actions.create_session("listener-pod", conflict_timeout=600)
    assert sum(fake.sleeps) == pytest.approx(600)
    assert route.call_count <= 50  # about 24 in the lease's first 70 s, then 5 s to 60 s
    assert all(s >= 30 for s in fake.sleeps[-5:-1])


@respx.mock
async def test_create_session_409_until_timeout(actions: ActionsClient, fake: FakeTime) -> None:
    type_name = (
        "GitHub.Actions.Runtime.WebApi.RunnerScaleSetSessionConflictException, "
        "GitHub.Actions.Runtime.WebApi"
    )
    route = respx.post(SESSIONS, params=API).respond(
        409,
        json={
            "typeName": type_name,
            "message": "The actions runner scaleset linux already has an active session.",
        },
        headers={"ActivityId": "act-9"},
    )
    with pytest.raises(SessionConflictError) as info:
        await actions.create_session("listener-pod", conflict_timeout=120)
    error = info.value
    assert error.status == 409
    assert error.type_name == type_name
    assert error.activity_id == "act-9"
    assert error.waited == pytest.approx(120)
    assert sum(fake.sleeps) == pytest.approx(120)
    assert route.call_count == len(fake.sleeps) + 1
    assert "still conflicting after 120 s" in str(error)
    assert "already has an active session" in str(error)
    assert ADMIN_TOKEN not in str(error)
    assert actions.session is None


@respx.mock
async def test_create_session_409_with_no_budget_fails_at_once(
    actions: ActionsClient, fake: FakeTime
) -> None:
    route = respx.post(SESSIONS, params=API).respond(409)
    with pytest.raises(SessionConflictError):
        await actions.create_session("listener-pod", conflict_timeout=0)
    assert (route.call_count, fake.sleeps) == (1, [])


@respx.mock
async def test_create_session_refreshes_admin_token_per_conflict_attempt(
    actions: ActionsClient, auth: StubAuth
) -> None:
    respx.post(SESSIONS, params=API).mock(
        side_effect=[httpx.Response(409), httpx.Response(200, json=session_json())]
    )
    await actions.create_session("listener-pod", conflict_timeout=60)
    assert auth.calls == 2  # a long conflict wait must not outlive the admin token


@respx.mock
async def test_create_session_5xx_exhausted(actions: ActionsClient, fake: FakeTime) -> None:
    route = respx.post(SESSIONS, params=API).respond(503)
    with pytest.raises(RetriesExhaustedError):
        await actions.create_session("listener-pod", conflict_timeout=300)
    assert route.call_count == 5
    assert fake.sleeps == [1, 2, 4, 8]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (session_json(session_id="00000000-0000-0000-0000-000000000000"), "nil session id"),
        ({**session_json(), "statistics": None}, "statistics: missing from the session"),
    ],
)
@respx.mock
async def test_create_session_bad_sessions(
    actions: ActionsClient, body: dict[str, Any], message: str
) -> None:
    respx.post(SESSIONS, params=API).respond(200, json=body)
    respx.delete(f"{SESSIONS}/{SESSION_ID}", params=API).respond(204)
    with pytest.raises(ProtocolError, match=message) as info:
        await actions.create_session("listener-pod", conflict_timeout=0)
    assert str(info.value).startswith(f"POST {SESSIONS}: ")
    assert actions.session is None


@pytest.mark.parametrize(
    ("missing", "delete_status"),
    [
        pytest.param("statistics", 204, id="deleted"),
        # A failed delete must not hide the first error.
        pytest.param("messageQueueUrl", 404, id="delete-fails"),
    ],
)
@respx.mock
async def test_an_unusable_created_session_is_deleted_before_the_error(
    actions: ActionsClient, missing: str, delete_status: int
) -> None:
    # The service holds a session now: leaving it would make the next pod meet a 409.
    body = {k: v for k, v in session_json().items() if k != missing}
    respx.post(SESSIONS, params=API).respond(200, json=body)
    delete = respx.delete(f"{SESSIONS}/{SESSION_ID}", params=API).respond(delete_status)
    with pytest.raises(ProtocolError, match=f"{missing}: missing"):
        await actions.create_session("listener-pod", conflict_timeout=0)
    assert delete.call_count == 1
    assert delete.calls.last.request.headers["Authorization"] == f"Bearer {ADMIN_TOKEN}"
    assert actions.session is None


@respx.mock
async def test_create_session_other_4xx(actions: ActionsClient) -> None:
    respx.post(SESSIONS, params=API).respond(
        404, text="scale set not found", headers={"Content-Type": "text/plain"}
    )
    with pytest.raises(ActionsHTTPError, match="status 404: scale set not found"):
        await actions.create_session("listener-pod", conflict_timeout=300)


# --- refresh and delete session -----------------------------------------------------------------


@respx.mock
async def test_refresh_session_patches_and_replaces(actions: ActionsClient) -> None:
    await with_session(actions)
    route = respx.patch(f"{SESSIONS}/{SESSION_ID}", params=API).respond(
        200, json=session_json(token="queue-token-2")
    )
    session = await actions.refresh_session()
    assert session.message_queue_access_token == "queue-token-2"
    assert actions.session is session
    request = route.calls.last.request
    assert request.content == b""
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Authorization"] == f"Bearer {ADMIN_TOKEN}"


@respx.mock
async def test_refresh_without_statistics_is_accepted(actions: ActionsClient) -> None:
    # Only the initial session needs statistics (ARC checks them once, before its loop); a
    # refresh answered without them keeps the session usable.
    await with_session(actions)
    refreshed = {k: v for k, v in session_json(token="queue-token-2").items() if k != "statistics"}
    respx.patch(f"{SESSIONS}/{SESSION_ID}", params=API).respond(200, json=refreshed)
    poll = respx.get(url__startswith=QUEUE).mock(
        side_effect=[httpx.Response(401), httpx.Response(202)]
    )
    assert await actions.get_message(0, 10) is None
    assert poll.calls.last.request.headers["Authorization"] == "Bearer queue-token-2"
    assert actions.session is not None
    assert actions.session.statistics.total_assigned_jobs == STATISTICS["totalAssignedJobs"]


@respx.mock
async def test_delete_session(actions: ActionsClient) -> None:
    await with_session(actions)
    route = respx.delete(f"{SESSIONS}/{SESSION_ID}", params=API).respond(204)
    await actions.delete_session()
    assert route.call_count == 1
    assert route.calls.last.request.headers["Authorization"] == f"Bearer {ADMIN_TOKEN}"
    assert actions.session is None
    await actions.delete_session()  # nothing left to delete: no request
    assert route.call_count == 1


@respx.mock
async def test_delete_expired_session_reports_the_service_error(actions: ActionsClient) -> None:
    await with_session(actions)
    respx.delete(f"{SESSIONS}/{SESSION_ID}", params=API).respond(
        400,
        json={
            "typeName": "GitHub.Actions.Runtime.WebApi.RunnerScaleSetSessionExpiredException",
            "message": f"The session identifier {SESSION_ID} is not valid.",
        },
    )
    with pytest.raises(ActionsHTTPError, match="SessionExpiredException"):
        await actions.delete_session()


async def test_calls_before_create_session_are_a_programming_error(
    actions: ActionsClient,
) -> None:
    with pytest.raises(RuntimeError, match="create_session"):
        await actions.get_message(0, 1)


# --- long poll ----------------------------------------------------------------------------------


@respx.mock
async def test_get_message_request_shape(actions: ActionsClient, auth: StubAuth) -> None:
    await with_session(actions)
    calls_before = auth.calls
    route = respx.get(url__startswith=QUEUE).respond(200, json=message_json())
    message = await actions.get_message(41, 2147483647)
    assert message is not None
    assert message.message_id == 42

    request = route.calls.last.request
    assert request.url.params.get("sessionId") == "abc"  # the queue URL's own query is kept
    assert request.url.params.get("lastMessageId") == "41"
    assert "api-version" not in request.url.params  # it goes in Accept for this call
    assert request.headers["Accept"] == "application/json; api-version=6.0-preview"
    assert request.headers["Authorization"] == "Bearer queue-token-1"
    assert request.headers["X-ScaleSetMaxCapacity"] == "2147483647"
    assert request.headers["User-Agent"] == UA
    assert request.extensions["timeout"] == LONG_POLL_TIMEOUT.as_dict()
    assert auth.calls == calls_before  # queue calls never touch the admin token


@respx.mock
async def test_get_message_without_last_id_uses_the_queue_url_as_given(
    actions: ActionsClient,
) -> None:
    await with_session(actions)
    route = respx.get(url__startswith=QUEUE).respond(202)
    assert await actions.get_message(0, 3) is None
    request = route.calls.last.request
    assert str(request.url) == "https://queue.example/_apis/q?sessionId=abc"
    assert request.headers["X-ScaleSetMaxCapacity"] == "3"


@respx.mock
async def test_get_message_401_refreshes_once_and_retries_once(actions: ActionsClient) -> None:
    await with_session(actions)
    poll = respx.get(url__startswith=QUEUE).mock(
        side_effect=[httpx.Response(401), httpx.Response(200, json=message_json(7))]
    )
    patch = respx.patch(f"{SESSIONS}/{SESSION_ID}", params=API).respond(
        200, json=session_json(token="queue-token-2")
    )
    message = await actions.get_message(5, 10)
    assert message is not None
    assert message.message_id == 7
    assert patch.call_count == 1
    tokens = [call.request.headers["Authorization"] for call in poll.calls]
    assert tokens == ["Bearer queue-token-1", "Bearer queue-token-2"]
    assert [call.request.url.params["lastMessageId"] for call in poll.calls] == ["5", "5"]


@respx.mock
async def test_get_message_second_401_renews_the_admin_token_then_refreshes_again(
    actions: ActionsClient, auth: StubAuth
) -> None:
    # The refreshed queue token refused too: before giving up, a fresh admin token from the
    # whole auth chain, a second refresh with it, one more poll.
    await with_session(actions)
    poll = respx.get(url__startswith=QUEUE).mock(
        side_effect=[httpx.Response(401), httpx.Response(401), httpx.Response(202)]
    )
    patch = respx.patch(f"{SESSIONS}/{SESSION_ID}", params=API).mock(
        side_effect=[
            httpx.Response(200, json=session_json(token="queue-token-2")),
            httpx.Response(200, json=session_json(token="queue-token-3")),
        ]
    )
    assert await actions.get_message(0, 10) is None
    assert auth.renewals == 1
    assert [c.request.headers["Authorization"] for c in patch.calls] == [
        f"Bearer {ADMIN_TOKEN}",
        f"Bearer {ADMIN_TOKEN}-1",
    ]
    tokens = [c.request.headers["Authorization"] for c in poll.calls]
    assert tokens == ["Bearer queue-token-1", "Bearer queue-token-2", "Bearer queue-token-3"]


@respx.mock
async def test_get_message_401_after_a_renewed_admin_token_is_fatal(
    actions: ActionsClient, auth: StubAuth
) -> None:
    await with_session(actions)
    poll = respx.get(url__startswith=QUEUE).respond(401, text="token expired")
    patch = respx.patch(f"{SESSIONS}/{SESSION_ID}", params=API).respond(
        200, json=session_json(token="queue-token-2")
    )
    with pytest.raises(UnauthorizedError) as info:
        await actions.get_message(0, 10)
    assert (poll.call_count, patch.call_count, auth.renewals) == (3, 2, 1)
    assert "queue-token" not in str(info.value)


@respx.mock
async def test_admin_call_401_renews_the_admin_token_once(
    actions: ActionsClient, auth: StubAuth
) -> None:
    await with_session(actions)
    route = respx.delete(f"{SESSIONS}/{SESSION_ID}", params=API).mock(
        side_effect=[httpx.Response(401), httpx.Response(204)]
    )
    await actions.delete_session()
    assert auth.renewals == 1
    assert route.calls.last.request.headers["Authorization"] == f"Bearer {ADMIN_TOKEN}-1"


@respx.mock
async def test_get_message_5xx_is_retried_by_the_http_layer(
    actions: ActionsClient, fake: FakeTime
) -> None:
    await with_session(actions)
    poll = respx.get(url__startswith=QUEUE).mock(
        side_effect=[httpx.Response(502), httpx.Response(202)]
    )
    assert await actions.get_message(0, 1) is None
    assert poll.call_count == 2
    assert fake.sleeps == [1.0]


@pytest.mark.parametrize("status", [400, 403, 410, 501])  # 404: test_actions_self_healing.py
@respx.mock
async def test_get_message_other_statuses_are_errors(actions: ActionsClient, status: int) -> None:
    await with_session(actions)
    respx.get(url__startswith=QUEUE).respond(status)
    with pytest.raises(ActionsHTTPError) as info:
        await actions.get_message(0, 1)
    assert info.value.status == status
    assert info.value.url == QUEUE  # no session id or other query in errors


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({**message_json(), "messageType": "RunnerScaleSetSomethingElse"}, "unsupported message"),
        ({k: v for k, v in message_json().items() if k != "statistics"}, "statistics: missing"),
    ],
)
@respx.mock
async def test_get_message_bad_messages(
    actions: ActionsClient, body: dict[str, Any], message: str
) -> None:
    await with_session(actions)
    respx.get(url__startswith=QUEUE).respond(200, json=body)
    with pytest.raises(ProtocolError, match=message):
        await actions.get_message(0, 1)


@respx.mock
async def test_get_message_parses_jobs_from_a_bom_body(actions: ActionsClient) -> None:
    await with_session(actions)
    jobs = [
        {"messageType": "JobAvailable", "runnerRequestId": 101},
        {
            "messageType": "JobCompleted",
            "runnerRequestId": 102,
            "finishTime": "2026-05-01T10:00:00.1234567Z",
            "result": "succeeded",
        },
    ]
    content = b"\xef\xbb\xbf" + json.dumps(message_json(9, jobs)).encode()
    respx.get(url__startswith=QUEUE).respond(200, content=content)
    message = await actions.get_message(0, 1)
    assert message is not None
    assert [job.runner_request_id for job in message.jobs] == [101, 102]
    assert message.jobs[1].finish_time is not None
    assert message.jobs[1].finish_time.microsecond == 123456


@respx.mock
async def test_cancelling_a_poll_is_not_a_failure_and_the_client_stays_usable(
    actions: ActionsClient, fake: FakeTime
) -> None:
    await with_session(actions)
    started = asyncio.Event()

    async def hold(request: httpx.Request) -> httpx.Response:
        started.set()
        await asyncio.sleep(3600)
        return httpx.Response(202)

    poll = respx.get(url__startswith=QUEUE).mock(side_effect=hold)
    patch = respx.patch(f"{SESSIONS}/{SESSION_ID}", params=API).respond(200)
    task = asyncio.create_task(actions.get_message(0, 5))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    poll.side_effect = None
    poll.return_value = httpx.Response(200, json=message_json(3))
    message = await actions.get_message(0, 6)
    assert message is not None
    assert message.message_id == 3
    assert poll.calls.last.request.headers["X-ScaleSetMaxCapacity"] == "6"
    assert patch.call_count == 0
    assert fake.sleeps == []
    assert actions.session is not None


async def test_cancelling_a_real_long_poll_then_polling_again(fake: FakeTime) -> None:
    """Over a real socket: abandon a held poll, re-issue at once with a new capacity."""
    seen: list[str] = []
    held = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await read_head(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            capacity = next(h for h in head if h.lower().startswith("x-scalesetmaxcapacity"))
            seen.append(capacity.split(":", 1)[1].strip())
            if len(seen) == 1:
                held.set()
                await asyncio.sleep(3600)
            writer.write(ok_response(b"", status="202 Accepted"))
            await writer.drain()

    async with serve(handler) as port, make_client(user_agent=UA, env={}) as client:
        actions = ActionsClient(client, StubAuth(), 7, sleep=fake.sleep)
        queue = f"http://127.0.0.1:{port}/_apis/q?sessionId=abc"
        with respx.mock(assert_all_mocked=False) as mock:
            mock.route(host="127.0.0.1").pass_through()
            mock.post(SESSIONS, params=API).respond(200, json=session_json(queue_url=queue))
            await actions.create_session("pod", conflict_timeout=0)
            task = asyncio.create_task(actions.get_message(0, 4))
            await asyncio.wait_for(held.wait(), 5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await asyncio.wait_for(actions.get_message(0, 9), 5) is None
    assert seen == ["4", "9"]


# --- ack ----------------------------------------------------------------------------------------


@respx.mock
async def test_delete_message_request_shape(actions: ActionsClient) -> None:
    await with_session(actions)
    route = respx.delete(f"{QUEUE}/42", params={"sessionId": "abc"}).respond(204)
    await actions.delete_message(42)
    request = route.calls.last.request
    assert str(request.url) == "https://queue.example/_apis/q/42?sessionId=abc"
    assert request.headers["Authorization"] == "Bearer queue-token-1"
    assert request.headers["Content-Type"] == "application/json"


@respx.mock
async def test_delete_message_401_refreshes_once(actions: ActionsClient) -> None:
    await with_session(actions)
    route = respx.delete(f"{QUEUE}/42", params={"sessionId": "abc"}).mock(
        side_effect=[httpx.Response(401), httpx.Response(204)]
    )
    patch = respx.patch(f"{SESSIONS}/{SESSION_ID}", params=API).respond(
        200, json=session_json(token="queue-token-2")
    )
    await actions.delete_message(42)
    assert patch.call_count == 1
    assert route.calls.last.request.headers["Authorization"] == "Bearer queue-token-2"


@pytest.mark.parametrize("status", [200, 400])  # 404: test_actions_self_healing.py
@respx.mock
async def test_delete_message_needs_204(actions: ActionsClient, status: int) -> None:
    await with_session(actions)
    respx.delete(f"{QUEUE}/42", params={"sessionId": "abc"}).respond(status)
    with pytest.raises(ActionsHTTPError):
        await actions.delete_message(42)


@respx.mock
async def test_concurrent_401s_share_one_session_refresh(actions: ActionsClient) -> None:
    await with_session(actions)

    def answer(request: httpx.Request) -> httpx.Response:
        ok = request.headers["Authorization"] == "Bearer queue-token-2"
        return httpx.Response(204 if ok else 401)

    respx.delete(url__startswith=QUEUE).mock(side_effect=answer)
    patch = respx.patch(f"{SESSIONS}/{SESSION_ID}", params=API).respond(
        200, json=session_json(token="queue-token-2")
    )
    await asyncio.gather(actions.delete_message(1), actions.delete_message(2))
    assert patch.call_count == 1


# --- acquirejobs --------------------------------------------------------------------------------


@respx.mock
async def test_acquire_jobs_request_shape(actions: ActionsClient, auth: StubAuth) -> None:
    await with_session(actions)
    calls_before = auth.calls
    route = respx.post(f"{SCALE_SETS}/7/acquirejobs", params=API).respond(
        200, json={"count": 1, "value": [101]}
    )
    assert await actions.acquire_jobs([101, 102]) == [101]  # a partial grant is fine
    request = route.calls.last.request
    assert request.content == b"[101,102]"
    assert request.headers["Authorization"] == "Bearer queue-token-1"  # not the admin token
    assert request.headers["Content-Type"] == "application/json"
    assert auth.calls == calls_before + 1  # built as an admin call: the token may be refreshed


@respx.mock
async def test_acquire_jobs_401_refreshes_once(actions: ActionsClient) -> None:
    await with_session(actions)
    route = respx.post(f"{SCALE_SETS}/7/acquirejobs", params=API).mock(
        side_effect=[httpx.Response(401), httpx.Response(200, json={"count": 2, "value": [1, 2]})]
    )
    patch = respx.patch(f"{SESSIONS}/{SESSION_ID}", params=API).respond(
        200, json=session_json(token="queue-token-2")
    )
    assert await actions.acquire_jobs([1, 2]) == [1, 2]
    assert patch.call_count == 1
    assert route.calls.last.request.headers["Authorization"] == "Bearer queue-token-2"


@pytest.mark.parametrize("status", [400, 409])
@respx.mock
async def test_acquire_jobs_other_statuses_are_errors(actions: ActionsClient, status: int) -> None:
    await with_session(actions)
    respx.post(f"{SCALE_SETS}/7/acquirejobs", params=API).respond(status)
    with pytest.raises(ActionsHTTPError):
        await actions.acquire_jobs([1])


@respx.mock
async def test_acquire_jobs_404_is_nothing_acquired_with_one_warning(
    actions: ActionsClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The broker service has no acquire endpoint: its router answers 404."""
    await with_session(actions)
    route = respx.post(f"{SCALE_SETS}/7/acquirejobs", params=API)
    route.respond(404, text="404 page not found")
    with caplog.at_level("DEBUG", logger="listener.actions"):
        assert await actions.acquire_jobs([1, 2]) == []
        assert await actions.acquire_jobs([3]) == []
    levels = [r.levelname for r in caplog.records if "acquirejobs answered 404" in r.message]
    assert levels == ["WARNING", "DEBUG"]
    assert route.call_count == 2


@respx.mock
async def test_acquire_nothing_sends_nothing(actions: ActionsClient) -> None:
    await with_session(actions)
    before = len(respx.calls)
    assert await actions.acquire_jobs([]) == []
    assert len(respx.calls) == before


# --- scale set ----------------------------------------------------------------------------------


@respx.mock
async def test_get_scale_set(actions: ActionsClient) -> None:
    route = respx.get(f"{SCALE_SETS}/7", params=API).respond(
        200, json={"id": 7, "name": "linux", "labels": [{"type": "System", "name": "gpu"}]}
    )
    info = await actions.get_scale_set(7)
    assert (info.id, info.name, info.labels) == (7, "linux", ("gpu",))
    assert route.calls.last.request.headers["Authorization"] == f"Bearer {ADMIN_TOKEN}"


@respx.mock
async def test_get_scale_set_404(actions: ActionsClient) -> None:
    respx.get(f"{SCALE_SETS}/8", params=API).respond(404)
    with pytest.raises(ActionsHTTPError, match="status 404"):
        await actions.get_scale_set(8)


# --- with the real auth chain -------------------------------------------------------------------


@respx.mock
async def test_admin_token_refresh_happens_before_admin_calls_only(
    client: httpx.AsyncClient, fake: FakeTime
) -> None:
    reg = respx.post("https://api.github.com/orgs/acme/actions/runners/registration-token").respond(
        201, json={"token": "reg"}
    )
    admin = respx.post("https://api.github.com/actions/runner-registration").mock(
        side_effect=lambda request: httpx.Response(
            200, json={"url": ACTIONS, "token": admin_jwt(fake.now + 600)}
        )
    )
    create = respx.post(SESSIONS, params=API).respond(200, json=session_json())
    poll = respx.get(url__startswith=QUEUE).respond(202)
    acquire = respx.post(f"{SCALE_SETS}/7/acquirejobs", params=API).respond(
        200, json={"count": 1, "value": [5]}
    )
    auth = GitHubAuth(
        client,
        parse_github_target("https://github.com/acme"),
        TokenCredentials("ghp_pat"),
        clock=fake.clock,
        sleep=fake.sleep,
    )
    actions = ActionsClient(client, auth, 7, sleep=fake.sleep, clock=fake.clock)

    await actions.create_session("pod", conflict_timeout=0)
    assert (reg.call_count, admin.call_count) == (1, 1)
    first_admin = create.calls.last.request.headers["Authorization"]

    fake.now += 600  # the admin token has expired
    assert await actions.get_message(0, 1) is None
    assert admin.call_count == 1  # the long poll uses the queue token only
    assert poll.call_count == 1

    assert await actions.acquire_jobs([5]) == [5]
    assert (reg.call_count, admin.call_count) == (2, 2)  # admin-built call refreshed first
    assert acquire.calls.last.request.headers["Authorization"] == "Bearer queue-token-1"
    assert first_admin.startswith("Bearer ey")


@respx.mock
async def test_every_queue_token_is_reported_for_log_masking(
    client: httpx.AsyncClient, fake: FakeTime
) -> None:
    secrets: list[str] = []
    actions = ActionsClient(client, StubAuth(), 7, sleep=fake.sleep, on_secret=secrets.append)
    respx.post(SESSIONS, params=API).respond(200, json=session_json())
    respx.patch(f"{SESSIONS}/{SESSION_ID}", params=API).respond(
        200, json=session_json(token="queue-token-2")
    )
    await actions.create_session("pod", conflict_timeout=0)
    await actions.refresh_session()
    assert secrets == ["queue-token-1", "queue-token-2"]


@pytest.mark.parametrize(
    ("queue_url", "generation"),
    [
        ("https://broker.actions.githubusercontent.com/rest/scalesets/message", "broker"),
        ("http://127.0.0.1:8080/rest/scalesets/message/", "broker"),
        (
            "https://pipelines.actions.githubusercontent.com/abc/_apis/runtime/messagequeues/"
            "q1/messages?sessionId=00000000-0000-0000-0000-000000000001",
            "pipelines",
        ),
        (
            "https://ghes.example/_services/pipelines/_apis/runtime/messagequeues/7/messages",
            "pipelines",
        ),
        ("https://queue.example/_apis/q", "unknown"),
    ],
)
def test_service_generation_from_the_queue_url(queue_url: str, generation: str) -> None:
    assert service_generation(queue_url) == generation
