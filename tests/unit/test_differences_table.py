"""docs/differences.md's table is the differential suite's table (the README summarises it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.conformance.differences import load_table, readme_rows
from tools.conformance.scenarios import RUNS, SCENARIOS

ROOT = Path(__file__).resolve().parents[2]
DIFFERENCES = ROOT / "docs" / "differences.md"
README = ROOT / "README.md"


def differences_table() -> list[tuple[str, str]]:
    lines = DIFFERENCES.read_text(encoding="utf-8").splitlines()
    start = lines.index("# Differences from ARC's listener")
    header = lines.index("| ARC | Here |", start)
    rows = []
    for line in lines[header + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        assert len(cells) == 2, f"docs/differences.md row with {len(cells)} cells: {line}"
        rows.append((cells[0], cells[1]))
    return rows


def test_the_differences_page_lists_exactly_the_accepted_differences() -> None:
    assert differences_table() == readme_rows(load_table())


def test_the_readme_links_the_full_table() -> None:
    """The README keeps a summary only; it must send readers to the full table."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Differences from ARC's listener", 1)[1].split("\n## ", 1)[0]
    assert "(docs/differences.md)" in section


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
