"""The benchmark results page (``make bench-report``): docs/benchmarks.md and the README's
results block, generated from the committed benchmark JSON named in INPUTS.

    python -m tools.bench_report [--check] [--no-figures]

Every table comes from the benchmark tools' own functions (bench_outcomes' table and
summary, bench_goals' goal rows, critical_path's steps, bench_staged's table,
bench_agreement's comparison, replayed here from the outcome JSON), so the page shows what
``python -m tools.bench_outcomes table`` and the others print. ``--check`` writes nothing and
exits 1 naming each file that differs from what it would write (the drift test runs it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools import bench_outcomes, bench_staged
from tools.bench_outcomes import HEADERS, VARIANTS
from tools.bench_report_tables import (
    agreement,
    capped_goal,
    goals,
    median_cell,
    node_seconds_shares,
    seed_ratios,
)

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "make bench-report"
PAGE = Path("docs/benchmarks.md")
README = Path("README.md")
BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"
# Variants no longer in the product: their rows stay in the JSON (the record), out of the page.
REMOVED = frozenset({"ours_adaptive"})


@dataclass(frozen=True)
class Family:
    name: str
    json: Path  # relative to the repository
    figure: str  # the summary scatter, in docs/img
    what: str  # one line: what the family measures


INPUTS = (
    Family(
        "roomy",
        Path("docs/img/outcomes-roomy.json"),
        "outcomes-summary-roomy.png",
        "`maxRunners` above any seed's peak of jobs in flight: the variants differ only in how "
        "they get capacity. This family measures the design.",
    ),
    Family(
        "capped",
        Path("docs/img/outcomes-capped.json"),
        "outcomes-summary-capped.png",
        "`maxRunners: 10` per cluster, which the busy minutes exceed: the cap holds every "
        "variant back alike, and most of every wait is the wait for a free runner.",
    ),
)
STAGED = Family(
    "staged",
    Path("docs/img/outcomes-staged.json"),
    "outcomes-staged-summary.png",
    "Staged CI: builds fan out into test shards on slow GPU-like nodes (150–210 s to a node), "
    "for the predictive warm pool.",
)


class ReportError(ValueError):
    """An input or the README cannot be used; the message is the one line printed."""


def load(root: Path, path: Path) -> dict[str, Any]:
    try:
        document: dict[str, Any] = json.loads((root / path).read_text())
    except (OSError, ValueError) as exc:
        raise ReportError(f"bench_report: {path}: {exc}") from None
    return document


def current(document: Mapping[str, Any]) -> dict[str, Any]:
    """The outcome document without the REMOVED variants, its summary computed again."""
    seeds = {
        key: {
            **figures,
            "variants": {v: own for v, own in figures["variants"].items() if v not in REMOVED},
        }
        for key, figures in document["seeds"].items()
    }
    config = {
        **document["config"],
        "variants": [v for v in document["config"]["variants"] if v not in REMOVED],
    }
    return bench_outcomes.with_reference({**document, "config": config, "seeds": seeds})


# ---------------------------------------------------------------------- page parts


def what_ran(family: Family, document: Mapping[str, Any]) -> str:
    """Command, settings and machine, from the document's own config and metadata."""
    config = document["config"]
    seeds = config["seeds"]
    delay = config["node_provisioning_delay_s"]
    cap = config.get("max_runners_per_cluster", config.get("max_runners_per_scale_set"))
    loads = [
        figures["load_average"][0]
        for figures in document["seeds"].values()
        if isinstance(figures.get("load_average"), list)
    ]
    lines = [
        f"- **Command**: `make bench-outcomes OUTCOMES_FAMILY={family.name}` "
        f"(`python -m tools.bench_outcomes run --family {family.name} --out docs/img`), "
        f"seeds {' '.join(map(str, seeds))}; runs of some seeds or variants joined with "
        "`python -m tools.bench_outcomes merge` (each seed's `parts` in the JSON say which "
        "run each row came from).",
        f"- **Settings**: N = {config['N']} (`minRunners`, pause pods and warm pool pairs per "
        f"cluster); `maxRunners` {cap}; node launch delay {delay[0]:g}–{delay[1]:g} s; "
        f"prepare-job timeout {config['prepare_timeout_s']:g} s; Karpenter `consolidateAfter` "
        f"{config['consolidate_after']}; everything else as the JSON's `changed_settings` say.",
        f"- **Machine**: {document.get('note', 'not recorded')} "
        f"{float(document.get('run_seconds') or 0) / 3600:.1f} h of runs"
        + (f"; 1-minute load after each seed {min(loads):.1f}–{max(loads):.1f}." if loads else "."),
        f"- **Data**: [{family.json.name}](img/{family.json.name}).",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------- the page


HEAD = f"""# Benchmarks

<!-- Generated by `{COMMAND}` (tools/bench_report.py): do not edit; run it again. -->

Generated by `{COMMAND}` (tools/bench_report.py) from the benchmark JSON in docs/img; edit
the tool or run the benchmarks again, not this page. Two clusters (two sites) on the real
Karpenter (its kwok cloud provider, every node launched by Karpenter after a drawn delay)
share one fake GitHub queue; site A's workflow instance type runs out of cloud capacity for
a seeded 4–8 minutes during the arrivals. Each seed runs every variant side by side on the
same trace, shortage and clock, each variant with its own control plane; the tables give
the median over seeds, (min–max), and ×the median ratio to stock `minRunners: 0` of the same
seed. Waits count a job failed by the prepare-job timeout at its failure, so no variant is
fast by failing its slowest jobs. What the benchmark does and does not model:
tools/bench_outcomes.py. Measurements on the real scheduler, Karpenter and
cluster-autoscaler, signal latency, apiserver load and memory:
[capacity-model.md](capacity-model.md#12-measured-on-the-real-components); the fault soak:
[soak.md](soak.md); what warm capacity costs: [whatif.md](whatif.md).

The variants: {"; ".join(f"**{HEADERS[v]}** (`{v}`)" for v in VARIANTS)}.
"""


def family_section(family: Family, document: Mapping[str, Any]) -> str:
    parts = [
        f"## The `{family.name}` family",
        family.what,
        what_ran(family, document),
        f"### `{family.name}`: medians over seeds",
        bench_outcomes.report(document),
        f"![One point per variant and seed, {family.name}](img/{family.figure})",
        f"### `{family.name}`: seed by seed",
        "p90 wait and node-seconds as ratios to stock `minRunners: 0` of the same seed, and the "
        "jobs failed by the prepare-job timeout:",
        seed_ratios(document),
        "Goals (`python -m tools.bench_goals`), seeds meeting each:",
        goals(document),
        f"### `{family.name}`: where the node-seconds go",
        "Median share of each variant's node-seconds by what its nodes held:",
        node_seconds_shares(document),
    ]
    if family.name == "capped":
        parts += [
            "### Can the `capped` goals be met?",
            "The demand-only goal asks for a p90 ≤ 0.75 × stock's. Under the cap most of "
            "every variant's wait is \"→ assigned\" (the table of steps above); stock's site A "
            "also keeps taking jobs while its workflow type is out, and fails them at the "
            "prepare-job timeout, which moves the queue behind them "
            "([capacity-model.md](capacity-model.md#a-cap-that-binds)):",
            capped_goal(document),
        ]
    return "\n\n".join(parts)


def staged_section(family: Family, document: Mapping[str, Any]) -> str:
    config = document["config"]
    gpu = config["gpu_node_provisioning_delay_s"]
    return "\n\n".join(
        [
            f"## The `{family.name}` family",
            family.what,
            f"- **Command**: `make bench-outcomes OUTCOMES_FAMILY=staged`, seeds "
            f"{' '.join(map(str, config['seeds']))}.\n"
            f"- **Settings**: N = {config['N']} per scale set; `maxRunners` "
            f"{config['max_runners_per_scale_set']}; GPU nodes in {gpu[0]:g}–{gpu[1]:g} s; "
            f"prepare-job timeout {config['prepare_timeout_s']:g} s.\n"
            f"- **Machine**: {document.get('note', 'not recorded')}\n"
            f"- **Data**: [{family.json.name}](img/{family.json.name}).",
            bench_staged.report(document),
            f"![One point per variant and seed, staged](img/{family.figure})",
            "Goals (`python -m tools.bench_goals`), seeds meeting each:",
            goals(document),
        ]
    )


def page(documents: Mapping[str, Mapping[str, Any]]) -> str:
    sections = [HEAD.rstrip()]
    sections += [family_section(f, documents[f.name]) for f in INPUTS]
    sections.append(staged_section(STAGED, documents[STAGED.name]))
    sections.append(
        "## Does the simulator agree with the cluster?\n\n"
        "`ghalistener whatif`'s simulator replays each seed's trace with each of our variants' "
        "settings and is compared with what the cluster measured (tools/bench_agreement.py "
        "says what it models and leaves out)."
    )
    sections += [
        f"### Agreement, `{f.name}`\n\n" + agreement(f.json, documents[f.name]) for f in INPUTS
    ]
    return "\n\n".join(sections) + "\n"


def readme_block(documents: Mapping[str, Mapping[str, Any]]) -> str:
    """One table of both families' current results, and how they were measured."""
    names = [v for v in VARIANTS if all(v in documents[f.name]["summary"] for f in INPUTS)]
    head = ["variant"]
    for f in INPUTS:
        head += [
            f"`{f.name}`: p90 wait",
            f"`{f.name}`: node-seconds",
            f"`{f.name}`: failed jobs per seed",
        ]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---|" * (len(head) - 1)]
    for name in names:
        cells = [HEADERS[name]]
        for f in INPUTS:
            summary = documents[f.name]["summary"]
            cells += [
                median_cell(summary, name, f"{bench_outcomes.WAIT}.p90", "s"),
                median_cell(summary, name, "node_seconds.total", "k"),
                median_cell(summary, name, "failed_by_timeout", ""),
            ]
        lines.append("| " + " | ".join(cells) + " |")
    seeds = len(documents[INPUTS[0].name]["seeds"])
    warm = documents[INPUTS[0].name]["config"]["N"]
    lines += [
        "",
        f"Medians of {seeds} seeds (×: ratio to stock `minRunners: 0` on the same seed; "
        f"N = {warm} per cluster), two "
        "clusters on the real Karpenter sharing one fake GitHub queue, one site's workflow "
        "type out of capacity for 4–8 minutes; how it was measured, per-seed figures and the "
        f"simulator's agreement: [docs/benchmarks.md](docs/benchmarks.md) (`{COMMAND}`).",
    ]
    return "\n".join(lines)


def with_block(readme: str, block: str) -> str:
    """``readme`` with only the lines between the two marker lines replaced by ``block``."""
    lines = readme.split("\n")
    try:
        begin, end = lines.index(BEGIN), lines.index(END)
    except ValueError:
        raise ReportError(
            f"bench_report: {README}: the marker lines {BEGIN} and {END} are missing"
        ) from None
    if end < begin:
        raise ReportError(f"bench_report: {README}: {END} comes before {BEGIN}")
    return "\n".join([*lines[: begin + 1], block, *lines[end:]])


def documents_of(root: Path) -> dict[str, dict[str, Any]]:
    found = {f.name: current(load(root, f.json)) for f in INPUTS}
    found[STAGED.name] = load(root, STAGED.json)
    return found


def render(root: Path) -> dict[Path, str]:
    """What the command writes: the page, and the README with its block."""
    documents = documents_of(root)
    readme = (root / README).read_text()
    return {PAGE: page(documents), README: with_block(readme, readme_block(documents))}


def draw(root: Path, documents: Mapping[str, Mapping[str, Any]]) -> None:
    """The summary scatters, drawn again from the same documents."""
    for f in INPUTS:
        document = documents[f.name]
        config = bench_outcomes.config_of(document)
        bench_outcomes._draw_summary(document["seeds"], config, root / "docs/img" / f.figure)
    staged = documents[STAGED.name]
    bench_staged._draw_summary(
        staged["seeds"], staged["config"]["variants"], root / "docs/img" / STAGED.figure
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_report")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 on drift")
    parser.add_argument("--no-figures", action="store_true", help="leave the PNGs as they are")
    args = parser.parse_args(argv)
    try:
        written = render(ROOT)
    except ReportError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.check:
        drifted = [path for path, text in written.items() if (ROOT / path).read_text() != text]
        for path in drifted:
            print(f"bench_report: {path} differs from what `{COMMAND}` writes", file=sys.stderr)
        return 1 if drifted else 0
    for path, text in written.items():
        (ROOT / path).write_text(text)
    if not args.no_figures:
        draw(ROOT, documents_of(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
