"""listener.wire: Go-compatible parsing of Actions-service bodies."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from listener.wire import (
    JobMessage,
    Statistics,
    WireError,
    decode_json,
    parse_acquired_jobs,
    parse_message,
    parse_scale_set,
    parse_session,
)

BOM = b"\xef\xbb\xbf"
SESSION_ID = "6f1d0c0e-7a3b-4c55-9d7e-1f2a3b4c5d6e"
STATS = {
    "totalAvailableJobs": 1,
    "totalAcquiredJobs": 2,
    "totalAssignedJobs": 3,
    "totalRunningJobs": 4,
    "totalRegisteredRunners": 5,
    "totalBusyRunners": 6,
    "totalIdleRunners": 7,
}


def dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def envelope(jobs: list[dict[str, Any]] | None = None, **overrides: Any) -> dict[str, Any]:
    env: dict[str, Any] = {
        "messageId": 42,
        "messageType": "RunnerScaleSetJobMessages",
        "statistics": STATS,
        "body": "" if jobs is None else json.dumps(jobs),
    }
    env.update(overrides)
    return env


def session_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "sessionId": SESSION_ID,
        "ownerName": "listener-pod",
        "runnerScaleSet": {
            "id": 7,
            "name": "linux",
            "runnerGroupId": 1,
            "labels": [{"type": "System", "name": "self-hosted"}, {"name": "linux"}],
            "RunnerSetting": {"disableUpdate": False},
        },
        "messageQueueUrl": "https://queue.example/_apis/q?sessionId=abc",
        "messageQueueAccessToken": "queue-token-value",
        "statistics": STATS,
    }
    body.update(overrides)
    return body


# --- decode_json -------------------------------------------------------------------------------


def test_decode_json_strips_utf8_bom() -> None:
    assert decode_json(BOM + b'{"a": 1}') == {"a": 1}


def test_decode_json_rejects_malformed_json_with_one_line() -> None:
    with pytest.raises(WireError, match=r"^response body is not valid JSON: .*line 1") as info:
        decode_json(b'{"a": ')
    assert "\n" not in str(info.value)


def test_decode_json_rejects_non_utf8() -> None:
    with pytest.raises(WireError, match="not UTF-8"):
        decode_json(b'{"a": "\xff"}')


# --- messages ----------------------------------------------------------------------------------


def test_message_full_job_started_with_bom_and_every_field() -> None:
    job = {
        "messageType": "JobStarted",
        "runnerRequestId": 101,
        "repositoryName": "app",
        "ownerName": "acme",
        "jobId": "8b3c1d2e-job",
        "jobWorkflowRef": "acme/app/.github/workflows/ci.yml@refs/heads/main",
        "jobDisplayName": "build (linux)",
        "workflowRunId": 9,
        "eventName": "push",
        "requestLabels": ["self-hosted", "linux"],
        "queueTime": "2026-05-01T10:00:00Z",
        "scaleSetAssignTime": "2026-05-01T10:00:01.5Z",
        "runnerAssignTime": "2026-05-01T12:00:02+02:00",
        "finishTime": None,
        "runnerId": 55,
        "runnerName": "linux-abcde-runner-x1",
        "someFutureField": {"nested": True},
    }
    message = parse_message(BOM + dumps(envelope([job])))
    assert message.message_id == 42
    assert message.message_type == "RunnerScaleSetJobMessages"
    assert message.statistics == Statistics(1, 2, 3, 4, 5, 6, 7)
    assert message.jobs == (
        JobMessage(
            message_type="JobStarted",
            runner_request_id=101,
            repository_name="app",
            owner_name="acme",
            job_id="8b3c1d2e-job",
            job_workflow_ref="acme/app/.github/workflows/ci.yml@refs/heads/main",
            job_display_name="build (linux)",
            workflow_run_id=9,
            event_name="push",
            request_labels=("self-hosted", "linux"),
            queue_time=datetime(2026, 5, 1, 10, 0, 0, tzinfo=UTC),
            scale_set_assign_time=datetime(2026, 5, 1, 10, 0, 1, 500000, tzinfo=UTC),
            runner_assign_time=datetime(2026, 5, 1, 10, 0, 2, tzinfo=UTC),
            finish_time=None,
            runner_id=55,
            runner_name="linux-abcde-runner-x1",
        ),
    )


def test_message_keys_match_case_insensitively_and_unknown_keys_are_ignored() -> None:
    body = {
        "MESSAGEID": 5,
        "MessageType": "RunnerScaleSetJobMessages",
        "Statistics": {"TOTALASSIGNEDJOBS": 9, "totalidlerunners": 2},
        "BODY": json.dumps([{"MESSAGETYPE": "JobCompleted", "Result": "canceled", "RUNNERID": 3}]),
        "extra": [1, 2, 3],
    }
    message = parse_message(dumps(body))
    assert message.message_id == 5
    assert message.statistics.total_assigned_jobs == 9
    assert message.statistics.total_idle_runners == 2
    assert message.statistics.total_busy_runners == 0
    (job,) = message.jobs
    assert (job.message_type, job.result, job.runner_id) == ("JobCompleted", "canceled", 3)


def test_later_key_wins_when_keys_differ_only_in_case() -> None:
    # Go's decoder assigns in document order; the last matching key is what sticks.
    message = parse_message(b'{"messageId":1,"MessageId":2,' + dumps(envelope())[1:])
    assert message.message_id == 42
    message = parse_message(dumps(envelope())[:-1] + b',"MESSAGEID":77}')
    assert message.message_id == 77


@pytest.mark.parametrize("body", ["", None])
def test_empty_or_null_body_means_no_jobs(body: str | None) -> None:
    assert parse_message(dumps(envelope(body=body))).jobs == ()


def test_missing_body_means_no_jobs() -> None:
    env = envelope()
    del env["body"]
    assert parse_message(dumps(env)).jobs == ()


def test_all_four_job_types_are_kept_in_order_and_unknown_types_skipped() -> None:
    jobs: list[dict[str, Any]] = [
        {"messageType": "JobAvailable", "runnerRequestId": 1, "acquireJobUrl": "https://x/a"},
        {"messageType": "SomethingNew", "runnerRequestId": 99},
        {"messageType": "JobAssigned", "runnerRequestId": 2},
        {"messageType": "JobStarted", "runnerRequestId": 3, "runnerName": "r"},
        {"messageType": "JobCompleted", "runnerRequestId": 4, "result": "succeeded"},
        {"runnerRequestId": 100},
    ]
    parsed = parse_message(dumps(envelope(jobs))).jobs
    assert [(j.message_type, j.runner_request_id) for j in parsed] == [
        ("JobAvailable", 1),
        ("JobAssigned", 2),
        ("JobStarted", 3),
        ("JobCompleted", 4),
    ]
    assert parsed[0].acquire_job_url == "https://x/a"
    assert parsed[3].result == "succeeded"


@pytest.mark.parametrize(
    "message_type", ["RunnerScaleSetJobMessage", "runnerscalesetjobmessages", ""]
)
def test_unsupported_envelope_message_type_is_an_error(message_type: str) -> None:
    with pytest.raises(WireError, match=r"^messageType: unsupported message type"):
        parse_message(dumps(envelope(messageType=message_type)))


def test_missing_statistics_on_a_message_is_an_error() -> None:
    env = envelope()
    del env["statistics"]
    with pytest.raises(WireError, match=r"^statistics: missing from the message$"):
        parse_message(dumps(env))
    with pytest.raises(WireError, match=r"^statistics: missing"):
        parse_message(dumps(envelope(statistics=None)))


def test_job_id_number_is_coerced_to_string() -> None:
    jobs = [{"messageType": "JobAssigned", "jobId": 123456789}]
    assert parse_message(dumps(envelope(jobs))).jobs[0].job_id == "123456789"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # .NET writes 7 fractional digits; Go allows up to 9. Python keeps microseconds.
        ("2026-05-01T10:00:00.1234567Z", datetime(2026, 5, 1, 10, 0, 0, 123456, tzinfo=UTC)),
        ("2026-05-01T10:00:00.123456789Z", datetime(2026, 5, 1, 10, 0, 0, 123456, tzinfo=UTC)),
        ("2026-05-01T10:00:00.1Z", datetime(2026, 5, 1, 10, 0, 0, 100000, tzinfo=UTC)),
        ("2026-05-01t10:00:00z", datetime(2026, 5, 1, 10, 0, 0, tzinfo=UTC)),
        ("2026-05-01T05:30:00-04:30", datetime(2026, 5, 1, 10, 0, 0, tzinfo=UTC)),
        ("0001-01-01T00:00:00Z", None),
        ("0001-01-01T00:00:00.0000000Z", None),
        ("", None),
        (None, None),
    ],
)
def test_timestamps(text: str | None, expected: datetime | None) -> None:
    jobs = [{"messageType": "JobCompleted", "finishTime": text}]
    parsed = parse_message(dumps(envelope(jobs))).jobs[0].finish_time
    assert parsed == expected
    if parsed is not None:
        assert parsed.utcoffset() is not None
        assert parsed.tzinfo == UTC


def test_missing_timestamp_is_none() -> None:
    job = parse_message(dumps(envelope([{"messageType": "JobAssigned"}]))).jobs[0]
    assert (job.queue_time, job.scale_set_assign_time, job.runner_assign_time) == (None,) * 3


@pytest.mark.parametrize(
    "text",
    [
        "2026-05-01",  # no time
        "2026-05-01T10:00:00",  # no zone
        "2026-05-01 10:00:00Z",  # space separator
        "20260501T100000Z",  # basic format
        "2026-05-01T10:00:00.1234567890Z",  # 10 fractional digits
        "2026-13-01T10:00:00Z",  # month 13
        "yesterday",
    ],
)
def test_bad_timestamps_name_the_field(text: str) -> None:
    jobs = [{"messageType": "JobStarted", "queueTime": "2026-05-01T10:00:00Z"}] * 2
    jobs = [*jobs, {"messageType": "JobStarted", "runnerAssignTime": text}]
    with pytest.raises(WireError, match=r"^body\[2\]\.runnerAssignTime: "):
        parse_message(dumps(envelope(jobs)))


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"messageId": "42"}, r"^messageId: expected an integer, got string$"),
        ({"messageId": 4.2}, r"^messageId: expected an integer, got number$"),
        ({"messageId": True}, r"^messageId: expected an integer, got bool$"),
        ({"body": ["not", "a", "string"]}, r"^body: expected a string, got array$"),
        ({"body": '{"an": "object"}'}, r"^body: expected a JSON array, got object$"),
        ({"body": "[{"}, r"^body: not valid JSON"),
        ({"body": '["x"]'}, r"^body\[0\]: expected a JSON object, got string$"),
        ({"statistics": [1]}, r"^statistics: expected a JSON object, got array$"),
        ({"statistics": {"totalAssignedJobs": "3"}}, r"^statistics\.totalAssignedJobs: expected"),
    ],
)
def test_wrong_types_give_one_line_naming_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(WireError, match=field) as info:
        parse_message(dumps(envelope(**overrides)))
    assert "\n" not in str(info.value)


def test_wrong_job_field_type_names_the_path() -> None:
    jobs = [{"messageType": "JobAssigned", "requestLabels": ["a", 1]}]
    with pytest.raises(WireError, match=r"^body\[0\]\.requestLabels\[1\]: expected a string"):
        parse_message(dumps(envelope(jobs)))


def test_message_body_must_be_an_object() -> None:
    with pytest.raises(WireError, match=r"^response: expected a JSON object, got array$"):
        parse_message(b"[]")


# --- sessions -----------------------------------------------------------------------------------


def test_session_parses_and_hides_the_queue_token_from_repr() -> None:
    session = parse_session(BOM + dumps(session_body()))
    assert session.session_id == SESSION_ID
    assert session.owner_name == "listener-pod"
    assert session.message_queue_url == "https://queue.example/_apis/q?sessionId=abc"
    assert session.message_queue_access_token == "queue-token-value"
    assert session.statistics == Statistics(1, 2, 3, 4, 5, 6, 7)
    assert session.scale_set is not None
    assert (session.scale_set.id, session.scale_set.name) == (7, "linux")
    assert session.scale_set.labels == ("self-hosted", "linux")
    assert "queue-token-value" not in repr(session)
    assert "queue-token-value" not in str(session)


def test_session_id_is_normalised() -> None:
    session = parse_session(dumps(session_body(sessionId=SESSION_ID.upper())))
    assert session.session_id == SESSION_ID


def test_session_without_scale_set_is_fine() -> None:
    body = session_body()
    del body["runnerScaleSet"]
    assert parse_session(dumps(body)).scale_set is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"sessionId": "00000000-0000-0000-0000-000000000000"}, r"^sessionId: .*nil session id"),
        ({"sessionId": None}, r"^sessionId: '' is not a UUID$"),
        ({"sessionId": "nope"}, r"^sessionId: 'nope' is not a UUID$"),
        ({"statistics": None}, r"^statistics: missing from the session$"),
        ({"messageQueueUrl": ""}, r"^messageQueueUrl: missing"),
        ({"messageQueueAccessToken": None}, r"^messageQueueAccessToken: missing"),
        ({"messageQueueAccessToken": 12345}, r"^messageQueueAccessToken: expected a string"),
    ],
)
def test_bad_sessions_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(WireError, match=message):
        parse_session(dumps(session_body(**overrides)))


def test_session_errors_never_echo_the_queue_token() -> None:
    with pytest.raises(WireError) as info:
        parse_session(dumps(session_body(messageQueueAccessToken=["secret-token-xyz"])))
    assert "secret-token-xyz" not in str(info.value)


# --- scale sets and acquirejobs -----------------------------------------------------------------


def test_scale_set_parses() -> None:
    body = {"id": 7, "name": "linux", "labels": [{"name": "a"}, {"name": "b"}], "runnerGroupId": 1}
    info = parse_scale_set(BOM + dumps(body))
    assert (info.id, info.name, info.labels) == (7, "linux", ("a", "b"))


def test_scale_set_labels_must_be_an_array() -> None:
    with pytest.raises(WireError, match=r"^labels: expected an array"):
        parse_scale_set(dumps({"id": 1, "labels": "x"}))


def test_acquired_jobs() -> None:
    assert parse_acquired_jobs(dumps({"count": 2, "value": [101, 102]})) == [101, 102]
    assert parse_acquired_jobs(dumps({"count": 0})) == []
    with pytest.raises(WireError, match=r"^value\[1\]: expected an integer"):
        parse_acquired_jobs(dumps({"value": [1, "2"]}))


def test_body_string_null_means_no_jobs() -> None:
    # Go decodes the JSON text null into a nil slice without error: a message with no jobs.
    message = parse_message(dumps(envelope(body="null")))
    assert message.jobs == ()
    assert message.statistics.total_assigned_jobs == 3
