"""Job traces (JSONL): round trip, and one-line errors naming the line and field."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from whatif.trace import TraceError, TraceJob, read_lines, to_json, write_lines

GOOD = (
    '{"job":"1","run":"9","labels":["linux-cpu"],"queued_at":"2026-11-20T09:00:00Z",'
    '"started_at":"2026-11-20T09:00:41Z","completed_at":"2026-11-20T09:07:02.5Z","runner":"r-1"}'
)


def test_a_line_is_read_with_its_times_and_wait() -> None:
    (job,) = read_lines([GOOD])
    assert job.labels == ("linux-cpu",)
    assert job.wait == 41.0
    assert job.duration == 381.5
    assert job.runner == "r-1"


def test_a_job_that_never_ran_is_kept() -> None:
    line = '{"job":"2","run":"9","labels":["b","a"],"queued_at":"2026-11-20T09:00:00+00:00"}'
    (job,) = read_lines([line])
    assert job.started_at is None
    assert job.duration is None
    assert job.wait is None
    assert job.label_set == "a,b"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{", "trace:1: not JSON"),
        ("[1]", "trace:1: expected a JSON object, got array"),
        (GOOD.replace('["linux-cpu"]', "[]"), "trace:1: field labels"),
        (GOOD.replace('"2026-11-20T09:00:00Z"', '"noon"'), "trace:1: field queued_at: not an RFC"),
        (
            GOOD.replace('"2026-11-20T09:00:00Z"', "17"),
            "field queued_at: expected an RFC 3339 time",
        ),
        (GOOD.replace('"2026-11-20T09:00:00Z"', '"2026-11-20T09:00:00"'), "field queued_at"),
        (GOOD.replace("09:00:41", "08:00:41"), "field started_at: before queued_at"),
        (GOOD.replace("09:07:02.5", "09:00:01"), "field completed_at"),
        (GOOD.replace('"job":"1"', '"job":true'), "field job: expected a string, got boolean"),
        (GOOD.replace("}", ',"run_attempt":0}'), "field run_attempt: expected a number >= 1"),
        (GOOD.replace("}", ',"run_attempt":"2"}'), "field run_attempt: expected a number"),
        (GOOD.replace("}", ',"workflow":["ci"]}'), "field workflow: expected a string, got array"),
        (GOOD.replace("}", ',"job_name":{}}'), "field job_name: expected a string, got object"),
    ],
)
def test_bad_lines_name_the_line_and_field(line: str, message: str) -> None:
    with pytest.raises(TraceError, match=r"^trace:1: ") as info:
        read_lines([line])
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_the_line_number_counts_blank_lines_and_duplicates_are_refused() -> None:
    with pytest.raises(TraceError, match=r"^jobs.jsonl:3: field job: '1' already on line 1$"):
        read_lines([GOOD, "", GOOD], name="jobs.jsonl")


times = st.integers(min_value=1_600_000_000_000, max_value=1_900_000_000_000).map(
    lambda ms: ms / 1000
)


@given(
    queued=times,
    wait=st.integers(min_value=0, max_value=10**7).map(lambda ms: ms / 1000),
    run=st.integers(min_value=0, max_value=10**7).map(lambda ms: ms / 1000),
    labels=st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=3, unique=True),
    workflow=st.text(max_size=12),
    job_name=st.text(max_size=12),
    attempt=st.integers(min_value=1, max_value=9),
)
def test_write_then_read_gives_the_same_job(
    queued: float,
    wait: float,
    run: float,
    labels: list[str],
    workflow: str,
    job_name: str,
    attempt: int,
) -> None:
    job = TraceJob(
        job="7",
        run="3",
        labels=tuple(sorted(labels)),
        queued_at=queued,
        started_at=round(queued + wait, 3),
        completed_at=round(queued + wait + run, 3),
        runner="x",
        workflow=workflow,
        job_name=job_name,
        run_attempt=attempt,
    )
    (back,) = read_lines(write_lines([job]))
    assert back == job
    assert to_json(back) == to_json(job)


def test_the_workflow_fields_are_read_and_old_lines_keep_their_defaults() -> None:
    staged = GOOD.replace(
        "}", ',"workflow":".github/workflows/ci.yml","job_name":"test (2/8)","run_attempt":2}'
    )
    (job,) = read_lines([staged])
    assert (job.workflow, job.job_name, job.run_attempt) == (
        ".github/workflows/ci.yml",
        "test (2/8)",
        2,
    )
    (old,) = read_lines([GOOD])
    assert (old.workflow, old.job_name, old.run_attempt) == ("", "", 1)
    # An old line written again is the same line: the new fields appear only when set.
    assert to_json(old) == GOOD.replace("09:07:02.5Z", "09:07:02.500Z")
