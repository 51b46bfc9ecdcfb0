"""The webhook receiver's HTTP side: GitHub's `workflow_job` deliveries in, demand out.

Two ports, two applications:

* **deliveries** (the one an Ingress exposes to GitHub): ``POST /webhook``. Each request is
  judged in this order, and the body is parsed only after its signature is right:
  an address with too many failed deliveries in the last minute gets 429 unread; a body over
  `max_body` gets 413 unread; no ``X-Hub-Signature-256`` or a wrong one gets 401; no
  ``X-GitHub-Delivery`` gets 400; ``ping`` and other events get 202 and change nothing;
  JSON that is not a `workflow_job` payload gets 400 with the field named; an unknown action
  gets 202 and is skipped. The signature is checked in constant time (`gidgethub`); the
  secret is never logged.
* **reads** (cluster-internal): ``GET /v1/demand?labels=a,b[&aged_after=900]`` for the
  listeners, ``/metrics``, ``/healthz`` and ``/readyz``. A demand read answers 503 until the
  queue has been reconciled with GitHub since the start (a restart lost what deliveries
  held) and once the last good reconcile is `stale_after` old: a listener then treats the
  source as failing, never as "nothing queued".
"""

from __future__ import annotations

import json
import logging
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from aiohttp import web
from gidgethub import ValidationFailure
from gidgethub.sansio import validate_event

from capacity.webhook_queue import ACTIONS, Applied, JobEvent, JobQueue, label_set
from listener.receiver_metrics import ReceiverMetrics

log = logging.getLogger("listener.receiver")

MAX_BODY = 1_048_576  # a workflow_job payload is some tens of KiB; GitHub's cap is 25 MB
MAX_LABELS = 100
MAX_LABEL_LENGTH = 256
FAILURE_WINDOW = 60.0
MAX_FAILURES = 30  # per address and window; GitHub's own deliveries never fail this way
MAX_ADDRESSES = 10_000  # addresses whose failures are remembered


class BadDelivery(ValueError):
    """A signed delivery that is not a `workflow_job` payload (one line, the field named)."""


def parse_job(body: bytes, delivery: str) -> JobEvent | None:
    """The job event of a signed `workflow_job` body; None for an action the queue does not
    follow. BadDelivery when a field is missing or malformed."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadDelivery(f"body: not JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise BadDelivery("body: not a JSON object")
    action = data.get("action")
    if not isinstance(action, str):
        raise BadDelivery("action: missing or not a string")
    status = ACTIONS.get(action)
    if status is None:
        return None
    job = data.get("workflow_job")
    if not isinstance(job, dict):
        raise BadDelivery("workflow_job: missing or not an object")
    job_id = job.get("id")
    if not isinstance(job_id, int) or isinstance(job_id, bool) or job_id <= 0:
        raise BadDelivery("workflow_job.id: missing or not a positive integer")
    labels = job.get("labels")
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        raise BadDelivery("workflow_job.labels: missing or not a list of strings")
    if len(labels) > MAX_LABELS or any(len(x) > MAX_LABEL_LENGTH for x in labels):
        raise BadDelivery(
            f"workflow_job.labels: more than {MAX_LABELS} labels or one over "
            f"{MAX_LABEL_LENGTH} characters"
        )
    created = job.get("created_at")
    try:
        created_at = datetime.fromisoformat(str(created).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise BadDelivery("workflow_job.created_at: missing or not an ISO 8601 time") from None
    if not math.isfinite(created_at):
        raise BadDelivery("workflow_job.created_at: not a finite time")
    return JobEvent(delivery, job_id, status, label_set(labels), created_at)


@dataclass
class Freshness:
    """When the queue was last reconciled with GitHub (None: not since the start)."""

    stale_after: float
    reconciles: bool = True  # False: no GitHub credentials, deliveries alone
    reconciled_at: float | None = None

    def problem(self, now: float) -> str | None:
        if not self.reconciles:
            return None
        if self.reconciled_at is None:
            return "not reconciled with GitHub since the start"
        if now - self.reconciled_at > self.stale_after:
            return f"last reconcile {now - self.reconciled_at:.0f}s ago"
        return None


class _Failures:
    """Failed deliveries per address in a sliding window, for the flood limit."""

    def __init__(self) -> None:
        self._times: OrderedDict[str, list[float]] = OrderedDict()

    def blocked(self, address: str, now: float) -> bool:
        times = self._times.get(address)
        if times is None:
            return False
        times[:] = [t for t in times if now - t < FAILURE_WINDOW]
        return len(times) >= MAX_FAILURES

    def add(self, address: str, now: float) -> None:
        self._times.setdefault(address, []).append(now)
        self._times.move_to_end(address)
        if len(self._times) > MAX_ADDRESSES:
            self._times.popitem(last=False)


def _text(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message + "\n")


def deliveries_app(
    queue: JobQueue,
    secret: str,
    metrics: ReceiverMetrics,
    clock: Callable[[], float],
    *,
    max_body: int = MAX_BODY,
) -> web.Application:
    """The application GitHub delivers to."""
    failures = _Failures()

    async def deliver(request: web.Request) -> web.StreamResponse:
        now = clock()
        address = request.remote or "unknown"
        if failures.blocked(address, now):
            metrics.delivery("flood")
            return _text(429, "too many failed deliveries from this address")

        def refuse(
            status: int, result: str, message: str, *, unsigned: bool = True
        ) -> web.Response:
            if unsigned:  # a signed delivery comes from GitHub: never a flood to hold back
                failures.add(address, now)
            metrics.delivery(result)
            log.warning("delivery refused", extra={"result": result, "why": message})
            return _text(status, message)

        if request.content_length is not None and request.content_length > max_body:
            return refuse(413, "too_large", f"body over {max_body} bytes")
        try:
            body = await request.content.read(max_body + 1)
        except ValueError:
            return refuse(400, "bad_body", "body: unreadable")
        if len(body) > max_body:
            return refuse(413, "too_large", f"body over {max_body} bytes")
        signature = request.headers.get("X-Hub-Signature-256", "")
        try:
            validate_event(body, signature=signature, secret=secret)
        except ValidationFailure:
            return refuse(401, "bad_signature", "X-Hub-Signature-256: missing or wrong")
        delivery = request.headers.get("X-GitHub-Delivery", "")
        if not delivery or len(delivery) > 100:
            return refuse(
                400, "bad_request", "X-GitHub-Delivery: missing or too long", unsigned=False
            )
        event = request.headers.get("X-GitHub-Event", "")
        if event != "workflow_job":
            metrics.delivery("ignored")
            return _text(202, "pong" if event == "ping" else f"event {event[:40]!r} ignored")
        try:
            job = parse_job(body, delivery)
        except BadDelivery as exc:
            return refuse(400, "bad_payload", str(exc), unsigned=False)
        if job is None:
            metrics.delivery("ignored")
            log.info("delivery skipped: action not followed", extra={"delivery": delivery})
            return _text(202, "action ignored")
        applied = queue.apply(job, now)
        metrics.delivery(applied.value)
        metrics.queue(queue)
        if applied is Applied.FULL:
            log.warning("queue full, job not kept", extra={"job_id": job.job_id})
        return _text(200, applied.value)

    app = web.Application(client_max_size=max_body)
    app.router.add_post("/webhook", deliver)
    return app


def reads_routes(
    app: web.Application,
    queue: JobQueue,
    freshness: Freshness,
    metrics: ReceiverMetrics,
    clock: Callable[[], float],
) -> None:
    """Adds the listeners' demand read to the reads application."""

    async def demand(request: web.Request) -> web.StreamResponse:
        now = clock()
        problem = freshness.problem(now)
        if problem is not None:
            metrics.read("stale")
            return web.json_response({"error": problem}, status=503)
        raw = request.query.get("labels", "")
        labels = label_set(x for x in raw.split(",") if x)
        if not labels:
            metrics.read("bad_request")
            return web.json_response({"error": "labels: required"}, status=400)
        aged_text = request.query.get("aged_after")
        try:
            aged_after = float(aged_text) if aged_text is not None else None
        except ValueError:
            aged_after = None
        if aged_text is not None and (aged_after is None or not aged_after >= 0):
            metrics.read("bad_request")
            return web.json_response({"error": "aged_after: not a number of seconds"}, status=400)
        count = queue.count(labels, aged_after=aged_after, now=now)
        metrics.read("ok")
        return web.json_response({"queued": count.queued, "aged": count.aged})

    app.router.add_get("/v1/demand", demand)
