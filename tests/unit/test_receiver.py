"""The webhook receiver's HTTP side (listener/receiver.py), with real signed deliveries over a
loopback port: what each bad input gets, and that none of them changes the queue."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, generate_latest

from capacity.webhook_queue import JobQueue, label_set
from listener.receiver import MAX_BODY, MAX_FAILURES, Freshness, deliveries_app, reads_routes
from listener.receiver_metrics import ReceiverMetrics
from listener.server import Health, build_app
from tests.support.fake_clock import FakeClock
from tools.fake_webhooks import delivery, workflow_job

SECRET = "hook-secret-for-tests"
LABELS = ["self-hosted", "linux"]
NOW = 1_800_000_000.0


@dataclass
class Receiver:
    hooks: TestClient[web.Request, web.Application]
    reads: TestClient[web.Request, web.Application]
    queue: JobQueue
    clock: FakeClock
    freshness: Freshness
    registry: CollectorRegistry

    async def send(
        self, payload: dict[str, object] | bytes, *, event: str = "workflow_job", **kw: object
    ) -> tuple[int, str]:
        body, headers = delivery(payload, SECRET, event=event)
        headers.update({k.replace("_", "-"): str(v) for k, v in kw.items()})
        async with self.hooks.post("/webhook", data=body, headers=headers) as response:
            return response.status, await response.text()

    def snapshot(self) -> tuple[int, int]:
        return len(self.queue), self.queue.queued


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    queue = JobQueue()
    clock = FakeClock(NOW)
    registry = CollectorRegistry()
    metrics = ReceiverMetrics(registry)
    freshness = Freshness(stale_after=900.0, reconciled_at=NOW)
    hooks_app = deliveries_app(queue, SECRET, metrics, clock)
    reads_app = build_app(registry=registry, metrics_endpoint="/metrics", health=Health(clock))
    reads_routes(reads_app, queue, freshness, metrics, clock)
    async with (
        TestClient(TestServer(hooks_app)) as hooks,
        TestClient(TestServer(reads_app)) as reads,
    ):
        yield Receiver(hooks, reads, queue, clock, freshness, registry)


def job(action: str, job_id: int = 1, labels: list[str] | None = None) -> dict[str, object]:
    return workflow_job(action, job_id, labels if labels is not None else LABELS, created_at=NOW)


async def demand(r: Receiver, labels: str = "self-hosted,linux") -> tuple[int, dict[str, object]]:
    async with r.reads.get("/v1/demand", params={"labels": labels}) as response:
        return response.status, json.loads(await response.text())


async def test_a_signed_queued_delivery_is_counted_and_its_start_uncounts_it(
    receiver: Receiver,
) -> None:
    assert await receiver.send(job("queued")) == (200, "changed\n")
    assert await demand(receiver) == (200, {"queued": 1, "aged": 0})
    assert await demand(receiver, "linux") == (200, {"queued": 1, "aged": 0})
    assert await demand(receiver, "windows") == (200, {"queued": 0, "aged": 0})
    assert await receiver.send(job("in_progress")) == (200, "changed\n")
    assert await demand(receiver) == (200, {"queued": 0, "aged": 0})


async def test_ping_and_other_events_are_accepted_and_ignored(receiver: Receiver) -> None:
    status, text = await receiver.send({"zen": "Keep it logically awesome."}, event="ping")
    assert (status, text) == (202, "pong\n")
    status, _ = await receiver.send({"action": "opened"}, event="pull_request")
    assert status == 202
    assert receiver.snapshot() == (0, 0)


BAD_BODIES: list[tuple[str, bytes, int, str]] = [
    ("malformed JSON", b'{"action": "queued", "workflow_job": {', 400, "body: not JSON"),
    ("not an object", b"[1, 2]", 400, "body: not a JSON object"),
    ("no action", json.dumps({"workflow_job": {}}).encode(), 400, "action:"),
    ("no workflow_job", json.dumps({"action": "queued"}).encode(), 400, "workflow_job:"),
    (
        "no id",
        json.dumps({"action": "queued", "workflow_job": {"labels": LABELS}}).encode(),
        400,
        "workflow_job.id:",
    ),
    (
        "labels not strings",
        json.dumps(
            {"action": "queued", "workflow_job": {"id": 3, "labels": [1], "created_at": "x"}}
        ).encode(),
        400,
        "workflow_job.labels:",
    ),
    (
        "10,000 labels",
        json.dumps(job("queued", 3, [f"l{i}" for i in range(10_000)])).encode(),
        400,
        "workflow_job.labels: more than 100",
    ),
    (
        "bad created_at",
        json.dumps(
            {"action": "queued", "workflow_job": {"id": 3, "labels": LABELS, "created_at": "now"}}
        ).encode(),
        400,
        "workflow_job.created_at:",
    ),
    ("unknown action", json.dumps(job("teleported", 3)).encode(), 202, "action ignored"),
]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [case[1:] for case in BAD_BODIES],
    ids=[case[0] for case in BAD_BODIES],
)
async def test_a_signed_bad_payload_gets_a_clear_answer_and_changes_nothing(
    receiver: Receiver, body: bytes, status: int, message: str
) -> None:
    await receiver.send(job("queued", 1))
    before = receiver.snapshot()
    got, text = await receiver.send(body)
    assert got == status
    assert text.startswith(message), text
    assert "\n" not in text.rstrip("\n")  # one line
    assert receiver.snapshot() == before


async def test_a_wrong_or_missing_signature_gets_401_and_changes_nothing(
    receiver: Receiver,
) -> None:
    body, headers = delivery(job("queued"), "another-secret")
    async with receiver.hooks.post("/webhook", data=body, headers=headers) as response:
        assert response.status == 401
        text = await response.text()
    del headers["X-Hub-Signature-256"]
    async with receiver.hooks.post("/webhook", data=body, headers=headers) as response:
        assert response.status == 401
    # The legacy SHA-1 header alone is not enough.
    headers["X-Hub-Signature"] = "sha1=0000"
    async with receiver.hooks.post("/webhook", data=body, headers=headers) as response:
        assert response.status == 401
    assert receiver.snapshot() == (0, 0)
    assert SECRET not in text


async def test_a_forged_body_is_refused_before_it_is_parsed(receiver: Receiver) -> None:
    # Not JSON at all, wrongly signed: the answer is about the signature, not the body.
    body, headers = delivery(b"\xff\xfe not json", "another-secret")
    async with receiver.hooks.post("/webhook", data=body, headers=headers) as response:
        assert response.status == 401
        assert "X-Hub-Signature-256" in await response.text()


async def test_a_body_over_the_limit_is_refused_unread(receiver: Receiver) -> None:
    big = json.dumps({**job("queued"), "padding": "x" * (3 * MAX_BODY)}).encode()
    status, text = await receiver.send(big)
    assert status == 413
    assert text.startswith("body over")
    assert receiver.snapshot() == (0, 0)


async def test_a_replayed_delivery_changes_nothing(receiver: Receiver) -> None:
    queued_body, queued_headers = delivery(job("queued"), SECRET)
    async with receiver.hooks.post("/webhook", data=queued_body, headers=queued_headers) as r:
        assert r.status == 200
    await receiver.send(job("in_progress"))
    async with receiver.hooks.post("/webhook", data=queued_body, headers=queued_headers) as r:
        assert (r.status, await r.text()) == (200, "duplicate\n")
    assert await demand(receiver) == (200, {"queued": 0, "aged": 0})


async def test_out_of_order_and_duplicate_events_leave_the_right_count(receiver: Receiver) -> None:
    await receiver.send(job("completed", 5))
    await receiver.send(job("queued", 5))  # late
    await receiver.send(job("queued", 6))
    await receiver.send(job("queued", 6))  # a second delivery of the same status
    assert await demand(receiver) == (200, {"queued": 1, "aged": 0})


async def test_a_flood_of_forgeries_from_one_address_is_cut_off_unread(
    receiver: Receiver,
) -> None:
    body, headers = delivery(job("queued"), "another-secret")
    for _ in range(MAX_FAILURES):
        async with receiver.hooks.post("/webhook", data=body, headers=headers) as response:
            assert response.status == 401
    async with receiver.hooks.post("/webhook", data=body, headers=headers) as response:
        assert response.status == 429
    # Even a good delivery from there waits out the window, then gets through.
    assert (await receiver.send(job("queued")))[0] == 429
    receiver.clock.now += 61
    assert (await receiver.send(job("queued")))[0] == 200
    assert receiver.snapshot() == (1, 1)


async def test_reads_fail_until_the_queue_is_reconciled_and_when_that_is_stale(
    receiver: Receiver,
) -> None:
    receiver.freshness.reconciled_at = None
    status, body = await demand(receiver)
    assert status == 503
    assert "not reconciled" in str(body["error"])
    receiver.freshness.reconciled_at = NOW - 901
    status, body = await demand(receiver)
    assert status == 503
    assert "last reconcile" in str(body["error"])


async def test_a_read_without_labels_or_with_a_bad_age_is_refused(receiver: Receiver) -> None:
    async with receiver.reads.get("/v1/demand") as response:
        assert response.status == 400
    params = {"labels": "linux", "aged_after": "soon"}
    async with receiver.reads.get("/v1/demand", params=params) as response:
        assert response.status == 400
        assert "aged_after" in await response.text()


async def test_the_metrics_count_every_result_without_the_secret(receiver: Receiver) -> None:
    await receiver.send(job("queued"))
    body, headers = delivery(job("queued", 2), "another-secret")
    async with receiver.hooks.post("/webhook", data=body, headers=headers):
        pass
    await demand(receiver)
    page = generate_latest(receiver.registry).decode()
    assert 'gha_receiver_deliveries_total{result="changed"} 1.0' in page
    assert 'gha_receiver_deliveries_total{result="bad_signature"} 1.0' in page
    assert 'gha_receiver_reads_total{result="ok"} 1.0' in page
    assert 'gha_receiver_jobs{status="queued"} 1.0' in page
    assert SECRET not in page
    assert label_set(LABELS) == frozenset(LABELS)
