"""Demand from GitHub's REST API: queued workflow jobs whose labels this scale set serves.

For users without HUD. One read (every `demand.interval`) walks, as KEDA's github-runner
scaler does:

1. the repositories: `github.repositories`, else the scale set's own repository, else every
   repository of its organization (``GET /orgs/{org}/repos``, re-listed every
   `github.repositories_refresh`; archived ones skipped);
2. per repository, the workflow runs that are queued or in progress
   (``GET /repos/{o}/{r}/actions/runs?status=…``; an in-progress run can still hold queued
   jobs, e.g. the rest of a matrix);
3. per run, its jobs (``GET …/actions/runs/{id}/jobs``), counting those with status
   ``queued`` whose every label is one of the scale set's labels (case-insensitive;
   ``self-hosted`` matches any self-hosted runner, as on GitHub).

Cost control:

- Conditional requests: every answer's ETag is kept with what was taken from its body (run
  ids, queued jobs' times, repository names — not the body itself, which can be large), and
  the next request for the same URL carries ``If-None-Match``. A 304 reuses what was taken
  and does not count against the token's rate limit.
- At most `github.max_calls_per_interval` calls per read (304s included). Repositories not
  reached keep their last counts; the next read starts where this one stopped, so every
  repository is visited in turn however long the list.
- Rate limit: ``X-RateLimit-Remaining``/``-Reset`` are tracked, and the calls that do count
  (anything but a 304) are spread so that `github.rate_limit_reserve` is left at the reset.
  A 429, or a 403 carrying ``Retry-After`` or ``X-RateLimit-Remaining: 0`` (primary and
  secondary limits), stops the read and pauses the source until the time GitHub gave.

A read never raises and never retries; a failed or rate-limited read returns a failed outcome,
and the policy holds the last good value, then falls back to the floor. The credentials are
the listener's own (a PAT, or a GitHub App installation token), through its HTTP client, so
the same proxy and CA settings apply.

Ages: a job's age is now − its ``created_at``, recomputed at every read even for counts held
from earlier reads, so a job held in a repository not visited this time still ages into the
part every peer claims (demand sharding).

Live parents: the same jobs lists also show the jobs now running (status ``in_progress`` with
a ``started_at``), which a reading reports as `Reading.running` for the stage model: workflow
(the run's ``path``, else the job's ``workflow_name``), job name, start and run
(``<run id>#<attempt>``). They cost nothing beyond the calls already made, are kept with the
queued jobs' times (a 304 reuses them; a repository not visited keeps its last ones; a run no
longer queued or in progress drops them at its next visit), and are bounded to the
`MAX_RUNNING` most recently started. With `github.in_progress_runs` off only the running
jobs of runs still queued as a whole are seen. A repository whose runs need more calls than
one read may make is kept as far as the read got; while any is, a reading says so
(`Reading.running_partial`): a job missing from it may still be running. The queued jobs
it counts are reported too (`Reading.queued_jobs`: run attempt, job id, creation time), so
the stage model can link children to the parent that ended before them.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from base.http.client import URL, Client, Headers, get_capped
from base.http.errors import TooLargeError, TransportError
from base.http.headers import rate_limit, rate_limited, retry_after
from capacity.demand import DemandReader, GitHubReaderFactory, Reading
from capacity.model import DemandOutcome, DemandResult
from capacity.settings import CapacitySettings
from capacity.settings_demand import DemandSettings, GitHubDemandSettings
from capacity.settings_problems import CapacitySettingsError
from capacity.stages import QueuedJob, RunningParent

TokenSource = Callable[[], Awaitable[str]]
T = TypeVar("T")

MAX_RESPONSE_BYTES = 10_000_000  # one page of 100 jobs is a few hundred KiB
_PER_PAGE = 100
_RUN_STATUSES = ("queued", "in_progress")
_DEFAULT_PAUSE = 60.0  # a rate-limit answer that names no time
_MAX_PAUSE = 3600.0  # the primary limit resets within the hour
_DETAIL_MAX = 200
_NEXT_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="next"')
_IMPLIED_LABEL = "self-hosted"
MAX_RUNNING = 500  # live parents in one reading, the most recently started kept


@dataclass(frozen=True)
class GitHubScope:
    """Where the scale set lives: the REST base URL and its owner/repository (from the
    listener's githubConfigUrl). `owner` is empty for an enterprise scale set."""

    api_url: str
    owner: str = ""
    repository: str = ""


def repositories_for(settings: GitHubDemandSettings, scope: GitHubScope) -> list[str] | None:
    """The repositories to read as `owner/name`, or None for every repository of the
    organization. CapacitySettingsError (one line) when the scope cannot be read."""
    owner = scope.owner
    names = settings.repositories
    if names:
        if not owner and any("/" not in name for name in names):
            raise CapacitySettingsError(
                "capacity setting github.repositories: use 'owner/name' for an enterprise scale set"
            )
        return [name if "/" in name else f"{owner}/{name}" for name in names]
    if scope.repository:
        return [f"{owner}/{scope.repository}"]
    if not owner:
        raise CapacitySettingsError(
            "capacity setting github.repositories: required for an enterprise scale set "
            "(GitHub lists no enterprise's repositories for this)"
        )
    return None  # every repository of the organization


def label_match(job_labels: Iterable[str], scale_set_labels: Iterable[str]) -> bool:
    """Whether a job with `job_labels` (its `runs-on`) can run on this scale set: every label
    is one of the scale set's, ignoring case; `self-hosted` is implied."""
    wanted = {label.lower() for label in job_labels}
    if not wanted:
        return False  # a job with no labels is not for a self-hosted scale set
    served = {label.lower() for label in scale_set_labels} | {_IMPLIED_LABEL}
    return wanted <= served and wanted != {_IMPLIED_LABEL}


def _epoch(text: object) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class _Run:
    """What a run list says of one run: its id, workflow file and name, and attempt."""

    id: int
    path: str = ""
    name: str = ""
    attempt: int | None = None


@dataclass(frozen=True)
class _Jobs:
    """What one page of a run's jobs gave: the matching queued jobs (their run, id and
    creation time) and the jobs running now."""

    queued: tuple[QueuedJob, ...] = ()
    running: tuple[RunningParent, ...] = ()


@dataclass
class _Found:
    """What one repository's visit gathered so far."""

    queued: list[QueuedJob]
    running: list[RunningParent]


class _Stop(Exception):
    """Ends a read early: budget spent (`result` None), rate-limited or failed."""

    def __init__(self, result: DemandResult | None, detail: str = "") -> None:
        super().__init__(detail)
        self.result = result
        self.detail = detail


class GitHubDemand(DemandReader):
    """Queued jobs for one scale set from GitHub's REST API (see the module docstring)."""

    def __init__(
        self,
        settings: GitHubDemandSettings,
        labels: Sequence[str] | None,
        *,
        client: Client,
        token: TokenSource,
        scope: GitHubScope,
        interval: float,
        demand: DemandSettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        # None: every queued job with labels (the webhook receiver's reconcile).
        self._labels = None if labels is None else tuple(labels)
        self._client = client
        self._token = token
        self._scope = GitHubScope(scope.api_url.rstrip("/"), scope.owner, scope.repository)
        self._interval = interval
        self._aged_after = (demand or DemandSettings()).aged_after
        self._clock = clock
        self._fixed = self._configured_repositories()
        # repository ("" for the organization's list) -> url -> the last 200 answer's
        # (etag, what was taken from the body, next page URL)
        self._cache: dict[str, dict[str, tuple[str, Any, str | None]]] = {}
        self._repos: list[str] = list(self._fixed or ())
        self._listed_at: float | None = None
        self._listing: list[str] | None = None  # pages read so far of a listing in progress
        self._listing_url: str | None = None
        self._jobs: dict[str, tuple[QueuedJob, ...]] = {}  # repo -> its matching queued jobs
        self._running: dict[str, tuple[RunningParent, ...]] = {}  # repo -> its running jobs
        self._partial: set[str] = set()  # repos last read in part (the call budget ran out)
        self._cursor = 0
        self._remaining: int | None = None
        self._reset_at: float | None = None
        self._paused_until = 0.0

    # --- configuration --------------------------------------------------------------------

    def _configured_repositories(self) -> list[str] | None:
        return repositories_for(self._settings, self._scope)

    # --- DemandReader ---------------------------------------------------------------------

    async def aclose(self) -> None:
        """The HTTP client is the listener's; nothing of ours to close."""

    async def read(self) -> Reading:
        started = self._clock()
        calls: Counter[str] = Counter()
        now = started
        if now < self._paused_until:
            return self._reading(
                DemandResult.RATE_LIMITED,
                started,
                calls,
                f"rate-limited: paused for {self._paused_until - now:.0f}s more",
            )
        budget = _Budget(self._settings.max_calls_per_interval, self._charged_allowance(now))
        if budget.charged <= 0:
            self._paused_until = self._reset_at or now + _DEFAULT_PAUSE
            return self._reading(
                DemandResult.RATE_LIMITED,
                started,
                calls,
                f"rate limit: {self._remaining} left, reserve "
                f"{self._settings.rate_limit_reserve}; waiting for the reset",
            )
        try:
            # The whole read is bounded too: many calls at their own deadline each could
            # otherwise hold the loop for many intervals.
            async with asyncio.timeout(max(self._interval, self._settings.timeout) * 2):
                token = await self._get_token()
                visited = await self._walk(token, budget, calls)
        except _Stop as stop:
            if stop.result is None:  # cannot happen: _walk turns budget stops into progress
                raise AssertionError("budget stop escaped") from None
            return self._reading(stop.result, started, calls, stop.detail)
        except TimeoutError:
            return self._reading(DemandResult.TIMEOUT, started, calls, "read took too long")
        return self._done(started, calls, visited)

    # --- one read -------------------------------------------------------------------------

    async def _get_token(self) -> str:
        try:
            return await self._token()
        except Exception as exc:
            # The class name only: messages of credential errors may quote what was sent.
            raise _Stop(
                DemandResult.HTTP_ERROR, f"no GitHub token ({type(exc).__name__})"
            ) from None

    async def _walk(self, token: str, budget: _Budget, calls: Counter[str]) -> int:
        """List repositories when due, then visit them round-robin within the budget.
        Returns how many repositories were visited."""
        try:
            await self._list_repositories(token, budget, calls)
        except _Stop as stop:
            if stop.result is not None:
                raise
        repos = self._repos
        if not repos:
            return 0
        visited = 0
        start = self._cursor % len(repos)
        for step in range(len(repos)):
            repo = repos[(start + step) % len(repos)]
            found = _Found([], [])
            spent = budget.total
            try:
                await self._visit(repo, token, budget, calls, found)
            except _Stop as stop:
                if stop.result is not None:
                    raise
                if visited == 0 and budget.total < spent:
                    # Progress even when one repository needs more calls than a read may
                    # make: keep what its reached runs hold, and move on next time.
                    self._keep(repo, found, partial=True)
                    self._cursor = (start + step + 1) % len(repos)
                    return 1
                self._cursor = (start + step) % len(repos)
                return visited
            self._keep(repo, found)
            visited += 1
        self._cursor = start
        return visited

    def _keep(self, repo: str, found: _Found, *, partial: bool = False) -> None:
        self._jobs[repo] = tuple(found.queued)
        self._running[repo] = tuple(found.running)
        if partial:
            self._partial.add(repo)
        else:
            self._partial.discard(repo)

    async def _list_repositories(self, token: str, budget: _Budget, calls: Counter[str]) -> None:
        if self._fixed is not None:
            return
        now = self._clock()
        refresh = self._settings.repositories_refresh
        due = self._listed_at is None or now - self._listed_at >= refresh
        if self._listing is None:
            if not due:
                return
            self._listing = []
            self._listing_url = (
                f"{self._scope.api_url}/orgs/{self._scope.owner}/repos"
                f"?type=all&sort=full_name&per_page={_PER_PAGE}"
            )
        while self._listing_url is not None:
            names, next_url = await self._get(
                self._listing_url, token, budget, calls, repo="", extract=_repository_names
            )
            self._listing.extend(names)
            self._listing_url = next_url
        listed = list(dict.fromkeys(self._listing))
        self._listing = None
        if listed != self._repos:
            keep = set(listed)
            self._jobs = {repo: jobs for repo, jobs in self._jobs.items() if repo in keep}
            self._running = {repo: jobs for repo, jobs in self._running.items() if repo in keep}
            self._partial &= keep
            self._cache = {repo: urls for repo, urls in self._cache.items() if repo in keep | {""}}
            self._cursor = 0
        self._repos = listed
        self._listed_at = now

    async def _visit(
        self, repo: str, token: str, budget: _Budget, calls: Counter[str], found: _Found
    ) -> None:
        base = f"{self._scope.api_url}/repos/{repo}/actions"
        runs: dict[int, _Run] = {}
        live: set[str] = set()
        statuses = _RUN_STATUSES if self._settings.in_progress_runs else _RUN_STATUSES[:1]
        for status in statuses:
            url: str | None = f"{base}/runs?status={status}&per_page={_PER_PAGE}"
            while url is not None:
                live.add(url)
                listed, url = await self._get(url, token, budget, calls, repo=repo, extract=_runs)
                for run in listed:
                    runs.setdefault(run.id, run)
        for run in runs.values():
            url = f"{base}/runs/{run.id}/jobs?per_page={_PER_PAGE}"
            while url is not None:
                live.add(url)
                jobs, url = await self._get(
                    url, token, budget, calls, repo=repo, extract=self._job_reader(run)
                )
                found.queued.extend(jobs.queued)
                found.running.extend(jobs.running)
        # Pages of runs no longer queued or running are not asked for again.
        cached = self._cache.get(repo, {})
        for stale in [u for u in cached if u not in live]:
            del cached[stale]

    def _job_reader(self, run: _Run) -> Callable[[Any], _Jobs]:
        return lambda body: self._jobs_of(run, body)

    def _jobs_of(self, run: _Run, body: Any) -> _Jobs:
        jobs = body.get("jobs") if isinstance(body, dict) else None
        if not isinstance(jobs, list):
            raise _Stop(DemandResult.BAD_RESPONSE, "job list: no jobs array")
        queued = []
        running = []
        for job in jobs:
            if not isinstance(job, dict):
                continue
            if job.get("status") == "in_progress":
                # Not filtered by this scale set's labels: a build running on another label
                # set announces the shards that will queue on this one. The repositories are
                # the ones this source reads, so the parents come from where its demand does.
                parent = _running_parent(run, job)
                if parent is not None:
                    running.append(parent)
                continue
            if job.get("status") != "queued":
                continue
            labels = job.get("labels")
            if not isinstance(labels, list) or not labels:
                continue
            names = tuple(map(str, labels))
            if self._labels is not None and not label_match(names, self._labels):
                continue
            created = _epoch(job.get("created_at"))
            job_id = _int(job.get("id"))
            queued.append(
                QueuedJob(
                    run=_attempt_of(run, job),
                    # -1: no id (counted, but not fed to the stage model, which could not
                    # tell it from the same job in the next reading).
                    job_id=job_id if job_id is not None else -1,
                    queued_at=created if created is not None else self._clock(),
                    labels=names,
                )
            )
        return _Jobs(tuple(queued), tuple(running))

    # --- one call -------------------------------------------------------------------------

    async def _get(
        self,
        url: str,
        token: str,
        budget: _Budget,
        calls: Counter[str],
        *,
        repo: str,
        extract: Callable[[Any], T],
    ) -> tuple[T, str | None]:
        """One conditional GET within the budget: (what `extract` took from the body, the
        next page's URL). `extract` raises _Stop on a body of the wrong shape."""
        if not budget.allows() or self._at_reserve():
            raise _Stop(None)
        cached = self._cache.get(repo, {}).get(url)
        headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }
        if cached is not None:
            headers["If-None-Match"] = cached[0]
        timeout = self._settings.timeout
        try:
            # The client's own timeouts are the listener's; this source's are per call.
            answer = await get_capped(
                self._client,
                url,
                max_bytes=MAX_RESPONSE_BYTES,
                deadline=timeout,
                headers=headers,
                limits=timeout,
            )
        except TransportError as exc:
            calls["error"] += 1
            budget.spend(charged=True)
            if exc.timed_out:
                raise _Stop(
                    DemandResult.TIMEOUT, f"{_path(url)}: no answer within {timeout:g}s"
                ) from None
            raise _Stop(DemandResult.HTTP_ERROR, f"{_path(url)}: {exc.kind}") from None
        except TooLargeError:
            calls["error"] += 1
            budget.spend(charged=True)
            raise _Stop(DemandResult.TOO_LARGE, f"{_path(url)}: response too large") from None
        status, response_headers, body = answer.status, answer.headers, answer.body
        self._note_rate_limit(response_headers)
        next_url = _next_link(response_headers.get("link", ""))
        if status == 304 and cached is not None:
            calls["not_modified"] += 1
            budget.spend(charged=False)
            return cached[1], next_url or cached[2]
        budget.spend(charged=True)
        if rate_limited(status, response_headers):
            calls["rate_limited"] += 1
            pause = self._pause_from(response_headers)
            self._paused_until = self._clock() + pause
            raise _Stop(
                DemandResult.RATE_LIMITED, f"{_path(url)}: HTTP {status}, pausing {pause:.0f}s"
            )
        if status != 200:
            calls["error"] += 1
            raise _Stop(DemandResult.HTTP_ERROR, f"{_path(url)}: HTTP {status}")
        try:
            parsed = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError):
            calls["error"] += 1
            raise _Stop(DemandResult.BAD_RESPONSE, f"{_path(url)}: not JSON") from None
        try:
            taken = extract(parsed)
        except _Stop as stop:
            calls["error"] += 1
            raise _Stop(DemandResult.BAD_RESPONSE, f"{_path(url)}: {stop.detail}") from None
        calls["ok"] += 1
        etag = response_headers.get("etag", "")
        if etag:
            self._cache.setdefault(repo, {})[url] = (etag, taken, next_url)
        return taken, next_url

    # --- rate limit -----------------------------------------------------------------------

    def _note_rate_limit(self, headers: Headers) -> None:
        limit = rate_limit(headers)
        if limit.remaining is not None:
            self._remaining = limit.remaining
        if limit.reset_at is not None:
            self._reset_at = limit.reset_at

    def _at_reserve(self) -> bool:
        """Whether the last answer left no more than the reserve (until the reset)."""
        if self._remaining is None or self._reset_at is None:
            return False
        reserve = self._settings.rate_limit_reserve
        return self._remaining <= reserve and self._clock() < self._reset_at

    def _pause_from(self, headers: Headers) -> float:
        now = self._clock()
        pause = retry_after(headers, now)
        if pause is None and headers.get("x-ratelimit-remaining") == "0" and self._reset_at:
            pause = self._reset_at - now
        if pause is None:
            pause = _DEFAULT_PAUSE
        return min(max(pause, 1.0), _MAX_PAUSE)

    def _charged_allowance(self, now: float) -> int:
        """Calls that count against the rate limit this read may make: what is left above
        the reserve, spread over the reads until the reset."""
        cap = self._settings.max_calls_per_interval
        if self._remaining is None:
            return cap
        if self._reset_at is None or now >= self._reset_at:
            return cap  # a new window has begun; the next answer tells its size
        spare = self._remaining - self._settings.rate_limit_reserve
        if spare <= 0:
            return 0
        reads_left = max(1, math.ceil((self._reset_at - now) / self._interval))
        return min(cap, max(1, spare // reads_left))

    # --- results --------------------------------------------------------------------------

    def _done(self, started: float, calls: Counter[str], visited: int) -> Reading:
        if self._fixed is None and self._listed_at is None:
            # The first listing of a large organization may take several reads' budgets; an
            # unknown list is not "nothing queued".
            return self._reading(
                DemandResult.RATE_LIMITED,
                started,
                calls,
                f"repository list not complete yet ({len(self._listing or ())} so far, "
                f"call budget spent)",
            )
        now = self._clock()
        created = [job.queued_at for jobs in self._jobs.values() for job in jobs]
        aged = sum(1 for t in created if now - t >= self._aged_after)
        outcome = DemandOutcome(
            result=DemandResult.OK,
            duration=max(0.0, now - started),
            queued=len(created),
            aged=aged,
            rows=visited,
            detail=(
                f"{len(created)} queued ({aged} aged) in {len(self._repos)} repositories, "
                f"{visited} read now, {sum(calls.values())} calls "
                f"({calls['not_modified']} not modified)"
            ),
        )
        return Reading(
            source="github",
            outcome=outcome,
            calls=dict(calls),
            rate_limit_remaining=self._remaining,
            running=self._running_now(),
            running_truncated=sum(map(len, self._running.values())) > MAX_RUNNING,
            running_partial=bool(self._partial),
            queued_jobs=tuple(job for jobs in self._jobs.values() for job in jobs),
            complete=visited == len(self._repos) and not self._partial,
        )

    def _running_now(self) -> tuple[RunningParent, ...]:
        parents = [p for jobs in self._running.values() for p in jobs]
        parents.sort(key=lambda p: p.started_at, reverse=True)
        return tuple(parents[:MAX_RUNNING])

    def _reading(
        self, result: DemandResult, started: float, calls: Counter[str], detail: str
    ) -> Reading:
        outcome = DemandOutcome(
            result=result,
            duration=max(0.0, self._clock() - started),
            detail=" ".join(detail.split())[:_DETAIL_MAX],
        )
        return Reading(
            source="github",
            outcome=outcome,
            calls=dict(calls),
            rate_limit_remaining=self._remaining,
        )


class _Budget:
    """Calls left in one read: all calls (`max_calls_per_interval`) and those that count
    against the rate limit (anything but a 304)."""

    def __init__(self, total: int, charged: int) -> None:
        self.total = total
        self.charged = charged

    def allows(self) -> bool:
        return self.total > 0 and self.charged > 0

    def spend(self, *, charged: bool) -> None:
        self.total -= 1
        if charged:
            self.charged -= 1


def _repository_names(body: Any) -> tuple[str, ...]:
    """Full names of the repositories on one page of the organization's list, archived ones
    left out (no workflow runs there)."""
    if not isinstance(body, list):
        raise _Stop(DemandResult.BAD_RESPONSE, "not a JSON array of repositories")
    names = []
    for repo in body:
        if not isinstance(repo, dict) or not isinstance(repo.get("full_name"), str):
            raise _Stop(DemandResult.BAD_RESPONSE, "a repository without full_name")
        if not repo.get("archived"):
            names.append(repo["full_name"])
    return tuple(names)


def _runs(body: Any) -> tuple[_Run, ...]:
    runs = body.get("workflow_runs") if isinstance(body, dict) else None
    if not isinstance(runs, list):
        raise _Stop(DemandResult.BAD_RESPONSE, "no workflow_runs array")
    return tuple(
        _Run(r["id"], _text(r.get("path")), _text(r.get("name")), _int(r.get("run_attempt")))
        for r in runs
        if isinstance(r, dict) and isinstance(r.get("id"), int)
    )


def _running_parent(run: _Run, job: dict[str, Any]) -> RunningParent | None:
    """A running job as the stage model names it, or None without a start time."""
    started = _epoch(job.get("started_at"))
    if started is None:
        return None
    return RunningParent(
        # The file path, as traces name a workflow; the name when the run list gave none.
        workflow=run.path or _text(job.get("workflow_name")) or run.name,
        job_name=_text(job.get("name")),
        started_at=started,
        run=_attempt_of(run, job),
    )


def _attempt_of(run: _Run, job: dict[str, Any]) -> str:
    """The run attempt a job belongs to, as the stage model names it: ``<run id>#<attempt>``."""
    attempt = run.attempt or _int(job.get("run_attempt")) or 1
    return f"{run.id}#{attempt}"


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _path(url: str) -> str:
    """The URL's path for messages (no host, no query)."""
    return URL(url).path


def _next_link(link: str) -> str | None:
    match = _NEXT_LINK.search(link)
    return match.group(1) if match else None


def reader_factory(
    *, client: Client, token: TokenSource, scope: GitHubScope
) -> GitHubReaderFactory:
    """What the composition root hands the monitor: builds the GitHub source from the
    capacity settings and the scale set's labels, with the listener's client and token."""

    def build(settings: CapacitySettings, labels: Sequence[str]) -> DemandReader:
        return GitHubDemand(
            settings.github,
            labels,
            client=client,
            token=token,
            scope=scope,
            interval=settings.demand_interval,  # how often reads come: the allowance per read
            demand=settings.demand,
        )

    return build
