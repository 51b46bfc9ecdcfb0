"""Capacity settings: defaults, sources and precedence, and the one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from capacity.model import Params
from capacity.settings import DEFAULT_IMAGE, CapacitySettings, load_capacity_settings, to_params
from capacity.settings_demand import DEFAULT_HUD_URL
from capacity.settings_problems import CapacitySettingsError
from capacity.settings_values import parse_duration

ENABLED = {"CAPACITY_ENABLED": "true", "CAPACITY_WORKFLOW_RESOURCES": '{"requests": {"cpu": "4"}}'}


def write(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "capacity.yaml"
    path.write_text(text)
    return {"CAPACITY_CONFIG_FILE": str(path)}


DEFAULTS = {
    "enabled": False,
    "proactive_capacity": 0,
    "recalculate_interval": 30.0,
    "placeholder_ready_timeout": 300.0,
    "workflow_resources": None,
    "runner_resources": None,
    "node_selector": None,
    "tolerations": None,
    "workflow_node_selector": None,
    "workflow_tolerations": None,
    "placeholder_namespace": None,
    "placeholder_image": DEFAULT_IMAGE,
    "placeholder_ttl": 900.0,
    "renew_before": 300.0,
    "max_pending_pairs": 30,
    "downscale_delay": 300.0,
    "node_checks": False,
}

HUD_DEFAULTS = {
    "enabled": False,
    "url": DEFAULT_HUD_URL,
    "timeout": 10.0,
    "max_response_bytes": 4_500_000,
    "stale_after": 300.0,
    "failure_base_capacity": 1,
    "token": None,
}


@pytest.mark.parametrize(("field", "expected"), list(DEFAULTS.items()), ids=list(DEFAULTS))
def test_defaults(field: str, expected: object) -> None:
    assert getattr(load_capacity_settings({}), field) == expected


@pytest.mark.parametrize(("field", "expected"), list(HUD_DEFAULTS.items()), ids=list(HUD_DEFAULTS))
def test_hud_defaults(field: str, expected: object) -> None:
    assert getattr(load_capacity_settings({}).hud, field) == expected


def test_hud_parameter_defaults() -> None:
    parameters = load_capacity_settings({}).hud.parameters
    assert (
        parameters.queued_threshold_minutes,
        parameters.max_age_days,
        parameters.orgs,
        parameters.repo,
    ) == (0, 1, [], "")


def test_yaml_file_is_read(tmp_path: Path) -> None:
    env = write(
        tmp_path,
        """
enabled: true
proactive_capacity: 2
placeholder_ready_timeout: 2m
workflow_resources:
  requests: {cpu: "4", memory: 16Gi, nvidia.com/gpu: 1, ephemeral-storage: 100Gi}
tolerations:
  - {key: gpu, operator: Exists, effect: NoSchedule}
workflow_node_selector: {pool: gpu}
hud:
  enabled: true
  parameters: {orgs: [pytorch], max_age_days: 3}
""",
    )
    settings = load_capacity_settings(env)
    assert settings.enabled
    assert settings.proactive_capacity == 2
    assert settings.placeholder_ready_timeout == 120.0
    assert settings.workflow_resources is not None
    assert settings.workflow_resources.requests == {
        "cpu": "4",
        "memory": "16Gi",
        "nvidia.com/gpu": "1",
        "ephemeral-storage": "100Gi",
    }
    assert settings.tolerations is not None
    assert [t.to_k8s() for t in settings.tolerations] == [
        {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert settings.workflow_node_selector == {"pool": "gpu"}
    assert settings.hud.enabled
    assert settings.hud.parameters.orgs == ["pytorch"]
    assert settings.hud.parameters.max_age_days == 3


def test_environment_wins_over_the_file(tmp_path: Path) -> None:
    env = write(tmp_path, "proactive_capacity: 2\nhud: {timeout: 3s, stale_after: 1m}\n")
    env |= {"CAPACITY_PROACTIVE_CAPACITY": "5", "CAPACITY_HUD__TIMEOUT": "7s"}
    settings = load_capacity_settings(env)
    assert settings.proactive_capacity == 5
    assert settings.hud.timeout == 7.0
    assert settings.hud.stale_after == 60.0  # the file's, not overridden


def test_nested_environment_variables() -> None:
    settings = load_capacity_settings(
        ENABLED
        | {
            "CAPACITY_HUD__PARAMETERS__ORGS": '["pytorch", ""]',
            "CAPACITY_HUD__PARAMETERS__REPO": "pytorch/pytorch",
            "CAPACITY_NODE_SELECTOR": '{"kubernetes.io/arch": "amd64"}',
            "capacity_max_pending_pairs": "4",
        }
    )
    assert settings.hud.parameters.orgs == ["pytorch", ""]
    assert settings.hud.parameters.repo == "pytorch/pytorch"
    assert settings.node_selector == {"kubernetes.io/arch": "amd64"}
    assert settings.max_pending_pairs == 4


def test_os_environment_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPACITY_PROACTIVE_CAPACITY", "9")
    assert load_capacity_settings({}).proactive_capacity == 0
    assert CapacitySettings().proactive_capacity == 0


def test_token_comes_from_hud_api_token_and_stays_secret() -> None:
    settings = load_capacity_settings({"HUD_API_TOKEN": "s3cr3t-value"})
    assert settings.hud.token is not None
    assert settings.hud.token.get_secret_value() == "s3cr3t-value"
    for text in (repr(settings), str(settings), settings.model_dump_json()):
        assert "s3cr3t-value" not in text


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("500ms", 0.5),
        ("45", 45.0),
        (12, 12.0),
        (2.5, 2.5),
        ("1.5m", 90.0),
    ],
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_to_params() -> None:
    settings = load_capacity_settings(
        ENABLED
        | {
            "CAPACITY_PROACTIVE_CAPACITY": "2",
            "CAPACITY_MAX_PENDING_PAIRS": "5",
            "CAPACITY_PLACEHOLDER_READY_TIMEOUT": "2m",
            "CAPACITY_DOWNSCALE_DELAY": "10m",
            "CAPACITY_PLACEHOLDER_TTL": "20m",
            "CAPACITY_RENEW_BEFORE": "4m",
            "CAPACITY_NODE_CHECKS": "true",
            "CAPACITY_HUD__ENABLED": "true",
            "CAPACITY_HUD__STALE_AFTER": "90s",
            "CAPACITY_HUD__FAILURE_BASE_CAPACITY": "6",
        }
    )
    assert to_params(settings, 40) == Params(
        max_runners=40,
        proactive_capacity=2,
        max_pending_pairs=5,
        ready_timeout=120.0,
        downscale_delay=600.0,
        ttl=1200.0,
        renew_before=240.0,
        node_checks=True,
        demand_enabled=True,
        demand_stale_after=90.0,
        demand_failure_base_capacity=6,
    )


ERRORS = {
    "duration-words": (
        {"CAPACITY_PLACEHOLDER_READY_TIMEOUT": "5 minutes"},
        "capacity setting placeholder_ready_timeout: invalid duration '5 minutes'",
    ),
    "duration-negative": (
        {"CAPACITY_DOWNSCALE_DELAY": "-5"},
        "capacity setting downscale_delay: invalid duration '-5'",
    ),
    "duration-zero-interval": (
        {"CAPACITY_RECALCULATE_INTERVAL": "0s"},
        "capacity setting recalculate_interval: duration must be more than 0, got '0s'",
    ),
    "duration-unit": (
        {"CAPACITY_PLACEHOLDER_TTL": "15d"},
        "capacity setting placeholder_ttl: invalid duration '15d'",
    ),
    "hud-timeout": (
        {"CAPACITY_HUD__TIMEOUT": "soon"},
        "capacity setting hud.timeout: invalid duration 'soon'",
    ),
    "integer": (
        {"CAPACITY_PROACTIVE_CAPACITY": "lots"},
        "capacity setting proactive_capacity: input should be a valid integer, unable to parse "
        "string as an integer (got 'lots')",
    ),
    "negative-integer": (
        {"CAPACITY_PROACTIVE_CAPACITY": "-1"},
        "capacity setting proactive_capacity: input should be greater than or equal to 0 "
        "(got '-1')",
    ),
    "max-pending-zero": (
        {"CAPACITY_MAX_PENDING_PAIRS": "0"},
        "capacity setting max_pending_pairs: input should be greater than or equal to 1 (got '0')",
    ),
    "boolean": (
        {"CAPACITY_ENABLED": "maybe"},
        "capacity setting enabled: input should be a valid boolean, unable to interpret input "
        "(got 'maybe')",
    ),
    "workflow-resources-required": (
        {"CAPACITY_ENABLED": "true"},
        "capacity setting workflow_resources: required when enabled (the requests of the "
        "largest workflow pod)",
    ),
    "cpu-quantity": (
        ENABLED | {"CAPACITY_RUNNER_RESOURCES__REQUESTS__CPU": "lots"},
        "capacity setting runner_resources.requests: invalid quantity 'lots' for cpu",
    ),
    "cpu-binary-suffix": (
        ENABLED | {"CAPACITY_RUNNER_RESOURCES__REQUESTS__CPU": "2Gi"},
        "capacity setting runner_resources.requests: invalid cpu quantity '2Gi' (use cores "
        "like '2' or '750m')",
    ),
    "memory-milli": (
        ENABLED | {"CAPACITY_RUNNER_RESOURCES__REQUESTS__MEMORY": "512m"},
        "capacity setting runner_resources.requests: invalid memory quantity '512m' (did you "
        "mean 512Mi?)",
    ),
    "zero-quantity": (
        {"CAPACITY_WORKFLOW_RESOURCES__REQUESTS__CPU": "0"},
        "capacity setting workflow_resources.requests: quantity for cpu must be more than 0, "
        "got '0'",
    ),
    "gpu-fraction": (
        {"CAPACITY_WORKFLOW_RESOURCES__REQUESTS__NVIDIA.COM/GPU": "0.5"},
        "capacity setting workflow_resources.requests: extended resource nvidia.com/gpu needs a "
        "whole number, got '0.5'",
    ),
    "unknown-resource": (
        {"CAPACITY_WORKFLOW_RESOURCES": '{"requests": {"gpu": "1"}}'},
        "capacity setting workflow_resources.requests: unknown resource 'gpu' (extended "
        "resources need a domain)",
    ),
    "empty-requests": (
        {"CAPACITY_WORKFLOW_RESOURCES": '{"requests": {}}'},
        "capacity setting workflow_resources.requests: requests must be a non-empty mapping, "
        "got {}",
    ),
    "renew-before-ttl": (
        {"CAPACITY_RENEW_BEFORE": "20m"},
        "capacity setting renew_before: 1200s must be shorter than placeholder_ttl (900s)",
    ),
    "namespace": (
        {"CAPACITY_PLACEHOLDER_NAMESPACE": "Bad_NS"},
        "capacity setting placeholder_namespace: invalid namespace 'Bad_NS'",
    ),
    "image": (
        {"CAPACITY_PLACEHOLDER_IMAGE": "alpine 3"},
        "capacity setting placeholder_image: invalid image 'alpine 3'",
    ),
    "node-selector": (
        {"CAPACITY_NODE_SELECTOR": '["a"]'},
        "capacity setting node_selector: input should be a valid dictionary (got ['a'])",
    ),
    "toleration-operator": (
        {"CAPACITY_TOLERATIONS": '[{"key": "a", "operator": "Bad"}]'},
        "capacity setting tolerations.0.operator: input should be 'Exists' or 'Equal' (got 'Bad')",
    ),
    "hud-url": (
        {"CAPACITY_HUD__URL": "ftp://example.com/x"},
        "capacity setting hud.url: invalid URL 'ftp://example.com/x' (needs http:// or https://)",
    ),
    "hud-max-response-bytes": (
        {"CAPACITY_HUD__MAX_RESPONSE_BYTES": "0"},
        "capacity setting hud.max_response_bytes: input should be greater than 0 (got '0')",
    ),
    "hud-floor": (
        {"CAPACITY_HUD__FAILURE_BASE_CAPACITY": "-2"},
        "capacity setting hud.failure_base_capacity: input should be greater than or equal to 0 "
        "(got '-2')",
    ),
    "hud-max-age": (
        {"CAPACITY_HUD__PARAMETERS__MAX_AGE_DAYS": "0"},
        "capacity setting hud.parameters.max_age_days: input should be greater than or equal "
        "to 1 (got '0')",
    ),
    "hud-token-not-a-setting": (
        {"CAPACITY_HUD__TOKEN": "leaked-value"},
        "capacity setting hud.token: set the token through HUD_API_TOKEN, not the settings",
    ),
    "unknown-variable": (
        {"CAPACITY_PROACTIVE_CAPACTY": "3"},
        "capacity setting CAPACITY_PROACTIVE_CAPACTY: unknown environment variable",
    ),
    "unknown-nested": (
        {"CAPACITY_HUD__TIMOUT": "3s"},
        "capacity setting hud.timout: unknown setting",
    ),
}


@pytest.mark.parametrize(("env", "line"), list(ERRORS.values()), ids=list(ERRORS))
def test_error_lines(env: dict[str, str], line: str) -> None:
    with pytest.raises(CapacitySettingsError) as info:
        load_capacity_settings(env)
    (problem,) = info.value.problems
    assert problem.text == line
    assert "\n" not in problem.line


FILE_ERRORS = {
    "yaml-syntax": ("enabled: [true\n", "not valid YAML (line 2)"),
    "not-a-mapping": ("- enabled\n", "must be a mapping of settings"),
    "unknown-key": ("enabeld: true\n", None),
    "token-in-file": ("hud: {token: super-secret}\n", None),
}


@pytest.mark.parametrize(("text", "tail"), list(FILE_ERRORS.values()), ids=list(FILE_ERRORS))
def test_file_error_lines(tmp_path: Path, text: str, tail: str | None) -> None:
    env = write(tmp_path, text)
    with pytest.raises(CapacitySettingsError) as info:
        load_capacity_settings(env)
    assert "super-secret" not in str(info.value)
    (problem,) = info.value.problems
    if tail is not None:
        assert str(info.value) == f"capacity settings file {env['CAPACITY_CONFIG_FILE']}: {tail}"
    elif "token" in text:
        assert problem.text == (
            "capacity setting hud.token: set the token through HUD_API_TOKEN, not the settings"
        )
    else:
        assert problem.text == "capacity setting enabeld: unknown setting"


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(
        CapacitySettingsError, match=r"^capacity settings file .*nope\.yaml: not found$"
    ):
        load_capacity_settings({"CAPACITY_CONFIG_FILE": str(missing)})


def test_empty_file_means_defaults(tmp_path: Path) -> None:
    assert load_capacity_settings(write(tmp_path, "")).proactive_capacity == 0
