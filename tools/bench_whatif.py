"""What warm capacity costs, on the generator's 2-day trace: OPT₀, the monitor's policy
replayed with fixed pools, with look-ahead, and with an arrival oracle (a pool that knows
how many jobs the next lead time brings: the ceiling of any arrival estimate), the
simulator's speed, and the curve figure.

    python -m tools.bench_whatif [--images docs/img] [--pools 0,10,20,40,80]
        [--adaptive 0.5,0.9,0.99 --adaptive-max 40] [--seed 1] [--keep]
        [--pool-factory module:callable ...]

Prints JSON (the table of docs/whatif.md). ``--adaptive`` adds
the product's adaptive pool per target_ready (and ``--adaptive-max``), built from the
capacity settings by the factory the listener uses (``listener.whatif.settings_pools``).
With ``--images`` it also writes ``whatif-curve.png`` (p90 queue time against spare
node-seconds, per label set; fixed pools and adaptive pools as two curves) and
``whatif.json`` there; ``--keep`` keeps the points of that file's policies this run does not
simulate (same seed), so adding adaptive points does not re-run the fixed pools. matplotlib
is a test dependency, so the figure is drawn here and not by ``ghalistener whatif``, which
prints JSON or a table.
"""

from __future__ import annotations

import argparse
import bisect
import functools
import importlib
import json
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from capacity.settings import load_capacity_settings, to_params
from capacity.whatif.optimum import by_label_set, intervals, optimum
from capacity.whatif.recommend import Point, Setting, fixed_pools
from capacity.whatif.simulate import SimConfig, simulate
from capacity.whatif.synth import SynthSpec, generate, provisioning_delays
from listener.whatif import settings_pools

LEAD = 60.0  # D: the goals are stated for 60 s
SPEC = SynthSpec(minutes=2 * 24 * 60, working_hours=True)
SEED = 1


class ArrivalOracle:
    """A warm pool that knows exactly how many jobs will be queued within the next lead
    time: the best any arrival estimate can do (an adaptive pool estimates this number)."""

    def __init__(self, arrivals: list[float], horizon: float) -> None:
        self._arrivals = sorted(arrivals)
        self._horizon = horizon

    def observe(self, now: float, queued_jobs: int, new_jobs: int) -> None:
        del now, queued_jobs, new_jobs

    def target(self, now: float) -> int:
        lo = bisect.bisect_right(self._arrivals, now)
        return bisect.bisect_right(self._arrivals, now + self._horizon) - lo


def _settings(
    pools: list[int],
    lookahead_pools: list[int],
    factories: list[str],
    adaptive: tuple[list[float], list[int]],
) -> list[Setting]:
    settings = fixed_pools(pools) + fixed_pools(lookahead_pools, lookahead=LEAD)
    if adaptive[0]:
        settings += settings_pools(load_capacity_settings({}), *adaptive)
    for spec in factories:
        module, _, attr = spec.partition(":")
        settings.append(Setting(name=spec, pool=getattr(importlib.import_module(module), attr)))
    return settings


def run(
    pools: list[int],
    lookahead_pools: list[int],
    factories: list[str],
    adaptive: tuple[list[float], list[int]] = ([], []),
    *,
    seed: int = SEED,
    oracle: bool = True,
) -> dict[str, Any]:
    started = time.process_time()
    jobs = generate(SPEC, seed)
    generated = time.process_time() - started
    delays = tuple(provisioning_delays(random.Random(seed), 10_000, 0.75 * LEAD, 1.25 * LEAD))
    params = to_params(load_capacity_settings({}), max_runners=1000)
    config = SimConfig(params=params, delays=delays)
    result: dict[str, Any] = {
        "trace": {"seed": seed, "jobs": len(jobs), "spec": SPEC.describe()},
        "generate_cpu_seconds": round(generated, 2),
        "lead_seconds": LEAD,
        "provisioning_delay_seconds": [0.75 * LEAD, 1.25 * LEAD],
        "label_sets": {},
    }
    for key, group in by_label_set(jobs).items():
        opt = optimum(intervals(group), LEAD)
        curve = []
        arrivals = [j.queued_at for j in group]
        oracle_setting = Setting(
            name=f"arrival oracle ({LEAD:g}s)",
            pool=functools.partial(ArrivalOracle, arrivals, LEAD),
        )
        chosen = _settings(pools, lookahead_pools, factories, adaptive)
        for setting in [*chosen, oracle_setting] if oracle else chosen:
            cpu, wall = time.process_time(), time.perf_counter()
            outcome = simulate(group, replace(config, lookahead=setting.lookahead), setting.pool())
            point = Point(setting, outcome).describe(opt.spare)
            point["cpu_seconds"] = round(time.process_time() - cpu, 2)
            point["wall_seconds"] = round(time.perf_counter() - wall, 2)
            curve.append(point)
            print(json.dumps({"label_set": key, **point}), flush=True)
        result["label_sets"][key] = {"opt0": opt.describe(), "curve": curve}
    return result


def keep(result: dict[str, Any], earlier: dict[str, Any]) -> None:
    """Add the points of ``earlier`` (same trace) whose policies ``result`` did not run."""
    if earlier.get("trace") != result["trace"]:
        raise SystemExit("--keep: the earlier whatif.json is of another trace")
    for key, data in result["label_sets"].items():
        ran = {p["policy"] for p in data["curve"]}
        old = earlier["label_sets"].get(key, {}).get("curve", [])
        data["curve"] = [p for p in old if p["policy"] not in ran] + data["curve"]


def assess(data: dict[str, Any], p90_goal: float = 10.0) -> dict[str, Any]:
    """The issue's goals for one label set: does some adaptive point dominate each fixed pool
    (no more spare, no worse p90), and how its cheapest point at p90 ≤ ``p90_goal`` compares
    with the cheapest fixed pool there (the goal: at most half)."""
    fixed = [p for p in data["curve"] if "proactive_capacity" in p and not p["lookahead_seconds"]]
    adaptive = [p for p in data["curve"] if "target_ready" in p]
    if not fixed or not adaptive:
        return {}

    def spare(p: dict[str, Any]) -> float:
        return float(p["spare_pct_of_busy"])

    def p90(p: dict[str, Any]) -> float:
        return float(p["queue_seconds"]["p90"])

    dominated = {}
    for f in fixed:
        by = [a["policy"] for a in adaptive if spare(a) <= spare(f) and p90(a) <= p90(f)]
        dominated[f["policy"]] = by[0] if by else None
    meet_fixed = [p for p in fixed if p90(p) <= p90_goal]
    meet_adaptive = [p for p in adaptive if p90(p) <= p90_goal]
    best_fixed = min(meet_fixed, key=spare) if meet_fixed else None
    best_adaptive = min(meet_adaptive, key=spare) if meet_adaptive else None
    ratio = None
    if best_fixed is not None and best_adaptive is not None and spare(best_fixed):
        ratio = round(spare(best_adaptive) / spare(best_fixed), 2)
    return {
        "fixed_dominated_by": dominated,
        "pareto_dominates_every_fixed_pool": all(v is not None for v in dominated.values()),
        f"cheapest_fixed_at_p90_le_{p90_goal:g}s": best_fixed and best_fixed["policy"],
        f"cheapest_adaptive_at_p90_le_{p90_goal:g}s": best_adaptive and best_adaptive["policy"],
        "adaptive_over_fixed_spare_at_goal": ratio,
        "goal_half_met": ratio is not None and ratio <= 0.5,
    }


def figure(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = result["label_sets"]
    fig, axes = plt.subplots(1, len(sets), figsize=(6 * len(sets), 4.5), squeeze=False)
    for ax, (key, data) in zip(axes[0], sets.items(), strict=True):
        for kind, marker in (("plain", "o-"), ("lookahead", "s--")):
            points = [
                p for p in data["curve"] if (p["lookahead_seconds"] > 0) == (kind == "lookahead")
            ]
            points = [p for p in points if "proactive_capacity" in p]
            if kind == "plain":
                adaptive = sorted(
                    (p for p in data["curve"] if "target_ready" in p),
                    key=lambda p: (p["max"], p["target_ready"]),
                )
                for ceiling in sorted({p["max"] for p in adaptive}):
                    line = [p for p in adaptive if p["max"] == ceiling]
                    ax.plot(
                        [p["spare_pct_of_busy"] for p in line],
                        [p["queue_seconds"]["p90"] for p in line],
                        "^-",
                        label=f"adaptive, max {ceiling} (target_ready)",
                    )
                    for p in line:
                        ax.annotate(
                            f"{p['target_ready']:g}",
                            (p["spare_pct_of_busy"], p["queue_seconds"]["p90"]),
                            textcoords="offset points",
                            xytext=(4, -10),
                            fontsize=7,
                        )
            if not points:
                continue
            xs = [p["spare_pct_of_busy"] for p in points]
            ys = [p["queue_seconds"]["p90"] for p in points]
            label = "fixed pool B" if kind == "plain" else f"B + look-ahead {LEAD:g}s"
            ax.plot(xs, ys, marker, label=label)
            for p, x, y in zip(points, xs, ys, strict=True):
                ax.annotate(
                    str(p["proactive_capacity"]),
                    (x, y),
                    textcoords="offset points",
                    xytext=(4, 4),
                    fontsize=8,
                )
        others = [
            p for p in data["curve"] if "proactive_capacity" not in p and "target_ready" not in p
        ]
        for p in others:
            ax.plot([p["spare_pct_of_busy"]], [p["queue_seconds"]["p90"]], "D", label=p["policy"])
        opt = data["opt0"]["spare_pct_of_busy"]
        ax.plot([opt], [0], "k*", markersize=12, label=f"OPT₀ ({opt:.1f} %, no wait)")
        ax.set_title(f"{key}: {data['opt0']['jobs']} jobs, D = {LEAD:g} s")
        ax.set_xlabel("spare node-seconds, % of busy")
        ax.set_ylabel("p90 queue time, s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=Path, help="write whatif-curve.png and whatif.json here")
    parser.add_argument("--pools", default="0,10,20,40,80")
    parser.add_argument("--lookahead-pools", default="0,20")
    parser.add_argument("--pool-factory", action="append", default=[])
    parser.add_argument("--adaptive", default="", help="target_ready values: 0.5,0.9,0.99")
    parser.add_argument("--adaptive-max", default="", help="warm_pool.max values (default 10)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--no-oracle", action="store_true", help="skip the arrival oracle")
    parser.add_argument("--keep", action="store_true", help="keep whatif.json's other points")
    args = parser.parse_args()
    pools = [int(x) for x in args.pools.split(",") if x]
    ahead = [int(x) for x in args.lookahead_pools.split(",") if x]
    adaptive = (
        [float(x) for x in args.adaptive.split(",") if x],
        [int(x) for x in args.adaptive_max.split(",") if x],
    )
    result = run(
        pools, ahead, args.pool_factory, adaptive, seed=args.seed, oracle=not args.no_oracle
    )
    if args.keep and args.images and (args.images / "whatif.json").exists():
        keep(result, json.loads((args.images / "whatif.json").read_text()))
    for data in result["label_sets"].values():
        data["goals"] = assess(data)
    print(json.dumps(result, indent=2))
    if args.images:
        args.images.mkdir(parents=True, exist_ok=True)
        (args.images / "whatif.json").write_text(json.dumps(result, indent=2) + "\n")
        figure(result, args.images / "whatif-curve.png")


if __name__ == "__main__":
    main()
