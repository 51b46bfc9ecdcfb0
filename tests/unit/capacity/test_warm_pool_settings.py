"""The `warm_pool` settings: the two modes, how they sit with `proactive_capacity`, the
one-line errors naming the field, and the refusal of an adaptive pool's settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from capacity.settings import load_capacity_settings, to_warm_pool
from capacity.settings_problems import REFERENCE, CapacitySettingsError
from capacity.warm_pool import FixedPool, ScheduledPool
from listener.cli import error_lines

REPLACEMENT = "use mode: fixed (proactive_capacity pairs) or scheduled"


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


def test_the_adaptive_mode_is_refused_with_its_replacement(tmp_path: Path) -> None:
    assert error(tmp_path, "warm_pool: {mode: adaptive}\n") == (
        f"capacity setting warm_pool.mode: adaptive was removed; {REPLACEMENT}"
    )
    with pytest.raises(CapacitySettingsError) as info:
        load_capacity_settings({"CAPACITY_WARM_POOL__MODE": "adaptive"})
    # What the listener prints at start-up: the one line, then the pointer to the reference.
    assert error_lines(info.value) == [
        f"Error: capacity setting warm_pool.mode: adaptive was removed; {REPLACEMENT} (from "
        "environment CAPACITY_WARM_POOL__MODE)",
        f"Error: every setting, its default and its variable: {REFERENCE}",
    ]


@pytest.mark.parametrize(
    "name", ["target_ready", "max", "lead_time", "launch_cost", "fast_window", "profile_timezone"]
)
def test_an_adaptive_pool_setting_is_refused_by_name(tmp_path: Path, name: str) -> None:
    # In the file and in the environment alike: one line naming the field, not "unknown".
    line = f"capacity setting warm_pool.{name}: removed with warm_pool.mode adaptive; {REPLACEMENT}"
    assert error(tmp_path, f"warm_pool: {{mode: scheduled, {name}: 1}}\n") == line
    with pytest.raises(CapacitySettingsError) as info:
        load_capacity_settings({f"CAPACITY_WARM_POOL__{name.upper()}": "1"})
    (problem,) = info.value.problems
    assert problem.text == line
    assert problem.source == f"environment CAPACITY_WARM_POOL__{name.upper()}"


def test_an_adaptive_block_gives_one_line_per_removed_setting(tmp_path: Path) -> None:
    path = tmp_path / "capacity.yaml"
    path.write_text("warm_pool:\n  mode: adaptive\n  target_ready: 0.95\n  max: 12\n")
    with pytest.raises(CapacitySettingsError) as info:
        load_capacity_settings({"CAPACITY_CONFIG_FILE": str(path)})
    assert [p.text.split(":")[0] for p in info.value.problems] == [
        "capacity setting warm_pool.mode",
        "capacity setting warm_pool.target_ready",
        "capacity setting warm_pool.max",
    ]
    assert all(REPLACEMENT in p.text for p in info.value.problems)


def test_an_unknown_warm_pool_setting_is_still_unknown(tmp_path: Path) -> None:
    assert error(tmp_path, "warm_pool: {ceiling: 3}\n") == (
        "capacity setting warm_pool.ceiling: unknown setting"
    )


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
            "warm_pool: {mode: scheduled, schedule: [{window: 'Mon-Fry 08:00-09:00 UTC', "
            "floor: 1}]}\n",
            "capacity setting warm_pool.schedule.0.window: invalid day 'mon-fry' (use Mon..Sun)",
        ),
        (
            "warm_pool: {mode: elastic}\n",
            "capacity setting warm_pool.mode: input should be 'fixed' or 'scheduled' (got "
            "'elastic')",
        ),
    ],
)
def test_bad_warm_pool_settings_fail_with_one_line(tmp_path: Path, text: str, line: str) -> None:
    assert error(tmp_path, text) == line
