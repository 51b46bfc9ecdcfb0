"""A watch stream's retry after the apiserver was away (base/kube.py ``informer``).

The client is fed scripted answers in place of ``ApiClient.call_api`` (what is tested is
when the informer asks again, not what Kubernetes answers; that is in the integration tier,
tests/integration/test_capacity_kube.py). The unit tier runs in virtual time, so the retry
delays are long and the moments are read from the loop's clock.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from base.kube import Failed, Kube, Reset, Resource

RETRY = (40.0, 40.0)  # every retry delay 20-40 s (half-jittered)
PODS = Resource.pods("ns")
OTHER = Resource.pods("other")
LISTED = {"items": [], "metadata": {"resourceVersion": "7"}}


@dataclass
class Answer:
    status: int
    body: Any = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    error: BaseException | None = None  # no answer at all


class _Content:
    def __init__(self, hold: asyncio.Event) -> None:
        self._hold = hold

    async def readline(self) -> bytes:
        await self._hold.wait()  # a watch with nothing to say stays open
        return b""


class _Response:
    def __init__(self, answer: Answer, hold: asyncio.Event) -> None:
        self.status = answer.status
        self._body = json.dumps(answer.body).encode()
        self.headers = answer.headers
        self.content = _Content(hold)

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        pass

    def close(self) -> None:
        pass


class ScriptedApi:
    """``call_api`` answers from ``script(method, path, query)`` and records every call."""

    def __init__(self, script: Callable[[str, str, dict[str, str]], Answer]) -> None:
        self.script = script
        self.calls: list[tuple[float, str, dict[str, str]]] = []
        self.hold = asyncio.Event()

    async def call_api(self, path: str, method: str, **kwargs: Any) -> _Response:
        query = dict(kwargs.get("query_params") or [])
        self.calls.append((asyncio.get_running_loop().time(), path, query))
        answer = self.script(method, path, query)
        if answer.error is not None:
            raise answer.error
        return _Response(answer, self.hold)

    def lists(self, resource: Resource = PODS) -> list[float]:
        return [
            at for at, path, query in self.calls if path == resource.path and "watch" not in query
        ]


class Scene:
    """One client; lists of PODS answer ``failure`` until ``up``; everything else succeeds."""

    def __init__(self, failure: Answer) -> None:
        self.failure = failure
        self.up = False
        self.api = ScriptedApi(self._script)
        self.kube = Kube(self.api, watch_retry=RETRY)  # type: ignore[arg-type]
        self.events: asyncio.Queue[object] = asyncio.Queue()

    def _script(self, method: str, path: str, query: dict[str, str]) -> Answer:
        if path == PODS.path and "watch" not in query:
            return Answer(200, LISTED) if self.up else self.failure
        if path in (PODS.path, OTHER.path):
            return Answer(200, LISTED)
        return Answer(200, {"metadata": {"name": "n1"}, "spec": {}})  # GET /api/v1/nodes/n1

    async def follow(self, resource: Resource = PODS, since: str = "") -> None:
        async for event in self.kube.informer(resource, lambda obj: obj, since=since):
            if resource is PODS:
                await self.events.put(event)

    async def failed(self) -> Failed:
        event = await self.events.get()
        assert isinstance(event, Failed)
        return event

    async def reset(self) -> None:
        event = await asyncio.wait_for(self.events.get(), timeout=RETRY[1])
        assert isinstance(event, Reset)


STARTING = Answer(503, {"message": "starting"})
NOT_THERE = [
    pytest.param(Answer(0, error=aiohttp.ClientConnectionError("refused")), id="no connection"),
    pytest.param(Answer(503, {"message": "starting"}), id="503"),
    pytest.param(Answer(500, {"message": "etcd"}), id="500"),
    # What a starting apiserver answers until its paths are installed.
    pytest.param(Answer(503, {"message": "not ready"}, {"Retry-After": "5"}), id="503 starting"),
]
REFUSED = [
    pytest.param(Answer(403, {"message": "forbidden"}), id="forbidden"),
    pytest.param(Answer(429, {"message": "slow down"}), id="throttled"),
]


@pytest.mark.parametrize("failure", NOT_THERE)
async def test_a_stream_retries_at_once_when_another_request_succeeds(failure: Answer) -> None:
    scene = Scene(failure)
    loop = asyncio.get_running_loop()
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(scene.follow())
        failed = await scene.failed()
        assert failed.retry_in >= RETRY[0] / 2
        await asyncio.sleep(5.0)  # the stream is in its retry delay
        scene.up = True
        answered_at = loop.time()
        assert await scene.kube.get_node("n1") is not None  # the apiserver answers again
        await scene.reset()
        task.cancel()
    first, second = scene.api.lists()
    # Asked again when the other request succeeded, not after its own 20-40 s.
    assert second - answered_at < 1.0
    assert second - first < failed.retry_in


async def test_a_watch_that_opens_wakes_the_stream_too() -> None:
    scene = Scene(STARTING)
    loop = asyncio.get_running_loop()
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(scene.follow())
        await scene.failed()
        await asyncio.sleep(5.0)
        scene.up = True
        opened_at = loop.time()
        # Another stream that starts with a watch (no list, no other request): it opening
        # is the sign that the apiserver is back.
        other = tg.create_task(scene.follow(OTHER, since="5"))
        await scene.reset()
        task.cancel()
        other.cancel()
    assert scene.api.lists(OTHER) == []
    assert scene.api.lists()[1] - opened_at < 1.0


async def test_only_one_retry_per_run_of_failures_is_cut_short() -> None:
    # The apiserver answers others but keeps failing this stream (overloaded, or a broken
    # webhook): after one early retry the stream keeps to its back-off.
    scene = Scene(STARTING)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(scene.follow())
        await scene.failed()
        await asyncio.sleep(5.0)
        assert await scene.kube.get_node("n1") is not None
        second = await scene.failed()  # retried at once, failed again
        await asyncio.sleep(1.0)
        assert await scene.kube.get_node("n1") is not None
        third = await scene.failed()
        task.cancel()
    first_at, second_at, third_at = scene.api.lists()
    assert second_at - first_at < RETRY[0] / 2
    assert third_at - second_at == pytest.approx(second.retry_in, abs=0.01)
    assert third.retry_in > 0


async def test_a_stream_that_lists_again_may_be_cut_short_again() -> None:
    scene = Scene(STARTING)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(scene.follow())
        await scene.failed()
        assert await scene.kube.get_node("n1") is not None
        await scene.failed()
        scene.up = True
        await scene.reset()  # a working stream: the next run of failures starts afresh
        task.cancel()
    scene.up = False
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(scene.follow())
        await scene.failed()
        await asyncio.sleep(5.0)
        scene.up = True
        assert await scene.kube.get_node("n1") is not None
        await scene.reset()
        task.cancel()
    assert scene.api.lists()[-1] - scene.api.lists()[-2] < RETRY[0] / 2


@pytest.mark.parametrize("failure", REFUSED)
async def test_a_refused_stream_waits_its_whole_delay(failure: Answer) -> None:
    scene = Scene(failure)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(scene.follow())
        failed = await scene.failed()
        await asyncio.sleep(5.0)
        scene.up = True
        assert await scene.kube.get_node("n1") is not None
        await scene.reset()
        task.cancel()
    first, second = scene.api.lists()
    # Others succeeding says nothing about a refusal: the full delay.
    assert second - first == pytest.approx(failed.retry_in, abs=0.01)
