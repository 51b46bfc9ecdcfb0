"""The listener config file the ARC controller writes (config.json): what it holds
(:class:`Config` and its parts), where it is (:func:`config_path`, ``LISTENER_CONFIG_PATH``)
and :class:`ConfigError`, whose fatal lines are ARC's.

PURE: no I/O. The decoding and ARC's validation rules are ``listener.config_parse``
(:func:`~listener.config_parse.parse_config`); ``configure_url`` is read by
``listener.github_target``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Final


class VaultError(Exception):
    """The vault config is unusable or the secret could not be read (one line, ARC's words).

    ``invalid_config``: the vault settings themselves are wrong (ARC reports those as "failed
    to validate config"), as opposed to a vault that could not be reached or read.
    """

    def __init__(self, message: str, *, invalid_config: bool = False) -> None:
        super().__init__(message)
        self.invalid_config = invalid_config


@dataclass(frozen=True)
class AzureKeyVaultConfig:
    """config.json ``azure_key_vault``: ARC's ``azurekeyvault.Config``.

    ``proxy`` is Go's ``httpproxy.Config`` (``HTTPProxy``, ``HTTPSProxy``, ``NoProxy``), or
    None when absent; the controller itself never writes one.
    """

    tenant_id: str
    client_id: str
    url: str
    certificate_path: str
    proxy: tuple[str, str, str] | None = None


VaultReader = Callable[[AzureKeyVaultConfig, str], str]
"""Checks the vault settings and reads one secret (``listener.vault.read_secret``)."""

MAX_INT32: Final = 2_147_483_647

LOG_LEVELS: Final = ("debug", "info", "warn", "error")
LOG_FORMATS: Final = ("json", "text")
VAULT_TYPE_AZURE_KEY_VAULT: Final = "azure_key_vault"


class ConfigError(ValueError):
    """A config value ARC would refuse. ``str(e)`` is one line and never holds a secret.

    ``field`` names the config.json key at fault ("" when the problem is the file itself).
    ``stage`` says where ARC would have failed, which decides its fatal line (:attr:`line`):
    ``env`` (no config path), ``read`` (the file, its JSON, the vault), ``validate``, or
    ``vault-validate`` (validation of a config whose credentials are in a vault).
    """

    def __init__(self, message: str, *, field: str = "", stage: str = "validate") -> None:
        # Guarantee the one-line promise even if a value with a newline is quoted.
        super().__init__(" ".join(message.splitlines()))
        self.field = field
        self.stage = stage

    @property
    def line(self) -> str:
        """The line ARC's ``ghalistener`` prints for this error (without Go's timestamp).

        Operators alert on these lines, so they are ARC's words: ``Failed to read config:``
        then, for validation, ``failed to validate configuration:``.
        """
        if self.stage == "env":
            return f"Error: {self}"
        if self.stage == "validate":
            return f"Failed to read config: failed to validate configuration: {self}"
        if self.stage == "vault-validate":  # ARC validates again after reading the vault
            return f"Failed to read config: config validation failed: {self}"
        return f"Failed to read config: {self}"


class Scope(StrEnum):
    ORGANIZATION = "organization"
    REPOSITORY = "repository"
    ENTERPRISE = "enterprise"


@dataclass(frozen=True)
class GitHubTarget:
    """What ``configure_url`` points at (ARC/scaleset ``ParseGitHubConfigFromURL``)."""

    configure_url: str
    scheme: str
    host: str
    scope: Scope
    enterprise: str
    organization: str
    repository: str
    is_hosted: bool

    @property
    def api_url(self) -> str:
        """GitHub REST base URL, without a trailing slash.

        Hosted: ``<scheme>://api.<host>`` (``www.github.com`` → ``api.github.com``); the
        scheme is the config URL's own, as in scaleset's ``GitHubAPIURL``. GHES:
        ``<scheme>://<host>/api/v3``.
        """
        if self.is_hosted:
            host = "api.github.com" if self.host.lower() == "www.github.com" else f"api.{self.host}"
            return f"{self.scheme}://{host}"
        return f"{self.scheme}://{self.host}/api/v3"

    @property
    def registration_token_path(self) -> str:
        if self.scope is Scope.ENTERPRISE:
            return f"/enterprises/{self.enterprise}/actions/runners/registration-token"
        if self.scope is Scope.ORGANIZATION:
            return f"/orgs/{self.organization}/actions/runners/registration-token"
        return f"/repos/{self.organization}/{self.repository}/actions/runners/registration-token"


@dataclass(frozen=True, repr=False)
class TokenCredentials:
    """A personal access token. Never printed."""

    token: str

    def __repr__(self) -> str:
        return "TokenCredentials(token=***)"

    __str__ = __repr__


@dataclass(frozen=True, repr=False)
class AppCredentials:
    """GitHub App credentials; ``app_id`` may be the App ID or its Client ID."""

    app_id: str
    installation_id: int
    private_key: str

    def __repr__(self) -> str:
        return (
            f"AppCredentials(app_id={self.app_id!r}, "
            f"installation_id={self.installation_id}, private_key=***)"
        )

    __str__ = __repr__


Credentials = TokenCredentials | AppCredentials


@dataclass(frozen=True)
class MetricSpec:
    """One entry of ``metrics.counters|gauges|histograms``: label names, optional buckets."""

    labels: tuple[str, ...]
    buckets: tuple[float, ...] = ()


def empty_specs() -> Mapping[str, MetricSpec]:
    return MappingProxyType({})


@dataclass(frozen=True)
class MetricsConfig:
    """ARS ``spec.listenerMetrics``: the allow-list of metrics and their labels/buckets."""

    counters: Mapping[str, MetricSpec] = field(default_factory=empty_specs)
    gauges: Mapping[str, MetricSpec] = field(default_factory=empty_specs)
    histograms: Mapping[str, MetricSpec] = field(default_factory=empty_specs)


@dataclass(frozen=True)
class Config:
    configure_url: str
    target: GitHubTarget
    credentials: Credentials
    ephemeral_runner_set_namespace: str
    ephemeral_runner_set_name: str
    max_runners: int
    min_runners: int
    runner_scale_set_id: int
    runner_scale_set_name: str
    server_root_ca: str
    log_level: str
    log_format: str
    metrics_addr: str
    metrics_endpoint: str
    metrics: MetricsConfig | None


def config_path(env: Mapping[str, str]) -> str:
    """The config file named by ``LISTENER_CONFIG_PATH``; ConfigError when unset or empty."""
    path = env.get("LISTENER_CONFIG_PATH")
    if path is None:
        raise ConfigError("LISTENER_CONFIG_PATH environment variable is not set", stage="env")
    if path == "":
        # Path("") is the working directory; reading it would only say "Is a directory".
        raise ConfigError("LISTENER_CONFIG_PATH environment variable is empty", stage="env")
    return path


def unreadable(path: str, reason: str) -> ConfigError:
    """The error for a config file that cannot be read: Go's os.Open error text,
    ``open <path>: <lower-case errno text>``, as ARC prints it."""
    return ConfigError(f"open {path}: {reason[:1].lower()}{reason[1:]}", stage="read")


def forces_ghes(env: Mapping[str, str]) -> bool:
    """``GITHUB_ACTIONS_FORCE_GHES`` being present at all (any value) forces GHES URL rules."""
    return "GITHUB_ACTIONS_FORCE_GHES" in env
