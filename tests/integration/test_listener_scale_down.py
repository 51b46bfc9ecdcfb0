"""Idle runners are scaled down while the capacity keeps changing (real apiserver, the runner
stand-in playing ARC's EphemeralRunnerSet controller).

ARC's controller deletes idle runners only on a patch with patchID 0, which the listener sends
on the 202 path (a poll that ended without a message). With a capacity-aware listener every
capacity change abandons and re-issues the held poll, so while the capacity changes faster
than the service's hold, no poll ever ends. Time is compressed: the fake session holds a poll
for 30 s (the service: ~50 s), the loop's quiet interval is 2 s (production: 50 s), and the
value changes every 0.2 s (every few seconds in production), for as long as it takes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from base.kube import Kube
from listener.advertised import AdvertisedCapacity
from listener.loop import Listener
from listener.scaler import KubePatcher, Scaler
from listener.wire import JobMessage, Message, Session, Statistics
from tools.e2e_site import SiteSpec, Stage
from tools.localcluster import LocalCluster

pytestmark = pytest.mark.cluster

HOLD = 30.0


def stats(assigned: int) -> Statistics:
    return Statistics(
        total_available_jobs=0,
        total_acquired_jobs=assigned,
        total_assigned_jobs=assigned,
        total_running_jobs=0,
        total_registered_runners=0,
        total_busy_runners=0,
        total_idle_runners=0,
    )


class HeldQueue:
    """The message queue as the loop sees it: a poll is held for HOLD seconds unless a
    message is queued (then it is delivered until acked)."""

    def __init__(self) -> None:
        self.pending: list[Message] = []
        self.arrived = asyncio.Event()
        self.headers: list[int] = []
        self.empty_answers = 0
        self.acked: list[int] = []

    def add(self, message: Message) -> None:
        self.pending.append(message)
        self.arrived.set()

    async def get_message(
        self, last_message_id: int, max_capacity: Callable[[], int]
    ) -> Message | None:
        self.headers.append(max_capacity())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(HOLD):
                while True:
                    fresh = [m for m in self.pending if m.message_id > last_message_id]
                    if fresh:
                        return fresh[0]
                    self.arrived.clear()
                    await self.arrived.wait()
        self.empty_answers += 1
        return None

    async def delete_message(self, message_id: int) -> None:
        self.acked.append(message_id)
        self.pending = [m for m in self.pending if m.message_id != message_id]

    async def acquire_jobs(self, request_ids: Sequence[int]) -> list[int]:
        return list(request_ids)


async def test_idle_runners_scale_down_while_the_capacity_keeps_changing(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    async with Stage(local_cluster, tmp_path / "stage", prefix="flap", hud=False) as stage:
        site = await stage.add_site(SiteSpec(name="flap", scale_set_id=93))
        standin = site.standin
        assert standin is not None
        queue = HeldQueue()
        capacity = AdvertisedCapacity(10)
        marks: list[int] = []
        scaler = Scaler(
            min_runners=0,
            max_runners=10,
            patcher=KubePatcher(
                Kube(stage.api), namespace=site.namespace, runner_set_name=site.runner_set_name
            ),
        )
        listener = Listener(
            session=queue,
            scaler=scaler,
            capacity=capacity,
            on_poll=lambda: marks.append(1),
            reissue_interval=0.05,
            quiet_interval=2.0,
        )
        session = Session(
            session_id="s-1",
            owner_name="test",
            message_queue_url="https://queue.invalid/",
            message_queue_access_token="unused",
            statistics=stats(2),  # two jobs assigned at start-up: two runners
            scale_set=None,
        )
        stop = asyncio.Event()
        loop_task = asyncio.create_task(listener.run(session, stop))
        try:
            await site.wait_for(lambda: standin.stats().runners_idle == 2, "two idle runners", 60)
            # The jobs are done: the next patch says 0 runners, but with patchID > 0 (a job
            # event happened), which the controller does not act on for a scale-down.
            done = JobMessage(message_type="JobCompleted", runner_request_id=1, runner_name="x")
            queue.add(Message(message_id=1, message_type="m", statistics=stats(0), jobs=(done,)))
            await site.wait_for(lambda: queue.acked == [1], "the message handled", 30)
            await site.wait_for(lambda: standin.stats().replicas == 0, "replicas 0 patched", 30)
            assert standin.stats().runners == 2
            answered = queue.empty_answers
            marked = len(marks)

            async def flap() -> None:
                value = 0
                while True:
                    value = 1 - value
                    capacity.set_max_capacity(value)
                    await asyncio.sleep(0.2)

            flapping = asyncio.create_task(flap())
            try:
                await site.wait_for(lambda: standin.stats().runners == 0, "idle scale-down", 120)
            finally:
                flapping.cancel()
            assert queue.empty_answers == answered  # no poll ever ended by itself meanwhile
            assert listener.reissued_polls > 10
            assert len(marks) > marked  # readiness kept being marked
            assert standin.stats().patch_id == 0
            assert not loop_task.done()
        finally:
            stop.set()
            await asyncio.wait_for(loop_task, 30)
