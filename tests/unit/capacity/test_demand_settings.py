"""Settings of the demand source and of demand sharding: defaults, selection, one-line errors."""

from __future__ import annotations

import pytest

from capacity.model import DemandSource
from capacity.settings import load_capacity_settings, to_params
from capacity.settings_problems import CapacitySettingsError

ENABLED = {"CAPACITY_ENABLED": "true", "CAPACITY_WORKFLOW_RESOURCES": '{"requests": {"cpu": "4"}}'}


def test_defaults_are_one_peer_and_no_source() -> None:
    settings = load_capacity_settings(ENABLED)
    assert settings.demand_source == "none"
    assert (settings.demand.cluster_index, settings.demand.cluster_count) == (0, 1)
    assert settings.demand.aged_after == 900.0
    assert settings.github.repositories == []
    assert settings.github.max_calls_per_interval == 200
    params = to_params(settings, 10)
    assert (params.demand_enabled, params.cluster_index, params.cluster_count) == (False, 0, 1)


@pytest.mark.parametrize(
    ("env", "source"),
    [
        ({"CAPACITY_HUD__ENABLED": "true"}, "hud"),  # the settings before `demand.source`
        ({"CAPACITY_DEMAND__SOURCE": "hud"}, "hud"),
        ({"CAPACITY_DEMAND__SOURCE": "github"}, "github"),
        ({"CAPACITY_DEMAND__SOURCE": "none"}, "none"),
    ],
)
def test_source_selection(env: dict[str, str], source: str) -> None:
    assert load_capacity_settings(ENABLED | env).demand_source == source


def test_github_source_params_use_its_own_floor_and_label() -> None:
    settings = load_capacity_settings(
        ENABLED
        | {
            "CAPACITY_DEMAND__SOURCE": "github",
            "CAPACITY_DEMAND__CLUSTER_INDEX": "1",
            "CAPACITY_DEMAND__CLUSTER_COUNT": "3",
            "CAPACITY_GITHUB__STALE_AFTER": "2m",
            "CAPACITY_GITHUB__FAILURE_BASE_CAPACITY": "4",
            "CAPACITY_HUD__FAILURE_BASE_CAPACITY": "9",
        }
    )
    params = to_params(settings, 10)
    assert params.demand_enabled
    assert (params.demand_stale_after, params.demand_failure_base_capacity) == (120.0, 4)
    assert params.demand_live == DemandSource.GITHUB
    assert (params.cluster_index, params.cluster_count) == (1, 3)


def test_repositories_are_deduplicated() -> None:
    settings = load_capacity_settings(
        ENABLED | {"CAPACITY_GITHUB__REPOSITORIES": '["app", "acme/lib", "app"]'}
    )
    assert settings.github.repositories == ["app", "acme/lib"]


ERRORS = {
    "index-not-below-count": (
        {"CAPACITY_HUD__ENABLED": "true", "CAPACITY_DEMAND__CLUSTER_INDEX": "2",
         "CAPACITY_DEMAND__CLUSTER_COUNT": "2"},
        "capacity setting demand.cluster_index: 2 must be less than demand.cluster_count (2)",
    ),
    "count-zero": (
        {"CAPACITY_DEMAND__CLUSTER_COUNT": "0"},
        "capacity setting demand.cluster_count: input should be greater than or equal to 1 "
        "(got '0')",
    ),
    "index-negative": (
        {"CAPACITY_DEMAND__CLUSTER_INDEX": "-1"},
        "capacity setting demand.cluster_index: input should be greater than or equal to 0 "
        "(got '-1')",
    ),
    "aged-after-zero": (
        {"CAPACITY_DEMAND__AGED_AFTER": "0s"},
        "capacity setting demand.aged_after: duration must be more than 0, got '0s'",
    ),
    "aged-after-not-minutes-for-hud": (
        {"CAPACITY_HUD__ENABLED": "true", "CAPACITY_DEMAND__CLUSTER_COUNT": "2",
         "CAPACITY_DEMAND__AGED_AFTER": "90s"},
        "capacity setting demand.aged_after: HUD counts queue time in whole minutes, got 90s",
    ),
    "sharding-without-source": (
        {"CAPACITY_DEMAND__CLUSTER_COUNT": "2"},
        "capacity setting demand.cluster_count: sharding needs a demand source (demand.source: "
        "hud or github)",
    ),
    "unknown-source": (
        {"CAPACITY_DEMAND__SOURCE": "keda"},
        "capacity setting demand.source: input should be 'hud', 'github', 'webhook' or 'none' "
        "(got 'keda')",
    ),
    "two-sources": (
        {"CAPACITY_DEMAND__SOURCE": "github", "CAPACITY_HUD__ENABLED": "true"},
        "capacity setting demand.source: 'github' but hud.enabled is true (choose one source)",
    ),
    "bad-repository": (
        {"CAPACITY_GITHUB__REPOSITORIES": '["acme/app/x"]'},
        "capacity setting github.repositories: invalid repository 'acme/app/x' (use 'name' or "
        "'owner/name')",
    ),
    "calls-zero": (
        {"CAPACITY_GITHUB__MAX_CALLS_PER_INTERVAL": "0"},
        "capacity setting github.max_calls_per_interval: input should be greater than or equal "
        "to 1 (got '0')",
    ),
}  # fmt: skip


@pytest.mark.parametrize(("env", "line"), list(ERRORS.values()), ids=list(ERRORS))
def test_error_lines(env: dict[str, str], line: str) -> None:
    with pytest.raises(CapacitySettingsError) as info:
        load_capacity_settings(env)
    assert [p.text for p in info.value.problems] == [line]
