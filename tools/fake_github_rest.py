"""A stateful fake of the GitHub REST endpoints the GitHub demand source reads, over real HTTP.

    GET /api/v3/orgs/{org}/repos                                  repositories of an org
    GET /api/v3/repos/{owner}/{repo}/actions/runs?status=…         workflow runs by status
    GET /api/v3/repos/{owner}/{repo}/actions/runs?created=A..B     runs by creation time
    GET /api/v3/repos/{owner}/{repo}/actions/runs/{run_id}/jobs    the jobs of one run

What it models, because the client must cope with it:

- Pagination: `per_page` (default 30, at most 100) and `page`, with a `Link` header carrying
  `rel="next"` and `rel="last"` as GitHub sends it.
- Conditional requests: every 200 carries an `ETag` (a hash of the body); a request whose
  `If-None-Match` equals the current ETag gets a 304 with no body, which does not count
  against the rate limit (as on GitHub, for authenticated requests).
- A primary rate limit per token: `X-RateLimit-Limit/-Remaining/-Used/-Reset` on every
  answer; each counted request decrements it; at 0 the answer is 403 "API rate limit
  exceeded" until the window (`window` seconds) resets.
- Secondary rate limits (`secondary_limit`): 403 with `Retry-After`, and 429s.
- Outages (`outage`): 5xx for the next N requests, or until cleared.
- Huge repository lists (`add_repositories` with thousands of names).

The `created` filter takes GitHub's forms: `A..B`, `>=A`, `>A`, `<=A`, `<A` and a bare time,
each an RFC 3339 time or a date. Finished jobs (`finished_job`, the job history an import
reads) carry `started_at`, `completed_at`, `conclusion` and `runner_name` as GitHub's do.

Jobs come from two places: jobs a test queues here (`queue_job`, `finished_job`), and, when
linked to a `FakeActions`, that fake's job queue (a job not yet claimed by a runner is
"queued", a claimed one "in_progress" with its `started_at`, a finished one "completed" with
`completed_at` and `conclusion`; the runs are that fake's, one per job unless it was queued
into a run). A linked job carries what the stage model reads (capacity/github_demand.py):
its `name` (the fake's display name), `run_attempt` and `workflow_name`, and its run in the
runs list its workflow file's `path`, `name` and `run_attempt`.
The fake can serve on its own loopback port (`start`), or from a `FakeActions` server
(`FakeActions.mount(rest.add_routes)`), which is where a listener's GitHub API URL points.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import operator
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from tools.fake_actions import FakeActions, FakeJob, JobState
from tools.fake_http import LoopbackFake, LoopbackServer

PREFIX = "/api/v3"
DEFAULT_PER_PAGE = 30
MAX_PER_PAGE = 100


@dataclass
class RestJob:
    id: int
    run_id: int
    owner: str
    repo: str
    labels: tuple[str, ...]
    created_at: datetime
    status: str = "queued"  # queued | in_progress | completed
    started_at: datetime | None = None
    completed_at: datetime | None = None
    conclusion: str | None = None  # success | failure | cancelled | skipped (completed jobs)
    runner_name: str | None = None
    name: str = ""  # "" for "job-<id>"
    workflow: str = ""  # the workflow file's path in the repository ("" when unknown)
    run_attempt: int = 1


@dataclass
class Call:
    """One request as the fake answered it."""

    path: str
    query: dict[str, str]
    status: int
    token: str
    conditional: bool  # carried If-None-Match


@dataclass
class _Limit:
    limit: int
    remaining: int
    reset_at: float


@dataclass
class _Faults:
    outage_status: int | None = None
    outage_left: int | None = None
    secondary: list[tuple[int, str]] = field(default_factory=list)  # (status, retry-after)


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeGitHubRest(LoopbackFake):
    """`await start()` and use `.api_url`, or mount it on a FakeActions before that starts."""

    def __init__(
        self,
        *,
        tokens: Iterable[str] = ("ghp_fake_pat",),
        rate_limit: int = 5000,
        window: float = 3600.0,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.tokens = set(tokens)
        self._clock = clock  # wall-clock seconds: the rate-limit window and its reset header
        self.rate_limit = rate_limit
        self.window = window
        self.calls: list[Call] = []
        self.repositories: dict[str, dict[str, dict[str, Any]]] = {}  # owner -> name -> repo
        self.jobs: dict[int, RestJob] = {}
        self._ids = itertools.count(90_001)
        self._limits: dict[str, _Limit] = {}
        self._faults = _Faults()
        self._actions: FakeActions | None = None
        # runner_request_id -> when a linked job was first served as "queued" in a run's job
        # list (on the linked fake's clock): the outcome benchmark's "first seen by a demand
        # reading" for the GitHub demand source.
        self.first_served: dict[int, float] = {}
        self._token_ok: Callable[[str], bool] = lambda token: token in self.tokens
        self._host, self._port = host, port

    # ------------------------------------------------------------------ lifecycle

    def add_routes(self, app: web.Application, prefix: str = PREFIX) -> None:
        app.router.add_get(f"{prefix}/orgs/{{org}}/repos", self._org_repos, name="gh_org_repos")
        app.router.add_get(
            f"{prefix}/repos/{{owner}}/{{repo}}/actions/runs", self._runs, name="gh_runs"
        )
        app.router.add_get(
            f"{prefix}/repos/{{owner}}/{{repo}}/actions/runs/{{run_id:[0-9]+}}/jobs",
            self._jobs,
            name="gh_jobs",
        )

    async def start(self) -> None:
        app = web.Application()
        self.add_routes(app)
        self._server = LoopbackServer(app, host=self._host, port=self._port)
        await super().start()

    @property
    def api_url(self) -> str:
        assert self._server is not None, "not started (or mounted elsewhere)"
        return f"{self.url}{PREFIX}"

    # ------------------------------------------------------------------ test API

    def link(self, actions: FakeActions) -> None:
        """Serve `actions`' job queue too, and accept its PATs and installation tokens."""
        self._actions = actions
        self._token_ok = lambda token: token in self.tokens or actions.accepts_github_token(token)

    def add_repositories(self, owner: str, names: Sequence[str], *, archived: bool = False) -> None:
        repos = self.repositories.setdefault(owner, {})
        for name in names:
            repos[name] = {
                "id": next(self._ids),
                "name": name,
                "full_name": f"{owner}/{name}",
                "owner": {"login": owner},
                "archived": archived,
            }

    def queue_job(
        self,
        owner: str,
        repo: str,
        labels: Sequence[str],
        *,
        age: float = 0.0,
        run_id: int | None = None,
        status: str = "queued",
    ) -> RestJob:
        """A job in a run (a new run unless `run_id` names one)."""
        if repo not in self.repositories.get(owner, {}):
            self.add_repositories(owner, [repo])
        job = RestJob(
            id=next(self._ids),
            run_id=run_id if run_id is not None else next(self._ids),
            owner=owner,
            repo=repo,
            labels=tuple(labels),
            created_at=datetime.now(UTC) - timedelta(seconds=age),
            status=status,
        )
        self.jobs[job.id] = job
        return job

    def finished_job(
        self,
        owner: str,
        repo: str,
        labels: Sequence[str],
        *,
        created_at: datetime,
        started_after: float | None,
        duration: float = 0.0,
        run_id: int | None = None,
        conclusion: str = "success",
    ) -> RestJob:
        """A completed job of the history: queued at `created_at`, started `started_after`
        seconds later on a runner and run for `duration` (None: it never got a runner)."""
        job = self.queue_job(owner, repo, labels, run_id=run_id, status="completed")
        job.created_at = created_at
        job.conclusion = conclusion
        if started_after is None:
            job.completed_at = created_at
        else:
            job.started_at = created_at + timedelta(seconds=started_after)
            job.completed_at = job.started_at + timedelta(seconds=duration)
            job.runner_name = f"runner-{job.id}"
        return job

    def set_status(self, job_id: int, status: str) -> None:
        self.jobs[job_id].status = status

    def outage(self, status: int = 503, times: int | None = None) -> None:
        """Answer `status` to the next `times` requests (None: until `clear_outage`)."""
        self._faults.outage_status, self._faults.outage_left = status, times

    def clear_outage(self) -> None:
        self._faults.outage_status = None

    def secondary_limit(self, retry_after: int = 60, *, status: int = 403, times: int = 1) -> None:
        """The next `times` requests hit a secondary rate limit (403 or 429, Retry-After)."""
        self._faults.secondary.extend([(status, str(retry_after))] * times)

    def set_remaining(self, token: str, remaining: int, *, reset_in: float | None = None) -> None:
        limit = self._limit(token)
        limit.remaining = remaining
        if reset_in is not None:
            limit.reset_at = self._clock() + reset_in

    def remaining(self, token: str) -> int:
        return self._limit(token).remaining

    def counted(self) -> int:
        """Requests that counted against a rate limit (everything but 304s)."""
        return sum(1 for c in self.calls if c.status != 304)

    # ------------------------------------------------------------------ state

    def _all_jobs(self) -> list[RestJob]:
        jobs = list(self.jobs.values())
        if self._actions is not None:
            status = {
                JobState.QUEUED: "queued",
                JobState.AVAILABLE: "queued",
                JobState.ASSIGNED: "queued",
                JobState.RUNNING: "in_progress",
                JobState.COMPLETED: "completed",
            }
            for job in self._actions.jobs.values():
                jobs.append(
                    RestJob(
                        id=job.runner_request_id,
                        run_id=job.workflow_run_id,
                        owner=job.owner_name,
                        repo=job.repository_name,
                        labels=job.labels,
                        created_at=job.queue_time,
                        status=status.get(job.state, "queued"),
                        started_at=_wall_of(job, JobState.RUNNING),
                        completed_at=_wall_of(job, JobState.COMPLETED),
                        conclusion=_CONCLUSIONS.get(job.result or ""),
                        runner_name=job.runner_name,
                        name=job.display_name,
                        workflow=_workflow_path(job.workflow_ref),
                        run_attempt=job.run_attempt,
                    )
                )
        return jobs

    def _repos_of(self, owner: str) -> list[dict[str, Any]]:
        repos = dict(self.repositories.get(owner, {}))
        for job in self._all_jobs():
            if job.owner == owner and job.repo not in repos:
                repos[job.repo] = {
                    "id": 0,
                    "name": job.repo,
                    "full_name": f"{owner}/{job.repo}",
                    "owner": {"login": owner},
                    "archived": False,
                }
        return [repos[name] for name in sorted(repos)]

    def _runs_of(self, owner: str, repo: str) -> list[dict[str, Any]]:
        by_run: dict[int, list[RestJob]] = {}
        for job in self._all_jobs():
            if (job.owner, job.repo) == (owner, repo):
                by_run.setdefault(job.run_id, []).append(job)
        runs = []
        for run_id, jobs in sorted(by_run.items(), reverse=True):  # newest first, as GitHub
            statuses = {j.status for j in jobs}
            if statuses == {"queued"}:
                status = "queued"
            elif statuses == {"completed"}:
                status = "completed"
            else:
                status = "in_progress"
            run: dict[str, Any] = {
                "id": run_id,
                "status": status,
                "created_at": _iso(min(j.created_at for j in jobs)),
                "repository": {"full_name": f"{owner}/{repo}"},
                "run_attempt": max(j.run_attempt for j in jobs),
            }
            path = next((j.workflow for j in jobs if j.workflow), "")
            if path:
                run["path"] = path
                run["name"] = path.rsplit("/", 1)[-1]
            runs.append(run)
        return runs

    def _jobs_of(self, owner: str, repo: str, run_id: int) -> list[dict[str, Any]] | None:
        jobs = [j for j in self._all_jobs() if (j.owner, j.repo, j.run_id) == (owner, repo, run_id)]
        if not jobs:
            return None
        return [
            {
                "id": j.id,
                "run_id": j.run_id,
                "status": j.status,
                "conclusion": j.conclusion,
                "labels": list(j.labels),
                "created_at": _iso(j.created_at),
                "started_at": _iso(j.started_at) if j.started_at else None,
                "completed_at": _iso(j.completed_at) if j.completed_at else None,
                "runner_name": j.runner_name,
                "name": j.name or f"job-{j.id}",
                "run_attempt": j.run_attempt,
                "workflow_name": j.workflow.rsplit("/", 1)[-1],
            }
            for j in sorted(jobs, key=lambda j: j.id)
        ]

    def _limit(self, token: str) -> _Limit:
        limit = self._limits.get(token)
        now = self._clock()
        if limit is None:
            limit = _Limit(self.rate_limit, self.rate_limit, now + self.window)
            self._limits[token] = limit
        elif now >= limit.reset_at:
            limit.remaining, limit.reset_at = limit.limit, now + self.window
        return limit

    # ------------------------------------------------------------------ HTTP

    async def _org_repos(self, request: web.Request) -> web.StreamResponse:
        return self._answer(request, lambda: self._repos_of(request.match_info["org"]), None)

    async def _runs(self, request: web.Request) -> web.StreamResponse:
        owner, repo = request.match_info["owner"], request.match_info["repo"]
        wanted = request.query.get("status")
        try:
            created = _created_filter(request.query.get("created", ""))
        except ValueError:
            return _json({"message": "Validation Failed"}, 422)

        def runs() -> list[dict[str, Any]]:
            return [
                r
                for r in self._runs_of(owner, repo)
                if (not wanted or r["status"] == wanted) and created(_parse(r["created_at"]))
            ]

        return self._answer(request, runs, "workflow_runs")

    async def _jobs(self, request: web.Request) -> web.StreamResponse:
        owner, repo = request.match_info["owner"], request.match_info["repo"]
        run_id = int(request.match_info["run_id"])
        return self._answer(
            request, lambda: self._served(self._jobs_of(owner, repo, run_id)), "jobs"
        )

    def _served(self, jobs: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if self._actions is not None:
            now = self._actions.clock()
            for job in jobs or ():
                if job["status"] == "queued" and job["id"] in self._actions.jobs:
                    self.first_served.setdefault(job["id"], now)
        return jobs

    def _answer(
        self,
        request: web.Request,
        items: Callable[[], list[dict[str, Any]] | None],
        key: str | None,
    ) -> web.Response:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        conditional = "If-None-Match" in request.headers
        response = self._respond(request, items, key, token if scheme == "Bearer" else "")
        self.calls.append(
            Call(request.path, dict(request.query), response.status, token, conditional)
        )
        return response

    def _respond(
        self,
        request: web.Request,
        items: Callable[[], list[dict[str, Any]] | None],
        key: str | None,
        token: str,
    ) -> web.Response:
        if not token or not self._token_ok(token):
            return _json({"message": "Bad credentials"}, 401)
        faults = self._faults
        if faults.outage_status is not None:
            status = faults.outage_status
            if faults.outage_left is not None:
                faults.outage_left -= 1
                if faults.outage_left <= 0:
                    faults.outage_status = None
            return _json({"message": "Server Error"}, status)
        limit = self._limit(token)
        if faults.secondary:
            status, retry_after = faults.secondary.pop(0)
            headers = {**_limit_headers(limit), "Retry-After": retry_after}
            message = "You have exceeded a secondary rate limit."
            return _json({"message": message}, status, headers)
        if limit.remaining <= 0:
            message = "API rate limit exceeded for this token."
            return _json({"message": message}, 403, _limit_headers(limit))
        found = items()
        if found is None:
            return _json({"message": "Not Found"}, 404, _limit_headers(limit))
        try:
            per_page = min(
                MAX_PER_PAGE, max(1, int(request.query.get("per_page", DEFAULT_PER_PAGE)))
            )
            page = max(1, int(request.query.get("page", "1")))
        except ValueError:
            return _json({"message": "Invalid pagination"}, 422, _limit_headers(limit))
        last = max(1, -(-len(found) // per_page))
        chunk = found[(page - 1) * per_page : page * per_page]
        payload: Any = chunk if key is None else {"total_count": len(found), key: chunk}
        body = json.dumps(payload, separators=(",", ":")).encode()
        etag = f'W/"{hashlib.sha256(body).hexdigest()[:32]}"'
        headers = {"ETag": etag}
        links = []
        if page < last:
            links.append(f'<{_page_url(request, page + 1)}>; rel="next"')
            links.append(f'<{_page_url(request, last)}>; rel="last"')
        if links:
            headers["Link"] = ", ".join(links)
        if request.headers.get("If-None-Match") == etag:
            # Not counted: a conditional request answered 304 is free on GitHub.
            return web.Response(status=304, headers={**headers, **_limit_headers(limit)})
        limit.remaining -= 1
        return web.Response(
            status=200,
            body=body,
            content_type="application/json",
            headers={**headers, **_limit_headers(limit)},
        )


_CONCLUSIONS = {"succeeded": "success", "failed": "failure", "canceled": "cancelled"}


def _wall_of(job: FakeJob, state: JobState) -> datetime | None:
    """When a linked job first entered `state`, on the wall clock (its history is on the
    fake's monotonic clock; its queue time on both)."""
    if not job.history:
        return None
    queued = job.history[0][0]
    at = next((t for t, s in job.history if s is state), None)
    return None if at is None else job.queue_time + timedelta(seconds=at - queued)


def _workflow_path(ref: str) -> str:
    """`.github/workflows/ci.yml` of a job's `owner/repo/.github/workflows/ci.yml@ref`."""
    path = ref.split("@", 1)[0]
    parts = path.split("/", 2)
    return parts[2] if len(parts) == 3 else ""


def _parse(text: str) -> datetime:
    """An RFC 3339 time or a date (midnight UTC)."""
    stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def _created_filter(text: str) -> Callable[[datetime], bool]:
    """GitHub's `created` qualifier as a predicate (an empty one admits everything)."""
    if not text:
        return lambda _t: True
    if ".." in text:
        low, high = (_parse(x) for x in text.split("..", 1))
        return lambda t: low <= t <= high
    tests: dict[str, Callable[[datetime, datetime], bool]] = {
        ">=": operator.ge,
        "<=": operator.le,
        ">": operator.gt,
        "<": operator.lt,
    }
    for op, test in tests.items():  # the two-character forms first
        if text.startswith(op):
            bound = _parse(text[len(op) :])
            return functools.partial(lambda t, test, bound: test(t, bound), test=test, bound=bound)
    exact = _parse(text)
    return lambda t: t == exact


def _page_url(request: web.Request, page: int) -> str:
    return str(request.url.update_query(page=str(page)))


def _limit_headers(limit: _Limit) -> dict[str, str]:
    return {
        "X-RateLimit-Limit": str(limit.limit),
        "X-RateLimit-Remaining": str(max(0, limit.remaining)),
        "X-RateLimit-Used": str(limit.limit - max(0, limit.remaining)),
        "X-RateLimit-Reset": str(int(limit.reset_at)),
    }


def _json(payload: Any, status: int, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(payload).encode(),
        content_type="application/json",
        headers=headers or {},
    )
