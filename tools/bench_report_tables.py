"""The tables of the benchmark results page (tools/bench_report.py) that the benchmark
tools do not print themselves: per-seed ratios, goal counts, node-seconds by state, the
`capped` goal per seed, and the simulator's agreement counted per metric."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tools import bench_agreement, bench_goals, bench_outcomes
from tools.bench_outcomes import BASE, HEADERS, VARIANTS


def kilo(value: float) -> str:
    return f"{value / 1000:.1f} k"


def median_cell(summary: Mapping[str, Any], variant: str, key: str, unit: str) -> str:
    """``median unit (×ratio)`` from a bench_outcomes summary: seconds (``s``) and
    node-seconds (``k``) with the ratio off stock, counts (``""``) without one."""
    cell = summary.get(variant, {}).get(key) or {}
    value, ratio = cell.get("value"), cell.get("ratio_to_stock")
    if value is None:
        return "–"
    median = float(value["median"])
    if not unit:
        return f"{median:g}"
    text = kilo(median) if unit == "k" else f"{median:.0f} s"
    if variant != BASE and ratio is not None:
        text += f" (×{ratio['median']:.2f})"
    return text


def seed_ratios(document: Mapping[str, Any]) -> str:
    """Per seed: stock ``minRunners: 0``'s p90 and node-seconds, every other variant's ratio
    to them, and the jobs each failed."""
    names = [v for v in VARIANTS if v != BASE and v in document["summary"]]
    lines = [
        "| seed | " + HEADERS[BASE] + " | " + " | ".join(HEADERS[n] for n in names) + " |",
        "|---|" + "---|" * (len(names) + 1),
    ]
    for key in sorted(document["seeds"], key=int):
        ran = document["seeds"][key]["variants"]
        base = ran.get(BASE)
        if base is None:
            continue
        base_p90 = float(base["wait_s"]["p90"])
        base_node_s = float(base["node_seconds"]["total"])
        cells = [f"p90 {base_p90:.0f} s, {kilo(base_node_s)}, {base['failed_by_timeout']} failed"]
        for name in names:
            own = ran.get(name)
            if own is None:
                cells.append("–")
                continue
            p90 = float(own["wait_s"]["p90"]) / base_p90 if base_p90 else float("nan")
            node_s = float(own["node_seconds"]["total"]) / base_node_s
            cells.append(f"×{p90:.2f}, ×{node_s:.2f}, {own['failed_by_timeout']} failed")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def goals(document: Mapping[str, Any]) -> str:
    """bench_goals' rows, one line per goal with the seeds meeting it."""
    return "\n".join(
        f"- {name}: **{met} of {len(per_seed)}** seeds"
        + (f" ({', '.join(seed for seed, _, ok in per_seed if ok)})" if met else "")
        for name, per_seed, met in bench_goals.goal_rows(document)
    )


def capped_goal(document: Mapping[str, Any]) -> str:
    """Per seed: the jobs stock failed, and the waits of stock and of ours demand only
    against the demand-only goal's p90 (0.75 × stock's)."""
    lines = [
        "| seed | stock failed | p50 wait, stock → ours | p90 wait, stock → ours "
        "| the goal's p90 |",
        "|---|---|---|---|---|",
    ]
    for key in sorted(document["seeds"], key=int):
        ran = document["seeds"][key]["variants"]
        stock, ours = ran.get(BASE), ran.get("ours_demand")
        if stock is None or ours is None:
            continue
        s, o = stock["wait_s"], ours["wait_s"]
        lines.append(
            f"| {key} | {stock['failed_by_timeout']} | {s['p50']:g} → {o['p50']:g} s | "
            f"{s['p90']:g} → {o['p90']:g} s | {0.75 * float(s['p90']):.0f} s |"
        )
    return "\n".join(lines)


_OCCUPANCY = ("launching", "real", "placeholders", "empty")


def node_seconds_shares(document: Mapping[str, Any]) -> str:
    """Per variant: the median share of its node-seconds in each state of a node."""
    names = [v for v in VARIANTS if v in document["summary"]]
    lines = [
        "| | launching (NodeClaim → Node) | with a real pod | placeholders / pause pods only "
        "| empty |",
        "|---|---|---|---|---|",
    ]
    for name in names:
        shares: dict[str, list[float]] = {state: [] for state in _OCCUPANCY}
        for figures in document["seeds"].values():
            own = figures["variants"].get(name) or {}
            held = (own.get(bench_outcomes.OCCUPANCY) or {}).get("total")
            if not held:
                continue
            total = sum(float(held[state]) for state in _OCCUPANCY)
            for state in _OCCUPANCY:
                shares[state].append(float(held[state]) / total)
        if not shares["real"]:
            continue
        cells = [f"{statistics.median(shares[state]):.0%}" for state in _OCCUPANCY]
        lines.append(f"| {HEADERS[name]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def agreement(path: Path, document: Mapping[str, Any]) -> str:
    """bench_agreement's replay of the family's run: counts per metric, the full table
    folded."""
    report = bench_agreement.compare(document, source=str(path))
    metrics: dict[str, dict[str, list[bool]]] = {}
    for variants in report.seeds.values():
        for variant, found in variants.items():
            for row in found:
                verdict = row.within(report.tolerance)
                if verdict is not None:
                    metrics.setdefault(row.metric, {}).setdefault(variant, []).append(verdict)
    ours = list(bench_agreement.OURS)
    counted = report.count()
    lines = [
        f"`python -m tools.bench_agreement {path}`: **{counted['within']} of "
        f"{counted['compared']}** figures within {report.tolerance:.0%}. Seeds within, per "
        "metric:",
        "",
        "| metric | " + " | ".join(HEADERS[v] for v in ours) + " |",
        "|---|" + "---|" * len(ours),
    ]
    for metric, by_variant in metrics.items():
        cells = [f"{sum(by_variant.get(v, []))} of {len(by_variant.get(v, []))}" for v in ours]
        lines.append(f"| {metric} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "<details><summary>Every seed, simulated beside measured</summary>",
        "",
        report.table(),
        "",
        "</details>",
    ]
    return "\n".join(lines)
