"""Actions-service wire models and their parsers (PURE: no I/O, no clock).

Responses are parsed here, at the boundary, into frozen dataclasses; nothing else in the
listener touches raw JSON. The parsers follow Go's ``encoding/json`` as the service's own
client uses it (docs/wire-protocol.md §3, §4):

- object keys match field names case-insensitively and unknown keys are ignored;
- ``null`` or a missing key gives the field's zero value;
- a value of the wrong JSON type is an error (a float is not an integer, a bool is not one);
- a message's ``body`` is a JSON *string* that holds an array, so it is decoded twice.

Where we are deliberately more tolerant than Go: an empty-string timestamp reads as "no time"
(Go rejects it) and a numeric ``jobId`` becomes a string (Go rejects it). Where we are
stricter: a session without a message-queue URL or token is refused up front instead of
failing on the first poll, and a message without ``statistics`` is an error (Go would
dereference nil).

Every failure is a :class:`WireError` whose one-line message names the offending field.
Values of secret fields never appear in messages.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from listener.gojson import Fields, fold_keys, type_name

MESSAGE_TYPE_JOB_MESSAGES = "RunnerScaleSetJobMessages"
"""The only envelope ``messageType`` the listener accepts."""

JOB_MESSAGE_TYPES = frozenset({"JobAvailable", "JobAssigned", "JobStarted", "JobCompleted"})
"""Job message types that are parsed; any other type inside ``body`` is skipped."""

_UTF8_BOM = b"\xef\xbb\xbf"

# RFC 3339 as Go's time.RFC3339Nano parser accepts it: fractional seconds of 1 to 9 digits and a
# mandatory zone. datetime.fromisoformat alone is far laxer (it takes dates without a time,
# basic format, a space separator), so the shape is checked first.
_RFC3339 = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[Tt](?P<time>\d{2}:\d{2}:\d{2})"
    r"(?:\.(?P<frac>\d{1,9}))?(?P<zone>[Zz]|[+-]\d{2}:\d{2})"
)


class WireError(ValueError):
    """A response body that does not have the shape the protocol defines."""


@dataclass(frozen=True)
class Statistics:
    """``RunnerScaleSetStatistic``: counters the service keeps for the scale set."""

    total_available_jobs: int
    total_acquired_jobs: int
    total_assigned_jobs: int
    total_running_jobs: int
    total_registered_runners: int
    total_busy_runners: int
    total_idle_runners: int


@dataclass(frozen=True)
class JobMessage:
    """One element of a message ``body``; one class for all four types.

    Fields a type does not carry keep their defaults (e.g. ``result`` outside JobCompleted).
    Timestamps are timezone-aware UTC datetimes, or ``None`` for Go's zero time.
    """

    message_type: str
    runner_request_id: int = 0
    repository_name: str = ""
    owner_name: str = ""
    job_id: str = ""
    job_workflow_ref: str = ""
    job_display_name: str = ""
    workflow_run_id: int = 0
    event_name: str = ""
    request_labels: tuple[str, ...] = ()
    queue_time: datetime | None = None
    scale_set_assign_time: datetime | None = None
    runner_assign_time: datetime | None = None
    finish_time: datetime | None = None
    runner_id: int = 0
    runner_name: str = ""
    result: str = ""
    acquire_job_url: str = ""


@dataclass(frozen=True)
class Message:
    """A 200 answer to the long poll."""

    message_id: int
    message_type: str
    statistics: Statistics
    jobs: tuple[JobMessage, ...]


@dataclass(frozen=True)
class ScaleSetInfo:
    """The parts of ``RunnerScaleSet`` the listener uses; ``labels`` are the label names."""

    id: int
    name: str
    labels: tuple[str, ...]
    runner_group_id: int = 0


@dataclass(frozen=True)
class Session:
    """``RunnerScaleSetSession``; the queue token is kept out of ``repr``."""

    session_id: str
    owner_name: str
    message_queue_url: str
    message_queue_access_token: str = field(repr=False)
    statistics: Statistics
    scale_set: ScaleSetInfo | None


# --- generic helpers -------------------------------------------------------------------------


def decode_json(body: bytes) -> Any:
    """Decode a response body as JSON, after dropping a leading UTF-8 byte-order mark.

    The Actions service is known to prefix bodies with a BOM (docs/wire-protocol.md §2).
    """
    return _decode(body, fold=False)


def _decode(body: bytes, *, fold: bool) -> Any:
    if body.startswith(_UTF8_BOM):
        body = body[len(_UTF8_BOM) :]
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireError(f"response body is not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        return json.loads(text, object_pairs_hook=fold_keys if fold else None)
    except json.JSONDecodeError as exc:
        raise WireError(
            f"response body is not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})"
        ) from None


class _Fields:
    """Case-insensitive view of one JSON object (decoded with folded keys), Go's zero values."""

    def __init__(self, obj: object, where: str) -> None:
        if not isinstance(obj, dict):
            raise WireError(f"{where or 'response'}: expected a JSON object, got {type_name(obj)}")
        self._where = where
        self._fields = Fields(obj)

    def path(self, key: str) -> str:
        return f"{self._where}.{key}" if self._where else key

    def raw(self, key: str) -> object:
        value: object = self._fields.get(key)
        return value

    def integer(self, key: str) -> int:
        value = self.raw(key)
        if value is None:
            return 0
        # bool is an int subclass in Python but never a number in JSON.
        if isinstance(value, bool) or not isinstance(value, int):
            raise WireError(f"{self.path(key)}: expected an integer, got {type_name(value)}")
        return value

    def string(self, key: str) -> str:
        value = self.raw(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            # Only the JSON type is reported, never the value: safe for secret fields too.
            raise WireError(f"{self.path(key)}: expected a string, got {type_name(value)}")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.raw(key)
        if value is None:
            return ()
        if not isinstance(value, list):
            raise WireError(
                f"{self.path(key)}: expected an array of strings, got {type_name(value)}"
            )
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise WireError(f"{self.path(key)}[{i}]: expected a string, got {type_name(item)}")
        return tuple(value)

    def time(self, key: str) -> datetime | None:
        value = self.raw(key)
        if value is None or value == "":
            return None  # "" is a decode error in Go; see the note above _job_id
        if not isinstance(value, str):
            raise WireError(f"{self.path(key)}: expected an RFC 3339 time, got {type_name(value)}")
        return _parse_time(value, self.path(key))

    def object(self, key: str) -> _Fields | None:
        value = self.raw(key)
        if value is None:
            return None
        return _Fields(value, self.path(key))


def _parse_time(value: str, where: str) -> datetime | None:
    match = _RFC3339.fullmatch(value)
    if match is None:
        raise WireError(f"{where}: {value[:40]!r} is not an RFC 3339 time")
    frac = (match["frac"] or "")[:6]  # Python keeps microseconds; Go's extra digits are dropped
    zone = "+00:00" if match["zone"] in ("Z", "z") else match["zone"]
    text = f"{match['date']}T{match['time']}{'.' + frac.ljust(6, '0') if frac else ''}{zone}"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise WireError(f"{where}: {value[:40]!r} is not a valid time: {exc}") from None
    # Go's zero time.Time marshals as 0001-01-01T00:00:00Z; it means "not set".
    if parsed.replace(tzinfo=None) == datetime(1, 1, 1) and parsed.utcoffset() == timedelta(0):
        return None
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise WireError(f"{where}: {value[:40]!r} is out of range") from None


# --- models ------------------------------------------------------------------------------------


def _statistics(fields: _Fields) -> Statistics:
    return Statistics(
        total_available_jobs=fields.integer("totalAvailableJobs"),
        total_acquired_jobs=fields.integer("totalAcquiredJobs"),
        total_assigned_jobs=fields.integer("totalAssignedJobs"),
        total_running_jobs=fields.integer("totalRunningJobs"),
        total_registered_runners=fields.integer("totalRegisteredRunners"),
        total_busy_runners=fields.integer("totalBusyRunners"),
        total_idle_runners=fields.integer("totalIdleRunners"),
    )


def _required_statistics(fields: _Fields, what: str) -> Statistics:
    stats = fields.object("statistics")
    if stats is None:
        raise WireError(f"{fields.path('statistics')}: missing from the {what}")
    return _statistics(stats)


def _scale_set(fields: _Fields) -> ScaleSetInfo:
    labels: list[str] = []
    raw_labels = fields.raw("labels")
    if raw_labels is not None:
        if not isinstance(raw_labels, list):
            raise WireError(
                f"{fields.path('labels')}: expected an array, got {type_name(raw_labels)}"
            )
        for i, item in enumerate(raw_labels):
            labels.append(_Fields(item, f"{fields.path('labels')}[{i}]").string("name"))
    return ScaleSetInfo(
        id=fields.integer("id"),
        name=fields.string("name"),
        labels=tuple(labels),
        runner_group_id=fields.integer("runnerGroupId"),
    )


# Wrongly typed job fields, decided: a numeric ``jobId`` and an empty-string timestamp are
# accepted (the message is handled and acked); ARC's decoder fails the whole message and exits
# without acking. Its way turns one odd message into a crash loop: the restarted listener
# starts again at lastMessageId 0, is handed the same unacked message, and exits again, while
# no job gets a runner. Both values have one obvious meaning (the same id; "not set"), so
# taking them costs nothing. Any other wrong type still fails the message, as in ARC.
def _job_id(fields: _Fields) -> str:
    value = fields.raw("jobId")
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return fields.string("jobId")


def _job(fields: _Fields, message_type: str) -> JobMessage:
    return JobMessage(
        message_type=message_type,
        runner_request_id=fields.integer("runnerRequestId"),
        repository_name=fields.string("repositoryName"),
        owner_name=fields.string("ownerName"),
        job_id=_job_id(fields),
        job_workflow_ref=fields.string("jobWorkflowRef"),
        job_display_name=fields.string("jobDisplayName"),
        workflow_run_id=fields.integer("workflowRunId"),
        event_name=fields.string("eventName"),
        request_labels=fields.strings("requestLabels"),
        queue_time=fields.time("queueTime"),
        scale_set_assign_time=fields.time("scaleSetAssignTime"),
        runner_assign_time=fields.time("runnerAssignTime"),
        finish_time=fields.time("finishTime"),
        runner_id=fields.integer("runnerId"),
        runner_name=fields.string("runnerName"),
        result=fields.string("result"),
        acquire_job_url=fields.string("acquireJobUrl"),
    )


def _jobs(body: str) -> tuple[JobMessage, ...]:
    if body == "":
        return ()
    try:
        items = json.loads(body.lstrip("\ufeff"), object_pairs_hook=fold_keys)
    except json.JSONDecodeError as exc:
        raise WireError(f"body: not valid JSON: {exc.msg} (column {exc.colno})") from None
    if items is None:
        return ()  # the JSON text null: Go decodes it into a nil slice, i.e. no jobs
    if not isinstance(items, list):
        raise WireError(f"body: expected a JSON array, got {type_name(items)}")
    jobs: list[JobMessage] = []
    for i, item in enumerate(items):
        fields = _Fields(item, f"body[{i}]")
        message_type = fields.string("messageType")
        if message_type in JOB_MESSAGE_TYPES:
            jobs.append(_job(fields, message_type))
        # Unknown job message types are skipped, as the Go listener does.
    return tuple(jobs)


# --- public parsers ----------------------------------------------------------------------------


def parse_message(body: bytes) -> Message:
    """Parse a 200 long-poll answer (docs/wire-protocol.md §4)."""
    fields = _Fields(_decode(body, fold=True), "")
    message_type = fields.string("messageType")
    if message_type != MESSAGE_TYPE_JOB_MESSAGES:
        raise WireError(f"messageType: unsupported message type {message_type[:80]!r}")
    statistics = _required_statistics(fields, "message")
    return Message(
        message_id=fields.integer("messageId"),
        message_type=message_type,
        statistics=statistics,
        jobs=_jobs(fields.string("body")),
    )


def parse_session(body: bytes, *, previous: Statistics | None = None) -> Session:
    """Parse a session create/refresh answer.

    ``previous`` is for a refresh: an answer without ``statistics`` keeps these. Only the
    initial session must carry statistics (they seed the first desired count); ARC's loop
    never reads them from a refreshed session, so a refresh without them is not an error.
    """
    fields = _Fields(_decode(body, fold=True), "")
    raw_id = fields.string("sessionId")
    try:
        session_uuid = uuid.UUID(raw_id)
    except ValueError:
        raise WireError(f"sessionId: {raw_id[:60]!r} is not a UUID") from None
    if session_uuid.int == 0:
        raise WireError("sessionId: the service returned the nil session id")
    if previous is not None and fields.object("statistics") is None:
        statistics = previous
    else:
        statistics = _required_statistics(fields, "session")
    queue_url = fields.string("messageQueueUrl")
    if not queue_url:
        raise WireError("messageQueueUrl: missing from the session")
    queue_token = fields.string("messageQueueAccessToken")
    if not queue_token:
        raise WireError("messageQueueAccessToken: missing from the session")
    scale_set = fields.object("runnerScaleSet")
    return Session(
        session_id=str(session_uuid),
        owner_name=fields.string("ownerName"),
        message_queue_url=queue_url,
        message_queue_access_token=queue_token,
        statistics=statistics,
        scale_set=None if scale_set is None else _scale_set(scale_set),
    )


def parse_scale_set(body: bytes) -> ScaleSetInfo:
    """Parse a ``RunnerScaleSet`` (GET scale set by id)."""
    return _scale_set(_Fields(_decode(body, fold=True), ""))


def parse_acquired_jobs(body: bytes) -> list[int]:
    """Parse an acquirejobs answer ``{"count": N, "value": [ids...]}`` into the acquired ids."""
    fields = _Fields(_decode(body, fold=True), "")
    value = fields.raw("value")
    if value is None:
        return []
    if not isinstance(value, list):
        raise WireError(f"value: expected an array of integers, got {type_name(value)}")
    ids: list[int] = []
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int):
            raise WireError(f"value[{i}]: expected an integer, got {type_name(item)}")
        ids.append(item)
    return ids
