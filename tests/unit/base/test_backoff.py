from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from base.backoff import Backoff, exponential, half_jitter


def test_doubles_from_base_and_is_capped() -> None:
    assert [exponential(n, base=1.0, cap=30.0) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]


def test_attempt_zero_or_less_waits_base() -> None:
    assert exponential(0, base=0.5, cap=8.0) == 0.5
    assert exponential(-3, base=0.5, cap=8.0) == 0.5


def test_counts_failures_and_resets() -> None:
    backoff = Backoff(base=0.5, cap=4.0)
    assert [backoff.next() for _ in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert backoff.failures == 5
    backoff.reset()
    assert backoff.next() == 0.5


def test_jitter_is_applied_to_each_wait() -> None:
    seen: list[float] = []

    def record(delay: float) -> float:
        seen.append(delay)
        return delay / 10

    backoff = Backoff(base=1.0, cap=60.0, jitter=record)
    assert backoff.next() == pytest.approx(0.1)
    assert backoff.next() == pytest.approx(0.2)
    assert seen == [1.0, 2.0]


@given(st.floats(min_value=0.0, max_value=1e6, allow_nan=False))
def test_half_jitter_stays_between_half_and_all(delay: float) -> None:
    assert delay / 2 <= half_jitter(delay) <= delay
