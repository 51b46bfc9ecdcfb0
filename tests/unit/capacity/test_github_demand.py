"""The GitHub REST demand source against the stateful fake of those endpoints (loopback HTTP):
label matching, pagination, conditional requests, the call budget, rate limits and failures,
and how its outcomes meet the hold-last-good-then-floor policy.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import respx

from capacity.demand import Reading
from capacity.github_demand import MAX_RUNNING, GitHubDemand, GitHubScope, label_match
from capacity.model import DemandResult, DemandSource, DemandState, Params
from capacity.policy import record_demand, resolve_demand
from capacity.settings_demand import DemandSettings, GitHubDemandSettings
from capacity.settings_problems import CapacitySettingsError
from capacity.stages import QueuedJob, RunningParent
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


# --- live parents -----------------------------------------------------------------------------

API = "https://api.test"
BUILD = ".github/workflows/build.yml"
T0 = 1_800_000_000.0


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


class RestState:
    """Runs and their jobs of one repository behind respx, with ETags: an unchanged body
    answers 304 to a request that carries its ETag, as GitHub's does."""

    def __init__(self, router: respx.MockRouter, repo: str = "acme/app") -> None:
        self.runs: dict[int, dict[str, Any]] = {}  # id -> run (with its "status")
        self.jobs: dict[int, list[dict[str, Any]]] = {}  # run id -> its jobs
        base = f"{API}/repos/{repo}/actions"
        router.get(f"{base}/runs").mock(side_effect=self._runs)
        router.get(url__regex=rf"{re.escape(base)}/runs/\d+/jobs").mock(side_effect=self._jobs)

    def _runs(self, request: httpx.Request) -> httpx.Response:
        status = request.url.params.get("status")
        runs = [r for r in self.runs.values() if r["status"] == status]
        return self._answer(request, {"total_count": len(runs), "workflow_runs": runs})

    def _jobs(self, request: httpx.Request) -> httpx.Response:
        run_id = int(request.url.path.split("/")[-2])
        jobs = self.jobs.get(run_id, [])
        return self._answer(request, {"total_count": len(jobs), "jobs": jobs})

    @staticmethod
    def _answer(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        content = json.dumps(body, sort_keys=True).encode()
        etag = f'"{hashlib.sha256(content).hexdigest()[:16]}"'
        if request.headers.get("if-none-match") == etag:
            return httpx.Response(304, headers={"ETag": etag})
        return httpx.Response(200, content=content, headers={"ETag": etag})


def _job(
    name: str,
    status: str,
    labels: list[str],
    started: float | None = None,
    job_id: int | None = None,
) -> dict[str, Any]:
    return {
        **({"id": job_id} if job_id is not None else {}),
        "name": name,
        "status": status,
        "labels": labels,
        "created_at": _iso(T0 - 60),
        "started_at": _iso(started) if started is not None else None,
        "workflow_name": "Build",
    }


def rest_source(http: httpx.AsyncClient, **settings: Any) -> GitHubDemand:
    async def token() -> str:
        return TOKEN

    return GitHubDemand(
        GitHubDemandSettings(**{"repositories": ["app"], **settings}),
        LABELS,
        client=http,
        token=token,
        scope=GitHubScope(API, "acme"),
        interval=30.0,
        clock=Clock(T0),
    )


async def test_running_jobs_are_reported_as_live_parents_of_any_label(
    http: httpx.AsyncClient,
) -> None:
    with respx.mock(assert_all_called=False) as router:
        state = RestState(router)
        state.runs[7] = {"id": 7, "status": "in_progress", "path": BUILD, "run_attempt": 2}
        state.jobs[7] = [
            _job("build", "in_progress", ["gpu"], started=T0 - 30),  # another label set's
            _job("lint", "in_progress", ["linux"]),  # no start time yet: not a parent
            _job("test (1/4)", "queued", ["linux"]),  # counted, not a parent
            _job("test (2/4)", "queued", ["gpu"]),  # neither
            _job("setup", "completed", ["linux"], started=T0 - 300),
        ]
        state.runs[8] = {"id": 8, "status": "in_progress", "name": "Nightly"}  # no path
        state.jobs[8] = [_job("docs", "in_progress", ["linux"], started=T0 - 10)]
        got = await rest_source(http).read()
    assert result(got) == (DemandResult.OK, 1, 0)
    assert got.running == (
        RunningParent("Build", "docs", T0 - 10, run="8#1"),  # the jobs' workflow_name
        RunningParent(BUILD, "build", T0 - 30, run="7#2"),  # newest first
    )
    assert not got.running_truncated


async def test_queued_jobs_are_reported_with_their_run_attempt_and_id(
    http: httpx.AsyncClient,
) -> None:
    with respx.mock(assert_all_called=False) as router:
        state = RestState(router)
        state.runs[7] = {"id": 7, "status": "in_progress", "path": BUILD, "run_attempt": 2}
        state.jobs[7] = [
            _job("build", "completed", ["gpu"], started=T0 - 600, job_id=70),
            _job("test (1/2)", "queued", ["linux"], job_id=71),
            _job("test (2/2)", "queued", ["linux"]),  # no id: counted, reported as -1
            _job("gpu (1/1)", "queued", ["gpu"], job_id=73),  # another scale set's
        ]
        reader = rest_source(http)
        first = await reader.read()
        second = await reader.read()  # 304s: the same jobs, taken from what was kept
    assert result(first) == (DemandResult.OK, 2, 0)
    expected = (
        QueuedJob("7#2", 71, T0 - 60, labels=("linux",)),
        QueuedJob("7#2", -1, T0 - 60, labels=("linux",)),
    )
    assert first.queued_jobs == second.queued_jobs == expected


async def test_held_parents_survive_304s_and_leave_with_their_run(
    http: httpx.AsyncClient,
) -> None:
    with respx.mock(assert_all_called=False) as router:
        state = RestState(router)
        state.runs[7] = {"id": 7, "status": "in_progress", "path": BUILD, "run_attempt": 1}
        state.jobs[7] = [
            _job("build", "in_progress", ["gpu"], started=T0 - 30),
            _job("test (1/4)", "queued", ["linux"]),
        ]
        reader = rest_source(http)
        first = await reader.read()
        second = await reader.read()
        assert second.calls == {"not_modified": 3}  # both run lists and the jobs list
        assert second.running == first.running == (RunningParent(BUILD, "build", T0 - 30, "7#1"),)
        assert result(second)[:2] == (DemandResult.OK, 1)
        state.runs[7]["status"] = "completed"
        third = await reader.read()
    assert third.running == ()
    assert result(third)[:2] == (DemandResult.OK, 0)


async def test_a_repository_not_reached_keeps_its_parents_until_its_next_visit(
    http: httpx.AsyncClient,
) -> None:
    with respx.mock(assert_all_called=False) as router:
        app = RestState(router, "acme/app")
        RestState(router, "acme/lib")  # nothing running there
        app.runs[7] = {"id": 7, "status": "in_progress", "path": BUILD}
        app.jobs[7] = [_job("build", "in_progress", ["gpu"], started=T0 - 30)]
        # app costs 3 calls (2 run lists, 1 jobs list), lib 2: one read reaches one of them.
        reader = rest_source(http, repositories=["app", "lib"], max_calls_per_interval=3)
        parent = RunningParent(BUILD, "build", T0 - 30, "7#1")
        assert (await reader.read()).running == (parent,)  # app
        app.runs[7]["status"] = "completed"
        assert (await reader.read()).running == (parent,)  # lib, then app's budget ran out
        assert (await reader.read()).running == ()  # app again: the run is gone


async def test_a_repository_read_in_part_makes_the_running_jobs_partial(
    http: httpx.AsyncClient,
) -> None:
    with respx.mock(assert_all_called=False) as router:
        state = RestState(router)
        for run in (7, 8):
            state.runs[run] = {"id": run, "status": "in_progress", "path": BUILD}
            state.jobs[run] = [_job("build", "in_progress", ["gpu"], started=T0 - run)]
        # Two run lists and one jobs list: the read stops before the second run's jobs.
        cut = await rest_source(http, max_calls_per_interval=3).read()
        whole = await rest_source(http).read()
    assert cut.outcome.result == DemandResult.OK
    assert cut.running_partial
    assert len(cut.running) == 1
    assert not whole.running_partial
    assert len(whole.running) == 2


async def test_live_parents_are_bounded_to_the_most_recently_started(
    http: httpx.AsyncClient,
) -> None:
    count = MAX_RUNNING + 100
    with respx.mock(assert_all_called=False) as router:
        state = RestState(router)
        state.runs[7] = {"id": 7, "status": "in_progress", "path": BUILD}
        state.jobs[7] = [
            _job(f"shard ({i}/{count})", "in_progress", ["linux"], started=T0 - count + i)
            for i in range(count)
        ]
        got = await rest_source(http).read()
    assert len(got.running) == MAX_RUNNING
    assert got.running_truncated
    starts = [p.started_at for p in got.running]
    assert starts == sorted(starts, reverse=True)
    assert starts[0] == T0 - 1
    assert starts[-1] == T0 - MAX_RUNNING


async def test_failed_reads_carry_no_parents(http: httpx.AsyncClient) -> None:
    with respx.mock(assert_all_called=False) as router:
        router.get(f"{API}/repos/acme/app/actions/runs").respond(503)
        got = await rest_source(http).read()
    assert got.outcome.result == DemandResult.HTTP_ERROR
    assert got.running == ()
    assert got.queued_jobs == ()
