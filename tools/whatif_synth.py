"""A seeded generator of job traces with the shape of real CI load.

What real CI queues looks like, and how it is modelled here:

* **Workflow runs arrive in bursts.** Runs arrive as a Poisson process whose rate switches
  between a quiet and a busy level (a two-state Markov-modulated Poisson process: the time
  spent in each state is exponential), optionally times a working-hours profile (weekdays
  09:00–18:00 at full rate, nights and weekends at a fraction), for multi-day traces.
* **Each run queues a batch of jobs at once**, of a heavy-tailed size: P(k) ∝ k^-s for
  k = 1..cap (s = 1.65, cap = 64: mean ≈ 4.9, about half the runs have one job and 1 in 17
  has 20 or more). Some runs have a second stage, queued when the first stage's longest job
  would end: jobs a look-ahead can see coming (their run is already under way).
* **Durations are log-normal** with a long tail (median and σ given; capped), optionally
  scaled down (``duration_scale``) so a benchmark on a real cluster ends in minutes; the
  scaling is part of the spec and printed with the results.
* **Two label sets** (e.g. a CPU and a GPU runner type); a run's jobs share one.

Synthetic jobs are written as if they started the moment they were queued (zero wait):
``started_at = queued_at`` and ``completed_at - started_at`` is the duration; a simulator or
benchmark replays arrivals and durations and measures its own waits.

Seeded: the same spec and seed give the same trace, byte for byte. Written as a trace file
(what ``ghalistener whatif`` reads; ``--family staged``: tools/whatif_staged.py)::

    python -m tools.whatif_synth [--family bursty|staged] --seed 1 --minutes 60 --out t.jsonl
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from whatif.trace import TraceJob, write_lines

DEFAULT_START = datetime(2026, 1, 5, 8, 0, tzinfo=UTC).timestamp()  # a Monday morning


@dataclass(frozen=True, kw_only=True)
class LabelSet:
    labels: tuple[str, ...]
    weight: float


@dataclass(frozen=True, kw_only=True)
class SynthSpec:
    """Every knob of the generator; defaults describe a mid-sized CI fleet."""

    minutes: float = 60.0  # how long runs keep arriving
    start: float = DEFAULT_START
    runs_per_minute_quiet: float = 0.6
    runs_per_minute_busy: float = 4.0
    mean_quiet_seconds: float = 600.0
    mean_busy_seconds: float = 240.0
    working_hours: bool = False  # multiply the rate by the weekday 09–18 UTC profile
    off_hours_factor: float = 0.15
    batch_exponent: float = 1.65
    batch_cap: int = 64
    second_stage_share: float = 0.3  # runs with a second stage of jobs
    duration_median_seconds: float = 360.0
    duration_sigma: float = 1.0
    duration_cap_seconds: float = 4 * 3600.0
    duration_scale: float = 1.0  # multiply every duration (benchmarks shrink real CI)
    label_sets: tuple[LabelSet, ...] = field(
        default_factory=lambda: (
            LabelSet(labels=("linux-cpu",), weight=0.7),
            LabelSet(labels=("linux-gpu",), weight=0.3),
        )
    )

    def __post_init__(self) -> None:
        positive = {
            "minutes": self.minutes,
            "runs_per_minute_busy": self.runs_per_minute_busy,
            "mean_quiet_seconds": self.mean_quiet_seconds,
            "mean_busy_seconds": self.mean_busy_seconds,
            "batch_exponent": self.batch_exponent,
            "duration_median_seconds": self.duration_median_seconds,
            "duration_cap_seconds": self.duration_cap_seconds,
            "duration_scale": self.duration_scale,
        }
        for name, value in positive.items():
            if not value > 0:
                raise ValueError(f"{name}: must be > 0, got {value}")
        if self.runs_per_minute_quiet < 0 or self.duration_sigma < 0:
            raise ValueError("runs_per_minute_quiet and duration_sigma must be >= 0")
        if self.batch_cap < 1:
            raise ValueError(f"batch_cap: must be >= 1, got {self.batch_cap}")
        if not 0 <= self.second_stage_share <= 1:
            raise ValueError(
                f"second_stage_share: must be in [0, 1], got {self.second_stage_share}"
            )
        if not 0 <= self.off_hours_factor <= 1:
            raise ValueError(f"off_hours_factor: must be in [0, 1], got {self.off_hours_factor}")
        if not self.label_sets or any(s.weight <= 0 for s in self.label_sets):
            raise ValueError("label_sets: at least one, each with a weight > 0")

    @property
    def mean_batch(self) -> float:
        weights = [math.pow(k, -self.batch_exponent) for k in range(1, self.batch_cap + 1)]
        return sum(k * w for k, w in enumerate(weights, start=1)) / sum(weights)

    def describe(self) -> dict[str, object]:
        """The spec as plain values, for the JSON next to any result made from it."""
        return {
            "minutes": self.minutes,
            "runs_per_minute": {
                "quiet": self.runs_per_minute_quiet,
                "busy": self.runs_per_minute_busy,
            },
            "mean_period_seconds": {
                "quiet": self.mean_quiet_seconds,
                "busy": self.mean_busy_seconds,
            },
            "working_hours": self.working_hours,
            "batch": {
                "exponent": self.batch_exponent,
                "cap": self.batch_cap,
                "mean": round(self.mean_batch, 2),
            },
            "second_stage_share": self.second_stage_share,
            "duration": {
                "median_seconds": self.duration_median_seconds,
                "sigma": self.duration_sigma,
                "cap_seconds": self.duration_cap_seconds,
                "scale": self.duration_scale,
            },
            "label_sets": {",".join(s.labels): s.weight for s in self.label_sets},
        }


def working_hours_factor(t: float, off_hours: float) -> float:
    """1 on weekdays 09:00–18:00 UTC, ``off_hours`` otherwise."""
    stamp = datetime.fromtimestamp(t, tz=UTC)
    if stamp.weekday() < 5 and 9 <= stamp.hour < 18:
        return 1.0
    return off_hours


class _Sampler:
    def __init__(self, spec: SynthSpec, rng: random.Random) -> None:
        self.spec = spec
        self.rng = rng
        weights = [math.pow(k, -spec.batch_exponent) for k in range(1, spec.batch_cap + 1)]
        total = sum(weights)
        self._batch_cdf: list[float] = []
        acc = 0.0
        for w in weights:
            acc += w / total
            self._batch_cdf.append(acc)

    def batch(self) -> int:
        u = self.rng.random()
        return min(bisect.bisect_left(self._batch_cdf, u) + 1, self.spec.batch_cap)

    def duration(self) -> float:
        spec = self.spec
        raw = spec.duration_median_seconds * math.exp(self.rng.gauss(0.0, spec.duration_sigma))
        return round(min(raw, spec.duration_cap_seconds) * spec.duration_scale, 3)

    def label_set(self) -> tuple[str, ...]:
        sets = self.spec.label_sets
        return self.rng.choices([s.labels for s in sets], weights=[s.weight for s in sets])[0]


def run_arrivals(spec: SynthSpec, rng: random.Random) -> list[float]:
    """Arrival times of workflow runs: a two-state modulated Poisson process, by thinning."""
    end = spec.start + spec.minutes * 60.0
    peak = max(spec.runs_per_minute_busy, spec.runs_per_minute_quiet) / 60.0
    busy = rng.random() < spec.mean_busy_seconds / (
        spec.mean_busy_seconds + spec.mean_quiet_seconds
    )
    switch = spec.start + rng.expovariate(
        1.0 / (spec.mean_busy_seconds if busy else spec.mean_quiet_seconds)
    )
    t = spec.start
    arrivals: list[float] = []
    while True:
        t += rng.expovariate(peak)
        while t >= switch:
            busy = not busy
            switch += rng.expovariate(
                1.0 / (spec.mean_busy_seconds if busy else spec.mean_quiet_seconds)
            )
        if t >= end:
            return arrivals
        rate = (spec.runs_per_minute_busy if busy else spec.runs_per_minute_quiet) / 60.0
        if spec.working_hours:
            rate *= working_hours_factor(t, spec.off_hours_factor)
        if rng.random() < rate / peak:
            arrivals.append(round(t, 3))


def generate(spec: SynthSpec, seed: int) -> list[TraceJob]:
    """The trace for ``spec`` and ``seed``, sorted by queue time."""
    rng = random.Random(seed)
    sample = _Sampler(spec, rng)
    jobs: list[TraceJob] = []
    for run_number, arrival in enumerate(run_arrivals(spec, rng), start=1):
        labels = sample.label_set()
        stage_at = arrival
        stages = 2 if rng.random() < spec.second_stage_share else 1
        for _ in range(stages):
            durations = [sample.duration() for _ in range(sample.batch())]
            for duration in durations:
                jobs.append(
                    TraceJob(
                        job=str(len(jobs) + 1),
                        run=str(run_number),
                        labels=labels,
                        queued_at=stage_at,
                        started_at=stage_at,
                        completed_at=round(stage_at + duration, 3),
                    )
                )
            stage_at = round(stage_at + max(durations), 3)
    jobs.sort(key=lambda j: (j.queued_at, int(j.job)))
    return jobs


def main(argv: Sequence[str] | None = None) -> int:
    """Write a seeded trace to ``--out`` (``-``: standard output) and its summary as JSON."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.whatif_synth", description="Write a seeded synthetic job trace."
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--family",
        choices=("bursty", "staged"),
        default="bursty",
        help="bursty batches (default), or staged runs: a build, then a fan-out of shards",
    )
    parser.add_argument("--minutes", type=float, default=60.0, help="how long runs arrive")
    parser.add_argument("--working-hours", action="store_true", help="weekday 09-18 UTC profile")
    parser.add_argument("--duration-scale", type=float, default=1.0, help="multiply durations")
    parser.add_argument(
        "--build-sigma-scale",
        type=float,
        default=1.0,
        help="staged: multiply each build's duration sigma (how predictable builds are)",
    )
    parser.add_argument("--out", default="-", help="the JSONL file ('-': standard output)")
    args = parser.parse_args(argv)
    spec: SynthSpec | StagedSpec
    if args.family == "staged":
        # Imported here: the staged family builds on this module's run arrivals.
        from tools.whatif_staged import StagedSpec, generate_staged

        spec = StagedSpec(
            minutes=args.minutes,
            working_hours=args.working_hours,
            duration_scale=args.duration_scale,
            build_sigma_scale=args.build_sigma_scale,
        )
        jobs = generate_staged(spec, args.seed)
    else:
        spec = SynthSpec(
            minutes=args.minutes,
            working_hours=args.working_hours,
            duration_scale=args.duration_scale,
        )
        jobs = generate(spec, args.seed)
    text = "".join(write_lines(jobs))
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text)
    summary = {"seed": args.seed, "jobs": len(jobs), "spec": spec.describe(), "out": args.out}
    print(json.dumps(summary, indent=2), file=sys.stderr if args.out == "-" else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
