"""The fake GitHub REST endpoints behave like GitHub where the demand source depends on it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.support.fake_clock import FakeClock
from tools.fake_actions import FakeActions
from tools.fake_github_rest import FakeGitHubRest

TOKEN = "ghp_fake_rest"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(time.time())


@pytest.fixture
async def fake(clock: FakeClock) -> AsyncIterator[FakeGitHubRest]:
    async with FakeGitHubRest(tokens=[TOKEN], rate_limit=50, window=1.0, clock=clock) as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False) as client:
        yield client


async def test_pagination_links(fake: FakeGitHubRest, http: httpx.AsyncClient) -> None:
    fake.add_repositories("acme", [f"r{i:03}" for i in range(205)])
    url = f"{fake.api_url}/orgs/acme/repos?per_page=100"
    names: list[str] = []
    pages = 0
    while url:
        response = await http.get(url, headers=AUTH)
        assert response.status_code == 200
        names += [r["full_name"] for r in response.json()]
        pages += 1
        url = response.links.get("next", {}).get("url", "")
    assert pages == 3
    assert len(names) == 205
    assert names[0] == "acme/r000"
    first = await http.get(f"{fake.api_url}/orgs/acme/repos", headers=AUTH)
    assert len(first.json()) == 30  # GitHub's default page size
    assert 'rel="last"' in first.headers["link"]


async def test_etag_304_is_free_and_changes_with_the_state(
    fake: FakeGitHubRest, http: httpx.AsyncClient
) -> None:
    fake.queue_job("acme", "app", ["linux"])
    url = f"{fake.api_url}/repos/acme/app/actions/runs?status=queued"
    first = await http.get(url, headers=AUTH)
    assert first.json()["total_count"] == 1
    etag = first.headers["etag"]
    left = int(first.headers["x-ratelimit-remaining"])
    again = await http.get(url, headers={**AUTH, "If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""
    assert int(again.headers["x-ratelimit-remaining"]) == left
    fake.queue_job("acme", "app", ["linux"])
    changed = await http.get(url, headers={**AUTH, "If-None-Match": etag})
    assert changed.status_code == 200
    assert changed.json()["total_count"] == 2
    assert int(changed.headers["x-ratelimit-remaining"]) == left - 1


async def test_primary_limit_then_reset(
    fake: FakeGitHubRest, http: httpx.AsyncClient, clock: FakeClock
) -> None:
    url = f"{fake.api_url}/orgs/acme/repos"
    fake.set_remaining(TOKEN, 1)
    assert (await http.get(url, headers=AUTH)).status_code == 200
    limited = await http.get(url, headers=AUTH)
    assert limited.status_code == 403
    assert limited.headers["x-ratelimit-remaining"] == "0"
    assert int(limited.headers["x-ratelimit-reset"]) > 0
    clock.now += 1.1  # the fake's window is one second here
    assert (await http.get(url, headers=AUTH)).status_code == 200


async def test_auth_outages_and_secondary_limits(
    fake: FakeGitHubRest, http: httpx.AsyncClient
) -> None:
    url = f"{fake.api_url}/orgs/acme/repos"
    assert (await http.get(url)).status_code == 401
    assert (await http.get(url, headers={"Authorization": "Bearer nope"})).status_code == 401
    fake.outage(502, times=2)
    assert [(await http.get(url, headers=AUTH)).status_code for _ in range(3)] == [502, 502, 200]
    fake.secondary_limit(retry_after=7, status=429)
    limited = await http.get(url, headers=AUTH)
    assert (limited.status_code, limited.headers["retry-after"]) == (429, "7")
    assert (
        await http.get(f"{fake.api_url}/repos/acme/x/actions/runs/1/jobs", headers=AUTH)
    ).status_code == 404


async def test_linked_actions_jobs_and_tokens(http: httpx.AsyncClient) -> None:
    actions = FakeActions(pats=["ghp_actions_pat"])
    rest = FakeGitHubRest(tokens=[])
    rest.link(actions)
    actions.mount(rest.add_routes)
    async with actions:
        (job,) = actions.add_jobs(1, labels=["linux"], repo="svc")
        headers = {"Authorization": "Bearer ghp_actions_pat"}
        base = f"{actions.api_url}/repos/acme/svc/actions"
        runs = (await http.get(f"{base}/runs?status=queued", headers=headers)).json()
        assert [r["id"] for r in runs["workflow_runs"]] == [job.workflow_run_id]
        jobs = (await http.get(f"{base}/runs/{job.workflow_run_id}/jobs", headers=headers)).json()
        assert [(j["status"], j["labels"]) for j in jobs["jobs"]] == [("queued", ["linux"])]
        # Served as queued in a job list: noted once, on the Actions fake's clock.
        first = rest.first_served[job.runner_request_id]
        assert first <= actions.clock()
        await http.get(f"{base}/runs/{job.workflow_run_id}/jobs", headers=headers)
        assert rest.first_served == {job.runner_request_id: first}
        repos = (await http.get(f"{actions.api_url}/orgs/acme/repos", headers=headers)).json()
        assert [r["full_name"] for r in repos] == ["acme/svc"]
