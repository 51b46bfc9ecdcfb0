"""Job traces: what a scale set was asked to run, one JSON object per line (JSONL).

A trace is the input of every what-if computation and of the outcome benchmark. Each line is
one job::

    {"job": "17", "run": "5", "labels": ["linux-cpu"], "queued_at": "2026-11-20T09:00:00Z",
     "started_at": "2026-11-20T09:00:41Z", "completed_at": "2026-11-20T09:07:02Z",
     "runner": "cpu-abc12-runner-xyz"}

``run`` is the workflow run the job belongs to: jobs of one run arrive together (a batch),
and jobs of a run already under way that are not queued yet are what a look-ahead can see.
Three optional fields say where a job sits in its workflow, for a stage model
(``capacity.stages``): ``workflow`` (the workflow file's path, else its name), ``job_name``
(the job's name as GitHub shows it, a matrix suffix included) and ``run_attempt`` (1 for the
first attempt, 2 for a re-run, ...; 1 when absent). They are written only when set, so a
trace without them reads and writes as before.
``started_at`` and ``completed_at`` may be null for a job that never ran (cancelled while
queued); such a job still counts as an arrival. Times are RFC 3339 in UTC.

A bad line is an error naming the line number and the field; nothing is dropped silently.

PURE: no I/O, no clock. Reading and writing take and give text lines.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


class TraceError(ValueError):
    """A line of a trace that cannot be read; the message names the line and the field."""


@dataclass(frozen=True, kw_only=True)
class TraceJob:
    """One job of a trace. Times are epoch seconds."""

    job: str
    run: str
    labels: tuple[str, ...]
    queued_at: float
    started_at: float | None = None
    completed_at: float | None = None
    runner: str = ""
    workflow: str = ""  # the workflow's path (or name), "" when unknown
    job_name: str = ""
    run_attempt: int = 1

    @property
    def duration(self) -> float | None:
        """How long the job ran once it had a runner (None if it never ran)."""
        if self.started_at is None or self.completed_at is None:
            return None
        return self.completed_at - self.started_at

    @property
    def wait(self) -> float | None:
        """Queue time: queued until started (None if it never started)."""
        if self.started_at is None:
            return None
        return self.started_at - self.queued_at

    @property
    def label_set(self) -> str:
        """The labels as one key (sorted, comma-joined): what a scale set is chosen by."""
        return ",".join(self.labels)


def format_time(t: float) -> str:
    """Epoch seconds → RFC 3339 UTC, with milliseconds only when there are any."""
    # Whole milliseconds by integer arithmetic: a float's binary fraction must not turn
    # .123 into .122 on the way out.
    millis = round(t * 1000)
    stamp = datetime.fromtimestamp(millis // 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{millis % 1000:03d}Z" if millis % 1000 else f"{stamp}Z"


def parse_time(text: str) -> float:
    """RFC 3339 → epoch seconds; a time without an offset is refused (ambiguous)."""
    stamp = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if stamp.tzinfo is None:
        raise ValueError("no UTC offset")
    return round(stamp.timestamp(), 6)


def to_json(job: TraceJob) -> str:
    """One line of JSONL for ``job`` (no trailing newline)."""
    record: dict[str, Any] = {
        "job": job.job,
        "run": job.run,
        "labels": list(job.labels),
        "queued_at": format_time(job.queued_at),
        "started_at": None if job.started_at is None else format_time(job.started_at),
        "completed_at": None if job.completed_at is None else format_time(job.completed_at),
        "runner": job.runner,
    }
    if job.workflow:
        record["workflow"] = job.workflow
    if job.job_name:
        record["job_name"] = job.job_name
    if job.run_attempt != 1:
        record["run_attempt"] = job.run_attempt
    return json.dumps(record, separators=(",", ":"))


def write_lines(jobs: Iterable[TraceJob]) -> Iterator[str]:
    """The JSONL lines of ``jobs`` (each with a trailing newline)."""
    for job in jobs:
        yield to_json(job) + "\n"


def _text(record: dict[str, Any], key: str, where: str, *, required: bool = True) -> str:
    value = record.get(key)
    if value is None and not required:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TraceError(f"{where}: field {key}: expected a string, got {_kind(value)}")
    return str(value)


def _attempt(record: dict[str, Any], where: str) -> int:
    value = record.get("run_attempt", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TraceError(f"{where}: field run_attempt: expected a number >= 1, got {value!r}")
    return value


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array"}.get(
        type(value), "object"
    )


def _time(record: dict[str, Any], key: str, where: str, *, required: bool) -> float | None:
    value = record.get(key)
    if value is None:
        if required:
            raise TraceError(f"{where}: field {key}: missing")
        return None
    if not isinstance(value, str):
        raise TraceError(f"{where}: field {key}: expected an RFC 3339 time, got {_kind(value)}")
    try:
        return parse_time(value)
    except ValueError:
        raise TraceError(f"{where}: field {key}: not an RFC 3339 time: {value!r}") from None


def parse_line(line: str, where: str) -> TraceJob:
    """One JSONL line → a job; ``where`` (e.g. ``trace.jsonl:12``) starts every error."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{where}: not JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(record, dict):
        raise TraceError(f"{where}: expected a JSON object, got {_kind(record)}")
    labels = record.get("labels")
    if not isinstance(labels, list) or not labels or not all(isinstance(x, str) for x in labels):
        raise TraceError(f"{where}: field labels: expected a non-empty list of strings")
    queued = _time(record, "queued_at", where, required=True)
    assert queued is not None
    started = _time(record, "started_at", where, required=False)
    completed = _time(record, "completed_at", where, required=False)
    if started is not None and started < queued:
        raise TraceError(f"{where}: field started_at: before queued_at")
    if completed is not None and (started is None or completed < started):
        raise TraceError(f"{where}: field completed_at: before started_at or without it")
    return TraceJob(
        job=_text(record, "job", where),
        run=_text(record, "run", where),
        labels=tuple(sorted(labels)),
        queued_at=queued,
        started_at=started,
        completed_at=completed,
        runner=_text(record, "runner", where, required=False),
        workflow=_text(record, "workflow", where, required=False),
        job_name=_text(record, "job_name", where, required=False),
        run_attempt=_attempt(record, where),
    )


def read_lines(lines: Iterable[str], name: str = "trace") -> list[TraceJob]:
    """Every job of a JSONL trace, sorted by queue time (ties in file order); blank lines pass.

    The first bad line raises ``TraceError`` naming ``name:line``; a job id seen twice is an
    error too (two imports of overlapping windows concatenated would count jobs twice).
    """
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{name}:{number}"
        job = parse_line(line, where)
        if job.job in seen:
            raise TraceError(f"{where}: field job: {job.job!r} already on line {seen[job.job]}")
        seen[job.job] = number
        jobs.append(job)
    jobs.sort(key=lambda j: j.queued_at)  # stable: ties keep the file's order
    return jobs


def from_github(run: dict[str, Any], job: dict[str, Any]) -> TraceJob | str:
    """A job of GitHub's REST API (``GET …/actions/runs/{id}/jobs``) as a trace job, or the
    reason it is not one (a short phrase: the import counts jobs by reason).

    Only finished jobs are traced (a queued or running job has no end yet). A job that
    finished without a runner (cancelled while queued) is an arrival that never ran; a
    skipped job (its condition was false) never asked for a runner and is left out. Where the
    run and job say so, the workflow (the run's ``path``, else its ``name``), the job's
    ``name`` and the ``run_attempt`` are kept for the stage model."""
    status = job.get("status")
    if status != "completed":
        return f"not finished (status {status})"
    if job.get("conclusion") == "skipped":
        return "skipped (never asked for a runner)"
    job_id = job.get("id")
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        return "no id"
    labels = job.get("labels")
    if not isinstance(labels, list) or not labels or not all(isinstance(x, str) for x in labels):
        return "no labels"
    try:
        queued = parse_time(str(job.get("created_at")))
    except ValueError:
        return "no created_at"
    runner = job.get("runner_name")
    started: float | None = None
    completed: float | None = None
    if isinstance(runner, str) and runner:
        try:
            started = parse_time(str(job.get("started_at")))
            completed = parse_time(str(job.get("completed_at")))
        except ValueError:
            return "ran, but no started_at or completed_at"
        if started < queued or completed < started:
            return "times out of order"
    run_id = job.get("run_id", run.get("id"))
    workflow = run.get("path") or run.get("name") or job.get("workflow_name")
    attempt = job.get("run_attempt", run.get("run_attempt", 1))
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        attempt = 1  # GitHub always sends one; an odd value is not worth dropping the job
    name = job.get("name")
    return TraceJob(
        job=str(job_id),
        run=str(run_id),
        labels=tuple(sorted(labels)),
        queued_at=queued,
        started_at=started,
        completed_at=completed,
        runner=runner if isinstance(runner, str) else "",
        workflow=workflow if isinstance(workflow, str) else "",
        job_name=name if isinstance(name, str) else "",
        run_attempt=attempt,
    )
