"""The seeded trace generator: deterministic, and shaped as its docstring says."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import pytest

from tools.whatif_synth import (
    SynthSpec,
    generate,
    main,
    run_arrivals,
    working_hours_factor,
)
from whatif.trace import TraceJob, read_lines, write_lines


def test_same_seed_same_trace_other_seed_other_trace() -> None:
    spec = SynthSpec(minutes=30)
    first = "".join(write_lines(generate(spec, 3)))
    assert first == "".join(write_lines(generate(spec, 3)))
    assert first != "".join(write_lines(generate(spec, 4)))
    assert read_lines(first.splitlines()) == generate(spec, 3)


def test_batches_are_heavy_tailed_with_a_mean_near_five() -> None:
    spec = SynthSpec(minutes=24 * 60, second_stage_share=0.0)
    jobs = generate(spec, 1)
    sizes = [sum(1 for _ in group) for group in _runs(jobs).values()]
    assert 4.0 < statistics.mean(sizes) < 6.0
    assert 4.5 < spec.mean_batch < 5.2
    assert max(sizes) >= 20  # the tail exists
    assert sizes.count(1) / len(sizes) > 0.35  # and so do the many single-job runs


def test_durations_are_log_normal_around_the_median_and_scaled() -> None:
    spec = SynthSpec(minutes=24 * 60, duration_scale=0.1)
    durations = [j.duration for j in generate(spec, 2) if j.duration is not None]
    assert 30 < statistics.median(durations) < 42  # 360 s × 0.1
    assert max(durations) > 5 * statistics.median(durations)  # long tail
    assert max(durations) <= spec.duration_cap_seconds * 0.1


def test_busy_periods_raise_the_arrival_rate() -> None:
    quiet = SynthSpec(minutes=600, runs_per_minute_busy=0.6, runs_per_minute_quiet=0.6)
    bursty = SynthSpec(minutes=600, runs_per_minute_busy=6.0, runs_per_minute_quiet=0.6)
    rng = random.Random(5)
    assert len(run_arrivals(bursty, rng)) > 1.5 * len(run_arrivals(quiet, random.Random(5)))


def test_second_stages_queue_when_the_first_stage_ends() -> None:
    jobs = generate(SynthSpec(minutes=120, second_stage_share=1.0), 7)
    for group in _runs(jobs).values():
        first = min(j.queued_at for j in group)
        later = [j for j in group if j.queued_at > first]
        assert later, "every run has a second stage"
        first_stage_end = max(j.completed_at or 0 for j in group if j.queued_at == first)
        assert all(j.queued_at == pytest.approx(first_stage_end) for j in later)


def test_working_hours_profile() -> None:
    monday_10 = 1767607200.0  # 2026-01-05T10:00Z
    assert working_hours_factor(monday_10, 0.2) == 1.0
    assert working_hours_factor(monday_10 + 12 * 3600, 0.2) == 0.2
    assert working_hours_factor(monday_10 + 5 * 86400, 0.2) == 0.2  # Saturday


def test_bad_specs_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"^minutes: must be > 0"):
        SynthSpec(minutes=0)
    with pytest.raises(ValueError, match=r"^second_stage_share"):
        SynthSpec(second_stage_share=2)


def _runs(jobs: list[TraceJob]) -> dict[str, list[TraceJob]]:
    runs: dict[str, list[TraceJob]] = {}
    for job in jobs:
        runs.setdefault(job.run, []).append(job)
    return runs


def test_the_command_writes_a_seeded_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.jsonl"
    assert main(["--seed", "4", "--minutes", "40", "--out", str(trace)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["jobs"] == len(trace.read_text().splitlines()) > 20
    again = tmp_path / "again.jsonl"
    main(["--seed", "4", "--minutes", "40", "--out", str(again)])
    assert again.read_bytes() == trace.read_bytes()


def test_the_command_writes_the_staged_family(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "staged.jsonl"
    argv = ["--family", "staged", "--seed", "2", "--minutes", "60", "--out", str(path)]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["spec"]["family"] == "staged"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert summary["jobs"] == len(lines) > 20
    names = {line["job_name"].split(" ")[0] for line in lines}
    assert {"build", "test"} <= names
    assert all(line["workflow"].startswith(".github/workflows/") for line in lines)
