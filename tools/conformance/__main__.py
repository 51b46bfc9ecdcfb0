"""``python -m tools.conformance``: run every scenario, print a JSON summary.

The pytest suite (``tests/conformance``) is the check; this is for looking: per scenario the
seconds each side took, how many requests and scaler calls the reference made, how many
exchange lines each side produced and how many lined up identical, and which aspects differed
(with any problem against the table).
"""

from __future__ import annotations

import asyncio
import difflib
import json
import sys
import time
from typing import Any

from tools.conformance import build
from tools.conformance.differences import aspect_diffs, load_table, problems_for
from tools.conformance.harness import our_command, run_listener
from tools.conformance.scenarios import RUNS


async def main(names: list[str]) -> dict[str, Any]:
    started = time.monotonic()
    built = time.monotonic()
    reference = build.ensure_built()
    build_seconds = time.monotonic() - built
    table = load_table()
    rows = []
    for scenario in RUNS:
        if names and scenario.name not in names:
            continue
        arc = await run_listener([str(reference)], scenario)
        ours = await run_listener(our_command(), scenario)
        matcher = difflib.SequenceMatcher(a=arc.exchange, b=ours.exchange, autojunk=False)
        diffs = aspect_diffs(arc, ours)
        rows.append(
            {
                "scenario": scenario.name,
                "arc_seconds": round(arc.seconds, 2),
                "ours_seconds": round(ours.seconds, 2),
                "arc_requests": sum(not line.startswith("scaler ") for line in arc.exchange),
                "arc_scaler_calls": sum(line.startswith("scaler ") for line in arc.exchange),
                "arc_lines": len(arc.exchange),
                "ours_lines": len(ours.exchange),
                "identical_pairs": sum(b.size for b in matcher.get_matching_blocks()),
                "differs": sorted(diffs),
                "problems": problems_for(scenario.name, diffs, table),
            }
        )
    return {
        "scenarios": len(rows),
        "arc_requests": sum(r["arc_requests"] for r in rows),
        "arc_scaler_calls": sum(r["arc_scaler_calls"] for r in rows),
        "arc_lines": sum(r["arc_lines"] for r in rows),
        "ours_lines": sum(r["ours_lines"] for r in rows),
        "identical_pairs": sum(r["identical_pairs"] for r in rows),
        "reference_build_seconds": round(build_seconds, 2),
        "wall_seconds": round(time.monotonic() - started, 1),
        "rows": rows,
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1:])), indent=2))
