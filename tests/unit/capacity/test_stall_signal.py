"""A stalled half decided on the pools' word (policy step 2): a half whose NodePools or node
groups said they cannot launch a node is released after one longest launch, not two. And
the word confirmed (a half refused still Pending a minute on) holds new pairs back (step 9):
a new pair would only launch its other half's node."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from capacity.model import (
    DeleteReason,
    Demand,
    DemandSource,
    Memory,
    Observed,
    Params,
    PodPhase,
    Role,
    StallCause,
)
from capacity.policy import SIGNAL_STALL_FLOOR, plan, signal_stall_timeout

from .builders import P, R, pair

W = Role.WORKFLOW
RU = Role.RUNNER


def knobs(**overrides: object) -> Params:
    base: dict[str, object] = {
        "max_runners": 10,
        "ready_timeout": 300.0,
        "stall_timeout": 200.0,  # twice a longest launch of 100 s
        "signal_stall_timeout": 100.0,  # one
    }
    base.update(overrides)
    return Params(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("launches", "ceiling", "timeout"),
    [
        ([50.0] * 7, 300.0, 150.0),  # too few launches seen: half the ready timeout
        ([], 100.0, 60.0),  # none seen, a short ready timeout: the floor
        ([5.0] * 8, 300.0, 60.0),  # launches on nodes with room: the floor
        ([10.0] * 8 + [80.0, 100.0], 300.0, 100.0),  # the longest, not the p90
        ([400.0] * 10, 300.0, 300.0),  # never beyond ready_timeout
        ([5.0] * 8, 40.0, 40.0),  # nor the floor beyond a shorter ready_timeout
    ],
)
def test_the_signal_stall_timeout_is_one_longest_launch(
    launches: list[float], ceiling: float, timeout: float
) -> None:
    assert signal_stall_timeout(launches, ceiling) == timeout


@dataclass(frozen=True)
class Row:
    runner: PodPhase
    workflow: PodPhase
    now: float  # the pair was created at 0
    said: dict[Role, float] = field(default_factory=dict)  # cannot_launch_at
    overrides: dict[str, object] = field(default_factory=dict)
    cause: StallCause | None = None  # expected: released as stalled, and why


ROWS = {
    "no word: a slow launch until twice the longest": Row(R, P, 150.0),
    "no word: past twice the longest": Row(R, P, 201.0, cause=StallCause.TIME),
    "word for the workflow half: one longest launch": Row(
        R, P, 101.0, {W: 30.0}, cause=StallCause.CLOUD
    ),
    "word, but within one launch: a launch retried elsewhere may still land": Row(
        R, P, 99.0, {W: 30.0}
    ),
    "word for the other half says nothing of this one": Row(R, P, 150.0, {RU: 30.0}),
    "word before the half, within the time-only timeout: the type is still short": Row(
        R, P, 101.0, {W: -60.0}, cause=StallCause.CLOUD
    ),
    "word older than the time-only timeout: the shortage may be over": Row(R, P, 150.0, {W: -51.0}),
    "word from a clock a little ahead": Row(R, P, 101.0, {W: 103.0}, cause=StallCause.CLOUD),
    "no time-only timeout known: a word within ready_timeout": Row(
        R, P, 101.0, {W: -150.0}, {"stall_timeout": None}, cause=StallCause.CLOUD
    ),
    "word, and past twice the longest too: the word is the cause": Row(
        R, P, 201.0, {W: 30.0}, cause=StallCause.CLOUD
    ),
    "runner half waiting on the word": Row(P, R, 101.0, {RU: 10.0}, cause=StallCause.CLOUD),
    "both halves Pending: left to ready_timeout": Row(P, P, 150.0, {W: 10.0, RU: 10.0}),
    "both halves Running: nothing to release": Row(R, R, 150.0, {W: 10.0}),
    "signal not used (too few launches): time alone": Row(
        R, P, 150.0, {W: 10.0}, {"signal_stall_timeout": None}
    ),
    "no time-only timeout either: the signal still releases": Row(
        R, P, 101.0, {W: 10.0}, {"stall_timeout": None}, cause=StallCause.CLOUD
    ),
}


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_when_a_half_is_stalled_and_why(row: Row) -> None:
    params = knobs(cannot_launch_at=row.said, **row.overrides)
    observed = Observed(placeholders=pair(1, row.runner, row.workflow, created=0.0))
    result, _ = plan(observed, Demand(queued=1, source=DemandSource.HUD), params, Memory(), row.now)
    if row.cause is None:
        assert result.stalls == ()
        assert DeleteReason.STALLED not in {d.reason for d in result.deletes}
    else:
        assert result.stalls == (row.cause,)
        assert {d.reason for d in result.deletes} == {DeleteReason.STALLED}
        assert result.creates == ()  # the back-off has begun
        assert result.stall_backoff > 0


def test_a_stall_on_the_word_backs_off_like_one_on_time() -> None:
    """The back-off starts at one stall timeout (the time-only one, when known) either way,
    and doubles on the next stall."""
    params = knobs(cannot_launch_at={W: 5.0})
    observed = Observed(placeholders=pair(1, R, P, created=0.0))
    first, memory = plan(
        observed, Demand(queued=1, source=DemandSource.HUD), params, Memory(), 101.0
    )
    assert (first.stalls, first.stall_backoff) == ((StallCause.CLOUD,), 200.0)
    again = Observed(placeholders=pair(7, R, P, created=400.0))
    said = knobs(cannot_launch_at={W: 410.0})
    second, _ = plan(again, Demand(queued=1, source=DemandSource.HUD), said, memory, 501.0)
    assert (second.stalls, second.stall_backoff) == ((StallCause.CLOUD,), 300.0)  # capped


def test_without_a_time_only_timeout_the_back_off_starts_at_the_signal_one() -> None:
    params = knobs(stall_timeout=None, cannot_launch_at={W: 5.0})
    observed = Observed(placeholders=pair(1, R, P, created=0.0))
    result, _ = plan(observed, Demand(queued=1, source=DemandSource.HUD), params, Memory(), 101.0)
    assert result.stall_backoff == 100.0


# --- a confirmed shortage holds new pairs back (step 9) ----------------------------------


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


def test_the_hold_ends_when_the_refused_half_runs_and_pairs_come_back_one_first() -> None:
    """The refused half may have run in a finished job's room on an old node while the type
    is still out: after the hold, one new pair, then two once its workflow half runs."""
    params = knobs(cannot_launch_at={W: 5.0}, max_pending_pairs=8)
    held, memory = plan(
        Observed(placeholders=pair(1, R, P, created=0.0)), queued(4), params, Memory(), 70.0
    )
    assert held.creates == ()
    assert memory.short_roles == (W,)
    ran, memory = plan(
        Observed(placeholders=pair(1, R, R, created=0.0)), queued(4), params, memory, 75.0
    )
    assert ran.short_roles == ()
    assert (ran.creates, ran.slow_start) == (("2",), 1)
    waiting = Observed(placeholders=(*pair(1, R, R, created=0.0), *pair(2, R, P, created=75.0)))
    again, memory = plan(waiting, queued(4), params, memory, 90.0)
    assert again.creates == ()
    grown = Observed(placeholders=(*pair(1, R, R, created=0.0), *pair(2, R, R, created=75.0)))
    more, memory = plan(grown, queued(4), params, memory, 120.0)
    assert (len(more.creates), more.slow_start) == (2, 2)


def test_karpenters_word_on_the_pending_half_confirms_the_shortage_at_once() -> None:
    """Seconds after its pools' refusal Karpenter said it has no node for pair 1's workflow
    half (no retry on another type is under way): no new pair, long before the minute the
    word alone needs. It covers a half made just after the refusal too (the provider then
    stops offering the type, so that half gets no refusal of its own from the pools)."""
    observed = Observed(placeholders=pair(1, R, P, created=0.0))
    name = observed.placeholders[1].name
    params = knobs(cannot_launch_at={W: 5.0}, refused_at={name: 12.0})
    result, _ = plan(observed, queued(5), params, Memory(), 15.0)
    assert result.short_roles == (W,)
    assert result.creates == ()
    assert result.held_by_shortage == 4
    later = Observed(placeholders=pair(1, R, P, created=8.0))
    result, _ = plan(later, queued(5), params, Memory(), 15.0)
    assert result.short_roles == (W,)


@pytest.mark.parametrize(
    ("runner", "workflow", "created", "refused", "now"),
    [
        # About an earlier pod of the same name (the slot made again since).
        (R, P, 20.0, 12.0, 30.0),
        # The refused half runs: Karpenter found a node after all.
        (R, R, 0.0, 12.0, 30.0),
    ],
)
def test_karpenters_word_confirms_only_a_recent_refusal_of_that_pending_half(
    runner: PodPhase, workflow: PodPhase, created: float, refused: float, now: float
) -> None:
    observed = Observed(placeholders=pair(1, runner, workflow, created=created))
    params = knobs(refused_at={observed.placeholders[1].name: refused})
    result, _ = plan(observed, queued(5), params, Memory(), now)
    assert result.short_roles == ()
    assert len(result.creates) == 4


def test_karpenters_word_alone_is_enough_and_names_the_half() -> None:
    """No insufficient-capacity Event for these pools (the provider stopped offering the
    type after another NodePool's refusal, or a NodePool limit): Karpenter's word on the
    Pending runner half holds new pairs on its own, and names the runner half short."""
    observed = Observed(placeholders=pair(1, P, R, created=0.0))
    params = knobs(refused_at={observed.placeholders[0].name: 12.0})
    result, _ = plan(observed, queued(5), params, Memory(), 30.0)
    assert result.short_roles == (RU,)
    assert result.creates == ()
