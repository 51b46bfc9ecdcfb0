"""HUD queued-jobs client (docs/capacity-model.md §4).

`GET <url>?parameters=<url-encoded JSON>` with the header `x-hud-internal-bot: <token>`. The
answer is a JSON array of rows grouped by (runner_label, org, repo), so one label may appear
in several rows: the queued count is the sum over every row whose label is one of the scale
set's labels.

Every request has a deadline (the whole exchange, body included), a body-size cap (the body is
streamed and abandoned at the cap) and a schema check. A request never raises: it returns a
`DemandOutcome` with the result and duration, for metrics. What to do when HUD fails (hold the
last good value, then fall back to a floor) is pure policy: `capacity.policy.record_demand` and
`capacity.policy.resolve_demand`. There are no retries here; the next periodic pass is the
retry.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from base.http.client import Client, get_capped, plain_client
from base.http.errors import TooLargeError, TransportError
from capacity.model import DemandOutcome, DemandResult
from capacity.settings_demand import HudParameters, HudSettings

TOKEN_HEADER = "x-hud-internal-bot"
_DETAIL_MAX = 200


class HudRow(BaseModel):
    """One row of `queued_jobs_aggregate`. Numbers may arrive as JSON strings (ClickHouse
    quotes 64-bit integers), which lax validation accepts."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    runner_label: str
    org: str
    repo: str
    num_queued_jobs: int = Field(ge=0)
    min_queue_time_minutes: float
    max_queue_time_minutes: float


_ROWS = TypeAdapter(list[HudRow])


def build_parameters(parameters: HudParameters, labels: Iterable[str]) -> dict[str, Any]:
    """The `parameters` JSON object. Empty org names are dropped because HUD reads
    `orgs: [""]` as every org; with no org left the key is omitted (HUD's own default)."""
    body: dict[str, Any] = {
        "queuedThresholdMinutes": parameters.queued_threshold_minutes,
        "maxAgeDays": parameters.max_age_days,
        "repo": parameters.repo,
        "runnerLabels": list(dict.fromkeys(label for label in labels if label)),
    }
    orgs = [org for org in parameters.orgs if org.strip()]
    if orgs:
        body["orgs"] = orgs
    return body


def parse_rows(body: bytes) -> list[HudRow]:
    """Rows from a response body; ValueError (one line) if it is not the expected shape."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON ({exc.__class__.__name__})") from None
    try:
        return _ROWS.validate_python(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise ValueError(f"unexpected rows: {where}: {first['msg']}") from None


def sum_queued(rows: Iterable[HudRow], labels: Iterable[str]) -> tuple[int, int]:
    """(queued jobs, matching rows) over the rows whose runner_label is one of `labels`."""
    wanted = set(labels)
    matched = [row for row in rows if row.runner_label in wanted]
    return sum(row.num_queued_jobs for row in matched), len(matched)


class HudClient:
    """Queued jobs for one scale set's labels. Owns its httpx client unless one is given
    (the composition root may pass one configured with a proxy or a CA bundle)."""

    def __init__(
        self,
        settings: HudSettings,
        labels: Sequence[str],
        *,
        client: Client | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._labels = tuple(labels)
        self._own_client = client is None
        self._client = client or plain_client(settings.timeout)
        self._clock = clock

    @property
    def labels(self) -> tuple[str, ...]:
        return self._labels

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _headers(self) -> dict[str, str]:
        headers = {"accept": "application/json"}
        if self._settings.token is not None:
            headers[TOKEN_HEADER] = self._settings.token.get_secret_value()
        return headers

    def _clean(self, text: str) -> str:
        """One line, bounded, and never the token (defence in depth: no message built here
        includes headers, but exception texts come from libraries)."""
        token = self._settings.token.get_secret_value() if self._settings.token else ""
        if token:
            text = text.replace(token, "***")
        return " ".join(text.split())[:_DETAIL_MAX]

    async def _exchange(self) -> tuple[int, bytes]:
        parameters = build_parameters(self._settings.parameters, self._labels)
        query = {"parameters": json.dumps(parameters, separators=(",", ":"))}
        # A redirect is not followed: the token must not travel to another host, and HUD
        # never redirects this endpoint. Per request, because the client may be shared.
        answer = await get_capped(
            self._client,
            self._settings.url,
            max_bytes=self._settings.max_response_bytes,
            deadline=self._settings.timeout,
            params=query,
            headers=self._headers(),
            follow_redirects=False,
        )
        return answer.status, answer.body

    async def fetch(self) -> DemandOutcome:
        """One request. Never raises (cancellation excepted)."""
        started = self._clock()

        def outcome(result: DemandResult, detail: str, **extra: Any) -> DemandOutcome:
            return DemandOutcome(
                result=result,
                duration=max(0.0, self._clock() - started),
                detail=self._clean(detail),
                **extra,
            )

        try:
            status, body = await self._exchange()
        except TransportError as exc:
            if exc.kind == "deadline":
                return outcome(DemandResult.TIMEOUT, exc.reason)
            if exc.timed_out:
                return outcome(DemandResult.TIMEOUT, exc.kind)
            return outcome(DemandResult.HTTP_ERROR, exc.reason)
        except TooLargeError as exc:
            return outcome(DemandResult.TOO_LARGE, f"response too large ({exc.reason})")
        if status != 200:
            return outcome(DemandResult.HTTP_ERROR, f"HTTP {status}")
        try:
            rows = parse_rows(body)
        except ValueError as exc:
            return outcome(DemandResult.BAD_RESPONSE, str(exc))
        queued, matched = sum_queued(rows, self._labels)
        return outcome(
            DemandResult.OK,
            f"{queued} queued in {matched} of {len(rows)} rows",
            queued=queued,
            rows=matched,
        )
