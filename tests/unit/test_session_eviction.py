"""The listener's Actions client against the stateful fake, when the service drops its session
(docs/wire-protocol.md §3): the broker's eviction (queue token refused, refresh 404) and a
quiet expiry (queue 404) both end in a new session that gets the queued job's message."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from listener.actions import ActionsClient
from listener.config import TokenCredentials
from listener.github_auth import GitHubAuth
from listener.github_target import parse_github_target
from tools.fake_actions import FakeActions

PAT = "ghp_fake_pat"


@pytest.fixture
async def fake() -> AsyncIterator[FakeActions]:
    async with FakeActions(pats=[PAT], poll_hold=0.05, ghes_mode=True) as f:
        f.add_scale_set(1, "linux")
        yield f


@pytest.fixture
async def actions(fake: FakeActions) -> AsyncIterator[ActionsClient]:
    async with httpx.AsyncClient(timeout=10) as http:
        auth = GitHubAuth(http, parse_github_target(fake.configure_url()), TokenCredentials(PAT))
        yield ActionsClient(http, auth, 1)


@pytest.mark.parametrize("drop", ["evict_session", "expire_session"])
async def test_a_dropped_session_is_created_again_and_the_job_still_comes(
    fake: FakeActions, actions: ActionsClient, drop: str
) -> None:
    first = await actions.create_session("pod", conflict_timeout=0)
    getattr(fake, drop)(1)
    fake.add_jobs(1, labels=["linux"])
    message = await actions.get_message(0, 5)
    assert message is not None
    assert [j.message_type for j in message.jobs] == ["JobAvailable"]
    live = fake.session(1)
    assert live is not None
    assert actions.session is not None
    assert live.session_id == actions.session.session_id != first.session_id
    assert fake.sessions_created == 2
    refreshes = fake.requests_for("session_refresh")
    assert [r.status for r in refreshes] == ([404] if drop == "evict_session" else [])
    await actions.delete_message(message.message_id)
    await actions.delete_session()
    assert fake.session(1) is None
