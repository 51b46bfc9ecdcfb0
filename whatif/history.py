"""Job history from GitHub's REST API, for ``ghalistener whatif import``.

With the listener's own client and credentials (a PAT, or a GitHub App installation token
from ``GitHubAuth.api_token``), it walks, per repository:

1. the workflow runs created in the window, one day at a time
   (``GET /repos/{o}/{r}/actions/runs?created=A..B&per_page=100``, every page): GitHub
   answers at most 1,000 runs per filtered query, so a day with more is reported, not
   silently cut (``truncated_days``);
2. each run's jobs (``GET …/actions/runs/{id}/jobs?per_page=100``, every page).

The organization's repositories (``GET /orgs/{org}/repos``, archived ones skipped) are
listed when no repository is named.

Pacing, as the demand source: ``X-RateLimit-Remaining``/``-Reset`` are read from every
answer, and when no more than ``reserve`` calls are left the reader waits for the reset
(capped at an hour) before the next call; a 403 or 429 carrying ``Retry-After`` or
``X-RateLimit-Remaining: 0`` (primary and secondary limits) is waited out and the same page
asked again, at most ``_LIMIT_WAITS`` times in a row. 5xx answers and transport failures
are retried by ``listener.http.send`` (the one retry layer), each attempt within its
deadline. Any other status ends the import with one line naming the path and the status.

Bodies are returned as GitHub sent them (dicts); turning a job into a trace line, and
saying why a job is not one, is ``whatif.trace.from_github``.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from base.http.client import URL, Client, Headers
from base.http.errors import HTTPError
from base.http.headers import rate_limit, rate_limited, retry_after
from listener.http import Clock, Sleep, error_from_response, send
from listener.wire import WireError, decode_json

TokenSource = Callable[[], Awaitable[str]]
Progress = Callable[[str], None]

_PER_PAGE = 100
_RUNS_PER_QUERY = 1000  # GitHub's cap on the results of one filtered run listing
_LIMIT_WAITS = 5
_MAX_WAIT = 3600.0
_DEFAULT_WAIT = 60.0


class HistoryError(HTTPError):
    """The import cannot go on; the message is one line, without secrets."""


@dataclass
class Pacing:
    """What the answers said about the rate limit, and what was waited for it."""

    reserve: int = 100
    remaining: int | None = None
    reset_at: float | None = None
    waited: float = 0.0
    calls: int = 0


@dataclass
class HistoryStats:
    repositories: int = 0
    runs: int = 0
    truncated_days: list[str] = field(default_factory=list)  # "owner/repo YYYY-MM-DD"


class GitHubHistory:
    """Reads runs and jobs; see the module docstring."""

    def __init__(
        self,
        client: Client,
        token: TokenSource,
        api_url: str,
        *,
        reserve: int = 100,
        sleep: Sleep = asyncio.sleep,
        clock: Clock = time.time,
        progress: Progress = lambda _line: None,
    ) -> None:
        self._client = client
        self._token = token
        self._api = api_url.rstrip("/")
        self._sleep = sleep
        self._clock = clock
        self._progress = progress
        self.pacing = Pacing(reserve=reserve)
        self.stats = HistoryStats()

    async def organization_repositories(self, org: str) -> list[str]:
        names: list[str] = []
        url: str | None = f"{self._api}/orgs/{quote(org)}/repos?type=all&per_page={_PER_PAGE}"
        while url is not None:
            body, url = await self._get(url)
            if not isinstance(body, list):
                raise HistoryError(f"/orgs/{org}/repos: not a JSON array")
            names.extend(
                repo["full_name"]
                for repo in body
                if isinstance(repo, dict)
                and isinstance(repo.get("full_name"), str)
                and not repo.get("archived")
            )
        return names

    async def jobs(
        self, repositories: list[str], since: datetime, until: datetime
    ) -> AsyncIterator[tuple[dict[str, Any], dict[str, Any]]]:
        """(run, job) for every job of every run created in [since, until)."""
        for repo in repositories:
            self.stats.repositories += 1
            day = since
            while day < until:
                end = min(day + timedelta(days=1), until)
                async for run in self._runs(repo, day, end):
                    self.stats.runs += 1
                    run_id = run.get("id")
                    if isinstance(run_id, bool) or not isinstance(run_id, int):
                        raise HistoryError(f"/repos/{repo}/actions/runs: a run without an id")
                    url: str | None = (
                        f"{self._api}/repos/{repo}/actions/runs/{run_id}/jobs?per_page={_PER_PAGE}"
                    )
                    while url is not None:
                        body, url = await self._get(url)
                        jobs = body.get("jobs") if isinstance(body, dict) else None
                        if not isinstance(jobs, list):
                            raise HistoryError(f"/repos/{repo}/actions/runs/{run_id}/jobs: no jobs")
                        for job in jobs:
                            yield run, (job if isinstance(job, dict) else {})
                day = end
            self._progress(f"{repo}: {self.stats.runs} runs so far, {self.pacing.calls} calls")

    async def _runs(
        self, repo: str, since: datetime, until: datetime
    ) -> AsyncIterator[dict[str, Any]]:
        window = f"{_stamp(since)}..{_stamp(until - timedelta(seconds=1))}"
        url: str | None = (
            f"{self._api}/repos/{repo}/actions/runs?created={quote(window)}&per_page={_PER_PAGE}"
        )
        first = True
        while url is not None:
            body, url = await self._get(url)
            runs = body.get("workflow_runs") if isinstance(body, dict) else None
            if not isinstance(runs, list):
                raise HistoryError(f"/repos/{repo}/actions/runs: no workflow_runs array")
            if first:
                total = body.get("total_count")
                if isinstance(total, int) and total > _RUNS_PER_QUERY:
                    self.stats.truncated_days.append(f"{repo} {since.date().isoformat()}")
                first = False
            for run in runs:
                if isinstance(run, dict):
                    yield run

    # --- one call -------------------------------------------------------------------------

    async def _get(self, url: str) -> tuple[Any, str | None]:
        """GET one page: (its JSON, the next page's URL)."""
        path = URL(url).path
        for _ in range(_LIMIT_WAITS + 1):
            await self._pace()
            token = await self._token()
            headers = {
                "Authorization": f"Bearer {token}",
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
            }
            response = await send(
                self._client,
                functools.partial(self._client.build_request, "GET", url, headers=headers),
                sleep=self._sleep,
                clock=self._clock,
            )
            self.pacing.calls += 1
            self._note(response.headers)
            if rate_limited(response.status_code, response.headers):
                await self._wait(self._limit_wait(response.headers), f"{path}: rate-limited")
                continue
            if response.status_code != 200:
                raise HistoryError(str(error_from_response(response)))
            try:
                body = decode_json(response.content)
            except WireError as exc:
                raise HistoryError(f"{path}: {exc}") from None
            return body, response.links.get("next", {}).get("url")
        raise HistoryError(f"{path}: still rate-limited after {_LIMIT_WAITS} waits")

    def _note(self, headers: Headers) -> None:
        limit = rate_limit(headers)
        if limit.remaining is not None:
            self.pacing.remaining = limit.remaining
        if limit.reset_at is not None:
            self.pacing.reset_at = limit.reset_at

    async def _pace(self) -> None:
        p = self.pacing
        if p.remaining is None or p.reset_at is None or p.remaining > p.reserve:
            return
        wait = p.reset_at - self._clock()
        if wait > 0:
            await self._wait(wait, f"{p.remaining} calls left (reserve {p.reserve})")
        p.remaining = None

    def _limit_wait(self, headers: Headers) -> float:
        asked = retry_after(headers, self._clock())
        if asked is not None:
            return asked
        if self.pacing.reset_at is not None:
            return self.pacing.reset_at - self._clock()
        return _DEFAULT_WAIT

    async def _wait(self, seconds: float, why: str) -> None:
        seconds = min(max(seconds, 1.0), _MAX_WAIT)
        self._progress(f"rate limit: {why}; waiting {seconds:.0f}s")
        self.pacing.waited += seconds
        await self._sleep(seconds)


def _stamp(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
