"""The long-poll loop over the real ActionsClient, with the Actions service faked by respx.

The fake message queue below is stateful the way the service is: a poll returns the first
unacked message after ``lastMessageId`` or holds, and unacked messages are delivered again.
That is what makes abandoning a poll safe, and these tests check it end to end: every
``X-ScaleSetMaxCapacity`` value sent, every message handled exactly once, ARC's order.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import respx

from base.http.client import make_client
from base.kube import KubeError
from listener.actions import ActionsClient
from listener.advertised import AdvertisedCapacity
from listener.github_auth import AdminConnection
from listener.http import user_agent
from listener.loop import Listener
from listener.scaler import PatchRetry, Scaler
from listener.wire import JobMessage, Statistics
from tests.unit.listener_fixtures import STATISTICS, session_json
from tools.waits import eventually

ACTIONS = "https://pipelines.example/tenant/"
SESSIONS = "https://pipelines.example/tenant/_apis/runtime/runnerscalesets/7/sessions"
ACQUIRE = "https://pipelines.example/tenant/_apis/runtime/runnerscalesets/7/acquirejobs"
QUEUE = "https://queue.example/_apis/q"


class StubAuth:
    async def admin_connection(self) -> AdminConnection:
        return AdminConnection(ACTIONS, "admin-token", expires_at=2e9)

    async def renew_admin_connection(self) -> AdminConnection:
        return await self.admin_connection()


def stats(assigned: int) -> dict[str, int]:
    return {**STATISTICS, "totalAssignedJobs": assigned}


@dataclass
class FakeQueue:
    """Message queue semantics: hold, deliver after lastMessageId, redeliver until acked."""

    hold: float = 5.0
    messages: dict[int, dict[str, Any]] = field(default_factory=dict)
    headers: list[int] = field(default_factory=list)
    last_ids: list[int] = field(default_factory=list)
    acked: list[int] = field(default_factory=list)
    acquired: list[list[int]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    abandoned: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    fail_with: list[int] = field(default_factory=list)  # statuses to answer polls with first
    acquire_status: int = 200
    # False: every poll gets the oldest unacked message, whatever its lastMessageId (a
    # service that delivers at least once and may repeat a message the client has seen).
    cursor: bool = True
    ready_marks: list[int] = field(default_factory=list)  # the loop's on_poll calls

    def add(self, message_id: int, assigned: int, jobs: list[dict[str, Any]]) -> None:
        self.messages[message_id] = {
            "messageId": message_id,
            "messageType": "RunnerScaleSetJobMessages",
            "statistics": stats(assigned),
            "body": json.dumps(jobs),
        }
        fired, self.arrived = self.arrived, asyncio.Event()
        fired.set()

    async def get(self, request: httpx.Request) -> httpx.Response:
        self.headers.append(int(request.headers["X-ScaleSetMaxCapacity"]))
        last = int(request.url.params.get("lastMessageId", "0"))
        self.last_ids.append(last)
        self.events.append(f"poll:{self.headers[-1]}")
        if self.fail_with:
            return httpx.Response(self.fail_with.pop(0), headers={"Retry-After": "1"})
        try:
            async with asyncio.timeout(self.hold):
                while True:
                    pending = sorted(i for i in self.messages if i > last or not self.cursor)
                    if pending:
                        return httpx.Response(200, json=self.messages[pending[0]])
                    await self.arrived.wait()
        except TimeoutError:
            return httpx.Response(202)
        except asyncio.CancelledError:
            self.abandoned += 1
            raise

    def delete(self, request: httpx.Request) -> httpx.Response:
        message_id = int(request.url.path.rsplit("/", 1)[1])
        self.acked.append(message_id)
        self.messages.pop(message_id, None)
        self.events.append(f"ack:{message_id}")
        return httpx.Response(204)

    def acquire(self, request: httpx.Request) -> httpx.Response:
        ids = json.loads(request.content)
        self.acquired.append(ids)
        self.events.append("acquire")
        if self.acquire_status == 404:
            return httpx.Response(404, text="404 page not found")
        return httpx.Response(200, json={"count": len(ids), "value": ids})


class RecordingPatcher:
    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.replicas: list[Any] = []
        self.patch_ids: list[int] = []
        self.failing: KubeError | None = None  # every runner-set patch fails with it

    async def patch_runner_set(self, body: dict[str, Any]) -> None:
        if self.failing is not None:
            self.events.append("patch-failed")
            raise self.failing
        self.replicas.append(body["spec"]["replicas"])
        self.patch_ids.append(body["spec"]["patchID"])
        self.events.append(f"desired:{body['spec']['replicas']}")

    async def patch_runner_status(self, runner_name: str, body: dict[str, Any]) -> None:
        self.events.append(f"started:{runner_name}")


class RecordingMetrics:
    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.stats: list[Statistics] = []

    def record_statistics(self, stats: Statistics) -> None:
        self.stats.append(stats)
        self.events.append(f"stats:{stats.total_assigned_jobs}")

    def record_desired_runners(self, count: int) -> None:
        pass

    def record_job_started(self, job: JobMessage) -> None:
        pass

    def record_job_completed(self, job: JobMessage) -> None:
        self.events.append(f"completed:{job.runner_name}")


@dataclass
class Reported:
    """What the loop reports to the capacity monitor: headers sent, jobs assigned."""

    headers: list[int] = field(default_factory=list)
    queued_at: list[float | None] = field(default_factory=list)

    @property
    def assigned(self) -> int:
        return len(self.queued_at)

    def job_assigned(self, queued_at: float | None) -> None:
        self.queued_at.append(queued_at)


@dataclass
class Harness:
    queue: FakeQueue
    capacity: AdvertisedCapacity
    listener: Listener
    patcher: RecordingPatcher
    stop: asyncio.Event
    reported: Reported
    task: asyncio.Task[None] | None = None

    async def start(self, client: ActionsClient) -> None:
        session = await client.create_session("pod", conflict_timeout=0)
        self.task = asyncio.create_task(self.listener.run(session, self.stop))

    async def until(self, predicate: Any, what: str, within: float = 3.0) -> None:
        def alive() -> None:
            assert self.task is not None
            if self.task.done():
                self.task.result()  # surface the loop's error
                raise AssertionError(f"loop ended while waiting for {what}")

        await eventually(predicate, what, within, interval=0.005, alive=alive)

    async def finish(self) -> None:
        self.stop.set()
        assert self.task is not None
        async with asyncio.timeout(3):
            await self.task


@pytest.fixture
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    """The loop over the fake queue; ``indirect`` parametrization overrides Listener
    keyword arguments (reissue_interval, quiet_interval)."""
    options: dict[str, float] = {
        "reissue_interval": 0.05,
        "quiet_interval": 50.0,
        "keepalive_interval": 0.1,
        **getattr(request, "param", {}),
    }
    queue = FakeQueue()
    with respx.mock(assert_all_called=False) as router:
        router.post(SESSIONS).respond(200, json=session_json(queue_url=QUEUE))
        router.get(url__startswith=QUEUE).mock(side_effect=queue.get)
        router.delete(url__startswith=QUEUE + "/").mock(side_effect=queue.delete)
        router.post(url__startswith=ACQUIRE).mock(side_effect=queue.acquire)
        async with make_client(user_agent=user_agent(7), env={}) as http:
            client = ActionsClient(http, StubAuth(), 7)
            capacity = AdvertisedCapacity(10)
            patcher = RecordingPatcher(queue.events)
            # The loop's clock: virtual in the unit tier, so intervals pass with its sleeps.
            clock = asyncio.get_running_loop().time
            scaler = Scaler(
                min_runners=0,
                max_runners=10,
                patcher=patcher,
                retry=PatchRetry(outage_budget=60, base=0.01, cap=0.05),
                clock=clock,
            )
            retries = asyncio.create_task(scaler.run())
            reported = Reported()
            listener = Listener(
                session=client,
                scaler=scaler,
                capacity=capacity,
                metrics=RecordingMetrics(queue.events),
                on_poll=lambda: queue.ready_marks.append(1),
                on_header=reported.headers.append,
                on_job_assigned=reported.job_assigned,
                reissue_interval=options["reissue_interval"],
                quiet_interval=options["quiet_interval"],
                keepalive_interval=options["keepalive_interval"],
                clock=clock,
            )
            h = Harness(queue, capacity, listener, patcher, asyncio.Event(), reported)
            await h.start(client)
            yield h
            if h.task is not None and not h.task.done():
                await h.finish()
            retries.cancel()


def job(kind: str, **extra: Any) -> dict[str, Any]:
    return {"messageType": kind, "jobId": f"j-{extra.get('runnerRequestId', 0)}", **extra}


async def test_capacity_change_reissues_the_held_poll_at_once(harness: Harness) -> None:
    q = harness.queue
    await harness.until(lambda: q.headers == [10], "first poll with max_runners")
    harness.capacity.set_max_capacity(3)
    await harness.until(lambda: q.headers == [10, 3], "re-issued poll with the new value")
    assert q.abandoned == 1
    assert harness.listener.reissued_polls == 1
    # Unchanged value → no re-issue.
    harness.capacity.set_max_capacity(3)
    await asyncio.sleep(0.1)
    assert q.headers == [10, 3]


@pytest.mark.parametrize("harness", [{"reissue_interval": 30.0}], indirect=True)
async def test_a_drop_is_sent_at_once_and_only_rises_wait_for_the_rate_limit(
    harness: Harness,
) -> None:
    q = harness.queue
    await harness.until(lambda: q.headers == [10], "first poll")
    harness.capacity.set_max_capacity(3)  # capacity lost: no waiting out the 30 s limit
    await harness.until(lambda: q.headers == [10, 3], "the drop on the wire at once")
    harness.capacity.set_max_capacity(8)  # a rise within the interval waits
    await asyncio.sleep(0.2)
    assert q.headers == [10, 3]
    harness.capacity.set_max_capacity(2)  # a drop below what is in flight, while a rise waits
    await harness.until(lambda: q.headers == [10, 3, 2], "the second drop at once")
    assert harness.listener.reissued_polls == 2


@pytest.mark.parametrize("harness", [{"reissue_interval": 30.0}], indirect=True)
async def test_the_header_is_read_when_the_request_is_sent(harness: Harness) -> None:
    """A poll retried after a 503 carries the value of the moment it is sent again."""
    q = harness.queue
    await harness.until(lambda: q.headers == [10], "first poll")
    q.fail_with = [503]
    harness.capacity.set_max_capacity(3)
    await harness.until(lambda: q.headers == [10, 3], "the re-issued poll, answered 503")
    harness.capacity.set_max_capacity(9)  # a rise while the HTTP layer waits to retry
    await harness.until(lambda: len(q.headers) == 3, "the retried poll", within=5)
    assert q.headers == [10, 3, 9]
    await asyncio.sleep(0.1)
    assert len(q.headers) == 3  # the retry already carries 9: no re-issue for it


async def test_value_is_clamped_to_max_runners(harness: Harness) -> None:
    q = harness.queue
    await harness.until(lambda: len(q.headers) == 1, "first poll")
    harness.capacity.set_max_capacity(50)  # above max_runners (10): nothing changes
    await asyncio.sleep(0.1)
    assert q.headers == [10]
    assert harness.capacity.value == 10


async def test_abandoned_poll_loses_no_message_and_handles_none_twice(harness: Harness) -> None:
    q = harness.queue
    await harness.until(lambda: len(q.headers) == 1, "first poll")
    # Several changes while messages arrive: each message must be acked exactly once.
    for i in range(1, 6):
        q.add(i, assigned=i, jobs=[])
        harness.capacity.set_max_capacity(i)
        await asyncio.sleep(0.01)
    await harness.until(lambda: q.acked == [1, 2, 3, 4, 5], "all messages acked once, in order")
    await harness.until(lambda: q.last_ids[-1] == 5, "lastMessageId advanced")
    await harness.finish()
    assert sorted(set(q.acked)) == q.acked
    assert harness.patcher.replicas[-1] == 5


async def test_flapping_value_is_rate_limited(harness: Harness) -> None:
    q = harness.queue
    await harness.until(lambda: len(q.headers) == 1, "first poll")
    loop = asyncio.get_running_loop()
    started = loop.time()
    for i in range(40):
        harness.capacity.set_max_capacity(i % 2)
        await asyncio.sleep(0.005)
    harness.capacity.set_max_capacity(7)
    await harness.until(lambda: q.headers[-1] == 7, "final value on the wire")
    # Rises are limited to one per 0.05 s interval and each drop follows a rise: at most two
    # polls per interval (plus the first and the last), not one per change.
    intervals = math.ceil((loop.time() - started) / 0.05)
    assert len(q.headers) <= 2 * intervals + 2, q.headers
    assert len(q.headers) < 40


async def test_changed_and_changed_back_keeps_the_poll(harness: Harness) -> None:
    q = harness.queue
    await harness.until(lambda: len(q.headers) == 1, "first poll")
    harness.capacity.set_max_capacity(4)
    harness.capacity.set_max_capacity(10)  # same as in flight again, before the loop woke
    await asyncio.sleep(0.15)
    assert q.headers == [10]
    assert q.abandoned == 0


async def test_arc_order_of_work_per_message(harness: Harness) -> None:
    q = harness.queue
    await harness.until(lambda: len(q.headers) == 1, "first poll")
    q.events.clear()
    q.add(
        1,
        assigned=2,
        jobs=[
            job("JobAvailable", runnerRequestId=11),
            job("JobAssigned", runnerRequestId=12),
            job("JobCompleted", runnerRequestId=13, runnerName="r-13", result="succeeded"),
            job("JobStarted", runnerRequestId=14, runnerName="r-14"),
            job("SomethingNew", runnerRequestId=15),
        ],
    )
    await harness.until(lambda: "desired:2" in q.events, "desired count patched")
    assert q.events[: q.events.index("desired:2") + 1] == [
        "stats:2",
        "ack:1",
        "acquire",
        "started:r-14",
        "completed:r-13",
        "desired:2",
    ]
    assert q.acquired == [[11]]


@pytest.mark.parametrize("harness", [{"reissue_interval": 30.0}], indirect=True)
async def test_each_header_sent_and_each_job_assigned_is_reported(harness: Harness) -> None:
    """For the capacity monitor's rise → assignment timing (listener/app.py wires it)."""
    q = harness.queue
    await harness.until(lambda: q.headers == [10], "first poll")
    q.fail_with = [503]
    harness.capacity.set_max_capacity(3)
    await harness.until(lambda: len(q.headers) == 3, "a poll, answered 503, and its retry")
    assert harness.reported.headers == q.headers == [10, 3, 3]  # every request as built
    q.add(
        1,
        assigned=2,
        jobs=[
            job("JobAssigned", runnerRequestId=21, queueTime="2026-11-27T10:00:00Z"),
            job("JobStarted", runnerRequestId=20, runnerName="r-20"),
            job("JobAssigned", runnerRequestId=22),
        ],
    )
    await harness.until(lambda: harness.reported.assigned == 2, "both assignments reported")
    # With when each was queued (the as-of correction); None when the message has no time.
    assert harness.reported.queued_at == [1795773600.0, None]


async def test_202_reapplies_the_last_statistics(harness: Harness) -> None:
    q = harness.queue
    q.hold = 0.02
    await harness.until(lambda: len(q.headers) == 1, "first poll")
    q.add(1, assigned=3, jobs=[])
    await harness.until(lambda: len(harness.patcher.replicas) >= 4, "202s re-apply")
    # start-up (the session's statistics: 2 assigned), the message (3), then 202s keep 3.
    assert harness.patcher.replicas[0] == STATISTICS["totalAssignedJobs"]
    assert set(harness.patcher.replicas[1:4]) == {3}


async def test_stop_abandons_the_held_poll_promptly(harness: Harness) -> None:
    q = harness.queue
    await harness.until(lambda: len(q.headers) == 1, "first poll")
    await harness.finish()
    assert q.abandoned == 1
    assert len(q.headers) == 1


async def test_stop_lets_the_message_in_progress_finish(harness: Harness) -> None:
    q = harness.queue
    gate = asyncio.Event()
    original = harness.patcher.patch_runner_status

    async def slow_status(runner_name: str, body: dict[str, Any]) -> None:
        await gate.wait()
        await original(runner_name, body)

    harness.patcher.patch_runner_status = slow_status  # type: ignore[method-assign]
    await harness.until(lambda: len(q.headers) == 1, "first poll")
    q.add(1, assigned=1, jobs=[job("JobStarted", runnerRequestId=1, runnerName="r-1")])
    await harness.until(lambda: q.acked == [1], "message acked, handler in progress")
    harness.stop.set()
    await asyncio.sleep(0.05)
    assert harness.task is not None
    assert not harness.task.done()
    gate.set()
    await harness.finish()
    assert "started:r-1" in q.events
    assert q.events[-1] == "desired:1"


REFUSED = KubeError("patch ephemeralrunnersets", 0, "ClientConnectorError: connection refused")


async def hold_a_message(harness: Harness, *, polls_while_refused: int) -> None:
    """Short polls, then the runner-set patch refused (polling goes on with 202s), then a
    JobAvailable message (request 11, 2 assigned) delivered: the loop holds it unacked."""
    q = harness.queue
    q.hold = 0.02
    await harness.until(lambda: len(q.headers) >= 1, "first poll")
    harness.capacity.set_max_capacity(9)  # re-issue the first poll with the short hold
    await harness.until(lambda: len(q.headers) >= 3, "short polls")
    harness.patcher.failing = REFUSED
    polls = len(q.headers)
    await harness.until(
        lambda: len(q.headers) >= polls + polls_while_refused, "polling goes on (202s)"
    )
    q.add(1, assigned=2, jobs=[job("JobAvailable", runnerRequestId=11)])
    await harness.until(lambda: any(last == 0 for last in q.last_ids[polls:]), "delivered")


async def test_apiserver_outage_keeps_polling_and_holds_messages_unacked(harness: Harness) -> None:
    """The runner set cannot be patched: 202s keep the session polling, a message is held
    (not acked, not acquired) until the patch goes through, then handled once."""
    q = harness.queue
    await hold_a_message(harness, polls_while_refused=5)
    assert "patch-failed" in q.events
    held_at = len(q.headers)
    # Held: the session is kept alive by polls from the same lastMessageId, nothing is acked.
    await harness.until(lambda: len(q.headers) >= held_at + 3, "keep-alive polls", within=5)
    assert set(q.last_ids[held_at:]) == {q.last_ids[held_at - 1]}
    assert q.acked == []
    assert q.acquired == []
    assert harness.task is not None
    assert not harness.task.done()
    harness.patcher.failing = None  # the apiserver is back
    await harness.until(lambda: q.acked == [1], "the held message handled")
    await harness.until(lambda: harness.patcher.replicas[-1:] == [2], "desired count applied")
    assert q.acquired == [[11]]


@pytest.mark.parametrize("harness", [{"keepalive_interval": 30.0}], indirect=True)
async def test_a_drop_while_a_message_is_held_is_sent_at_once(harness: Harness) -> None:
    """Holding a message, the loop polls only every keep-alive interval; a drop of the value
    must not wait for the next one (the last poll's header is what the service goes by)."""
    q = harness.queue
    await hold_a_message(harness, polls_while_refused=2)
    await asyncio.sleep(1.0)  # holding: the next keep-alive is 29 s away
    held_at = len(q.headers)
    harness.capacity.set_max_capacity(4)
    await harness.until(lambda: q.headers[held_at:] == [4], "the drop sent at once", within=1)
    # A rise waits for the keep-alive as before; nothing is acked meanwhile.
    harness.capacity.set_max_capacity(8)
    await asyncio.sleep(5.0)
    assert q.headers[held_at:] == [4]
    assert q.acked == []
    harness.patcher.failing = None
    await harness.until(lambda: q.acked == [1], "the held message handled", within=60)


@pytest.mark.parametrize(
    "harness", [{"reissue_interval": 0.01, "quiet_interval": 0.3}], indirect=True
)
async def test_capacity_changing_faster_than_a_poll_completes_still_scales_down(
    harness: Harness,
) -> None:
    """Time compressed: the service holds a poll for 5 s (50 s in production) and the value
    changes every 20 ms (every few seconds), for about 7 hold periods. No poll ever completes,
    yet the scale-down patch (patchID 0 at min_runners) and the readiness mark keep coming."""
    q = harness.queue
    await harness.until(lambda: len(q.headers) == 1, "first poll")
    # A job finished: the patch after it may not scale down (ARC's dirty rule).
    q.add(1, assigned=0, jobs=[job("JobCompleted", runnerRequestId=1, runnerName="r-1")])
    await harness.until(lambda: q.acked == [1], "message handled")
    await harness.until(lambda: len(harness.patcher.patch_ids) == 2, "its patch")
    assert harness.patcher.patch_ids[1] > 0
    marks = len(q.ready_marks)
    loop = asyncio.get_running_loop()
    end = loop.time() + 2.0
    value = 0
    while loop.time() < end:
        value = 1 - value
        harness.capacity.set_max_capacity(value)
        await asyncio.sleep(0.02)
    assert q.abandoned > 20  # the polls really were re-issued all along
    after = harness.patcher.patch_ids[2:]
    assert 0 in after, harness.patcher.patch_ids
    assert harness.patcher.replicas[2 + after.index(0)] is None  # replicas 0: scale down
    assert len(q.ready_marks) > marks + 5


async def test_a_message_delivered_again_is_acked_and_not_handled_twice(
    harness: Harness,
) -> None:
    q = harness.queue
    q.cursor = False
    await harness.until(lambda: len(q.headers) == 1, "first poll")
    q.add(1, assigned=2, jobs=[job("JobAssigned"), job("JobAssigned")])
    await harness.until(lambda: q.acked == [1], "message 1 handled")
    handled = list(q.events)
    q.add(1, assigned=2, jobs=[job("JobAssigned"), job("JobAssigned")])  # the ack did not stick
    await harness.until(lambda: q.acked == [1, 1], "message 1 acked again")
    q.add(2, assigned=3, jobs=[job("JobAssigned")])
    await harness.until(lambda: q.acked == [1, 1, 2], "message 2 handled")
    again = q.events[len(handled) :]
    # Between the two handled messages: polls and the second ack, no statistics, no patch.
    assert [e for e in again if not e.startswith("poll:")] == [
        "ack:1",
        "stats:3",
        "ack:2",
        "desired:3",
    ]
    assert q.last_ids[-1] == 2


async def test_jobs_offered_by_a_service_without_acquire_are_not_fatal(harness: Harness) -> None:
    """The broker service (GitHub.com today) answers acquirejobs with a router 404."""
    q = harness.queue
    q.acquire_status = 404
    await harness.until(lambda: len(q.headers) == 1, "first poll")
    q.add(1, assigned=0, jobs=[job("JobAvailable", runnerRequestId=11)])
    await harness.until(lambda: q.acked == [1], "message 1 handled")
    q.add(2, assigned=1, jobs=[job("JobAssigned")])
    await harness.until(lambda: "desired:1" in q.events, "the loop goes on to message 2")
    assert q.acquired == [[11]]
    assert q.acked == [1, 2]
