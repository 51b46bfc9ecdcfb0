"""What warm capacity costs, on the generator's 2-day trace: OPT₀, the monitor's policy
replayed with fixed pools, with look-ahead, and with an arrival oracle (a pool that knows
how many jobs the next lead time brings: the ceiling of any arrival estimate), the
simulator's speed, and the curve figure.

    python -m tools.bench_whatif [--images docs/img] [--pools 0,10,20,40,80] [--seed 1]
        [--keep] [--pool-factory module:callable ...]

Prints JSON (the table of docs/whatif.md). With ``--images`` it also writes
``whatif-curve.png`` (p90 queue time against spare node-seconds, per label set; fixed pools
with and without look-ahead as two curves) and ``whatif.json`` there; ``--keep`` keeps the
points of that file's policies this run does not simulate (same seed), so adding a pool
factory's points does not re-run the fixed pools. matplotlib is a test dependency, so the
figure is drawn here and not by ``ghalistener whatif``, which prints JSON or a table.
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
from tools.whatif_synth import SynthSpec, generate
from whatif.delays import provisioning_delays
from whatif.optimum import by_label_set, intervals, optimum
from whatif.recommend import Point, Setting, fixed_pools
from whatif.simulate import SimConfig, simulate

LEAD = 60.0  # D: the goals are stated for 60 s
SPEC = SynthSpec(minutes=2 * 24 * 60, working_hours=True)
SEED = 1


class ArrivalOracle:
    """A warm pool that knows exactly how many jobs will be queued within the next lead
    time: the best any arrival estimate can do."""

    def __init__(self, arrivals: list[float], horizon: float) -> None:
        self._arrivals = sorted(arrivals)
        self._horizon = horizon

    def observe(self, now: float, queued_jobs: int, new_jobs: int) -> None:
        del now, queued_jobs, new_jobs

    def target(self, now: float) -> int:
        lo = bisect.bisect_right(self._arrivals, now)
        return bisect.bisect_right(self._arrivals, now + self._horizon) - lo


def _settings(pools: list[int], lookahead_pools: list[int], factories: list[str]) -> list[Setting]:
    settings = fixed_pools(pools) + fixed_pools(lookahead_pools, lookahead=LEAD)
    for spec in factories:
        module, _, attr = spec.partition(":")
        settings.append(Setting(name=spec, pool=getattr(importlib.import_module(module), attr)))
    return settings


def run(
    pools: list[int],
    lookahead_pools: list[int],
    factories: list[str],
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
        chosen = _settings(pools, lookahead_pools, factories)
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
        others = [p for p in data["curve"] if "proactive_capacity" not in p]
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
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--no-oracle", action="store_true", help="skip the arrival oracle")
    parser.add_argument("--keep", action="store_true", help="keep whatif.json's other points")
    args = parser.parse_args()
    pools = [int(x) for x in args.pools.split(",") if x]
    ahead = [int(x) for x in args.lookahead_pools.split(",") if x]
    result = run(pools, ahead, args.pool_factory, seed=args.seed, oracle=not args.no_oracle)
    if args.keep and args.images and (args.images / "whatif.json").exists():
        keep(result, json.loads((args.images / "whatif.json").read_text()))
    print(json.dumps(result, indent=2))
    if args.images:
        args.images.mkdir(parents=True, exist_ok=True)
        (args.images / "whatif.json").write_text(json.dumps(result, indent=2) + "\n")
        figure(result, args.images / "whatif-curve.png")


if __name__ == "__main__":
    main()
