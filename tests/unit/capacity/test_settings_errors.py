"""Bad capacity settings are reported all at once, each with where its value came from (an
environment variable, which wins, or a key of the settings file), then one line pointing to
the reference; the listener's CLI prints each as its own line."""

from __future__ import annotations

from pathlib import Path

import pytest

from capacity.settings import load_capacity_settings
from capacity.settings_problems import REFERENCE, CapacitySettingsError
from listener.cli import error_lines

REFERENCE_LINE = f"every setting, its default and its variable: {REFERENCE}"


def failure(env: dict[str, str]) -> CapacitySettingsError:
    with pytest.raises(CapacitySettingsError) as info:
        load_capacity_settings(env)
    return info.value


def settings_file(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "capacity.yaml"
    path.write_text(text)
    return {"CAPACITY_CONFIG_FILE": str(path)}


def test_every_bad_value_is_reported_with_its_source(tmp_path: Path) -> None:
    env = settings_file(tmp_path, "hud: {timeout: 5 minutes}\nmax_pending_pairs: 0\n")
    env |= {"CAPACITY_PROACTIVE_CAPACITY": "-1", "CAPACITY_DOWNSCALE_DELAY": "soon"}
    env |= {"CAPACITY_PROACTVE_CAPACITY": "2"}  # a typo of a variable name
    path = env["CAPACITY_CONFIG_FILE"]
    error = failure(env)
    assert [p.line for p in error.problems] == [
        "capacity setting CAPACITY_PROACTVE_CAPACITY: unknown environment variable",
        "capacity setting proactive_capacity: input should be greater than or equal to 0 "
        "(got '-1') (from environment CAPACITY_PROACTIVE_CAPACITY)",
        "capacity setting max_pending_pairs: input should be greater than or equal to 1 "
        f"(got 0) (from file {path}, key max_pending_pairs)",
        "capacity setting downscale_delay: invalid duration 'soon' "
        "(from environment CAPACITY_DOWNSCALE_DELAY)",
        f"capacity setting hud.timeout: invalid duration '5 minutes' (from file {path}, key "
        "hud.timeout)",
    ]
    assert str(error).splitlines() == [*(p.line for p in error.problems), REFERENCE_LINE]


def test_a_variable_that_overrides_the_file_is_named_as_the_source(tmp_path: Path) -> None:
    """The environment wins over the file: the error says the value is the variable's, so
    fixing the file would change nothing."""
    env = settings_file(tmp_path, "placeholder_ttl: 15m\n") | {"capacity_placeholder_ttl": "x"}
    (problem,) = failure(env).problems
    assert problem.source == "environment capacity_placeholder_ttl, over the file's value"


def test_a_nested_value_from_a_json_variable_names_that_variable() -> None:
    (problem,) = failure({"CAPACITY_HUD": '{"timeout": "x"}'}).problems
    assert problem.text == "capacity setting hud.timeout: invalid duration 'x'"
    assert problem.source == "environment CAPACITY_HUD"


def test_rules_between_settings_are_all_reported(tmp_path: Path) -> None:
    env = settings_file(tmp_path, "renew_before: 20m\ndemand: {cluster_index: 3}\n")
    env |= {"CAPACITY_ENABLED": "true"}
    path = env["CAPACITY_CONFIG_FILE"]
    assert [p.line for p in failure(env).problems] == [
        "capacity setting workflow_resources: required when enabled (the requests of the "
        "largest workflow pod)",
        "capacity setting renew_before: 1200s must be shorter than placeholder_ttl (900s) "
        f"(from file {path}, key renew_before)",
        "capacity setting demand.cluster_index: 3 must be less than demand.cluster_count (1) "
        f"(from file {path}, key demand.cluster_index)",
    ]


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    error = failure({"CAPACITY_CONFIG_FILE": str(tmp_path / "missing.yaml")})
    assert str(error) == f"capacity settings file {tmp_path / 'missing.yaml'}: not found"


def test_the_cli_prints_one_line_per_problem_and_never_the_value_of_a_token(
    tmp_path: Path,
) -> None:
    env = settings_file(tmp_path, "hud: {token: super-secret}\n") | {"CAPACITY_FOO": "1"}
    lines = error_lines(failure(env))
    assert lines == [
        "Error: capacity setting CAPACITY_FOO: unknown environment variable",
        "Error: capacity setting hud.token: set the token through HUD_API_TOKEN, not the "
        f"settings (from file {env['CAPACITY_CONFIG_FILE']}, key hud.token)",
        f"Error: {REFERENCE_LINE}",
    ]
    assert not any("super-secret" in line for line in lines)
