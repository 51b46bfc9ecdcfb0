"""The runner-set patch over HTTP: an apiserver that throttles (429) or is not ready (503),
with and without ``Retry-After``, through kubernetes-asyncio, KubePatcher and the Scaler."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from kubernetes_asyncio import client

from base.kube import Kube, KubeError, KubeErrorKind
from listener.scaler import KubePatcher, PatchRetry, Scaler
from tests.support.fake_clock import FakeClock
from tools.fake_http import LoopbackServer

PATH = "/apis/actions.github.com/v1alpha1/namespaces/arc-runners/ephemeralrunnersets/arc-cpu"


@dataclass
class FakeApiserver:
    """Answers each PATCH with the next scripted (status, Retry-After), then 200."""

    script: list[tuple[int, str | None]] = field(default_factory=list)
    bodies: list[object] = field(default_factory=list)

    async def patch(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.json())
        if self.script:
            status, retry_after = self.script.pop(0)
            headers = {"Retry-After": retry_after} if retry_after is not None else {}
            body = {"kind": "Status", "status": "Failure", "reason": "TooManyRequests",
                    "message": "please try again later", "code": status}  # fmt: skip
            return web.json_response(body, status=status, headers=headers)
        return web.json_response({"kind": "EphemeralRunnerSet"})


@pytest.fixture
async def apiserver() -> AsyncIterator[tuple[FakeApiserver, Kube]]:
    fake = FakeApiserver()
    app = web.Application()
    app.router.add_patch(PATH, fake.patch)
    async with LoopbackServer(app) as server:
        configuration = client.Configuration(host=server.url)
        configuration.api_key = {"BearerToken": "t"}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        async with client.ApiClient(configuration) as api:
            yield fake, Kube(api, request_timeout=5.0)


async def patch(kube: Kube) -> None:
    await KubePatcher(kube, namespace="arc-runners", runner_set_name="arc-cpu").patch_runner_set(
        {"spec": {"patchID": 0, "replicas": 1}}
    )


@pytest.mark.parametrize(
    ("status", "header", "expected"),
    [
        (429, "3", 3.0),
        (503, "5", 5.0),
        (500, None, None),
        (429, "Wed, 21 Oct 2015 07:28:00 GMT", None),  # client-go reads whole seconds only
    ],
)
async def test_retry_after_is_read_from_the_error_response(
    apiserver: tuple[FakeApiserver, Kube], status: int, header: str | None, expected: float | None
) -> None:
    fake, kube = apiserver
    fake.script = [(status, header)]
    with pytest.raises(KubeError) as caught:
        await patch(kube)
    assert caught.value.status == status
    assert caught.value.retry_after == expected
    assert caught.value.kind in {KubeErrorKind.THROTTLED, KubeErrorKind.SERVER}


async def test_throttled_patch_is_retried_honouring_retry_after(
    apiserver: tuple[FakeApiserver, Kube],
) -> None:
    fake, kube = apiserver
    fake.script = [(429, "2"), (503, "4"), (429, "1")]
    fake_clock = FakeClock()
    scaler = Scaler(
        min_runners=0,
        max_runners=5,
        patcher=KubePatcher(kube, namespace="arc-runners", runner_set_name="arc-cpu"),
        retry=PatchRetry(outage_budget=60),
        sleep=fake_clock.sleep,
    )
    retries = asyncio.create_task(scaler.run())
    assert await scaler.handle_desired_runner_count(3) == 3
    async with asyncio.timeout(10):
        await scaler.wait_in_sync()
    retries.cancel()
    assert fake_clock.sleeps == [2.0, 4.0, 1.0]
    assert len(fake.bodies) == 4
    assert {json.dumps(b) for b in fake.bodies} == {
        json.dumps({"spec": {"patchID": 0, "replicas": 3}})
    }
