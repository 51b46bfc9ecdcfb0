"""Differential conformance: ARC's own poll loop and ours, same scripted fake, same config.

The reference is a small Go program over ``github.com/actions/scaleset`` v0.4.0 (the library
ARC 0.14.2's ``ghalistener`` runs its loop with), built once from the Go module proxy and
cached. Every scenario runs the reference, then this listener, and every difference between
the two runs must be one the table in ``tools/conformance/differences.toml`` accepts.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest

from tools.conformance import build
from tools.conformance.differences import (
    aspect_diffs,
    load_table,
    problems_for,
    unused_wildcards,
)
from tools.conformance.harness import Run, Scenario, our_command, run_listener
from tools.conformance.scenarios import RUNS

pytestmark = pytest.mark.conformance


@dataclass(frozen=True)
class Pair:
    arc: Run
    ours: Run

    @property
    def diffs(self) -> dict[str, str]:
        return aspect_diffs(self.arc, self.ours)


async def _run_pair(reference: Path, scenario: Scenario) -> Pair:
    arc = await run_listener([str(reference)], scenario)
    ours = await run_listener(our_command(), scenario)
    return Pair(arc, ours)


@pytest.fixture(scope="session")
def reference() -> Path:
    try:
        return build.ensure_built()
    except build.BuildError as exc:
        pytest.fail(f"the ARC reference listener could not be built: {exc}")


@pytest.fixture(scope="session")
def pairs(reference: Path) -> dict[str, Pair]:
    """Every scenario, run once per session (the wildcard check needs them all)."""

    async def run_all() -> dict[str, Pair]:
        return {s.name: await _run_pair(reference, s) for s in RUNS}

    return asyncio.run(run_all())


@pytest.mark.parametrize("scenario", [s.name for s in RUNS])
def test_scenario_differs_only_as_listed(pairs: dict[str, Pair], scenario: str) -> None:
    pair = pairs[scenario]
    # The reference really ran the scenario (a broken harness would make both sides empty).
    assert any("session_create" in line for line in pair.arc.exchange), pair.arc.output[-2000:]
    problems = problems_for(scenario, pair.diffs, load_table())
    assert not problems, "\n\n".join(problems) + f"\n\nours:\n{pair.ours.output[-3000:]}"


def test_every_wildcard_difference_still_shows(pairs: dict[str, Pair]) -> None:
    observed = {name: pair.diffs for name, pair in pairs.items()}
    assert unused_wildcards(observed, load_table()) == []
