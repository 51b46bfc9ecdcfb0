"""The shutdown budget: every step fits inside the pod's grace period."""

from __future__ import annotations

import pytest

from listener.shutdown import MARGIN, PLACEHOLDER_CAP, SESSION_DELETE_CAP, ShutdownBudget


@pytest.mark.parametrize("grace", [0.0, 1.0, 5.0, 10.0, 30.0, 60.0, 600.0])
def test_placeholders_then_session_delete_fit_in_the_grace(grace: float) -> None:
    budget = ShutdownBudget(grace=grace)
    budget.begin(100.0)
    placeholders = budget.placeholders(100.0)
    # The worst case: the clean-up uses all of its share, then the DELETE all of the rest.
    session = budget.session_delete(100.0 + placeholders)
    assert placeholders >= 0
    assert session >= 0
    assert placeholders + session <= max(0.0, grace - MARGIN) + 1e-9
    assert placeholders <= PLACEHOLDER_CAP
    assert session <= SESSION_DELETE_CAP
    if grace >= 2 * MARGIN:
        assert session >= placeholders  # the session matters most: the next pod needs it gone


def test_the_clock_starts_at_the_first_stop() -> None:
    budget = ShutdownBudget(grace=30.0)
    assert budget.remaining(5.0) == 28.0  # not started: the whole usable grace
    budget.begin(10.0)
    budget.begin(20.0)  # a second cause of stopping does not restart it
    assert budget.remaining(20.0) == 18.0
    assert budget.remaining(60.0) == 0.0
    assert budget.session_delete(60.0) == 0.0
