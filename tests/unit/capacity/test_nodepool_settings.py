"""The `nodepools` settings: off by default, one-line errors naming the field."""

from __future__ import annotations

import pytest

from capacity.settings import load_capacity_settings
from capacity.settings_problems import CapacitySettingsError

ON = {"CAPACITY_NODEPOOLS__ENABLED": "true"}


def test_on_by_default() -> None:
    pools = load_capacity_settings({}).nodepools
    assert pools.enabled
    assert pools.runner is None
    assert pools.workflow is None


def test_names_from_the_environment() -> None:
    env = {**ON, "CAPACITY_NODEPOOLS__WORKFLOW": '["gpu-a", "gpu-b", "gpu-a"]'}
    pools = load_capacity_settings(env).nodepools
    assert pools.enabled
    assert pools.workflow == ["gpu-a", "gpu-b"]  # duplicates dropped, order kept


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {**ON, "CAPACITY_NODEPOOLS__RUNNER": '["Runners_1"]'},
            "capacity setting nodepools.runner: invalid NodePool name 'Runners_1'",
        ),
        (
            {**ON, "CAPACITY_NODEPOOLS__WORKFLOW": "[]"},
            "capacity setting nodepools.workflow: must name at least one NodePool (leave it "
            "unset to resolve)",
        ),
        (
            {"CAPACITY_NODEPOOLS__ENABLED": "false", "CAPACITY_NODEPOOLS__RUNNER": '["runners"]'},
            "capacity setting nodepools.runner: set, but nodepools.enabled is false",
        ),
        (
            {"CAPACITY_NODEPOOLS__ENABLED": "sometimes"},
            "capacity setting nodepools.enabled: input should be a valid boolean, unable to "
            "interpret input (got 'sometimes')",
        ),
        (
            {"CAPACITY_NODEPOOLS__LIMITS": "true"},
            "capacity setting nodepools.limits: unknown setting",
        ),
    ],
)
def test_bad_values_fail_with_one_line(env: dict[str, str], line: str) -> None:
    with pytest.raises(CapacitySettingsError) as caught:
        load_capacity_settings(env)
    assert [p.text for p in caught.value.problems] == [line]
