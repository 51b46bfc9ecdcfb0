"""The staged family's curve: the shards' p90 wait against the GPU pool's node-seconds, for
every policy `ghalistener whatif simulate` replays (reactive, fixed pools, the predictive
pool at three horizons) and OPT₀, on the generator's staged traces.

    python -m tools.bench_whatif_staged [--seeds 1 2 3 4 5] [--images docs/img]

Runs the commands docs/whatif.md ("Staged CI") lists, through their own entry points:
per seed a 4-hour staged trace and a training trace of seed 1000 + seed, the GPU label set
(`linux-gpu`), launches uniform in 120–240 s; with the builds as generated and with their
spread × 0.25. Prints JSON: per build spread, policy and seed the p90 and node-seconds, and
per policy the mean over seeds of both as ratios to reactive on the same seed. With
``--images`` it writes ``whatif-staged-curve.png`` (those means, one curve per build spread)
and ``whatif-staged.json`` there. matplotlib is a test dependency, hence here and not in
`ghalistener whatif`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools import whatif_synth
from whatif import cli

LABEL_SET = "linux-gpu"
# One launch of a GPU-like node: the lead (create to Running) and its jitter (±1/3, so
# 120–240 s), as docs/whatif.md measured.
SIM = ["--label-set", LABEL_SET, "--lead", "180", "--lead-jitter", "0.3333333"]
SPREADS = {"as generated": 1.0, "σ × 0.25": 0.25}
REACTIVE = "reactive"
OPT0 = "OPT₀"


def _cli(argv: Sequence[str]) -> Any:
    """One `ghalistener whatif` command, its JSON output parsed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(list(argv))
    if code != 0:
        raise RuntimeError(f"ghalistener whatif {' '.join(argv)}: exit {code}")
    return json.loads(out.getvalue())


def _synth(seed: int, sigma: float, path: Path) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        whatif_synth.main(
            [
                "--family",
                "staged",
                "--seed",
                str(seed),
                "--minutes",
                "240",
                "--build-sigma-scale",
                f"{sigma:g}",
                "--out",
                str(path),
            ]
        )


def seed_points(seed: int, sigma: float, work: Path) -> dict[str, dict[str, float]]:
    """Per policy: the shards' p90 wait (s) and the GPU node-seconds, on one seed."""
    trace, train = work / f"t{seed}.jsonl", work / f"train{seed}.jsonl"
    _synth(seed, sigma, trace)
    _synth(1000 + seed, sigma, train)
    base = [str(trace), *SIM, "--predictive-train", str(train)]
    runs = [
        ["--pools", "0,4,8", "--predictive"],
        ["--pools", "0", "--predictive", "--predictive-horizon", "240"],
        ["--pools", "0", "--predictive", "--predictive-horizon", "360"],
    ]
    points: dict[str, dict[str, float]] = {}
    for extra in runs:
        found = _cli(["simulate", *base, *extra])["label_sets"][LABEL_SET]
        opt = found["opt0"]
        points[OPT0] = {
            "p90": 0.0,
            "node_seconds": opt["busy_node_seconds"] + opt["spare_node_seconds"],
        }
        for point in found["curve"]:
            points[point["policy"]] = {
                "p90": point["queue_seconds"]["p90"],
                "node_seconds": point["node_seconds"],
            }
    return points


def summarize(per_seed: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per policy: the mean over seeds of p90 and node-seconds, each ÷ reactive's."""
    policies = sorted({p for points in per_seed.values() for p in points})
    result: dict[str, dict[str, float]] = {}
    for policy in policies:
        waits, costs = [], []
        for points in per_seed.values():
            if policy not in points:
                continue
            reactive = points[REACTIVE]
            waits.append(points[policy]["p90"] / reactive["p90"] if reactive["p90"] else 0.0)
            costs.append(points[policy]["node_seconds"] / reactive["node_seconds"])
        result[policy] = {
            "p90_ratio": round(statistics.mean(waits), 3),
            "node_seconds_ratio": round(statistics.mean(costs), 3),
        }
    return result


def _family(policy: str) -> str:
    """Which curve a policy is a point of: reactive starts the fixed pools' curve."""
    if policy == REACTIVE or policy.startswith("fixed"):
        return "fixed pools"
    return policy.split(" ")[0]


def draw(summary: dict[str, dict[str, dict[str, float]]], path: Path) -> None:
    from tools.bench_outcomes import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 6))
    styles = {"fixed pools": ("s", "--"), "predictive": ("o", "-")}
    for color, (spread, points) in zip(("tab:blue", "tab:orange"), summary.items(), strict=False):
        families: dict[str, list[tuple[str, dict[str, float]]]] = {}
        for name, v in points.items():
            families.setdefault(_family(name), []).append((name, v))
        for family, members in sorted(families.items()):
            members.sort(key=lambda kv: kv[1]["node_seconds_ratio"])
            marker, line = styles.get(family, ("*", ""))
            ax.plot(
                [v["node_seconds_ratio"] for _, v in members],
                [v["p90_ratio"] for _, v in members],
                marker=marker,
                linestyle=line or "none",
                color=color,
                markersize=9 if family == OPT0 else 6,
                label=f"{family}, builds {spread}",
            )
            for name, v in members:
                if spread == next(iter(summary)) or family == "predictive":
                    ax.annotate(
                        name,
                        (v["node_seconds_ratio"], v["p90_ratio"]),
                        textcoords="offset points",
                        xytext=(5, 4),
                        fontsize=8,
                    )
    ax.set_xlabel("GPU node-seconds ÷ reactive's (mean over seeds)")
    ax.set_ylabel("shards' p90 wait ÷ reactive's (mean over seeds)")
    ax.set_title("Staged CI in the simulator: every policy and OPT₀", fontsize=12)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench_whatif_staged", description=__doc__
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--images", type=Path, default=None, help="write the figure and JSON here")
    args = parser.parse_args(argv)
    started = time.process_time()
    document: dict[str, Any] = {"seeds": args.seeds, "label_set": LABEL_SET, "spreads": {}}
    summary: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for spread, sigma in SPREADS.items():
            per_seed = {str(seed): seed_points(seed, sigma, Path(tmp)) for seed in args.seeds}
            summary[spread] = summarize(per_seed)
            document["spreads"][spread] = {
                "per_seed": per_seed,
                "mean_ratio_to_reactive": summary[spread],
            }
    document["cpu_seconds"] = round(time.process_time() - started, 1)
    if args.images is not None:
        args.images.mkdir(parents=True, exist_ok=True)
        draw(summary, args.images / "whatif-staged-curve.png")
        (args.images / "whatif-staged.json").write_text(json.dumps(document, indent=1) + "\n")
    print(json.dumps(document, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
