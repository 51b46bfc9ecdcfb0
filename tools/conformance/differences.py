"""The table of accepted differences from ARC's listener, and the checks against it.

``differences.toml`` (beside this file) is the one list of every way this listener behaves
differently from ARC 0.14.2's ``ghalistener``. Each entry has the two table columns (``arc``,
``here``), the reason (``why``), and ``seen``: where the differential suite observes it, as
``"<scenario>:<aspect>"``, or ``"*:<aspect>"`` for "in every scenario where that aspect
differs and no entry names the scenario itself". Every scenario runs against both service
generations, the second time named ``<scenario>@broker``: a claim on ``<scenario>`` covers
both runs (and must show in both), one on ``<scenario>@broker`` only the broker run. An
empty ``seen`` marks a difference the suite cannot observe (metrics exposition, Kubernetes
config); it is still listed so the table stays complete. ``shows``, when given, maps an
aspect to a regular expression its observed difference must match, so a claim cannot
silently cover a different change there.

The suite fails when a scenario shows a difference no entry claims, when a specific claim no
longer shows, or when a wildcard claim shows nowhere. The table in docs/differences.md
must list exactly these entries, in this order (checked by a unit test).
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tools.conformance.harness import Run

__all__ = [
    "TABLE_PATH",
    "Difference",
    "aspect_diffs",
    "covers",
    "load_table",
    "problems_for",
    "readme_rows",
    "unused_wildcards",
]

TABLE_PATH = Path(__file__).resolve().parent / "differences.toml"
ASPECTS = ("exchange", "user_agent", "exit", "ending", "session")


@dataclass(frozen=True)
class Difference:
    id: str
    arc: str
    here: str
    why: str
    seen: tuple[str, ...]
    shows: Mapping[str, str]


def load_table(path: Path = TABLE_PATH) -> list[Difference]:
    data = tomllib.loads(path.read_text())
    table = []
    for entry in data["difference"]:
        seen = tuple(entry.get("seen", ()))
        for claim in seen:
            scenario, _, aspect = claim.partition(":")
            if not scenario or aspect not in ASPECTS:
                raise ValueError(f"{path.name}: {entry['id']}: bad claim {claim!r}")
        table.append(
            Difference(
                id=entry["id"],
                arc=entry["arc"],
                here=entry["here"],
                why=entry["why"],
                seen=seen,
                shows=dict(entry.get("shows", {})),
            )
        )
    ids = [d.id for d in table]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{path.name}: duplicate ids")
    return table


def aspect_diffs(arc: Run, ours: Run) -> dict[str, str]:
    """Aspect → unified diff (ARC lines ``-``, ours ``+``), for the aspects that differ."""
    left, right = arc.aspects(), ours.aspects()
    diffs = {}
    for aspect in ASPECTS:
        if left[aspect] != right[aspect]:
            lines = difflib.unified_diff(
                left[aspect].splitlines(), right[aspect].splitlines(), "arc", "ours",
                lineterm="", n=1,
            )  # fmt: skip
            diffs[aspect] = "\n".join(list(lines)[2:])  # without the ---/+++ header
    return diffs


def covers(claimed: str, run: str) -> bool:
    """Whether a claim's scenario part names the run ``run`` (``name`` or ``name@broker``)."""
    return claimed == run or ("@" not in claimed and run.partition("@")[0] == claimed)


def _claims(entry: Difference, run: str, aspect: str) -> bool:
    return any(
        covers(claimed, run) and claimed_aspect == aspect
        for claimed, _, claimed_aspect in (c.partition(":") for c in entry.seen)
    )


def problems_for(scenario: str, diffs: Mapping[str, str], table: Iterable[Difference]) -> list[str]:
    """Why this scenario run's differences do not match the table (empty when they do)."""
    table = list(table)
    problems = []
    for aspect, text in diffs.items():
        # A claim naming the scenario wins over a wildcard for the same aspect.
        owners = [d for d in table if _claims(d, scenario, aspect)] or [
            d for d in table if f"*:{aspect}" in d.seen
        ]
        if not owners:
            problems.append(f"{scenario}:{aspect} differs and no entry claims it:\n{text}")
        elif len(owners) > 1:
            problems.append(f"{scenario}:{aspect} is claimed by {[d.id for d in owners]}")
        elif (shows := owners[0].shows.get(aspect)) and not re.search(shows, text, re.MULTILINE):
            problems.append(
                f"{scenario}:{aspect} differs, but not as {owners[0].id} says ({shows!r}):\n{text}"
            )
    for entry in table:
        for claim in entry.seen:
            claimed_scenario, _, aspect = claim.partition(":")
            if covers(claimed_scenario, scenario) and aspect not in diffs:
                problems.append(f"{entry.id}: listed for {claim}, but ours now matches ARC there")
    return problems


def unused_wildcards(
    observed: Mapping[str, Mapping[str, str]], table: Iterable[Difference]
) -> list[str]:
    """Wildcard claims (``*:aspect``) that no scenario shows any more."""
    stale = []
    for entry in table:
        for claim in entry.seen:
            scenario, _, aspect = claim.partition(":")
            if scenario == "*" and not any(aspect in diffs for diffs in observed.values()):
                stale.append(f"{entry.id}: {claim} shows in no scenario")
    return stale


def readme_rows(table: Iterable[Difference]) -> list[tuple[str, str]]:
    return [(d.arc, d.here) for d in table]
