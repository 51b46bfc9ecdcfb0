"""The `warm_pool.predictive` settings: off by default, its knobs and their defaults, the
demand source it needs, and the one-line errors naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from capacity.settings import CapacitySettings, load_capacity_settings
from capacity.settings_problems import CapacitySettingsError

GITHUB = "demand: {source: github}\n"


def load(tmp_path: Path, text: str) -> CapacitySettings:
    path = tmp_path / "capacity.yaml"
    path.write_text(text)
    return load_capacity_settings({"CAPACITY_CONFIG_FILE": str(path)})


def error(tmp_path: Path, text: str) -> str:
    with pytest.raises(CapacitySettingsError) as info:
        load(tmp_path, text)
    (problem,) = info.value.problems
    return problem.text


def test_off_by_default_with_automatic_horizon_and_hold() -> None:
    predictive = load_capacity_settings({}).warm_pool.predictive
    assert not predictive.enabled
    assert predictive.horizon is None
    assert predictive.hold is None
    assert predictive.count_quantile is None


def test_on_with_the_github_source_over_a_base_pool(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        GITHUB + "proactive_capacity: 1\n"
        "warm_pool:\n"
        "  mode: scheduled\n"
        "  schedule: [{window: 'Mon-Fri 08:00-18:00 UTC', floor: 2}]\n"
        "  predictive: {enabled: true, horizon: 6m, hold: 90s, count_quantile: 0.75}\n",
    )
    predictive = settings.warm_pool.predictive
    assert predictive.enabled
    assert (predictive.horizon, predictive.hold, predictive.count_quantile) == (360.0, 90.0, 0.75)
    assert settings.warm_pool.mode == "scheduled"


def test_on_from_the_environment() -> None:
    settings = load_capacity_settings(
        {
            "CAPACITY_DEMAND__SOURCE": "github",
            "CAPACITY_WARM_POOL__PREDICTIVE__ENABLED": "true",
            "CAPACITY_WARM_POOL__PREDICTIVE__HOLD": "0",
        }
    )
    assert settings.warm_pool.predictive.enabled
    assert settings.warm_pool.predictive.hold == 0.0  # no hold past the fanned runs


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            "warm_pool: {predictive: {enabled: true}}\n",
            "capacity setting warm_pool.predictive.enabled: needs demand.source github, the "
            "one source that reports running jobs (demand source is none)",
        ),
        (
            "hud: {enabled: true}\nwarm_pool: {predictive: {enabled: true}}\n",
            "capacity setting warm_pool.predictive.enabled: needs demand.source github, the "
            "one source that reports running jobs (demand source is hud)",
        ),
        (
            "demand: {source: github, cluster_count: 2}\n"
            "warm_pool: {predictive: {enabled: true}}\n",
            "capacity setting warm_pool.predictive.enabled: not with demand sharding "
            "(demand.cluster_count > 1): every peer would hold pairs for every predicted child",
        ),
        (
            GITHUB + "warm_pool: {predictive: {horizon: 5m}}\n",
            "capacity setting warm_pool.predictive.horizon: set, but "
            "warm_pool.predictive.enabled is false",
        ),
        (
            GITHUB + "warm_pool: {predictive: {hold: 5m}}\n",
            "capacity setting warm_pool.predictive.hold: set, but "
            "warm_pool.predictive.enabled is false",
        ),
        (
            GITHUB + "warm_pool: {predictive: {count_quantile: 0.9}}\n",
            "capacity setting warm_pool.predictive.count_quantile: set, but "
            "warm_pool.predictive.enabled is false",
        ),
    ],
)
def test_contradictions_fail_with_one_line(tmp_path: Path, text: str, line: str) -> None:
    assert error(tmp_path, text) == line


@pytest.mark.parametrize(
    ("text", "field", "why"),
    [
        ("horizon: 0s", "warm_pool.predictive.horizon", "duration must be more than 0"),
        ("horizon: soon", "warm_pool.predictive.horizon", "invalid duration 'soon'"),
        ("hold: -5", "warm_pool.predictive.hold", "invalid duration -5"),
        ("count_quantile: 0", "warm_pool.predictive.count_quantile", "greater than 0"),
        ("count_quantile: 1.5", "warm_pool.predictive.count_quantile", "less than or equal"),
        ("enabled: maybe", "warm_pool.predictive.enabled", "boolean"),
        ("lead: 5m", "warm_pool.predictive.lead", ""),
    ],
)
def test_bad_values_name_their_field(tmp_path: Path, text: str, field: str, why: str) -> None:
    line = error(tmp_path, GITHUB + f"warm_pool: {{predictive: {{enabled: true, {text}}}}}\n")
    assert line.startswith(f"capacity setting {field}: "), line
    assert why in line
    assert "\n" not in line
