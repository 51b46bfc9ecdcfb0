"""tools/bench_report.py: the committed results page and README block are what the tool
writes from the committed JSON, and its medians and ratios are right on a small run."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tools import bench_outcomes, bench_report
from tools.bench_report_tables import seed_ratios


def test_the_committed_page_and_readme_block_are_what_the_tool_writes() -> None:
    readme = (bench_report.ROOT / bench_report.README).read_text()
    if bench_report.BEGIN not in readme:
        pytest.skip("README.md has no results markers yet")
    for path, text in bench_report.render(bench_report.ROOT).items():
        assert (bench_report.ROOT / path).read_text() == text, (
            f"{path} differs from what `make bench-report` writes: run it and commit the result"
        )


def _variant(p90: float, node_s: float, failed: int = 0) -> dict[str, Any]:
    return {
        "succeeded": 10 - failed,
        "failed_by_timeout": failed,
        "wait_s": {"p50": p90 / 2, "p90": p90},
        "node_seconds": {"total": node_s},
    }


def _document() -> dict[str, Any]:
    """Two seeds on FULL's trace: ours demand only at ×0.5 and ×0.7 of stock's p90, and a
    removed variant that must not show."""
    config = replace(bench_outcomes.FULL, seeds=(1, 4), variants=(*bench_outcomes.VARIANTS,))
    described = {**config.describe(), "variants": ["stock_min0", "ours_demand", "ours_adaptive"]}
    return {
        "config": described,
        "seeds": {
            "1": {
                "variants": {
                    "stock_min0": _variant(100, 20_000, failed=3),
                    "ours_demand": _variant(50, 18_000),
                    "ours_adaptive": _variant(1, 99_000),
                }
            },
            "4": {
                "variants": {
                    "stock_min0": _variant(200, 30_000, failed=5),
                    "ours_demand": _variant(140, 33_000),
                    "ours_adaptive": _variant(1, 99_000),
                }
            },
        },
    }


def test_medians_and_ratios_to_stock_over_seeds() -> None:
    document = bench_report.current(_document())
    assert "ours_adaptive" not in document["summary"]
    p90 = document["summary"]["ours_demand"]["wait_s.p90"]
    assert p90["value"]["median"] == 95  # (50 + 140) / 2
    assert p90["ratio_to_stock"]["median"] == pytest.approx(0.6)  # (0.5 + 0.7) / 2
    block = bench_report.readme_block({"roomy": document, "capped": document})
    assert "| ours, demand only | 95 s (×0.60) | 25.5 k (×1.00) | 0 |" in block
    assert "| stock, minRunners 0 | 150 s | 25.0 k | 4 |" in block
    assert "adaptive" not in block
    ratios = seed_ratios(document)
    assert "| 1 | p90 100 s, 20.0 k, 3 failed | ×0.50, ×0.90, 0 failed |" in ratios
    assert "| 4 | p90 200 s, 30.0 k, 5 failed | ×0.70, ×1.10, 0 failed |" in ratios


def test_the_block_replaces_only_what_is_between_the_markers() -> None:
    readme = f"top\n{bench_report.BEGIN}\nold\nrows\n{bench_report.END}\nbottom\n"
    assert bench_report.with_block(readme, "new") == (
        f"top\n{bench_report.BEGIN}\nnew\n{bench_report.END}\nbottom\n"
    )


def test_missing_markers_fail_with_one_line() -> None:
    with pytest.raises(bench_report.ReportError, match="marker lines") as caught:
        bench_report.with_block("no markers here\n", "new")
    assert "\n" not in str(caught.value)
