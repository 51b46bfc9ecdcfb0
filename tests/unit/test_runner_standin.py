"""The runner stand-in's own failure handling (test infrastructure the e2e tier relies on).

What happens on the real control plane is tested in tests/e2e/test_harness.py; here, the
decisions: which errors are retried, and that a runner that dies fails its job and is
forgotten instead of leaving the job "running" forever.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tools.fake_actions import FakeActions, JobState
from tools.kube_calls import retrying, transient
from tools.runner_standin import RUNNER_CREATES_AT_ONCE, Runner, RunnerStandIn, StandInSpec


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (aiohttp.ClientConnectionError("refused"), True),
        (ConnectionRefusedError(), True),
        (TimeoutError(), True),
        (ApiException(status=503), True),
        (ApiException(status=429), True),
        (ApiException(status=0), True),
        (ApiException(status=404), False),
        (ApiException(status=409), False),
        (ApiException(status=422), False),
        (ValueError("bug"), False),
    ],
)
def test_transient_errors(error: BaseException, expected: bool) -> None:
    assert transient(error) is expected


def forbidden(message: str) -> ApiException:
    error = ApiException(status=403, reason="Forbidden")
    status = f'{{"kind":"Status","reason":"Forbidden","code":403,"message":"{message}"}}'
    error.body = status.encode()
    return error


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # What a restarted apiserver answered in the e2e tier before its caches synced.
        ('pods \\"w\\" is forbidden: no PriorityClass with name arc-workflow was found', True),
        ("pods is forbidden: not yet ready to handle request", True),
        ('pods is forbidden: User \\"x\\" cannot create resource \\"pods\\"', False),
    ],
)
def test_an_apiserver_starting_up_refuses_for_a_while_other_403s_are_final(
    message: str, expected: bool
) -> None:
    assert transient(forbidden(message)) is expected


async def test_retrying_outlasts_an_unreachable_apiserver() -> None:
    failures = [aiohttp.ClientConnectionError("refused"), ApiException(status=503)]
    seen: list[BaseException] = []

    async def call() -> str:
        if failures:
            raise failures.pop(0)
        return "done"

    assert await retrying(call, on_retry=seen.append, first=0.001) == "done"
    assert [type(e) for e in seen] == [aiohttp.ClientConnectionError, ApiException]


async def test_retrying_raises_what_retrying_cannot_fix() -> None:
    calls = 0

    async def call() -> None:
        nonlocal calls
        calls += 1
        raise ApiException(status=422)

    with pytest.raises(ApiException):
        await retrying(call, first=0.001)
    assert calls == 1


async def test_a_runner_that_dies_fails_its_job_and_is_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeActions()
    fake.add_scale_set(1, "linux")
    (job,) = fake.add_jobs(1, labels=["linux"])
    fake.assign(1, 1)
    spec = StandInSpec(
        namespace="ns", runner_set_name="linux-ers", scale_set_name="linux", scale_set_id=1
    )
    async with client.ApiClient() as api:  # never called: the cluster calls are replaced
        standin = RunnerStandIn(api, fake, spec)
        runner = Runner(
            name="linux-runner-a",
            patch_id=1,
            runner_id=fake.register_runner(1, "linux-runner-a"),
            created=0.0,
        )
        standin.runners[runner.name] = runner
        deleted: list[str] = []

        async def lifecycle(r: Runner, er_uid: str) -> None:
            r.job = fake.claim_job(1, r.name)
            assert r.job is not None
            raise aiohttp.ClientConnectionError("apiserver went away mid-job")

        async def delete(call: object) -> None:
            deleted.append("deleted")

        monkeypatch.setattr(standin, "_lifecycle", lifecycle)
        monkeypatch.setattr(standin, "_delete", delete)
        await asyncio.wait_for(standin._run(runner, "uid"), timeout=5)

    assert job.state is JobState.COMPLETED
    assert job.result == "failed"
    assert standin.jobs_lost == 1
    assert runner.name not in standin.runners
    assert deleted == ["deleted"] * 3  # workflow pod, runner pod, EphemeralRunner
    assert any("apiserver went away" in e for e in standin.errors)


async def test_clean_up_forgets_the_runner_even_when_deletes_fail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeActions()
    fake.add_scale_set(1, "linux")
    spec = StandInSpec(
        namespace="ns", runner_set_name="linux-ers", scale_set_name="linux", scale_set_id=1
    )
    async with client.ApiClient() as api:
        standin = RunnerStandIn(api, fake, spec)
        runner = Runner(name="linux-runner-b", patch_id=1, runner_id=1, created=0.0)
        standin.runners[runner.name] = runner

        async def delete(call: object) -> None:
            raise ApiException(status=403, reason="Forbidden")

        monkeypatch.setattr(standin, "_delete", delete)
        await standin._clean_up(runner)

    assert runner.name not in standin.runners
    assert any("Forbidden" in e for e in standin.errors)


async def test_a_short_set_creates_its_runners_a_batch_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A burst of 20 replicas: all made in one reconcile, never more than
    RUNNER_CREATES_AT_ONCE creates in flight, and more than one at a time (one after another,
    a loaded API server's second per call delayed a burst's runners by half a minute)."""
    fake = FakeActions()
    fake.add_scale_set(1, "linux")
    spec = StandInSpec(
        namespace="ns", runner_set_name="linux-ers", scale_set_name="linux", scale_set_id=1
    )
    async with client.ApiClient() as api:  # never called: the create is replaced
        standin = RunnerStandIn(api, fake, spec)
        standin.ers = {"spec": {"replicas": 20, "patchID": 3}}
        in_flight = peak = 0
        made: list[int] = []

        async def create(patch_id: int) -> None:
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(0.01)
            in_flight -= 1
            made.append(patch_id)

        monkeypatch.setattr(standin, "_create_runner", create)
        await asyncio.wait_for(standin._reconcile(), timeout=5)

    assert made == [3] * 20
    assert peak == RUNNER_CREATES_AT_ONCE
