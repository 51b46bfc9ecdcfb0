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
from typing import Any

import aiohttp
import pytest

from base.kube import Failed, Kube, Reset, Resource

RETRY = (40.0, 40.0)  # every retry delay 20-40 s (half-jittered)
PODS = Resource.pods("ns")


class _Content:
    def __init__(self, lines: list[bytes], hold: asyncio.Event) -> None:
        self._lines = lines
        self._hold = hold

    async def readline(self) -> bytes:
        if self._lines:
            return self._lines.pop(0)
        await self._hold.wait()  # a watch with nothing to say stays open
        return b""


class _Response:
    def __init__(self, status: int, body: Any, hold: asyncio.Event) -> None:
        self.status = status
        self._body = json.dumps(body).encode()
        self.headers: dict[str, str] = {}
        self.content = _Content([], hold)

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        pass

    def close(self) -> None:
        pass


class ScriptedApi:
    """``call_api`` answers from ``answer(method, path, query)``: a (status, body) pair."""

    def __init__(self, answer: Callable[[str, str, dict[str, str]], tuple[int, Any]]) -> None:
        self.answer = answer
        self.calls: list[tuple[float, str, str, dict[str, str]]] = []
        self.hold = asyncio.Event()

    async def call_api(self, path: str, method: str, **kwargs: Any) -> _Response:
        query = dict(kwargs.get("query_params") or [])
        self.calls.append((asyncio.get_running_loop().time(), method, path, query))
        status, body = self.answer(method, path, query)
        if isinstance(body, BaseException):
            raise body  # no answer at all
        return _Response(status, body, self.hold)


def lists(api: ScriptedApi) -> list[float]:
    return [at for at, _, path, query in api.calls if path == PODS.path and "watch" not in query]


async def first_list_answered_after(
    failure: tuple[int, Any],
) -> tuple[Kube, ScriptedApi, asyncio.Queue[object], dict[str, bool]]:
    """An informer whose first list gets ``failure``; later lists succeed once ``up``."""
    state = {"up": False}

    def answer(method: str, path: str, query: dict[str, str]) -> tuple[int, Any]:
        if path == PODS.path and "watch" not in query:
            if not state["up"]:
                return failure
            return 200, {"items": [], "metadata": {"resourceVersion": "7"}}
        if path == PODS.path:
            return 200, {}
        return 200, {"metadata": {"name": "n1"}, "spec": {}}  # GET /api/v1/nodes/n1

    api = ScriptedApi(answer)
    kube = Kube(api, watch_retry=RETRY)  # type: ignore[arg-type]
    events: asyncio.Queue[object] = asyncio.Queue()
    return kube, api, events, state


async def run_informer(kube: Kube, events: asyncio.Queue[object]) -> None:
    async for event in kube.informer(PODS, lambda obj: obj):
        await events.put(event)


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param((0, aiohttp.ClientConnectionError("refused")), id="no connection"),
        pytest.param((503, {"message": "starting"}), id="5xx"),
        pytest.param((500, {"message": "etcd"}), id="500"),
    ],
)
async def test_a_stream_retries_at_once_when_another_request_is_answered(
    failure: tuple[int, Any],
) -> None:
    kube, api, events, state = await first_list_answered_after(failure)
    loop = asyncio.get_running_loop()
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(run_informer(kube, events))
        failed = await events.get()
        assert isinstance(failed, Failed)
        assert failed.retry_in >= RETRY[0] / 2
        await asyncio.sleep(5.0)  # the stream is in its retry delay
        state["up"] = True
        answered_at = loop.time()
        assert await kube.get_node("n1") is not None  # the apiserver answers again
        reset = await asyncio.wait_for(events.get(), timeout=RETRY[1])
        assert isinstance(reset, Reset)
        task.cancel()
    first, second = lists(api)
    # Asked again when the other request was answered, not after its own 20-40 s.
    assert second - answered_at < 1.0
    assert second - first < failed.retry_in


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param((403, {"message": "forbidden"}), id="forbidden"),
        pytest.param((429, {"message": "slow down"}), id="throttled"),
    ],
)
async def test_a_refused_stream_waits_its_whole_delay(failure: tuple[int, Any]) -> None:
    kube, api, events, state = await first_list_answered_after(failure)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(run_informer(kube, events))
        failed = await events.get()
        assert isinstance(failed, Failed)
        await asyncio.sleep(5.0)
        state["up"] = True
        assert await kube.get_node("n1") is not None
        reset = await asyncio.wait_for(events.get(), timeout=RETRY[1])
        assert isinstance(reset, Reset)
        task.cancel()
    first, second = lists(api)
    # The apiserver answering others says nothing about a refusal: the full delay.
    assert second - first == pytest.approx(failed.retry_in, abs=0.01)
