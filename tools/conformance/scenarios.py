"""The scripted situations of the differential suite.

Each scenario scripts the fake Actions service (poll answers, injected faults) so that both
listeners see exactly the same thing; the harness records what each did. Message and job
contents are fixed values, so two runs produce identical bodies.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tools.conformance.harness import SCALE_SET_ID, Scenario
from tools.fake_actions import FakeActions, ScriptedPoll, make_rsa_keypair
from tools.fake_http import Fault

__all__ = ["RUNS", "SCENARIOS", "by_name"]

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


def _without(key: str) -> Fault:
    return Fault.mutate(lambda body: {k: v for k, v in body.items() if k != key})


def _poll_401_once(fake: FakeActions) -> None:
    fake.inject("get_message", Fault.unauthorized())
    _polls(fake, _message(1, [job("JobAssigned", 101)], assigned=1), _EMPTY)


def _poll_401_twice(fake: FakeActions) -> None:
    fake.inject("get_message", Fault.unauthorized(), times=2)
    _polls(fake, _message(1, [job("JobAssigned", 101)], assigned=1), _EMPTY)


def _refresh_401(fake: FakeActions) -> None:
    fake.inject("get_message", Fault.unauthorized())
    fake.inject("session_refresh", Fault.unauthorized())
    _polls(fake, _message(1, [job("JobAssigned", 101)], assigned=1), _EMPTY)


def _refresh_without_statistics(fake: FakeActions) -> None:
    fake.inject("get_message", Fault.unauthorized())
    fake.inject("session_refresh", _without("statistics"))
    _polls(fake, _message(1, [job("JobAssigned", 101)], assigned=1), _EMPTY)


def _create_without_statistics(fake: FakeActions) -> None:
    fake.inject("session_create", _without("statistics"))


def _rate_limited(fake: FakeActions) -> None:
    fake.inject("get_message", Fault.rate_limited(1))
    fake.inject("registration_token", Fault.rate_limited(2))  # not the 1 s backoff
    unavailable = Fault.status_code(
        503, b'{"typeName":"Unavailable","message":"busy"}', {"Retry-After": "1"}
    )
    fake.inject("session_create", unavailable)
    _polls(fake, _message(1, [job("JobAssigned", 101)], assigned=1), _EMPTY)


def _ack_5xx(fake: FakeActions) -> None:
    fake.inject("delete_message", Fault.server_error(500))
    _polls(fake, _message(1, [job("JobAssigned", 101)], assigned=1), _EMPTY)


def _acquire_5xx(fake: FakeActions) -> None:
    fake.inject("acquire_jobs", Fault.server_error(502))
    _polls(fake, _message(1, [job("JobAvailable", 101)], available=1), _EMPTY)


def _acquire_gives_up(fake: FakeActions) -> None:
    # Retry-After: 0 makes all five attempts immediate on both sides.
    busy = Fault.status_code(503, b'{"message":"busy"}', {"Retry-After": "0"})
    fake.inject("acquire_jobs", busy, times=5)
    _polls(fake, _message(1, [job("JobAvailable", 101)], available=1), _EMPTY)


def _malformed(fake: FakeActions) -> None:
    _polls(fake, ScriptedPoll(b'{"messageId": 1, "messageType": "RunnerScale'))


def _unknown_envelope(fake: FakeActions) -> None:
    _polls(fake, ScriptedPoll({**envelope(1, []), "messageType": "RunnerScaleSetSomethingElse"}))


def _bom(fake: FakeActions) -> None:
    for route in ("registration_token", "runner_registration", "session_create", "get_message"):
        fake.inject(route, Fault.bom())
    _polls(fake, _message(1, [job("JobAssigned", 101)], assigned=1), _EMPTY)


def _null_body(fake: FakeActions) -> None:
    _polls(fake, ScriptedPoll({**envelope(1, []), "body": "null"}), _EMPTY)


def _numeric_job_id(fake: FakeActions) -> None:
    _polls(fake, _message(1, [job("JobStarted", 101, jobId=987654)], assigned=1, running=1))


def _empty_time(fake: FakeActions) -> None:
    _polls(fake, _message(1, [job("JobCompleted", 101, finishTime="")]))


def _session_conflict(fake: FakeActions) -> None:
    fake.inject_session_conflict(times=1)
    _polls(fake, _EMPTY)


def _session_evicted(fake: FakeActions) -> None:
    # actions/scaleset #123: the broker evicts the session; its token is refused, the refresh
    # answers 404.
    _polls(
        fake,
        _message(1, [job("JobAssigned", 101)], assigned=1),
        ScriptedPoll(drop="evict"),
        _message(2, [job("JobStarted", 101)], assigned=1, running=1),
        _EMPTY,
    )


def _session_expired(fake: FakeActions) -> None:
    # The session ended quietly on the service's side: the poll answers 404.
    _polls(
        fake,
        _message(1, [job("JobAssigned", 101)], assigned=1),
        ScriptedPoll(drop="expire"),
        _message(2, [job("JobStarted", 101)], assigned=1, running=1),
        _EMPTY,
    )


_GONE = json.dumps(
    {
        "typeName": "GitHub.Actions.Runtime.WebApi.RunnerScaleSetNotFoundException, "
        "GitHub.Actions.Runtime.WebApi",
        "message": "The runner scale set was not found.",
    }
).encode()


def _scale_set_gone(fake: FakeActions) -> None:
    # ARC #4370: the scale set was deleted on GitHub's side.
    fake.inject("session_create", Fault.status_code(404, _GONE), times=10)


def _admin_token_expiry(fake: FakeActions) -> None:
    # The admin token lives 62-63 s and is renewed 60 s before it expires: nothing in the
    # first 2 s renews it, the acquire after a 3.5 s hold runs the whole chain again on both
    # sides, and the session DELETE right after uses the new token.
    _polls(
        fake,
        ScriptedPoll(envelope(1, [job("JobAvailable", 101)], available=1), delay=3.5),
        _EMPTY,
    )


# As the broker writes them (a public live probe of GitHub.com, 2026-07): runnerRequestId 0
# and a UUID jobId on every job message of a directly assigned job.
_BROKER_JOBS = {
    n: {"runnerRequestId": 0, "jobId": f"6f1c2a4e-0000-4000-8000-00000000000{n}"} for n in (1, 2)
}


def _assigned_directly(fake: FakeActions) -> None:
    _polls(
        fake,
        _message(1, [job("JobAssigned", 101, **_BROKER_JOBS[1])], assigned=1),
        _message(2, [job("JobAssigned", 102, **_BROKER_JOBS[2])], assigned=2),
        _EMPTY,
        _message(3, [job("JobStarted", 101, **_BROKER_JOBS[1])], assigned=2, running=1),
        _message(4, [job("JobCompleted", 101, **_BROKER_JOBS[1])], assigned=1),
        _EMPTY,
    )


def _redelivered(fake: FakeActions) -> None:
    # Delivery is at-least-once: message 1 comes again although it was acked (the DELETE
    # landed after the service had answered the next poll).
    first = _message(1, [job("JobAssigned", 101)], assigned=1)
    _polls(
        fake,
        first,
        first,
        _message(2, [job("JobStarted", 101)], assigned=1, running=1),
        _EMPTY,
    )


def _acquire_404(fake: FakeActions) -> None:
    # The broker has no acquire endpoint; should it ever offer a job, acquiring it is a 404.
    _polls(
        fake,
        _message(1, [job("JobAvailable", 101)], available=1),
        _message(2, [job("JobAssigned", 101)], assigned=1),
        _EMPTY,
    )


_APP_KEY, _APP_PUBLIC_KEY = make_rsa_keypair()


def _github_app(fake: FakeActions) -> None:
    _polls(fake, _message(1, [job("JobAssigned", 101)], assigned=1), _EMPTY)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "happy",
        "every message type (JobAvailable, JobAssigned, JobStarted, JobCompleted, an unknown "
        "type), 202s, acquirejobs, then SIGTERM",
        _happy,
        modes=("pipelines",),
    ),
    Scenario(
        "assigned-directly",
        "jobs assigned with no JobAvailable before them, runnerRequestId 0 and UUID job ids "
        "(the broker's messages), started and completed",
        _assigned_directly,
    ),
    Scenario(
        "redelivered",
        "a message delivered again after it was handled and acked",
        _redelivered,
    ),
    Scenario(
        "acquire-404",
        "a JobAvailable on the broker, whose acquirejobs is a router 404",
        _acquire_404,
        modes=("broker",),
    ),
    Scenario("poll-401", "401 on a poll: refresh the session, poll again", _poll_401_once),
    Scenario("poll-401-twice", "the refreshed queue token is refused too", _poll_401_twice),
    Scenario(
        "refresh-401",
        "the session refresh itself is refused (admin token no longer honoured)",
        _refresh_401,
    ),
    Scenario(
        "refresh-without-statistics",
        "a session refresh answered without statistics",
        _refresh_without_statistics,
    ),
    Scenario(
        "create-without-statistics",
        "a session created without statistics (unusable)",
        _create_without_statistics,
    ),
    Scenario(
        "retry-after",
        "429 and 503 with Retry-After on the registration token, session create and a poll",
        _rate_limited,
    ),
    Scenario("ack-5xx", "500 on the ack, retried", _ack_5xx),
    Scenario("acquire-5xx", "502 on acquirejobs, retried", _acquire_5xx, modes=("pipelines",)),
    Scenario(
        "acquire-gives-up",
        "503 on every acquirejobs attempt",
        _acquire_gives_up,
        modes=("pipelines",),
    ),
    Scenario("malformed", "a 200 poll answer that is not JSON", _malformed),
    Scenario(
        "unknown-envelope", "a message whose messageType is not job messages", _unknown_envelope
    ),
    Scenario("bom", "UTF-8 byte-order marks on GitHub and Actions-service bodies", _bom),
    Scenario("null-body", 'a message whose body is the string "null"', _null_body),
    Scenario("numeric-job-id", "JobStarted with a numeric jobId", _numeric_job_id),
    Scenario("empty-time", 'JobCompleted with finishTime ""', _empty_time),
    Scenario("session-409", "409 on session create (another session is active)", _session_conflict),
    Scenario(
        "session-evicted",
        "the session is evicted: the queue token is refused and the refresh answers 404",
        _session_evicted,
    ),
    Scenario(
        "session-expired",
        "the session ended on the service: the poll answers 404",
        _session_expired,
    ),
    Scenario(
        "scale-set-gone",
        "404 RunnerScaleSetNotFoundException on session create (the scale set was deleted)",
        _scale_set_gone,
        env={"LISTENER_SCALE_SET_GONE_TIMEOUT": "6"},
    ),
    Scenario(
        "github-app",
        "GitHub App credentials: JWT → installation token → registration token → admin token",
        _github_app,
        fake_options={
            "app_id": "4242",
            "app_public_key": _APP_PUBLIC_KEY,
            "app_installation_id": 99,
        },
        config={
            "github_token": "",
            "github_app_id": "4242",
            "github_app_installation_id": 99,
            "github_app_private_key": _APP_KEY,
        },
    ),
    Scenario(
        "admin-token-expiry",
        "the admin token expires between polls: the chain runs again before acquirejobs",
        _admin_token_expiry,
        fake_options={"admin_token_ttl": 62.0},
        modes=("pipelines",),  # the renewal is seen on acquirejobs
    ),
)


def _run(scenario: Scenario, mode: str) -> Scenario:
    if mode == "pipelines":
        return scenario
    return dataclasses.replace(
        scenario,
        name=f"{scenario.name}@{mode}",
        fake_options={**scenario.fake_options, mode: True},
        modes=(mode,),
    )


# Every scenario once per service generation it applies to: ``name`` on the pipelines
# service, ``name@broker`` on the broker (the fake's ``broker`` option).
RUNS: tuple[Scenario, ...] = tuple(_run(s, mode) for s in SCENARIOS for mode in s.modes)


def by_name(name: str) -> Scenario:
    for scenario in RUNS:
        if scenario.name == name:
            return scenario
    raise KeyError(name)
