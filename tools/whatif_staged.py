"""A seeded generator of *staged* CI traces: a build, then a fan-out of test shards.

Large projects' pull-request CI is staged. A run's build job (label set A) runs for minutes
to tens of minutes; when it succeeds, the run fans out into K test shards on label set B
(often GPU nodes with slow launches), all queued within seconds of the build's end; some
workflows add a third stage (a report job) once the last shard ends. The shards are
announced a build-duration ahead, which is what a stage model (``capacity.stages``) learns
and a predictive pool uses. Each workflow has its own shape:

* the build's duration is log-normal (median, σ) per workflow;
* K is drawn from the workflow's own distribution (e.g. 4, 6, 8 or 12 shards);
* each shard is queued 1..``fanout_spread`` seconds after the build ends (GitHub queues a
  stage's jobs one by one), and runs for a log-normal duration;
* a share of runs has a third stage on the build's label set.

Noise, as real CI has it: a cancelled run (its build cut short, nothing follows), a failed
build that fans out nothing, and re-runs: a failed run run again (``run_attempt`` 2, same run
id) a few minutes later, which then goes as a first attempt would.

Jobs carry ``workflow`` (the file's path), ``job_name`` (``build``, ``test (i/K)``,
``report``) and ``run_attempt``. As with ``synth``, jobs are written as if they started the
moment they were queued; runs arrive as ``synth``'s modulated Poisson process.

Seeded: the same spec and seed give the same trace, byte for byte.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from tools.whatif_synth import DEFAULT_START, SynthSpec, run_arrivals
from whatif.trace import TraceJob


@dataclass(frozen=True, kw_only=True)
class StagedWorkflow:
    """One workflow's shape (seconds)."""

    path: str
    weight: float
    build_labels: tuple[str, ...] = ("linux-cpu",)
    build_median: float = 1200.0
    build_sigma: float = 0.2
    fail_share: float = 0.08  # builds that fail and fan out nothing
    cancel_share: float = 0.05  # runs cancelled during the build
    shard_labels: tuple[str, ...] = ("linux-gpu",)
    shards: tuple[tuple[int, float], ...] = ((4, 0.3), (6, 0.3), (8, 0.25), (12, 0.15))
    shard_median: float = 900.0
    shard_sigma: float = 0.35
    fanout_spread: float = 8.0  # shards queued 1..this many seconds after the build ends
    third_stage_share: float = 0.3  # runs with a report job after the last shard

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError("path: must not be empty")
        for name in ("weight", "build_median", "shard_median", "fanout_spread"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{self.path}: {name}: must be > 0, got {getattr(self, name)}")
        for name in ("fail_share", "cancel_share", "third_stage_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{self.path}: {name}: must be in [0, 1]")
        if self.fail_share + self.cancel_share > 1:
            raise ValueError(f"{self.path}: fail_share + cancel_share: must be <= 1")
        if any(k < 0 or w <= 0 for k, w in self.shards) or not self.shards:
            raise ValueError(f"{self.path}: shards: (count >= 0, weight > 0) pairs, at least one")

    @property
    def mean_shards(self) -> float:
        total = sum(w for _, w in self.shards)
        return sum(k * w for k, w in self.shards) / total


def default_workflows() -> tuple[StagedWorkflow, ...]:
    """Four shapes: a PR pipeline and a longer trunk one fanning out onto GPU shards, a quick
    lint-and-unit run fanning out two or three CPU shards, and a one-job docs build."""
    return (
        StagedWorkflow(path=".github/workflows/pull.yml", weight=0.5),
        StagedWorkflow(
            path=".github/workflows/trunk.yml",
            weight=0.15,
            build_median=2400.0,
            build_sigma=0.15,
            shards=((8, 0.5), (10, 0.3), (12, 0.2)),
            shard_median=1500.0,
            shard_sigma=0.3,
            third_stage_share=0.5,
        ),
        StagedWorkflow(
            path=".github/workflows/lint.yml",
            weight=0.25,
            build_median=300.0,
            build_sigma=0.4,
            shard_labels=("linux-cpu",),
            shards=((2, 0.6), (3, 0.4)),
            shard_median=400.0,
            third_stage_share=0.0,
        ),
        StagedWorkflow(
            path=".github/workflows/docs.yml",
            weight=0.1,
            build_median=180.0,
            build_sigma=0.3,
            shards=((0, 1.0),),
            third_stage_share=0.0,
        ),
    )


@dataclass(frozen=True, kw_only=True)
class StagedSpec:
    """The staged family's knobs; runs arrive as in ``SynthSpec`` (quiet and busy rates)."""

    minutes: float = 240.0
    start: float = DEFAULT_START
    runs_per_minute_quiet: float = 0.2
    runs_per_minute_busy: float = 0.8
    working_hours: bool = False
    rerun_share: float = 0.5  # failed runs run again (run_attempt 2)
    rerun_after: tuple[float, float] = (120.0, 900.0)  # seconds after the failure
    duration_scale: float = 1.0
    build_sigma_scale: float = 1.0  # multiply every build's σ: how predictable builds are
    workflows: tuple[StagedWorkflow, ...] = field(default_factory=default_workflows)

    def __post_init__(self) -> None:
        if not self.workflows:
            raise ValueError("workflows: at least one")
        if not 0 <= self.rerun_share <= 1:
            raise ValueError(f"rerun_share: must be in [0, 1], got {self.rerun_share}")
        low, high = self.rerun_after
        if not 0 <= low <= high:
            raise ValueError(f"rerun_after: need 0 <= low <= high, got {low}..{high}")
        if not self.duration_scale > 0:
            raise ValueError(f"duration_scale: must be > 0, got {self.duration_scale}")
        if self.build_sigma_scale < 0:
            raise ValueError(f"build_sigma_scale: must be >= 0, got {self.build_sigma_scale}")
        self.arrivals()  # the arrival knobs are checked where they are defined

    def arrivals(self) -> SynthSpec:
        return SynthSpec(
            minutes=self.minutes,
            start=self.start,
            runs_per_minute_quiet=self.runs_per_minute_quiet,
            runs_per_minute_busy=self.runs_per_minute_busy,
            working_hours=self.working_hours,
        )

    def describe(self) -> dict[str, object]:
        """The spec as plain values, for the JSON next to any result made from it."""
        return {
            "family": "staged",
            "minutes": self.minutes,
            "runs_per_minute": {
                "quiet": self.runs_per_minute_quiet,
                "busy": self.runs_per_minute_busy,
            },
            "working_hours": self.working_hours,
            "rerun_share": self.rerun_share,
            "duration_scale": self.duration_scale,
            "build_sigma_scale": self.build_sigma_scale,
            "workflows": {
                w.path: {
                    "weight": w.weight,
                    "build": [",".join(w.build_labels), w.build_median, w.build_sigma],
                    "shards": [",".join(w.shard_labels), round(w.mean_shards, 2), w.shard_median],
                    "fail_cancel": [w.fail_share, w.cancel_share],
                    "third_stage_share": w.third_stage_share,
                }
                for w in self.workflows
            },
        }


class _Builder:
    """Appends the jobs of one trace, numbering them in order."""

    def __init__(self, spec: StagedSpec, rng: random.Random) -> None:
        self.spec = spec
        self.rng = rng
        self.jobs: list[TraceJob] = []

    def duration(self, median: float, sigma: float) -> float:
        return round(median * math.exp(self.rng.gauss(0.0, sigma)) * self.spec.duration_scale, 3)

    def add(
        self,
        run: str,
        flow: StagedWorkflow,
        name: str,
        labels: tuple[str, ...],
        at: float,
        took: float,
        attempt: int,
    ) -> float:
        """A job queued (and started) at ``at`` that runs ``took`` seconds; returns its end."""
        end = round(at + took, 3)
        self.jobs.append(
            TraceJob(
                job=str(len(self.jobs) + 1),
                run=run,
                labels=labels,
                queued_at=round(at, 3),
                started_at=round(at, 3),
                completed_at=end,
                workflow=flow.path,
                job_name=name,
                run_attempt=attempt,
            )
        )
        return end

    def attempt(self, run: str, flow: StagedWorkflow, at: float, attempt: int) -> None:
        rng = self.rng
        build = self.duration(flow.build_median, flow.build_sigma * self.spec.build_sigma_scale)
        fate = rng.random()
        if fate < flow.cancel_share:  # cancelled part-way: nothing follows
            self.add(
                run, flow, "build", flow.build_labels, at, build * rng.uniform(0.1, 0.9), attempt
            )
            return
        if fate < flow.cancel_share + flow.fail_share:  # failed: no fan-out, maybe a re-run
            end = self.add(
                run, flow, "build", flow.build_labels, at, build * rng.uniform(0.3, 1.0), attempt
            )
            if attempt == 1 and rng.random() < self.spec.rerun_share:
                self.attempt(run, flow, end + rng.uniform(*self.spec.rerun_after), attempt + 1)
            return
        end = self.add(run, flow, "build", flow.build_labels, at, build, attempt)
        counts = [k for k, _ in flow.shards]
        k = rng.choices(counts, weights=[w for _, w in flow.shards])[0]
        last = end
        for i in range(1, k + 1):
            queued = end + rng.uniform(1.0, flow.fanout_spread)
            took = self.duration(flow.shard_median, flow.shard_sigma)
            last = max(
                last,
                self.add(run, flow, f"test ({i}/{k})", flow.shard_labels, queued, took, attempt),
            )
        if k and rng.random() < flow.third_stage_share:
            report = self.duration(120.0, 0.3)
            self.add(
                run,
                flow,
                "report",
                flow.build_labels,
                last + rng.uniform(1.0, 5.0),
                report,
                attempt,
            )


def generate_staged(spec: StagedSpec, seed: int) -> list[TraceJob]:
    """The staged trace for ``spec`` and ``seed``, sorted by queue time."""
    rng = random.Random(seed)
    builder = _Builder(spec, rng)
    weights = [w.weight for w in spec.workflows]
    for number, arrival in enumerate(run_arrivals(spec.arrivals(), rng), start=1):
        flow = rng.choices(spec.workflows, weights=weights)[0]
        builder.attempt(str(number), flow, arrival, 1)
    jobs = builder.jobs
    jobs.sort(key=lambda j: (j.queued_at, int(j.job)))
    return jobs
