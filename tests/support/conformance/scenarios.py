"""The scripted situations of the differential suite.

Each scenario scripts the fake Actions service (poll answers, injected faults) so that both
listeners see exactly the same thing; the harness records what each did. Message and job
contents are fixed values, so two runs produce identical bodies.
"""

from __future__ import annotations

import json
from typing import Any

from tests.support.conformance.harness import SCALE_SET_ID, Scenario
from tests.support.fake_actions import FakeActions, ScriptedPoll
from tests.support.fake_http import UTF8_BOM, Fault

__all__ = ["SCENARIOS", "by_name"]

_T0 = "2026-05-01T10:00:00.0000000Z"
_T1 = "2026-05-01T10:00:07.1234567Z"
_T2 = "2026-05-01T10:03:00Z"
_ZERO = "0001-01-01T00:00:00Z"


def stats(assigned: int = 0, running: int = 0, available: int = 0) -> dict[str, int]:
    return {
        "totalAvailableJobs": available,
        "totalAcquiredJobs": assigned,
        "totalAssignedJobs": assigned,
        "totalRunningJobs": running,
        "totalRegisteredRunners": running,
        "totalBusyRunners": running,
        "totalIdleRunners": 0,
    }


def job(message_type: str, request_id: int, **extra: Any) -> dict[str, Any]:
    """One job message as the service writes it (camelCase, .NET timestamps)."""
    body: dict[str, Any] = {
        "messageType": message_type,
        "runnerRequestId": request_id,
        "repositoryName": "app",
        "ownerName": "acme",
        "jobId": f"job-{request_id}",
        "jobWorkflowRef": "acme/app/.github/workflows/ci.yml@refs/heads/main",
        "jobDisplayName": f"build ({request_id})",
        "workflowRunId": 5000 + request_id,
        "eventName": "push",
        "requestLabels": ["linux"],
        "queueTime": _T0,
        "scaleSetAssignTime": _T0,
        "runnerAssignTime": _ZERO,
        "finishTime": _ZERO,
    }
    if message_type == "JobAvailable":
        body["acquireJobUrl"] = "https://pipelines.example/acquirejobs"
    if message_type in ("JobStarted", "JobCompleted"):
        body.update(runnerId=request_id - 100, runnerName=f"linux-abcde-runner-{request_id}")
        body["runnerAssignTime"] = _T1
    if message_type == "JobCompleted":
        body.update(result="succeeded", finishTime=_T2)
    body.update(extra)
    return body


def envelope(message_id: int, jobs: list[dict[str, Any]], **statistics: int) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "messageType": "RunnerScaleSetJobMessages",
        "statistics": stats(**statistics),
        "body": json.dumps(jobs, separators=(",", ":")),
    }


def _polls(fake: FakeActions, *polls: ScriptedPoll) -> None:
    fake.script_polls(SCALE_SET_ID, polls)


def _message(message_id: int, jobs: list[dict[str, Any]], **statistics: int) -> ScriptedPoll:
    return ScriptedPoll(envelope(message_id, jobs, **statistics))


_EMPTY = ScriptedPoll(None)


# --- scenarios -----------------------------------------------------------------------------


def _happy(fake: FakeActions) -> None:
    _polls(
        fake,
        _message(1, [job("JobAvailable", 101), job("JobAvailable", 102)], available=2),
        _message(2, [job("JobAssigned", 101), job("JobAssigned", 102)], assigned=2),
        _EMPTY,
        _message(3, [job("JobStarted", 101), job("SomethingNew", 0)], assigned=2, running=1),
        _message(4, [job("JobStarted", 102), job("JobCompleted", 101)], assigned=1, running=1),
        _message(5, [job("JobCompleted", 102, result="canceled")]),
        _EMPTY,
    )


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "happy",
        "every message type (JobAvailable, JobAssigned, JobStarted, JobCompleted, an unknown "
        "type), 202s, acquirejobs, then SIGTERM",
        _happy,
    ),
)


def by_name(name: str) -> Scenario:
    for scenario in SCENARIOS:
        if scenario.name == name:
            return scenario
    raise KeyError(name)


# Imported for scenarios added below; kept referenced so linters see them used.
_UNUSED = (UTF8_BOM, Fault)
