"""A fake of the PyTorch HUD queued-jobs endpoint, served over real HTTP on loopback.

`GET /api/clickhouse/queued_jobs_aggregate?parameters=<url-encoded JSON>` with header
`x-hud-internal-bot: <token>` answers a JSON array of rows
`{runner_label, org, repo, num_queued_jobs, min_queue_time_minutes, max_queue_time_minutes}`,
ordered by max queue time, descending, like the real query.

Rows come from two places, concatenated: rows a test sets by hand (`set_queued`), and, when
linked to a `FakeActions`, rows computed from its job queue as it was `lag` seconds ago (HUD is
fed by webhooks, so it trails GitHub). A linked job counts as queued until a runner claims it,
because GitHub reports a job "queued" until it starts; `include_assigned=False` counts only
jobs no scale set holds yet. Row fields follow the real query: `repo` is the repository name
without the owner, minutes are whole numbers, `runner_label` is the job's second label when it
has several, else its first, else "N/A".

Filters honoured: `runnerLabels` (empty = all), `orgs` (empty, or containing "", = all),
`repo` ("" = all), `queuedThresholdMinutes` and `maxAgeDays` (per job when linked; for hand-set
rows a row is dropped when its max queue time is under the threshold).
"""

from __future__ import annotations

import asyncio
import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from tools.fake_actions import FakeActions, FakeJob, JobState
from tools.fake_http import (
    Fault,
    LoopbackFake,
    LoopbackServer,
    RecordedRequest,
    RecordingFaultMiddleware,
    json_response,
)

PATH = "/api/clickhouse/queued_jobs_aggregate"
AUTH_HEADER = "x-hud-internal-bot"
ROUTES = frozenset({"queued_jobs"})


class Outage(enum.StrEnum):
    SERVER_ERROR = "5xx"
    HANG = "hang"  # accept the request, never answer (until stop)
    GARBAGE = "garbage"  # 200 with a body that is not JSON
    OVERSIZED = "oversized"  # 200 with a valid but huge JSON array
    WRONG_SCHEMA = "wrong_schema"  # 200 with JSON of the wrong shape


@dataclass
class HUDRow:
    runner_label: str
    org: str
    repo: str
    num_queued_jobs: int
    min_queue_time_minutes: int
    max_queue_time_minutes: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "runner_label": self.runner_label,
            "org": self.org,
            "repo": self.repo,
            "num_queued_jobs": self.num_queued_jobs,
            "min_queue_time_minutes": self.min_queue_time_minutes,
            "max_queue_time_minutes": self.max_queue_time_minutes,
        }


def hud_runner_label(labels: Sequence[str]) -> str:
    """The label HUD groups a job under: second of several, else first, else N/A."""
    if not labels:
        return "N/A"
    return labels[1] if len(labels) > 1 else labels[0]


class FakeHUD(LoopbackFake):
    """`await start()`, point the client at `.endpoint`, `await stop()`."""

    def __init__(
        self,
        token: str = "hud-fake-token",
        *,
        oversized_bytes: int = 5 * 1024 * 1024,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.token = token
        self.oversized_bytes = oversized_bytes
        self.parameters: list[dict[str, Any]] = []  # decoded `parameters` of each valid call
        # runner_request_id -> when a linked job was first counted in an answer served (on
        # the linked fake's clock): the outcome benchmark's "first seen by a demand reading".
        self.first_served: dict[int, float] = {}
        self._rows: list[HUDRow] = []
        self._actions: FakeActions | None = None
        self._lag = 0.0
        self._include_assigned = True
        self._outage: Outage | None = None
        self._outage_left: int | None = None
        self._outage_status = 503
        self._outage_body: bytes | None = None
        self._closing = asyncio.Event()
        self._recorder = RecordingFaultMiddleware(ROUTES)
        app = web.Application(middlewares=[self._recorder.middleware])
        app.router.add_get(PATH, self._queued_jobs, name="queued_jobs")
        self._server = LoopbackServer(app, host=host, port=port)

    async def stop(self) -> None:
        self._closing.set()
        await super().stop()

    @property
    def endpoint(self) -> str:
        return f"{self.url}{PATH}"

    @property
    def requests(self) -> list[RecordedRequest]:
        return self._recorder.requests

    # ------------------------------------------------------------------ test API

    def set_queued(
        self,
        label: str,
        count: int,
        *,
        org: str = "acme",
        repo: str = "app",
        min_minutes: int = 1,
        max_minutes: int | None = None,
    ) -> None:
        """Set (replace) the hand-made row for (label, org, repo); count 0 removes it."""
        self._rows = [
            r for r in self._rows if (r.runner_label, r.org, r.repo) != (label, org, repo)
        ]
        if count > 0:
            top = max(min_minutes, max_minutes if max_minutes is not None else min_minutes)
            self._rows.append(HUDRow(label, org, repo, count, min_minutes, top))

    def clear_rows(self) -> None:
        self._rows = []

    @property
    def lag(self) -> float:
        """How far behind the linked queue the rows are (seconds)."""
        return self._lag

    def link(
        self, actions: FakeActions, *, lag: float = 0.0, include_assigned: bool = True
    ) -> None:
        """Derive rows from `actions`' jobs as they were `lag` seconds ago."""
        self._actions = actions
        self._lag = lag
        self._include_assigned = include_assigned

    def unlink(self) -> None:
        self._actions = None

    def outage(
        self,
        mode: Outage | str,
        *,
        times: int | None = None,
        status: int = 503,
        body: bytes | None = None,
    ) -> None:
        """Misbehave for the next `times` requests (None: until `clear_outage`). `status`
        applies to 5xx; `body` overrides the garbage or wrong-schema payload."""
        self._outage = Outage(mode)
        self._outage_left = times
        self._outage_status = status
        self._outage_body = body

    def clear_outage(self) -> None:
        self._outage = None

    def inject(self, fault: Fault, times: int = 1) -> None:
        """Low-level faults shared with the Actions fake (drop, truncate, slow, bom...)."""
        self._recorder.inject("queued_jobs", fault, times)

    def rows(
        self, parameters: dict[str, Any] | None = None, *, served: bool = False
    ) -> list[dict[str, Any]]:
        """What a request with these parameters would get right now (outages aside);
        ``served``: they are being sent, so note the linked jobs they count (first_served)."""
        params = parameters or {}
        rows = [r for r in self._rows if self._row_passes(r, params)]
        rows += self._linked_rows(params, served=served)
        rows.sort(key=lambda r: r.max_queue_time_minutes, reverse=True)
        return [r.as_dict() for r in rows]

    # ------------------------------------------------------------------ rows

    @staticmethod
    def _scope_passes(label: str, org: str, repo: str, params: dict[str, Any]) -> bool:
        labels = params.get("runnerLabels") or []
        if labels and label not in labels:
            return False
        orgs = params.get("orgs") or []
        if orgs and "" not in orgs and org not in orgs:
            return False
        wanted_repo = params.get("repo") or ""
        return not wanted_repo or repo == wanted_repo

    def _row_passes(self, row: HUDRow, params: dict[str, Any]) -> bool:
        threshold = int(params.get("queuedThresholdMinutes") or 0)
        if row.max_queue_time_minutes < threshold:
            return False
        return self._scope_passes(row.runner_label, row.org, row.repo, params)

    def _linked_rows(self, params: dict[str, Any], *, served: bool) -> list[HUDRow]:
        if self._actions is None:
            return []
        served_at = self._actions.clock()
        counted = {JobState.QUEUED}
        if self._include_assigned:
            counted |= {JobState.AVAILABLE, JobState.ASSIGNED}
        as_of = self._actions.clock() - self._lag  # the job history is on that clock
        now = datetime.now(UTC)
        threshold = int(params.get("queuedThresholdMinutes") or 0)
        max_age_days = params.get("maxAgeDays")
        groups: dict[tuple[str, str, str], list[int]] = {}
        job: FakeJob
        for job in self._actions.jobs.values():
            if job.state_at(as_of) not in counted:
                continue
            minutes = int((now - job.queue_time).total_seconds() // 60)
            if minutes < threshold:
                continue
            if max_age_days is not None and minutes > int(max_age_days) * 24 * 60:
                continue
            label = hud_runner_label(job.labels)
            key = (label, job.owner_name, job.repository_name)
            if self._scope_passes(*key, params):
                groups.setdefault(key, []).append(minutes)
                if served:
                    self.first_served.setdefault(job.runner_request_id, served_at)
        return [
            HUDRow(label, org, repo, len(ages), min(ages), max(ages))
            for (label, org, repo), ages in groups.items()
        ]

    # ------------------------------------------------------------------ HTTP

    async def _queued_jobs(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get(AUTH_HEADER) != self.token:
            return json_response({"error": "Unauthorized"}, status=401)
        raw = request.query.get("parameters")
        if raw is None:
            return json_response({"error": "parameters is required"}, status=400)
        try:
            params = json.loads(raw)
        except ValueError:
            return json_response({"error": "parameters is not JSON"}, status=400)
        if not isinstance(params, dict):
            return json_response({"error": "parameters must be an object"}, status=400)
        self.parameters.append(params)
        outage = self._take_outage()
        if outage is not None:
            return await self._misbehave(outage)
        return json_response(self.rows(params, served=True))

    def _take_outage(self) -> Outage | None:
        outage = self._outage
        if outage is None:
            return None
        if self._outage_left is not None:
            self._outage_left -= 1
            if self._outage_left <= 0:
                self._outage = None
        return outage

    async def _misbehave(self, outage: Outage) -> web.StreamResponse:
        if outage is Outage.SERVER_ERROR:
            return json_response({"error": "fake HUD outage"}, status=self._outage_status)
        if outage is Outage.HANG:
            await self._closing.wait()
            return web.Response(status=503)
        if outage is Outage.GARBAGE:
            body = self._outage_body or b"<!DOCTYPE html><title>Vercel Security Checkpoint</title>"
            return web.Response(status=200, body=body, content_type="text/html")
        if outage is Outage.WRONG_SCHEMA:
            body = (
                self._outage_body
                or json.dumps(
                    {"rows": [{"runner_label": "linux", "num_queued_jobs": "many"}]}
                ).encode()
            )
            return web.Response(status=200, body=body, content_type="application/json")
        # Oversized: valid rows, padded past the size cap a careful client enforces.
        row = HUDRow("N/A", "acme", "x" * 200, 1, 1, 1).as_dict()
        one = len(json.dumps(row)) + 1
        body = json.dumps([row] * (self.oversized_bytes // one + 1)).encode()
        return web.Response(status=200, body=body, content_type="application/json")
