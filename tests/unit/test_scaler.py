"""ARC's scaler rules: desired count, patchID sequence, and the exact patch bodies."""

from __future__ import annotations

from typing import Any

import pytest

from listener.scaler import PatchSequencer, Scaler, runner_set_patch, runner_status_patch
from listener.wire import JobMessage


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
