"""The outcome benchmark's goal rows, seed by seed: each of our variants against the stock
variant it replaces, on the same seed (the same trace, shortage and clock).

    python -m tools.bench_goals OUTCOMES_JSON [OUTCOMES_JSON ...]

A median over seeds can hide that a variant wins big on two seeds and loses on three; a
platform team deciding whether to deploy wants to know in how many seeds it wins. The goals:

* **ours, demand only** against stock ``minRunners: 0``: no job failed by the prepare-job
  timeout, p90 wait ≤ 0.75 × stock's, node-seconds ≤ 1.05 × stock's;
* **ours, warm pool N** against stock ``minRunners: N`` and pause pods: a shorter p90 than
  both, at no more node-seconds than either;
* **every variant of ours** within 1.3 × the offline optimum's node-seconds.

The first two goals compare total node-seconds, as set. Total node-seconds flatter a variant
that fails jobs: a job the prepare-job timeout failed held its runner's node until then but
never ran its workflow pod, so its work was not done (a user re-runs it, and pays again).
Each of the two goals therefore also has a row that compares node-seconds **per succeeded
job** (total node-seconds / jobs that succeeded), the cost of the work actually done; those
rows are labelled so, and are not the goals as set.

The optimum of the third goal is a bound: every launch takes the shortest delay and no node
outlives its last job, so even stock's variants sit far above it. A labelled row beside it
prices each launch as the cluster charges it (the mean launch delay, plus Karpenter's
``consolidateAfter`` before a released node goes): what a listener with perfect foresight
and packing could hold on this cluster, the part of the gap that is the listener's.

For the ``staged`` family (tools/bench_staged.py), on the shards (the children, label
``linux-gpu``) and the GPU pool's node-seconds:

* **ours, predictive** against ours, reactive: the shards' p90 wait ≤ 0.3 × reactive's, at
  ≤ 1.15 × its GPU node-seconds;
* **ours, predictive** against stock ``minRunners: N`` and pause pods: a shorter shards' p90
  than both, at fewer GPU node-seconds than either.

Waits are ``wait_s`` (queue → workflow pod Running, or → the failure for a job the timeout
failed). Prints one markdown table per document (a trace family) and, per goal, the seeds
that meet it. Seeds that lack a variant a goal needs, or were recorded before failed jobs
counted in the waits, are left out of that goal.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Seed = Mapping[str, Any]


def _p90(seed: Seed, variant: str) -> float:
    return float(seed["variants"][variant]["wait_s"]["p90"])


def _node_s(seed: Seed, variant: str) -> float:
    return float(seed["variants"][variant]["node_seconds"]["total"])


def node_seconds_per_succeeded_job(figures: Mapping[str, Any]) -> float | None:
    """Total node-seconds over the jobs that succeeded: the cost of the work actually done.
    None when no job succeeded or a figure is missing."""
    total = (figures.get("node_seconds") or {}).get("total")
    done = figures.get("succeeded")
    if not isinstance(total, int | float) or not isinstance(done, int) or done <= 0:
        return None
    return float(total) / done


def _per_job(seed: Seed, variant: str) -> float:
    """Node-seconds per succeeded job; infinite when none succeeded (all the cost, no work)."""
    value = node_seconds_per_succeeded_job(seed["variants"][variant])
    return float("inf") if value is None else value


def _failed(seed: Seed, variant: str) -> int:
    return int(seed["variants"][variant]["failed_by_timeout"])


def _optimum(seed: Seed) -> float:
    return float(seed["reference"]["node_seconds"]["total"])


def _priced_optimum(seed: Seed) -> float:
    return float(seed["reference"]["priced"]["node_seconds"]["total"])


@dataclass(frozen=True)
class Goal:
    name: str
    needs: tuple[str, ...]
    # (the seed's figures as text, whether the goal is met)
    check: Callable[[Seed], tuple[str, bool]]
    staged: bool = False  # reads the staged family's figures (no optimum needed)
    priced: bool = False  # reads the optimum priced at the cluster's launches (newer runs)


# How a goal row shows the cost of ours against stock's: (ours, stock) → text.
CostText = Callable[[float, float], str]


def _total_text(ours: float, stock: float) -> str:
    return f"node-s ×{ours / stock:.2f}"


def _per_job_text(ours: float, stock: float) -> str:
    return f"node-s per succeeded job {ours:.0f} vs {stock:.0f} ×{ours / stock:.2f}"


def _demand_against(
    seed: Seed, cost: Callable[[Seed, str], float], text_of: CostText
) -> tuple[str, bool]:
    failed = _failed(seed, "ours_demand")
    p90 = _p90(seed, "ours_demand") / _p90(seed, "stock_min0")
    ours, stock = cost(seed, "ours_demand"), cost(seed, "stock_min0")
    text = f"failed {failed} (stock {_failed(seed, 'stock_min0')}), p90 ×{p90:.2f}, " + text_of(
        ours, stock
    )
    return text, failed == 0 and p90 <= 0.75 and ours / stock <= 1.05


def _demand(seed: Seed) -> tuple[str, bool]:
    return _demand_against(seed, _node_s, _total_text)


def _demand_per_job(seed: Seed) -> tuple[str, bool]:
    return _demand_against(seed, _per_job, _per_job_text)


def _warm_against(seed: Seed, cost: Callable[[Seed, str], float], label: str) -> tuple[str, bool]:
    ours_p90, ours_node = _p90(seed, "ours_warm"), cost(seed, "ours_warm")
    parts, met = [], True
    for stock, name in (("stock_minN", "minRunners N"), ("stock_overprov", "pause pods")):
        p90, node = ours_p90 / _p90(seed, stock), ours_node / cost(seed, stock)
        parts.append(f"vs {name}: p90 ×{p90:.2f}, {label} ×{node:.2f}")
        met = met and p90 < 1.0 and node <= 1.0
    return "; ".join(parts), met


def _warm(seed: Seed) -> tuple[str, bool]:
    return _warm_against(seed, _node_s, "node-s")


def _warm_per_job(seed: Seed) -> tuple[str, bool]:
    return _warm_against(seed, _per_job, "node-s per succeeded job")


def _within(seed: Seed, bound: Callable[[Seed], float]) -> tuple[str, bool]:
    ours = [v for v in ("ours_demand", "ours_warm") if v in seed["variants"]]
    ratios = {v: _node_s(seed, v) / bound(seed) for v in ours}
    text = ", ".join(f"{v.removeprefix('ours_')} ×{r:.2f}" for v, r in ratios.items())
    if "stock_min0" in seed["variants"]:  # what the variant replaced, for scale (not a goal)
        text += f" (stock minRunners 0 ×{_node_s(seed, 'stock_min0') / bound(seed):.2f})"
    return text, all(r <= 1.3 for r in ratios.values())


def _optimum_bound(seed: Seed) -> tuple[str, bool]:
    return _within(seed, _optimum)


def _priced_bound(seed: Seed) -> tuple[str, bool]:
    return _within(seed, _priced_optimum)


GOALS = (
    Goal(
        "demand only: 0 failed, p90 ≤ 0.75 × stock minRunners 0, node-s ≤ 1.05 ×",
        ("ours_demand", "stock_min0"),
        _demand,
    ),
    Goal(
        "warm pool N: shorter p90 than minRunners N and pause pods, node-s ≤ both",
        ("ours_warm", "stock_minN", "stock_overprov"),
        _warm,
    ),
    Goal(
        "(per succeeded job) demand only: 0 failed, p90 ≤ 0.75 ×, node-s per job ≤ 1.05 ×",
        ("ours_demand", "stock_min0"),
        _demand_per_job,
    ),
    Goal(
        "(per succeeded job) warm pool N: shorter p90 than both, node-s per job ≤ both",
        ("ours_warm", "stock_minN", "stock_overprov"),
        _warm_per_job,
    ),
    Goal("every variant of ours ≤ 1.3 × the optimum's node-s", ("ours_demand",), _optimum_bound),
    Goal(
        "(launches priced as the cluster charges them) every variant of ours ≤ 1.3 × that "
        "optimum's node-s",
        ("ours_demand",),
        _priced_bound,
        priced=True,
    ),
)


def _shard_p90(seed: Seed, variant: str) -> float:
    return float(seed["variants"][variant]["staged"]["shard_wait_s"]["p90"])


def _gpu_s(seed: Seed, variant: str) -> float:
    return float(seed["variants"][variant]["staged"]["shard_node_seconds"]["gpu"])


def _ratio(value: float, base: float) -> float:
    """``value / base``; 1 when both are 0 (no better, no worse), inf over a 0 base."""
    if base == 0:
        return 1.0 if value == 0 else float("inf")
    return value / base


def _predictive(seed: Seed) -> tuple[str, bool]:
    p90 = _ratio(_shard_p90(seed, "ours_predictive"), _shard_p90(seed, "ours_reactive"))
    gpu = _ratio(_gpu_s(seed, "ours_predictive"), _gpu_s(seed, "ours_reactive"))
    return f"shards' p90 ×{p90:.2f}, GPU node-s ×{gpu:.2f} of reactive", p90 <= 0.3 and gpu <= 1.15


def _predictive_vs_stock(seed: Seed) -> tuple[str, bool]:
    parts, met = [], True
    for stock, label in (("stock_minN", "minRunners N"), ("stock_overprov", "pause pods")):
        p90 = _ratio(_shard_p90(seed, "ours_predictive"), _shard_p90(seed, stock))
        gpu = _ratio(_gpu_s(seed, "ours_predictive"), _gpu_s(seed, stock))
        parts.append(f"vs {label}: shards' p90 ×{p90:.2f}, GPU node-s ×{gpu:.2f}")
        met = met and p90 < 1.0 and gpu < 1.0
    return "; ".join(parts), met


STAGED_GOALS = (
    Goal(
        "predictive: shards' p90 ≤ 0.3 × reactive's, GPU node-s ≤ 1.15 ×",
        ("ours_predictive", "ours_reactive"),
        _predictive,
        staged=True,
    ),
    Goal(
        "predictive: shorter shards' p90 than minRunners N and pause pods, fewer GPU node-s",
        ("ours_predictive", "stock_minN", "stock_overprov"),
        _predictive_vs_stock,
        staged=True,
    ),
)


def _usable(seed: Seed, goal: Goal) -> bool:
    """The seed has every variant the goal needs, with waits that count failed jobs (runs
    before 2026-11-27 recorded only the succeeded jobs' waits), and the optimum (the staged
    family: its own figures instead)."""
    variants = seed["variants"]
    if goal.staged:
        return all(v in variants and "staged" in variants[v] for v in goal.needs)
    if "reference" not in seed or (goal.priced and "priced" not in seed["reference"]):
        return False
    return all(v in variants and "wait_s" in variants[v] for v in goal.needs)


def goals_of(document: Mapping[str, Any]) -> tuple[Goal, ...]:
    """The goals of the document's trace family."""
    staged = document.get("config", {}).get("family") == "staged"
    return STAGED_GOALS if staged else GOALS


def goal_rows(document: Mapping[str, Any]) -> list[tuple[str, list[tuple[str, str, bool]], int]]:
    """Per goal: (name, [(seed, figures, met)], seeds meeting it)."""
    rows = []
    for goal in goals_of(document):
        per_seed = []
        for name, seed in sorted(document["seeds"].items(), key=lambda kv: int(kv[0])):
            if _usable(seed, goal):
                text, met = goal.check(seed)
                per_seed.append((name, text, met))
        rows.append((goal.name, per_seed, sum(met for _, _, met in per_seed)))
    return rows


def report(document: Mapping[str, Any]) -> str:
    family = document.get("config", {}).get("family", "capped")
    lines = [
        f"Goals, seed by seed ({family} family)",
        "",
        "| goal | seed | figures (ratio to the variant it replaces) | met |",
        "|---|---|---|---|",
    ]
    summary = []
    for name, per_seed, met in goal_rows(document):
        for seed, text, ok in per_seed:
            lines.append(f"| {name} | {seed} | {text} | {'yes' if ok else 'no'} |")
        summary.append(f"- {name}: {met} of {len(per_seed)} seeds")
    return "\n".join([*lines, "", *summary])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_goals")
    parser.add_argument("json", type=Path, nargs="+", help="outcomes.json of bench_outcomes")
    args = parser.parse_args(argv)
    for path in args.json:
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            print(f"bench_goals: {path}: {exc}", file=sys.stderr)
            return 2
        print(report(document))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
