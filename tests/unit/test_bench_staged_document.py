"""The outcome benchmark's staged document, from hand-made seeds: the goal rows against the
reactive pool and stock ARC, the summary and table, and the table and merge commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tools.bench_goals import goal_rows
from tools.bench_goals import report as goals_report
from tools.bench_outcomes import main as outcomes_main
from tools.bench_staged import VARIANTS, summarize, table


def _variant(p90: float, gpu: float) -> dict[str, Any]:
    return {
        "wait_s": {"p90": p90},
        "staged": {"shard_wait_s": {"p90": p90}, "shard_node_seconds": {"gpu": gpu}},
    }


def _document() -> dict[str, Any]:
    seeds = {
        "1": {
            "variants": {
                "stock_min0": _variant(200.0, 1000.0),
                "stock_minN": _variant(120.0, 1500.0),
                "stock_overprov": _variant(100.0, 1600.0),
                "ours_reactive": _variant(200.0, 1000.0),
                "ours_predictive": _variant(50.0, 1100.0),
            }
        },
        "2": {
            "variants": {
                "stock_min0": _variant(180.0, 900.0),
                "stock_minN": _variant(40.0, 1400.0),
                "stock_overprov": _variant(100.0, 1500.0),
                "ours_reactive": _variant(180.0, 900.0),
                "ours_predictive": _variant(90.0, 1200.0),
            }
        },
    }
    return {"config": {"family": "staged"}, "seeds": seeds}


def test_the_staged_goal_rows_compare_the_shards_seed_by_seed() -> None:
    document = _document()
    rows = {name: (per_seed, met) for name, per_seed, met in goal_rows(document)}
    assert len(rows) == 2
    (against_reactive,) = [v for k, v in rows.items() if "reactive" in k]
    per_seed, met = against_reactive
    # Seed 1: 50/200 = 0.25 at 1.1x: met. Seed 2: 0.5 at 1.33x: not.
    assert [ok for _, _, ok in per_seed] == [True, False]
    assert met == 1
    (against_stock,) = [v for k, v in rows.items() if "minRunners" in k]
    # Seed 1: faster and cheaper than both; seed 2: slower than minRunners N.
    assert [ok for _, _, ok in against_stock[0]] == [True, False]
    text = goals_report(document)
    assert "staged family" in text
    assert "1 of 2 seeds" in text


def test_a_staged_goal_leaves_out_a_seed_without_its_variants() -> None:
    document = _document()
    del document["seeds"]["2"]["variants"]["stock_overprov"]
    rows = goal_rows(document)
    assert [len(per_seed) for _, per_seed, _ in rows] == [2, 1]


def test_the_staged_summary_and_table_show_the_shards() -> None:
    document = _document()
    summary = summarize(document["seeds"], VARIANTS)
    cell = summary["ours_predictive"]["staged.shard_wait_s.p90"]
    assert cell["value"] == {"median": 70.0, "min": 50.0, "max": 90.0}
    assert cell["ratio_to_stock"]["min"] == pytest.approx(0.25)
    text = table({"summary": summary})
    assert "shards: queue → workflow Running or failed p90 (s)" in text
    assert "ours, predictive" in text


def test_the_table_command_prints_a_staged_run_with_the_staged_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = _document()
    document["summary"] = summarize(document["seeds"], VARIANTS)
    path = tmp_path / "outcomes-staged.json"
    path.write_text(json.dumps(document))
    assert outcomes_main(["table", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "shards: queue → workflow Running or failed p90 (s)" in printed
    assert "ours, predictive" in printed


def test_the_merge_command_puts_staged_seeds_together_with_their_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seeds run apart (one run per seed) merge into one document: the staged summary over
    all of them, its figure drawn again beside it; a seed in two runs is refused."""
    both = _document()
    paths = []
    for seed in ("1", "2"):
        part = {
            "config": {"family": "staged", "variants": list(VARIANTS), "seeds": [int(seed)]},
            "seeds": {seed: both["seeds"][seed]},
            "run_seconds": 100.0,
        }
        paths.append(tmp_path / f"part-{seed}.json")
        paths[-1].write_text(json.dumps(part))
    out = tmp_path / "merged" / "outcomes-staged.json"
    out.parent.mkdir()
    assert outcomes_main(["merge", *map(str, paths), "--out", str(out)]) == 0
    merged = json.loads(out.read_text())
    assert merged["config"]["seeds"] == [1, 2]
    assert merged["run_seconds"] == 200.0
    p90 = merged["summary"]["ours_predictive"]["staged.shard_wait_s.p90"]["value"]
    assert (p90["min"], p90["max"]) == (50.0, 90.0)
    assert (out.parent / "outcomes-staged-summary.png").stat().st_size > 0
    assert "ours, predictive" in capsys.readouterr().out
    assert outcomes_main(["merge", str(paths[0]), str(paths[0]), "--out", str(out)]) == 2
    assert "in more than one run" in capsys.readouterr().err
