"""Demand from the cluster's webhook receiver: the queued jobs it holds for this scale set's
labels, from GitHub's `workflow_job` deliveries.

A read is one GET of the receiver's reads port (``/v1/demand``), answered from memory. Any
answer but a 200 with the expected body is a failed read, so a receiver that is down, or that
has not reconciled with GitHub since it started (a restart lost what it held), or whose
reconciles have failed for too long, is a failing source: the policy holds the last good
value for `webhook.stale_after`, then falls back to the floor. It is never "nothing queued".
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from base.http.client import Client, get_capped, plain_client
from base.http.errors import TooLargeError, TransportError, one_line
from capacity.demand import Reading
from capacity.model import DemandOutcome, DemandResult
from capacity.settings_demand import DemandSettings, WebhookDemandSettings

PATH = "/v1/demand"
MAX_RESPONSE_BYTES = 4096  # two counts and two times


class Answer(BaseModel):
    """The receiver's answer (what `listener.receiver` serves)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    queued: int = Field(ge=0)
    aged: int = Field(ge=0)


def parse_answer(body: bytes) -> Answer:
    """ValueError (one line) when the body is not the receiver's answer."""
    try:
        return Answer.model_validate(json.loads(body))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON ({exc.__class__.__name__})") from None
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise ValueError(f"unexpected answer: {where}: {first['msg']}") from None


class WebhookDemand:
    """Reads the receiver for one scale set's labels (a `DemandReader`)."""

    def __init__(
        self,
        settings: WebhookDemandSettings,
        labels: Sequence[str],
        demand: DemandSettings,
        *,
        client: Client | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        # Runner labels hold no commas (GitHub refuses them).
        self._params = {"labels": ",".join(labels)}
        if demand.cluster_count > 1:
            self._params["aged_after"] = f"{demand.aged_after:g}"
        self._own_client = client is None
        self._client = client or plain_client(settings.timeout)
        self._clock = clock

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def read(self) -> Reading:
        started = self._clock()

        def reading(
            result: DemandResult, detail: str, queued: int | None = None, aged: int | None = None
        ) -> Reading:
            outcome = DemandOutcome(
                result=result,
                duration=max(0.0, self._clock() - started),
                queued=queued,
                aged=aged,
                detail=one_line(detail, 200),
            )
            return Reading(source="webhook", outcome=outcome)

        try:
            answer = await get_capped(
                self._client,
                self._settings.url + PATH,
                max_bytes=MAX_RESPONSE_BYTES,
                deadline=self._settings.timeout,
                params=self._params,
                headers={"accept": "application/json"},
                follow_redirects=False,
            )
        except TransportError as exc:
            timed_out = exc.kind == "deadline" or exc.timed_out
            result = DemandResult.TIMEOUT if timed_out else DemandResult.HTTP_ERROR
            return reading(result, exc.reason)
        except TooLargeError as exc:
            return reading(DemandResult.TOO_LARGE, f"answer too large ({exc.reason})")
        if answer.status != 200:
            # 503: not reconciled with GitHub since it started, or for too long.
            return reading(DemandResult.HTTP_ERROR, f"HTTP {answer.status}")
        try:
            counts = parse_answer(answer.body)
        except ValueError as exc:
            return reading(DemandResult.BAD_RESPONSE, str(exc))
        return reading(
            DemandResult.OK,
            f"{counts.queued} queued ({counts.aged} aged)",
            counts.queued,
            counts.aged if len(self._params) > 1 else None,
        )
