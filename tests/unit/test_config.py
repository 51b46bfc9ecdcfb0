"""ARC config.json decoding and validation (listener/config_parse.py, listener/config_json.py,
listener/github_target.py)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from listener.config import AppCredentials, ConfigError, MetricSpec, Scope, TokenCredentials
from listener.config_parse import parse_config
from listener.github_target import parse_github_target
from listener.startup import load_config

TOKEN = "ghp_TOPSECRETtokenVALUE1234567890"
PRIVATE_KEY = "-----BEGIN RSA PRIVATE KEY-----\nTOPSECRETkeyMATERIAL\n-----END RSA PRIVATE KEY-----"


def controller_config(**overrides: Any) -> dict[str, Any]:
    """A config exactly as the controller writes it (PAT flavour), with overrides."""
    base: dict[str, Any] = {
        "configure_url": "https://github.com/acme",
        "vault_type": "",
        "vault_lookup_key": "",
        "github_app_id": "",
        "github_app_installation_id": 0,
        "github_app_private_key": "",
        "github_token": TOKEN,
        "ephemeral_runner_set_namespace": "arc-runners",
        "ephemeral_runner_set_name": "linux-abcde",
        "max_runners": 2147483647,
        "min_runners": 0,
        "runner_scale_set_id": 7,
        "runner_scale_set_name": "linux",
        "server_root_ca": "",
        "log_level": "debug",
        "log_format": "text",
        "metrics_addr": ":8080",
        "metrics_endpoint": "/metrics",
        "metrics": None,
    }
    base.update(overrides)
    return base


def encode(cfg: dict[str, Any]) -> bytes:
    # Like Go's json.Encoder: compact, trailing newline.
    return (json.dumps(cfg, separators=(",", ":")) + "\n").encode()


def self_signed_pem() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


# --------------------------------------------------------------------------- happy paths


def test_controller_written_pat_config() -> None:
    cfg = parse_config(encode(controller_config()))
    assert cfg.credentials == TokenCredentials(token=TOKEN)
    assert cfg.configure_url == "https://github.com/acme"
    assert cfg.target.scope is Scope.ORGANIZATION
    assert cfg.target.organization == "acme"
    assert cfg.ephemeral_runner_set_namespace == "arc-runners"
    assert cfg.ephemeral_runner_set_name == "linux-abcde"
    assert (cfg.min_runners, cfg.max_runners) == (0, 2147483647)
    assert cfg.runner_scale_set_id == 7
    assert cfg.runner_scale_set_name == "linux"
    assert (cfg.log_level, cfg.log_format) == ("debug", "text")
    assert (cfg.metrics_addr, cfg.metrics_endpoint) == (":8080", "/metrics")
    assert cfg.metrics is None


def test_controller_written_app_config() -> None:
    raw = controller_config(
        github_token="",
        github_app_id="Iv23liClientId",
        github_app_installation_id=4242,
        github_app_private_key=PRIVATE_KEY,
    )
    cfg = parse_config(encode(raw))
    assert cfg.credentials == AppCredentials(
        app_id="Iv23liClientId", installation_id=4242, private_key=PRIVATE_KEY
    )


def test_token_wins_over_partial_app_config() -> None:
    # ARC's tidy(): a token plus an incomplete app is a valid PAT config.
    raw = controller_config(github_app_id="1", github_app_private_key=PRIVATE_KEY)
    assert parse_config(encode(raw)).credentials == TokenCredentials(token=TOKEN)


def test_keys_match_case_insensitively_and_unknown_keys_are_ignored() -> None:
    raw = {k.upper(): v for k, v in controller_config().items()}
    raw["Configure_URL"] = raw.pop("CONFIGURE_URL")
    raw["something_new"] = {"nested": [1, 2]}
    cfg = parse_config(json.dumps(raw))
    assert cfg.configure_url == "https://github.com/acme"
    assert cfg.runner_scale_set_id == 7


def test_null_leaves_zero_value_like_go() -> None:
    raw = controller_config(min_runners=None, server_root_ca=None, metrics_addr=None)
    cfg = parse_config(encode(raw))
    assert cfg.min_runners == 0
    assert cfg.server_root_ca == ""
    assert cfg.metrics_addr == ""


def test_installation_id_accepts_a_digit_string() -> None:
    raw = controller_config(
        github_token="",
        github_app_id="12",
        github_app_installation_id="4242",
        github_app_private_key=PRIVATE_KEY,
    )
    creds = parse_config(encode(raw)).credentials
    assert isinstance(creds, AppCredentials)
    assert creds.installation_id == 4242


def test_utf8_bom_and_str_input_are_accepted() -> None:
    body = encode(controller_config())
    assert parse_config(b"\xef\xbb\xbf" + body).runner_scale_set_id == 7
    assert parse_config(body.decode()).runner_scale_set_id == 7


def test_log_level_is_case_insensitive_and_normalised() -> None:
    assert parse_config(encode(controller_config(log_level="WARN"))).log_level == "warn"


def test_metrics_config_is_decoded() -> None:
    raw = controller_config(
        metrics={
            "counters": {"gha_started_jobs_total": {"labels": ["repository", "job_name"]}},
            "Gauges": {"gha_assigned_jobs": {"labels": ["name"]}, "gha_busy_runners": {}},
            "histograms": {
                "gha_job_startup_duration_seconds": {"labels": [], "buckets": [1, 2.5, 10]},
                "gha_job_execution_duration_seconds": {"labels": None, "buckets": None},
            },
        }
    )
    metrics = parse_config(encode(raw)).metrics
    assert metrics is not None
    assert dict(metrics.counters) == {
        "gha_started_jobs_total": MetricSpec(labels=("repository", "job_name"))
    }
    assert dict(metrics.gauges) == {
        "gha_assigned_jobs": MetricSpec(labels=("name",)),
        "gha_busy_runners": MetricSpec(labels=()),
    }
    assert dict(metrics.histograms) == {
        "gha_job_startup_duration_seconds": MetricSpec(labels=(), buckets=(1.0, 2.5, 10.0)),
        "gha_job_execution_duration_seconds": MetricSpec(labels=(), buckets=()),
    }


def test_empty_metrics_object_means_empty_allow_list() -> None:
    metrics = parse_config(encode(controller_config(metrics={}))).metrics
    assert metrics is not None
    assert (len(metrics.counters), len(metrics.gauges), len(metrics.histograms)) == (0, 0, 0)


def test_server_root_ca_accepts_a_pem_bundle_with_one_good_certificate() -> None:
    bad_block = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"
    pem = bad_block + self_signed_pem()
    assert parse_config(encode(controller_config(server_root_ca=pem))).server_root_ca == pem


# --------------------------------------------------------------------------- validation table

APP_ONLY = {"github_token": "", "github_app_id": "1", "github_app_installation_id": 10}

INVALID: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "missing configure_url",
        {"configure_url": ""},
        "GitHubConfigUrl is not provided",
        "configure_url",
    ),
    (
        "missing namespace",
        {"ephemeral_runner_set_namespace": ""},
        'EphemeralRunnerSetNamespace "" or EphemeralRunnerSetName "linux-abcde" is missing',
        "ephemeral_runner_set_namespace",
    ),
    (
        "missing ERS name",
        {"ephemeral_runner_set_name": None},
        'EphemeralRunnerSetNamespace "arc-runners" or EphemeralRunnerSetName "" is missing',
        "ephemeral_runner_set_name",
    ),
    (
        "scale set id 0",
        {"runner_scale_set_id": 0},
        'RunnerScaleSetId "0" is missing',
        "runner_scale_set_id",
    ),
    (
        "min above max",
        {"min_runners": 5, "max_runners": 2},
        'MinRunners "5" cannot be greater than MaxRunners "2"',
        "min_runners",
    ),
    (
        "unknown vault type",
        {"vault_type": "invalid_vault_type", "vault_lookup_key": "testkey"},
        "unsupported vault type: invalid_vault_type",
        "vault_type",
    ),
    (
        "vault without lookup key",
        {"vault_type": "azure_key_vault"},
        'VaultLookupKey is required when VaultType is set to "azure_key_vault"',
        "vault_lookup_key",
    ),
    (
        "azure key vault without its object",
        {"vault_type": "azure_key_vault", "vault_lookup_key": "testkey"},
        "failed to create Azure Key Vault client: failed to validate config: "
        "azure_key_vault is not set",
        "azure_key_vault",
    ),
    (
        "app id and installation but no key",
        APP_ONLY,
        "AppConfig validation failed: no credentials provided: either a PAT or GitHub App "
        "credentials should be provided",
        "github_token",
    ),
    (
        "client id app without key",
        {**APP_ONLY, "github_app_id": "Iv23f8doAlphaNumer1c"},
        "AppConfig validation failed: no credentials provided: either a PAT or GitHub App "
        "credentials should be provided",
        "github_token",
    ),
    (
        "app with zero installation id",
        {**APP_ONLY, "github_app_installation_id": 0, "github_app_private_key": PRIVATE_KEY},
        "AppConfig validation failed: no credentials provided: either a PAT or GitHub App "
        "credentials should be provided",
        "github_token",
    ),
    (
        "both PAT and full app",
        {
            "github_app_id": "1",
            "github_app_installation_id": 10,
            "github_app_private_key": PRIVATE_KEY,
        },
        "AppConfig validation failed: both PAT and GitHub App credentials provided. should "
        "only provide one",
        "github_token",
    ),
    (
        "max runners negative",
        {"max_runners": -1, "min_runners": -3},
        "maxRunners must be between 0 and MaxInt32 (2147483647), got max_runners -1",
        "max_runners",
    ),
    (
        "max runners above int32",
        {"max_runners": 2147483648},
        "maxRunners must be between 0 and MaxInt32 (2147483647), got max_runners 2147483648",
        "max_runners",
    ),
    (
        "empty log level",
        {"log_level": ""},
        'invalid log level: "" (log_level must be one of debug|info|warn|error)',
        "log_level",
    ),
    (
        "bad log level",
        {"log_level": "trace"},
        'invalid log level: "trace" (log_level must be one of debug|info|warn|error)',
        "log_level",
    ),
    (
        "log format is case-sensitive",
        {"log_format": "JSON"},
        'invalid log format: "JSON" (log_format must be json or text)',
        "log_format",
    ),
    (
        "empty log format",
        {"log_format": ""},
        'invalid log format: "" (log_format must be json or text)',
        "log_format",
    ),
    (
        "configure_url without scheme",
        {"configure_url": "github.com/some_org/some_repo"},
        'configure_url "github.com/some_org/some_repo" must be an absolute http(s) URL, '
        "e.g. https://github.com/<org>",
        "configure_url",
    ),
    (
        "configure_url with too many segments",
        {"configure_url": "https://github.com/some/random/path"},
        '"https://github.com/some/random/path": invalid config URL, should point to an '
        "enterprise, org, or repository",
        "configure_url",
    ),
    (
        "configure_url without a path",
        {"configure_url": "https://github.com/"},
        '"https://github.com": invalid config URL, should point to an enterprise, org, or '
        "repository",
        "configure_url",
    ),
    (
        "server_root_ca not PEM",
        {"server_root_ca": "not a certificate"},
        "failed to parse root certificate: server_root_ca holds no valid PEM certificate",
        "server_root_ca",
    ),
    (
        "max_runners as a string",
        {"max_runners": "5"},
        "failed to decode config: max_runners must be an integer, got string",
        "max_runners",
    ),
    (
        "scale set id as a float",
        {"runner_scale_set_id": 7.5},
        "failed to decode config: runner_scale_set_id must be an integer, got number",
        "runner_scale_set_id",
    ),
    (
        "min_runners as bool",
        {"min_runners": True},
        "failed to decode config: min_runners must be an integer, got bool",
        "min_runners",
    ),
    (
        "installation id non-numeric string",
        {"github_app_installation_id": "abc"},
        "failed to decode config: github_app_installation_id must be an integer (or a string "
        "of digits), got string",
        "github_app_installation_id",
    ),
    (
        "token as a number",
        {"github_token": 12345},
        "failed to decode config: github_token must be a string, got number",
        "github_token",
    ),
    (
        "metrics as a list",
        {"metrics": []},
        "failed to decode config: metrics must be an object or null, got array",
        "metrics",
    ),
    (
        "metric entry null",
        {"metrics": {"gauges": {"gha_busy_runners": None}}},
        'failed to decode config: metrics.gauges["gha_busy_runners"] must be an object, got null',
        'metrics.gauges["gha_busy_runners"]',
    ),
    (
        "metric labels not strings",
        {"metrics": {"counters": {"gha_started_jobs_total": {"labels": [1]}}}},
        'failed to decode config: metrics.counters["gha_started_jobs_total"].labels must be '
        "an array of strings, got array",
        'metrics.counters["gha_started_jobs_total"].labels',
    ),
    (
        "histogram buckets not numbers",
        {"metrics": {"histograms": {"gha_job_startup_duration_seconds": {"buckets": ["1"]}}}},
        'failed to decode config: metrics.histograms["gha_job_startup_duration_seconds"]'
        ".buckets must be an array of numbers, got array",
        'metrics.histograms["gha_job_startup_duration_seconds"].buckets',
    ),
]


@pytest.mark.parametrize(
    ("overrides", "message", "field"),
    [pytest.param(o, m, f, id=name) for name, o, m, f in INVALID],
)
def test_invalid_config(overrides: dict[str, Any], message: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(encode(controller_config(**overrides)))
    assert str(info.value) == message
    assert info.value.field == field
    assert "\n" not in str(info.value)


def test_missing_app_config_when_no_credential_key_is_present() -> None:
    raw = controller_config()
    for key in ("github_app_id", "github_app_installation_id", "github_app_private_key"):
        del raw[key]
    del raw["github_token"]
    with pytest.raises(ConfigError, match=r"^AppConfig validation failed: missing app config$"):
        parse_config(encode(raw))


def test_a_null_credential_key_counts_as_present_like_go() -> None:
    raw = {k: v for k, v in controller_config().items() if not k.startswith("github_")}
    raw["github_token"] = None
    with pytest.raises(ConfigError, match="no credentials provided"):
        parse_config(encode(raw))


def test_validation_runs_in_arc_order() -> None:
    # Everything is wrong; ARC reports the URL first, then the ERS, then the id.
    raw = controller_config(
        configure_url="", ephemeral_runner_set_name="", runner_scale_set_id=0, log_level=""
    )
    with pytest.raises(ConfigError, match=r"^GitHubConfigUrl is not provided$"):
        parse_config(encode(raw))
    raw["configure_url"] = "https://github.com/acme"
    with pytest.raises(ConfigError, match="EphemeralRunnerSetName"):
        parse_config(encode(raw))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "failed to decode config: Expecting property name enclosed in double"),
        (b"[1, 2]", "failed to decode config: expected a JSON object, got array"),
        (b"\xff\xfe", "failed to decode config: the file is not UTF-8"),
    ],
)
def test_undecodable_file(raw: bytes, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert str(info.value).startswith(message)
    assert info.value.field == ""


# --------------------------------------------------------------------------- secrets


def secret_configs() -> list[dict[str, Any]]:
    """Configs carrying the token and/or the key that fail somewhere, at every stage."""
    app = {
        "github_token": "",
        "github_app_id": "12",
        "github_app_installation_id": 3,
        "github_app_private_key": PRIVATE_KEY,
    }
    both = {**app, "github_token": TOKEN}
    bad_stages: list[dict[str, Any]] = [
        {"configure_url": ""},
        {"runner_scale_set_id": 0},
        {"min_runners": 9, "max_runners": 1},
        {"vault_type": "azure_key_vault", "vault_lookup_key": "k"},
        {"log_level": "loud"},
        {"configure_url": "https://x:{S}@ghes.example/a/b/c"},
        {"configure_url": "ghes.example/{S}"},
        {"ephemeral_runner_set_name": "", "ephemeral_runner_set_namespace": "{S}"},
        {"server_root_ca": PRIVATE_KEY},
        {"metrics": "x"},
        {},
    ]
    out = []
    for creds in (app, both, {"github_token": TOKEN}):
        # "{S}" stands for a secret of this very config pasted into a non-secret field.
        secret = str(creds["github_token"]) or "TOPSECRETkeyMATERIAL"
        for stage in bad_stages:
            filled = {
                k: v.replace("{S}", secret) if isinstance(v, str) else v for k, v in stage.items()
            }
            out.append(controller_config(**{**creds, **filled}))
    # Wrong types on the secret fields themselves.
    out.append(controller_config(github_token=[TOKEN]))
    out.append(controller_config(github_app_private_key={"pem": PRIVATE_KEY}))
    return out


def test_errors_and_reprs_never_contain_secrets() -> None:
    failures = 0
    for raw in secret_configs():
        try:
            cfg = parse_config(encode(raw))
        except ConfigError as exc:
            failures += 1
            for text in (str(exc), repr(exc)):
                assert TOKEN not in text
                assert "TOPSECRET" not in text
        else:
            for text in (repr(cfg), str(cfg), repr(cfg.credentials), str(cfg.credentials)):
                assert TOKEN not in text
                assert "TOPSECRET" not in text
    # Nearly every case must actually have failed, or the test proves nothing.
    assert failures >= len(secret_configs()) - 3


def test_credential_reprs_hide_values() -> None:
    assert repr(TokenCredentials(TOKEN)) == "TokenCredentials(token=***)"
    app = AppCredentials(app_id="12", installation_id=3, private_key=PRIVATE_KEY)
    assert repr(app) == "AppCredentials(app_id='12', installation_id=3, private_key=***)"


# --------------------------------------------------------------------------- configure_url

TARGETS = [
    ("https://github.com/org/repo", Scope.REPOSITORY, "", "org", "repo", True),
    ("https://github.com/org/repo/", Scope.REPOSITORY, "", "org", "repo", True),
    ("https://github.com/org", Scope.ORGANIZATION, "", "org", "", True),
    (
        "https://github.com/enterprises/my-enterprise",
        Scope.ENTERPRISE,
        "my-enterprise",
        "",
        "",
        True,
    ),
    (
        "https://github.com/Enterprises/my-enterprise/",
        Scope.ENTERPRISE,
        "my-enterprise",
        "",
        "",
        True,
    ),
    ("https://www.github.com/org", Scope.ORGANIZATION, "", "org", "", True),
    ("https://www.github.com/org/", Scope.ORGANIZATION, "", "org", "", True),
    ("https://github.localhost/org", Scope.ORGANIZATION, "", "org", "", True),
    ("https://GitHub.com/org", Scope.ORGANIZATION, "", "org", "", True),
    ("https://my-ghes.com/org", Scope.ORGANIZATION, "", "org", "", False),
    ("https://my-ghes.com/org/", Scope.ORGANIZATION, "", "org", "", False),
    ("https://my-ghes.ghe.com/org/", Scope.ORGANIZATION, "", "org", "", True),
    ("https://github.com:443/org", Scope.ORGANIZATION, "", "org", "", False),
    ("/https://github.com/org/", Scope.ORGANIZATION, "", "org", "", True),
]


@pytest.mark.parametrize(("url", "scope", "enterprise", "org", "repo", "hosted"), TARGETS)
def test_parse_github_target(
    url: str, scope: Scope, enterprise: str, org: str, repo: str, hosted: bool
) -> None:
    target = parse_github_target(url)
    assert (target.scope, target.enterprise, target.organization, target.repository) == (
        scope,
        enterprise,
        org,
        repo,
    )
    assert target.is_hosted is hosted
    assert target.configure_url == url.strip("/")


@pytest.mark.parametrize(
    "url", ["https://github.com/", "https://github.com", "https://github.com/some/random/path"]
)
def test_parse_github_target_rejects(url: str) -> None:
    with pytest.raises(ConfigError, match="invalid config URL"):
        parse_github_target(url)


@pytest.mark.parametrize(
    ("url", "force", "api"),
    [
        ("https://github.com/org/repo", False, "https://api.github.com"),
        ("https://www.github.com/org", False, "https://api.github.com"),
        ("https://github.ghe.com/org/repo", False, "https://api.github.ghe.com"),
        ("https://ghes.com/org/repo", False, "https://ghes.com/api/v3"),
        ("https://test.ghe.com/org/repo", True, "https://test.ghe.com/api/v3"),
        ("https://github.com/org", True, "https://github.com/api/v3"),
        ("http://ghes.local:8443/org", False, "http://ghes.local:8443/api/v3"),
    ],
)
def test_api_url(url: str, force: bool, api: str) -> None:
    assert parse_github_target(url, force_ghes=force).api_url == api


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("https://github.com/acme", "/orgs/acme/actions/runners/registration-token"),
        ("https://github.com/acme/app", "/repos/acme/app/actions/runners/registration-token"),
        (
            "https://github.com/enterprises/big",
            "/enterprises/big/actions/runners/registration-token",
        ),
    ],
)
def test_registration_token_path(url: str, path: str) -> None:
    assert parse_github_target(url).registration_token_path == path


# --------------------------------------------------------------------------- load_config


def test_load_config_requires_the_env_var() -> None:
    with pytest.raises(ConfigError) as info:
        load_config({})
    assert str(info.value) == "LISTENER_CONFIG_PATH environment variable is not set"


def test_load_config_reads_the_file_and_force_ghes(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(encode(controller_config()))
    env = {"LISTENER_CONFIG_PATH": str(path)}
    assert load_config(env).target.is_hosted is True
    # Presence is what counts, even with an empty value.
    forced = load_config({**env, "GITHUB_ACTIONS_FORCE_GHES": ""})
    assert forced.target.is_hosted is False
    assert forced.target.api_url == "https://github.com/api/v3"


def test_load_config_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(ConfigError) as info:
        load_config({"LISTENER_CONFIG_PATH": str(missing)})
    assert str(info.value) == f"open {missing}: no such file or directory"  # Go's words
    assert info.value.line == f"Failed to read config: open {missing}: no such file or directory"


def test_load_config_empty_path_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An empty path must not be read as "." (the working directory): that would report
    # "Is a directory", or read a stray config.json-less directory, instead of the real cause.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_config({"LISTENER_CONFIG_PATH": ""})
    assert str(info.value) == "LISTENER_CONFIG_PATH environment variable is empty"
