"""ARC's scaler rules: desired count, patchID sequence, and the exact patch bodies."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from base.kube import KubeError
from listener.scaler import (
    Patcher,
    PatchRetry,
    PatchSequencer,
    Scaler,
    runner_set_patch,
    runner_status_patch,
)
from listener.wire import JobMessage
from tests.support.fake_clock import FakeClock


def test_first_update_is_a_full_state_sync() -> None:
    seq = PatchSequencer(min_runners=0, max_runners=10)
    assert seq.next(0) == (0, 0)


@pytest.mark.parametrize(
    ("min_runners", "max_runners", "steps", "expected"),
    [
        pytest.param(
            0,
            10,
            [(0, False), (0, False), (0, False)],
            [(0, 0), (0, 0), (0, 0)],
            id="idle-at-floor",
        ),
        pytest.param(
            0,
            10,
            [(3, False), (3, False), (0, False), (0, False)],
            [(3, 0), (3, 1), (0, 2), (0, 0)],
            id="scale-up-then-down-waits-one-quiet-update",
        ),
        pytest.param(
            2,
            10,
            [(0, False), (1, False), (1, True), (0, True), (0, False)],
            [(2, 0), (3, 1), (3, 2), (2, 3), (2, 0)],
            id="min-runners-are-on-top-of-assigned",
        ),
        pytest.param(
            1, 4, [(10, False), (10, False)], [(4, 0), (4, 1)], id="capped-at-max-runners"
        ),
        pytest.param(
            0,
            10,
            [(0, False), (0, True), (0, False)],
            [(0, 0), (0, 1), (0, 0)],
            id="job-events-block-scale-down-once",
        ),
    ],
)
def test_patch_sequence(
    min_runners: int,
    max_runners: int,
    steps: list[tuple[int, bool]],
    expected: list[tuple[int, int]],
) -> None:
    seq = PatchSequencer(min_runners=min_runners, max_runners=max_runners)
    got = []
    for assigned, dirty_before in steps:
        if dirty_before:
            seq.dirty = True
        got.append(seq.next(assigned))
    assert got == expected


def test_patch_seq_wraps_at_max_int32() -> None:
    seq = PatchSequencer(min_runners=0, max_runners=10, target=1, patch_seq=2_147_483_647)
    assert seq.next(1) == (1, 1)


def test_runner_set_patch_omits_zero_replicas() -> None:
    assert runner_set_patch(0, 4) == {"spec": {"patchID": 4, "replicas": None}}
    assert runner_set_patch(3, 0) == {"spec": {"patchID": 0, "replicas": 3}}


def test_runner_status_patch_drops_empty_fields() -> None:
    job = JobMessage(
        message_type="JobStarted",
        runner_request_id=101,
        owner_name="acme",
        repository_name="app",
        job_id="j-1",
        job_display_name="build",
        job_workflow_ref="acme/app/.github/workflows/ci.yml@refs/heads/main",
        workflow_run_id=0,
        runner_name="runner-abc",
    )
    assert runner_status_patch(job) == {
        "status": {
            "jobDisplayName": "build",
            "jobId": "j-1",
            "jobRepositoryName": "acme/app",
            "jobRequestId": 101,
            "jobWorkflowRef": "acme/app/.github/workflows/ci.yml@refs/heads/main",
        }
    }


class RecordingPatcher:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def patch_runner_set(self, body: dict[str, Any]) -> None:
        self.calls.append(("set", body))

    async def patch_runner_status(self, runner_name: str, body: dict[str, Any]) -> None:
        self.calls.append((runner_name, body))


async def test_scaler_marks_dirty_on_job_events() -> None:
    patcher = RecordingPatcher()
    scaler = Scaler(min_runners=0, max_runners=5, patcher=patcher)
    assert await scaler.handle_desired_runner_count(0) == 0
    started = JobMessage(message_type="JobStarted", runner_name="r-1", job_id="j")
    await scaler.handle_job_started(started)
    await scaler.handle_desired_runner_count(0)
    scaler.handle_job_completed(JobMessage(message_type="JobCompleted"))
    await scaler.handle_desired_runner_count(0)
    await scaler.handle_desired_runner_count(0)
    assert patcher.calls == [
        ("set", {"spec": {"patchID": 0, "replicas": None}}),
        ("r-1", {"status": {"jobId": "j", "jobRepositoryName": "/"}}),
        ("set", {"spec": {"patchID": 1, "replicas": None}}),
        ("set", {"spec": {"patchID": 2, "replicas": None}}),
        ("set", {"spec": {"patchID": 0, "replicas": None}}),
    ]


# --- apiserver throttling and outages ------------------------------------------------------


class FlakyPatcher(RecordingPatcher):
    """Fails runner-set patches with the queued errors, then succeeds."""

    def __init__(self, errors: list[KubeError]) -> None:
        super().__init__()
        self.errors = errors
        self.attempts = 0

    async def patch_runner_set(self, body: dict[str, Any]) -> None:
        self.attempts += 1
        if self.errors:
            raise self.errors.pop(0)
        await super().patch_runner_set(body)


class Report:
    def __init__(self) -> None:
        self.failures = 0
        self.pending: list[bool] = []

    def patch_failed(self, error: KubeError) -> None:
        self.failures += 1

    def patch_pending(self, pending: bool) -> None:
        self.pending.append(pending)


def throttled(after: str) -> KubeError:
    return KubeError("patch ephemeralrunnersets", 429, "TooManyRequests", retry_after=float(after))


REFUSED = KubeError("patch ephemeralrunnersets", 0, "ClientConnectorError: connection refused")
NOT_READY = KubeError("patch ephemeralrunnersets", 503, "ServiceUnavailable: not all paths")


def scaler_with(patcher: Patcher, clock: FakeClock, report: Report, budget: float = 120) -> Scaler:
    return Scaler(
        min_runners=0,
        max_runners=5,
        patcher=patcher,
        retry=PatchRetry(outage_budget=budget),
        state=report,
        clock=clock,
        sleep=clock.sleep,
    )


async def test_throttling_honours_retry_after_and_is_not_fatal() -> None:
    clock, report = FakeClock(1000.0), Report()
    patcher = FlakyPatcher([throttled("3"), throttled("7")])
    scaler = scaler_with(patcher, clock, report)
    retry = asyncio.create_task(scaler.run())
    assert await scaler.handle_desired_runner_count(2) == 2  # returns at once
    assert not scaler.in_sync
    async with asyncio.timeout(5):
        await scaler.wait_in_sync()
    retry.cancel()
    assert clock.sleeps == [3.0, 7.0]  # what the apiserver asked for
    assert patcher.calls == [("set", {"spec": {"patchID": 0, "replicas": 2}})]
    assert report.failures == 2
    assert report.pending == [True, False]


async def test_an_outage_keeps_the_newest_desired_state_and_applies_it_once_back() -> None:
    clock, report = FakeClock(1000.0), Report()
    patcher = FlakyPatcher([REFUSED] * 6 + [NOT_READY] * 3)
    scaler = scaler_with(patcher, clock, report)
    assert await scaler.handle_desired_runner_count(1) == 1  # fails: deferred
    # Updates during the outage only replace the kept state; none is sent.
    assert await scaler.handle_desired_runner_count(3) == 3
    assert await scaler.handle_desired_runner_count(4) == 4
    assert patcher.attempts == 1
    retry = asyncio.create_task(scaler.run())
    async with asyncio.timeout(5):
        await scaler.wait_in_sync()
    assert patcher.calls == [("set", {"spec": {"patchID": 2, "replicas": 4}})]
    assert 0 < sum(clock.sleeps) < 120
    assert max(clock.sleeps) <= PatchRetry().cap
    # Back to normal: patches are made in line again.
    await scaler.handle_desired_runner_count(4)
    assert patcher.calls[-1] == ("set", {"spec": {"patchID": 3, "replicas": 4}})
    retry.cancel()


async def test_an_outage_past_the_budget_is_fatal() -> None:
    clock, report = FakeClock(1000.0), Report()
    patcher = FlakyPatcher([REFUSED] * 1000)
    scaler = scaler_with(patcher, clock, report, budget=90)
    await scaler.handle_desired_runner_count(1)
    with pytest.raises(KubeError, match="connection refused"):
        async with asyncio.timeout(5):
            await scaler.run()
    assert 90 <= clock.now - 1000.0 <= 90 + 1e-6  # gave up exactly at the budget
    assert patcher.calls == []


async def test_errors_that_waiting_cannot_fix_stay_fatal() -> None:
    clock, report = FakeClock(1000.0), Report()
    forbidden = KubeError("patch ephemeralrunnersets", 403, "Forbidden")
    scaler = scaler_with(FlakyPatcher([forbidden]), clock, report)
    with pytest.raises(KubeError, match="403"):
        await scaler.handle_desired_runner_count(1)
    assert scaler.in_sync


async def test_job_started_status_patch_is_retried_in_line() -> None:
    clock, report = FakeClock(1000.0), Report()

    class FlakyStatus(RecordingPatcher):
        def __init__(self) -> None:
            super().__init__()
            self.errors = [REFUSED, throttled("2")]

        async def patch_runner_status(self, runner_name: str, body: dict[str, Any]) -> None:
            if self.errors:
                raise self.errors.pop(0)
            await super().patch_runner_status(runner_name, body)

    patcher = FlakyStatus()
    scaler = scaler_with(patcher, clock, report)
    await scaler.handle_job_started(JobMessage(message_type="JobStarted", runner_name="r-1"))
    assert [name for name, _ in patcher.calls] == ["r-1"]
    assert clock.sleeps[-1] == 2.0
