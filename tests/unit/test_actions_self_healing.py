"""listener.actions: sessions the service evicted are created again, and a scale set it no
longer knows is re-checked for a bounded time (docs/wire-protocol.md §3)."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
import respx

from listener.actions import ActionsClient
from listener.errors import ActionsHTTPError, ScaleSetGoneError
from tests.unit.listener_fixtures import SESSION_ID, FakeTime, session_json
from tests.unit.test_actions import (
    API,
    QUEUE,
    SCALE_SETS,
    SESSIONS,
    actions,
    auth,
    message_json,
    with_session,
)

# The same client on the same stub as test_actions.py, as fixtures.
__all__ = ["actions", "auth"]

NEW_ID = "11111111-2222-3333-4444-555555555555"
EVICTED = {
    "typeName": "GitHub.Actions.Runtime.WebApi.RunnerAdminException",
    "message": "runner referenced a session ID that doesn't exist in redis",
}
GONE = {
    "typeName": "GitHub.Actions.Runtime.WebApi.RunnerScaleSetNotFoundException",
    "message": "The runner scale set was not found.",
}


def new_session() -> httpx.Response:
    return httpx.Response(200, json=session_json(session_id=NEW_ID, token="queue-token-new"))


@respx.mock
async def test_a_404_on_refresh_creates_a_new_session(actions: ActionsClient) -> None:
    """actions/scaleset #123: the broker evicted the session, the refresh after the queue
    token's 401 answers 404, and ARC's listener exits (every ~50 min for some orgs)."""
    await with_session(actions)
    poll = respx.get(url__startswith=QUEUE).mock(
        side_effect=[httpx.Response(401), httpx.Response(200, json=message_json(9))]
    )
    refresh = respx.patch(f"{SESSIONS}/{SESSION_ID}", params=API).respond(404, json=EVICTED)
    create = respx.post(SESSIONS, params=API).mock(side_effect=[new_session()])
    message = await actions.get_message(5, 10)
    assert message is not None
    assert message.message_id == 9
    assert (refresh.call_count, create.call_count) == (1, 1)
    assert actions.session is not None
    assert actions.session.session_id == NEW_ID
    tokens = [c.request.headers["Authorization"] for c in poll.calls]
    assert tokens == ["Bearer queue-token-1", "Bearer queue-token-new"]
    # The cursor is kept: messages up to it were acked, later ones come on the new session.
    assert [c.request.url.params["lastMessageId"] for c in poll.calls] == ["5", "5"]


@respx.mock
async def test_a_404_on_the_poll_creates_a_new_session(actions: ActionsClient) -> None:
    await with_session(actions)
    poll = respx.get(url__startswith=QUEUE).mock(
        side_effect=[
            httpx.Response(404, json={"message": "The message queue was not found."}),
            httpx.Response(202),
        ]
    )
    create = respx.post(SESSIONS, params=API).mock(side_effect=[new_session()])
    assert await actions.get_message(0, 10) is None
    assert create.call_count == 1
    assert poll.calls.last.request.headers["Authorization"] == "Bearer queue-token-new"


@respx.mock
async def test_a_404_on_the_ack_creates_a_new_session(actions: ActionsClient) -> None:
    await with_session(actions)
    ack = respx.delete(url__startswith=QUEUE).mock(
        side_effect=[httpx.Response(404), httpx.Response(204)]
    )
    respx.post(SESSIONS, params=API).mock(side_effect=[new_session()])
    await actions.delete_message(9)
    assert ack.calls.last.request.headers["Authorization"] == "Bearer queue-token-new"


@respx.mock
async def test_a_second_404_after_the_new_session_is_an_error(actions: ActionsClient) -> None:
    # One new session per call: a service that evicts every session at once ends the process
    # (the pod restart), it does not turn into a create storm.
    await with_session(actions)
    respx.get(url__startswith=QUEUE).respond(404)
    create = respx.post(SESSIONS, params=API).mock(side_effect=[new_session()])
    with pytest.raises(ActionsHTTPError, match="status 404"):
        await actions.get_message(0, 10)
    assert create.call_count == 1


@respx.mock
async def test_a_404_on_acquirejobs_is_not_a_lost_session(actions: ActionsClient) -> None:
    # The broker answers acquirejobs with a router-level 404; that says nothing about the
    # session, so no new one is created (and nothing is acquired).
    await with_session(actions)
    respx.post(f"{SCALE_SETS}/7/acquirejobs", params=API).respond(404)
    create = respx.post(SESSIONS, params=API).respond(200, json=session_json())
    assert await actions.acquire_jobs([101]) == []
    assert create.call_count == 0


@respx.mock
async def test_a_gone_scale_set_is_checked_again_then_one_error(
    actions: ActionsClient, fake: FakeTime, caplog: pytest.LogCaptureFixture
) -> None:
    """ARC #4370: a scale set deleted on GitHub's side. One clear log line, re-checks at
    5 s doubling to 60 s for LISTENER_SCALE_SET_GONE_TIMEOUT, then an error (exit 1): the
    controller recreates the pod at most once per timeout, not in a crash loop."""
    route = respx.post(SESSIONS, params=API).respond(404, json=GONE)
    with caplog.at_level(logging.INFO), pytest.raises(ScaleSetGoneError) as info:
        await actions.create_session("pod", conflict_timeout=600, gone_timeout=120)
    assert fake.sleeps == [5.0, 10.0, 20.0, 40.0, 45.0]
    assert route.call_count == 6
    error = str(info.value)
    assert "RunnerScaleSetNotFoundException" in error
    assert "still so after 120 s" in error
    assert "\n" not in error
    lines = [r for r in caplog.records if "no longer exists" in r.getMessage()]
    assert len(lines) == 1
    assert actions.session is None


@respx.mock
async def test_a_scale_set_back_after_a_transient_404_gets_its_session(
    actions: ActionsClient, fake: FakeTime
) -> None:
    # ARC #3942: RunnerScaleSetNotFoundException for a while during an Actions outage.
    respx.post(SESSIONS, params=API).mock(
        side_effect=[httpx.Response(404, json=GONE), httpx.Response(404), new_session()]
    )
    session = await actions.create_session("pod", conflict_timeout=600, gone_timeout=600)
    assert session.session_id == NEW_ID
    assert fake.sleeps == [5.0, 10.0]


@respx.mock
async def test_a_scale_set_gone_while_running_ends_with_no_session_to_delete(
    actions: ActionsClient,
) -> None:
    first = respx.post(SESSIONS, params=API).respond(200, json=session_json())
    await actions.create_session("pod", conflict_timeout=0, gone_timeout=0)
    first.mock(return_value=httpx.Response(404, json=GONE))
    respx.get(url__startswith=QUEUE).respond(404)
    with pytest.raises(ScaleSetGoneError):
        await actions.get_message(0, 10)
    assert actions.session is None


@respx.mock
async def test_a_poll_cancelled_during_the_new_session_leaves_no_session_behind(
    actions: ActionsClient,
) -> None:
    """The loop abandons polls when the capacity changes. A poll cancelled while its new
    session is being created must not leave that session on the service unheld (the next
    create would meet a 409): the create finishes, and the next poll uses it."""
    await with_session(actions)
    created = asyncio.Event()
    release = asyncio.Event()

    async def slow_create(_request: httpx.Request) -> httpx.Response:
        created.set()
        await release.wait()
        return new_session()

    poll = respx.get(url__startswith=QUEUE).mock(
        side_effect=[httpx.Response(404), httpx.Response(202)]
    )
    create = respx.post(SESSIONS, params=API).mock(side_effect=slow_create)
    first = asyncio.create_task(actions.get_message(0, 10))
    await created.wait()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    release.set()
    assert await actions.get_message(0, 10) is None
    assert create.call_count == 1
    assert poll.calls.last.request.headers["Authorization"] == "Bearer queue-token-new"
    assert actions.session is not None
    assert actions.session.session_id == NEW_ID
