"""Readiness and liveness (listener/server.py's ``Health``) on a fake clock: which components
count, how old a success may be, failing conditions."""

from __future__ import annotations

import time

import pytest

from listener.server import Health
from tests.support.fake_clock import FakeClock


def test_ready_only_after_every_component_succeeded_recently() -> None:
    clock = FakeClock()
    health = Health(clock)
    health.add("poll", max_age=60)
    health.add("reconcile", max_age=30)
    assert health.ready()[0] is False  # nothing has succeeded yet

    health.mark("poll", clock.now)
    ok, details = health.ready()
    assert ok is False
    assert details["poll"] == {"ok": True, "age_seconds": 0.0, "max_age_seconds": 60}
    assert details["reconcile"] == {"ok": False, "age_seconds": None, "max_age_seconds": 30}

    health.mark("reconcile", clock.now)
    assert health.ready()[0] is True
    clock.now += 30
    assert health.ready()[0] is True  # exactly at max age is still fine
    clock.now += 0.5
    ok, details = health.ready()
    assert ok is False
    assert details["reconcile"]["ok"] is False  # type: ignore[index]
    assert details["poll"]["ok"] is True  # type: ignore[index]


def test_a_failing_condition_fails_readiness_not_liveness() -> None:
    clock = FakeClock()
    health = Health(clock)
    health.add("poll", max_age=60)
    health.mark("poll", clock.now)
    health.set_failing("kubernetes", "kubernetes patch ephemeralrunnersets failed: 0 refused")
    ok, details = health.ready()
    assert ok is False
    assert details["kubernetes"] == {
        "ok": False,
        "error": "kubernetes patch ephemeralrunnersets failed: 0 refused",
    }
    assert details["poll"]["ok"] is True  # type: ignore[index]
    assert health.live()[0] is True
    health.set_failing("kubernetes", None)
    assert health.ready() == (True, {"poll": details["poll"]})


def test_liveness_fails_only_well_past_max_age() -> None:
    clock = FakeClock()
    health = Health(clock)  # default: three max ages
    health.add("poll", max_age=60)
    # Never succeeded: the age counts from registration, so start-up is not a failure.
    clock.now += 179
    assert health.live()[0] is True
    clock.now += 2
    assert health.live()[0] is False
    health.mark("poll", clock.now)
    assert health.live()[0] is True
    clock.now += 100  # late (not ready) but not wedged
    assert health.ready()[0] is False
    assert health.live()[0] is True
    clock.now += 100
    assert health.live()[0] is False


def test_liveness_limit_per_component_and_factor() -> None:
    clock = FakeClock()
    health = Health(clock, liveness_factor=2)
    health.add("poll", max_age=10)
    health.add("reconcile", max_age=10, live_max_age=100)
    health.mark("poll", clock.now)
    health.mark("reconcile", clock.now)
    clock.now += 21
    ok, details = health.live()
    assert ok is False
    assert details["poll"]["ok"] is False  # type: ignore[index]
    assert details["reconcile"]["ok"] is True  # type: ignore[index]


def test_no_components_is_ready_and_live() -> None:
    health = Health(FakeClock())
    assert health.ready() == (True, {})
    assert health.live() == (True, {})


def test_health_rejects_bad_settings_and_unknown_components() -> None:
    health = Health(FakeClock())
    with pytest.raises(ValueError, match="max_age of 'poll' must be positive"):
        health.add("poll", max_age=0)
    with pytest.raises(ValueError, match="must be at least its max_age"):
        health.add("poll", max_age=10, live_max_age=5)
    with pytest.raises(ValueError, match="liveness_factor"):
        Health(FakeClock(), liveness_factor=0.5)
    with pytest.raises(KeyError):
        health.mark("typo", 1.0)


def test_default_clock_is_monotonic() -> None:
    health = Health()
    health.add("poll", max_age=5)
    health.mark("poll", time.monotonic())
    assert health.ready()[0] is True
