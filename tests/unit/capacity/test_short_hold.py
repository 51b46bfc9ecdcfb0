"""A confirmed shortage holds new pairs back (policy step 9): the pools said they cannot
launch a node for a half, and a half of that role Pending when they said it is still Pending
a minute after it was created. A new pair would only launch the node of its other half."""

from __future__ import annotations

import pytest

from capacity.model import Demand, DemandSource, Memory, Observed, Params, Role
from capacity.policy import SIGNAL_STALL_FLOOR, plan

from .builders import P, R, pair

W = Role.WORKFLOW
RU = Role.RUNNER


def knobs(**overrides: object) -> Params:
    base: dict[str, object] = {
        "max_runners": 10,
        "ready_timeout": 300.0,
        "stall_timeout": 200.0,
        "signal_stall_timeout": 100.0,
    }
    base.update(overrides)
    return Params(**base)  # type: ignore[arg-type]


def queued(n: int) -> Demand:
    return Demand(queued=n, source=DemandSource.HUD)


def test_a_confirmed_shortage_makes_no_new_pair_and_keeps_the_one_launching() -> None:
    """Pair 1's workflow half has waited a minute since its pools refused: four more pairs
    are wanted, none is made, and pair 1 stays until its own stall timeout."""
    observed = Observed(placeholders=pair(1, R, P, created=0.0))
    params = knobs(cannot_launch_at={W: 5.0})
    result, _ = plan(observed, queued(5), params, Memory(), SIGNAL_STALL_FLOOR)
    assert result.creates == ()
    assert result.probes == ()  # the Pending half already asks the cloud
    assert result.deletes == ()
    assert result.short_roles == (W,)
    assert result.held_by_shortage == 4


@pytest.mark.parametrize(
    ("placeholders", "said", "now"),
    [
        # Not a minute yet: a retry on another type may still launch it.
        (pair(1, R, P, created=0.0), {W: 5.0}, SIGNAL_STALL_FLOOR - 1),
        # The word came before the half: it is about another launch.
        (pair(1, R, P, created=10.0), {W: 5.0}, 80.0),
        # The refused half runs: the cloud gave the node.
        (pair(1, R, R, created=0.0), {W: 5.0}, 80.0),
        # The word is about the other half's pools.
        (pair(1, R, P, created=0.0), {RU: 5.0}, 80.0),
        # No word at all.
        (pair(1, R, P, created=0.0), {}, 80.0),
    ],
)
def test_no_hold_without_a_confirmed_shortage(
    placeholders: tuple[object, ...], said: dict[Role, float], now: float
) -> None:
    observed = Observed(placeholders=placeholders)  # type: ignore[arg-type]
    params = knobs(cannot_launch_at=said)
    result, _ = plan(observed, queued(5), params, Memory(), now)
    assert result.short_roles == ()
    assert len(result.creates) == 4
    assert result.held_by_shortage == 0


def test_the_hold_ends_when_the_refused_half_runs() -> None:
    params = knobs(cannot_launch_at={W: 5.0})
    held, memory = plan(
        Observed(placeholders=pair(1, R, P, created=0.0)), queued(3), params, Memory(), 70.0
    )
    assert held.creates == ()
    ran, _ = plan(
        Observed(placeholders=pair(1, R, R, created=0.0)), queued(3), params, memory, 75.0
    )
    assert len(ran.creates) == 2
    assert ran.short_roles == ()
