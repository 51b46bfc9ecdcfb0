"""README's "Differences from ARC's listener" table is the differential suite's table."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.conformance.differences import load_table, readme_rows
from tools.conformance.scenarios import RUNS, SCENARIOS

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_table() -> list[tuple[str, str]]:
    lines = README.read_text().splitlines()
    start = lines.index("## Differences from ARC's listener")
    header = lines.index("| ARC | Here |", start)
    rows = []
    for line in lines[header + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        assert len(cells) == 2, f"README row with {len(cells)} cells: {line}"
        rows.append((cells[0], cells[1]))
    return rows


def test_readme_lists_exactly_the_accepted_differences() -> None:
    assert readme_table() == readme_rows(load_table())


def test_every_claim_names_a_scenario() -> None:
    names = {s.name for s in SCENARIOS} | {s.name for s in RUNS}
    for entry in load_table():
        for claim in entry.seen:
            scenario = claim.partition(":")[0]
            assert scenario == "*" or scenario in names, f"{entry.id}: {claim}"


def test_every_entry_says_why() -> None:
    for entry in load_table():
        assert entry.why.strip(), entry.id


def test_a_bad_aspect_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "t.toml"
    bad.write_text(
        '[[difference]]\nid = "x"\narc = "a"\nhere = "b"\nwhy = "c"\nseen = ["happy:colour"]\n'
    )
    with pytest.raises(ValueError, match="bad claim"):
        load_table(bad)
