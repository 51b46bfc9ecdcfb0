"""The GitHub REST demand source against the stateful fake of those endpoints (loopback HTTP):
label matching, pagination, conditional requests, the call budget, rate limits and failures,
and how its outcomes meet the hold-last-good-then-floor policy.

Size: the tests of one module, capacity/github_demand.py, against one fake and one clock: what
counts, pagination and conditional requests, the call budget and rate limits, failures, a test
per behaviour.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import respx

from capacity.demand import Reading
from capacity.github_demand import GitHubDemand, GitHubScope, label_match
from capacity.model import DemandResult, DemandSource, DemandState, Params
from capacity.policy import record_demand, resolve_demand
from capacity.settings import CapacitySettingsError, DemandSettings, GitHubDemandSettings
from tools.fake_github_rest import FakeGitHubRest

TOKEN = "ghp_unit_token"
LABELS = ("linux", "x64")


@pytest.fixture
async def fake() -> AsyncIterator[FakeGitHubRest]:
    async with FakeGitHubRest(tokens=[TOKEN]) as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False) as client:
        yield client


class Clock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def source(
    fake: FakeGitHubRest,
    http: httpx.AsyncClient,
    *,
    owner: str = "acme",
    repository: str = "",
    token: str = TOKEN,
    clock: Callable[[], float] | None = None,
    aged_after: float = 900.0,
    **settings: Any,
) -> GitHubDemand:
    async def get_token() -> str:
        return token

    kwargs: dict[str, Any] = {"clock": clock} if clock is not None else {}
    return GitHubDemand(
        GitHubDemandSettings(**settings),
        LABELS,
        client=http,
        token=get_token,
        scope=GitHubScope(fake.api_url, owner, repository),
        interval=30.0,
        demand=DemandSettings(aged_after=aged_after),
        **kwargs,
    )


def result(reading: Reading) -> tuple[DemandResult, int | None, int | None]:
    return reading.outcome.result, reading.outcome.queued, reading.outcome.aged


# --- what counts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("job", "matches"),
    [
        (["linux"], True),
        (["LINUX", "x64"], True),
        (["self-hosted", "linux"], True),
        (["linux", "gpu"], False),
        (["self-hosted"], False),
        ([], False),
        (["ubuntu-latest"], False),
    ],
)
def test_label_match(job: list[str], matches: bool) -> None:
    assert label_match(job, LABELS) is matches


async def test_counts_queued_jobs_with_matching_labels_across_repositories(
    fake: FakeGitHubRest, http: httpx.AsyncClient
) -> None:
    fake.add_repositories("acme", ["empty", "archived-one"])
    fake.add_repositories("acme", ["old"], archived=True)
    fake.queue_job("acme", "app", ["linux"])
    fake.queue_job("acme", "app", ["linux", "x64"], age=1000.0)  # aged
    fake.queue_job("acme", "lib", ["gpu"])  # another scale set's
    fake.queue_job("acme", "lib", ["linux"], status="completed")
    fake.queue_job("other", "app", ["linux"])  # another owner
    started = fake.queue_job("acme", "matrix", ["linux"], status="in_progress")
    fake.queue_job("acme", "matrix", ["linux"], run_id=started.run_id)  # rest of a matrix
    fake.queue_job("acme", "old", ["linux"])  # archived: not read
    got = await source(fake, http).read()
    assert result(got) == (DemandResult.OK, 3, 1)
    paths = {c.path for c in fake.calls}
    assert "/api/v3/repos/acme/old/actions/runs" not in paths
    assert all(c.token == TOKEN for c in fake.calls)


async def test_in_progress_runs_can_be_left_out(
    fake: FakeGitHubRest, http: httpx.AsyncClient
) -> None:
    started = fake.queue_job("acme", "matrix", ["linux"], status="in_progress")
    fake.queue_job("acme", "matrix", ["linux"], run_id=started.run_id)
    fake.queue_job("acme", "app", ["linux"])
    got = await source(fake, http, in_progress_runs=False).read()
    assert result(got)[:2] == (DemandResult.OK, 1)
    assert not any(c.query.get("status") == "in_progress" for c in fake.calls)


async def test_configured_and_repository_scopes_read_only_those(
    fake: FakeGitHubRest, http: httpx.AsyncClient
) -> None:
    for repo in ("a", "b", "c"):
        fake.queue_job("acme", repo, ["linux"])
    fake.queue_job("partner", "d", ["linux"])
    got = await source(fake, http, repositories=["a", "partner/d"]).read()
    assert result(got)[:2] == (DemandResult.OK, 2)
    assert not any("/orgs/" in c.path for c in fake.calls)
    fake.calls.clear()
    got = await source(fake, http, repository="c").read()
    assert result(got)[:2] == (DemandResult.OK, 1)
    assert {c.path.split("/")[5] for c in fake.calls} == {"c"}


def test_enterprise_scale_sets_need_owner_qualified_repositories() -> None:
    http = httpx.AsyncClient()

    async def token() -> str:
        return TOKEN

    def build(**settings: Any) -> GitHubDemand:
        return GitHubDemand(
            GitHubDemandSettings(**settings),
            LABELS,
            client=http,
            token=token,
            scope=GitHubScope("https://ghe.test/api/v3"),
            interval=30.0,
        )

    with pytest.raises(CapacitySettingsError, match="required for an enterprise scale set"):
        build()
    with pytest.raises(CapacitySettingsError, match="use 'owner/name'"):
        build(repositories=["app"])
    assert isinstance(build(repositories=["acme/app"]), GitHubDemand)


# --- pagination and conditional requests ------------------------------------------------------


async def test_pages_are_followed(fake: FakeGitHubRest, http: httpx.AsyncClient) -> None:
    fake.add_repositories("acme", [f"r{i:03}" for i in range(250)])
    for _ in range(130):
        fake.queue_job("acme", "r007", ["linux"])  # 130 runs of one job each
    got = await source(fake, http, max_calls_per_interval=1000).read()
    assert result(got)[:2] == (DemandResult.OK, 130)
    listing = [c for c in fake.calls if c.path.endswith("/orgs/acme/repos")]
    assert [c.query.get("page", "1") for c in listing] == ["1", "2", "3"]
    runs = [c for c in fake.calls if c.path.endswith("/r007/actions/runs")]
    assert [(c.query["status"], c.query.get("page", "1")) for c in runs] == [
        ("queued", "1"),
        ("queued", "2"),
        ("in_progress", "1"),
    ]


async def test_unchanged_answers_are_304s_that_cost_no_rate_limit(
    fake: FakeGitHubRest, http: httpx.AsyncClient
) -> None:
    fake.add_repositories("acme", [f"r{i}" for i in range(5)])
    job = fake.queue_job("acme", "r1", ["linux"])
    reader = source(fake, http, repositories=[f"r{i}" for i in range(5)])
    first = await reader.read()
    assert first.calls == {"ok": 11}  # 5 × (queued, in_progress) runs + 1 jobs list
    remaining = fake.remaining(TOKEN)
    second = await reader.read()
    assert result(second)[:2] == (DemandResult.OK, 1)
    assert second.calls == {"not_modified": 11}
    assert all(c.conditional for c in fake.calls[-11:])
    assert fake.remaining(TOKEN) == remaining
    assert second.rate_limit_remaining == remaining
    # A change shows at once: the changed lists answer 200, the others stay 304.
    fake.set_status(job.id, "in_progress")
    fake.queue_job("acme", "r3", ["linux"])
    third = await reader.read()
    assert result(third)[:2] == (DemandResult.OK, 1)
    assert third.calls["ok"] >= 2
    assert third.calls["not_modified"] >= 6


# --- budget and rate limits -------------------------------------------------------------------


async def test_call_budget_is_never_exceeded_and_every_repository_is_reached(
    fake: FakeGitHubRest, http: httpx.AsyncClient
) -> None:
    names = [f"r{i:02}" for i in range(50)]
    fake.add_repositories("acme", names)
    for name in names[::5]:
        fake.queue_job("acme", name, ["linux"])  # 10 repositories with one queued job
    reader = source(fake, http, max_calls_per_interval=25)
    totals: list[int] = []
    for _ in range(6):
        before = len(fake.calls)
        got = await reader.read()
        assert len(fake.calls) - before <= 25
        assert got.outcome.queued is not None
        totals.append(got.outcome.queued)
    # 1 listing call + 50 × 2 run lists + 10 job lists = 111 calls: round-robin reaches every
    # repository within 5 reads, and the count is whole from then on.
    assert totals[-1] == 10
    assert totals == sorted(totals)


async def test_first_listing_of_a_huge_organization_is_not_read_as_empty(
    fake: FakeGitHubRest, http: httpx.AsyncClient
) -> None:
    fake.add_repositories("acme", [f"repo-{i:05}" for i in range(5000)])  # 50 pages
    fake.queue_job("acme", "repo-04999", ["linux"])
    reader = source(fake, http, max_calls_per_interval=30)
    first = await reader.read()
    assert first.outcome.result == DemandResult.RATE_LIMITED  # not OK with 0 queued
    assert "not complete" in first.outcome.detail
    second = await reader.read()  # pages 31-50, then the first repositories
    assert second.outcome.result == DemandResult.OK
    assert len(fake.calls) <= 60


async def test_low_allowance_slows_down_to_last_until_the_reset(
    fake: FakeGitHubRest, http: httpx.AsyncClient
) -> None:
    fake.add_repositories("acme", [f"r{i}" for i in range(10)])
    reader = source(fake, http, rate_limit_reserve=100)
    await reader.read()
    fake.set_remaining(TOKEN, 100 + 60, reset_in=3600)  # 60 spare for 120 reads
    fake.queue_job("acme", "r5", ["linux"])
    fake.queue_job("acme", "r6", ["linux"])
    await reader.read()  # learns the new allowance from its first answer
    fake.queue_job("acme", "r7", ["linux"])  # two lists change: two counted calls needed
    fake.calls.clear()
    got = await reader.read()
    assert got.outcome.result == DemandResult.OK
    counted = [c for c in fake.calls if c.status != 304]
    assert len(counted) == 1  # spread: one counted call per read until the reset
    assert len(fake.calls) > len(counted)  # 304s go on: they cost nothing
    # Never into the reserve, however many reads.
    for _ in range(30):
        await reader.read()
    assert fake.remaining(TOKEN) >= 100


async def test_exhausted_rate_limit_pauses_until_the_reset(
    fake: FakeGitHubRest, http: httpx.AsyncClient
) -> None:
    clock = Clock(time.time())
    fake.queue_job("acme", "app", ["linux"])
    reader = source(fake, http, clock=clock, rate_limit_reserve=0)
    fake.set_remaining(TOKEN, 0, reset_in=600)
    got = await reader.read()
    assert result(got) == (DemandResult.RATE_LIMITED, None, None)
    assert got.calls == {"rate_limited": 1}
    calls = len(fake.calls)
    clock.now += 300
    again = await reader.read()
    assert again.outcome.result == DemandResult.RATE_LIMITED
    assert len(fake.calls) == calls  # paused: not one call


@pytest.mark.parametrize("status", [403, 429])
async def test_secondary_rate_limit_obeys_retry_after(
    fake: FakeGitHubRest, http: httpx.AsyncClient, status: int
) -> None:
    clock = Clock(time.time())  # the fake's rate-limit window is on the real clock
    fake.queue_job("acme", "app", ["linux"])
    reader = source(fake, http, clock=clock, repositories=["app"])
    fake.secondary_limit(retry_after=120, status=status)
    got = await reader.read()
    assert got.outcome.result == DemandResult.RATE_LIMITED
    assert "pausing 120s" in got.outcome.detail
    clock.now += 100
    assert (await reader.read()).calls == {}
    clock.now += 21
    assert result(await reader.read())[:2] == (DemandResult.OK, 1)


async def test_server_errors_fail_the_read_and_the_policy_holds_then_floors(
    fake: FakeGitHubRest, http: httpx.AsyncClient
) -> None:
    for _ in range(3):
        fake.queue_job("acme", "app", ["linux"])
    reader = source(fake, http)
    params = Params(
        max_runners=10,
        demand_enabled=True,
        demand_stale_after=60.0,
        demand_failure_base_capacity=2,
        demand_live=DemandSource.GITHUB,
    )
    state = record_demand(DemandState(), (await reader.read()).outcome, 0.0)
    assert resolve_demand(state, 0.0, params).source == DemandSource.GITHUB
    fake.outage(502)
    failed = await reader.read()
    assert result(failed) == (DemandResult.HTTP_ERROR, None, None)
    assert failed.calls == {"error": 1}
    state = record_demand(state, failed.outcome, 30.0)
    held = resolve_demand(state, 30.0, params)
    assert (held.queued, held.source) == (3, DemandSource.STALE)
    floor = resolve_demand(state, 61.0, params)
    assert (floor.queued, floor.source) == (2, DemandSource.FLOOR)


@pytest.mark.parametrize(
    ("token", "expected"), [("wrong-token", DemandResult.HTTP_ERROR), (TOKEN, DemandResult.TIMEOUT)]
)
async def test_bad_credentials_and_timeouts_fail_without_raising(
    fake: FakeGitHubRest, http: httpx.AsyncClient, token: str, expected: DemandResult
) -> None:
    fake.queue_job("acme", "app", ["linux"])
    reader = source(fake, http, token=token, timeout=0.2, repositories=["app"])
    if expected == DemandResult.TIMEOUT:
        await fake.stop()  # nothing listens: refused, reported as a failed call
        got = await reader.read()
        assert got.outcome.result in (DemandResult.HTTP_ERROR, DemandResult.TIMEOUT)
        return
    got = await reader.read()
    assert got.outcome.result == expected
    assert "HTTP 401" in got.outcome.detail
    assert token not in got.outcome.detail


async def test_a_failing_token_source_is_a_failed_read(
    fake: FakeGitHubRest, http: httpx.AsyncClient
) -> None:
    async def broken() -> str:
        raise RuntimeError("private key ----BEGIN RSA PRIVATE KEY---- leaked?")

    reader = GitHubDemand(
        GitHubDemandSettings(),
        LABELS,
        client=http,
        token=broken,
        scope=GitHubScope(fake.api_url, "acme"),
        interval=30.0,
    )
    got = await reader.read()
    assert got.outcome.result == DemandResult.HTTP_ERROR
    assert got.outcome.detail == "no GitHub token (RuntimeError)"
    assert fake.calls == []


async def test_held_counts_keep_ageing(fake: FakeGitHubRest, http: httpx.AsyncClient) -> None:
    clock = Clock(0.0)
    job = fake.queue_job("acme", "app", ["linux"])
    clock.now = job.created_at.timestamp() + 10
    reader = source(fake, http, clock=clock, aged_after=60.0, repositories=["app"])
    assert result(await reader.read()) == (DemandResult.OK, 1, 0)
    clock.now += 60
    assert result(await reader.read()) == (DemandResult.OK, 1, 1)


async def test_calls_per_read_at_50_repositories(
    fake: FakeGitHubRest, http: httpx.AsyncClient
) -> None:
    """The cost the settings reference quotes: 1 listing + 2 run lists per repository + 1 job
    list per queued run; once cached, all of it is 304s that cost no rate limit."""
    names = [f"repo-{i:03}" for i in range(50)]
    fake.add_repositories("acme", names)
    for name in names[::5]:
        fake.queue_job("acme", name, ["linux"])
    reader = source(fake, http)  # the default budget, 200 calls
    cold = await reader.read()
    assert cold.calls == {"ok": 1 + 100 + 10}
    warm = await reader.read()
    assert warm.calls == {"not_modified": 100 + 10}
    assert result(warm)[:2] == (DemandResult.OK, 10)


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"<html>proxy error</html>", "not JSON"),
        (b'{"total_count": 1}', "no workflow_runs array"),
        (b'{"workflow_runs": [{"id": 7}]}', "no jobs array"),  # then the jobs list is `{}`
    ],
)
async def test_bodies_of_the_wrong_shape_are_bad_responses(
    http: httpx.AsyncClient, body: bytes, detail: str
) -> None:
    base = "https://api.test/repos/acme/app/actions"
    with respx.mock(assert_all_called=False) as router:
        router.get(f"{base}/runs").respond(200, content=body)
        router.get(f"{base}/runs/7/jobs").respond(200, json={})

        async def token() -> str:
            return TOKEN

        reader = GitHubDemand(
            GitHubDemandSettings(repositories=["app"]),
            LABELS,
            client=http,
            token=token,
            scope=GitHubScope("https://api.test", "acme"),
            interval=30.0,
        )
        got = await reader.read()
    assert got.outcome.result == DemandResult.BAD_RESPONSE
    assert detail in got.outcome.detail
    assert got.calls.get("error") == 1
