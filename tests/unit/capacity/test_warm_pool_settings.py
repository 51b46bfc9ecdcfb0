"""The `warm_pool` settings: the three modes, how they sit with `proactive_capacity`, and the
one-line errors naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from capacity.settings import CapacitySettingsError, load_capacity_settings, to_warm_pool
from capacity.warm_pool import AdaptivePool, FixedPool, ScheduledPool


def load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "capacity.yaml"
    path.write_text(text)
    return load_capacity_settings({"CAPACITY_CONFIG_FILE": str(path)})


def error(tmp_path: Path, text: str) -> str:
    with pytest.raises(CapacitySettingsError) as info:
        load(tmp_path, text)
    (problem,) = info.value.problems
    return problem.text


def test_default_is_the_fixed_pool_of_proactive_capacity() -> None:
    settings = load_capacity_settings({"CAPACITY_PROACTIVE_CAPACITY": "3"})
    assert settings.warm_pool.mode == "fixed"
    pool = to_warm_pool(settings)
    assert isinstance(pool, FixedPool)
    assert pool.target(0.0) == 3


def test_scheduled_pool_uses_proactive_capacity_outside_its_windows(tmp_path: Path) -> None:
    settings = load_capacity_settings(
        {
            "CAPACITY_PROACTIVE_CAPACITY": "1",
            "CAPACITY_WARM_POOL__MODE": "scheduled",
            "CAPACITY_WARM_POOL__SCHEDULE": '[{"window": "Mon-Fri 08:00-18:00 UTC", "floor": 6}]',
        }
    )
    pool = to_warm_pool(settings)
    assert isinstance(pool, ScheduledPool)
    wednesday_noon = 1_795_608_000.0  # 2026-11-25 12:00 UTC
    assert pool.target(wednesday_noon) == 6
    assert pool.target(wednesday_noon + 8 * 3600) == 1


def test_adaptive_pool_from_yaml(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        "warm_pool:\n"
        "  mode: adaptive\n"
        "  target_ready: 0.95\n"
        "  max: 12\n"
        "  lead_time: 90s\n"
        "  launch_cost: 30s\n"
        "  profile_timezone: Europe/Berlin\n"
        "  schedule:\n"
        "    - {window: 'Mon-Fri 08:00-18:00 Europe/Berlin', floor: 2}\n",
    )
    pool = to_warm_pool(settings)  # type: ignore[arg-type]
    assert isinstance(pool, AdaptivePool)
    assert pool.config.target_ready == 0.95
    assert pool.config.ceiling == 12
    assert pool.config.hold == 120.0
    assert pool.floor is not None
    assert len(pool.floor.windows) == 1


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            "warm_pool: {mode: scheduled}\n",
            "capacity setting warm_pool.schedule: required when warm_pool.mode is scheduled",
        ),
        (
            "warm_pool: {schedule: [{window: 'Mon 08:00-09:00 UTC', floor: 1}]}\n",
            "capacity setting warm_pool.schedule: set, but warm_pool.mode is fixed",
        ),
        (
            "warm_pool: {mode: scheduled, target_ready: 0.9, "
            "schedule: [{window: 'Mon 08:00-09:00 UTC', floor: 1}]}\n",
            "capacity setting warm_pool.target_ready: set, but warm_pool.mode is scheduled "
            "(only adaptive uses it)",
        ),
        (
            "proactive_capacity: 5\nwarm_pool: {mode: adaptive, max: 4}\n",
            "capacity setting warm_pool.max: 4 is below a floor (5: proactive_capacity or a "
            "schedule window), so it could never apply",
        ),
        (
            "warm_pool: {mode: scheduled, schedule: [{window: 'Mon-Fry 08:00-09:00 UTC', "
            "floor: 1}]}\n",
            "capacity setting warm_pool.schedule.0.window: invalid day 'mon-fry' (use Mon..Sun)",
        ),
        (
            "warm_pool: {mode: adaptive, profile_timezone: Mars/Olympus}\n",
            "capacity setting warm_pool.profile_timezone: unknown time zone 'Mars/Olympus'",
        ),
        (
            "warm_pool: {mode: elastic}\n",
            "capacity setting warm_pool.mode: input should be 'fixed', 'scheduled' or "
            "'adaptive' (got 'elastic')",
        ),
        (
            "warm_pool: {mode: adaptive, target_ready: 1}\n",
            "capacity setting warm_pool.target_ready: input should be less than 1 (got 1)",
        ),
    ],
)
def test_bad_warm_pool_settings_fail_with_one_line(tmp_path: Path, text: str, line: str) -> None:
    assert error(tmp_path, text) == line
