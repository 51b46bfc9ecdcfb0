"""The listener config file the ARC controller writes (config.json) → :class:`Config`.

PURE: no I/O. :func:`config_path` says which file to read (``LISTENER_CONFIG_PATH``); the
composition root (``listener.startup.load_config``) reads it and hands the bytes to
:func:`parse_config`, with the Azure Key Vault reader (``listener.vault.read_secret``) for a
config whose credentials are in a vault. The decoding follows Go's ``encoding/json`` as ARC
uses it (keys matched case-insensitively, unknown keys ignored, ``null`` leaves a field at
its zero value)
and the validation reproduces ARC's rules and messages, in ARC's order, so a config that ARC
refuses is refused here with the same words.

Deliberate differences from ARC, each stricter or friendlier, never looser:

* ``github_app_installation_id`` may also be a string of decimal digits. The controller always
  writes a number, but the Kubernetes Secret it copies the value from holds a string, so a
  hand-written config often has one; Go would reject it with a type error.
* ``vault_type`` = ``azure_key_vault`` without an ``azure_key_vault`` object is one line
  (ARC dereferences the missing object and panics).

Fatal lines are ARC's (:attr:`ConfigError.line`): ``Failed to read config: failed to validate
configuration: ...`` for validation, ``Failed to read config: ...`` for the file, its JSON and
the vault (e.g. ``unsupported vault type: ...``).
* ``configure_url`` is parsed at start-up (ARC only does it when building its client) and must
  be an absolute http(s) URL.
* ``server_root_ca`` is parsed at start-up (ARC: when building its client).
* With no ``vault_type``, credentials are always validated, even if ``vault_lookup_key`` is set
  (ARC skips the check in that case and then dereferences missing credentials).

The messages are a compatibility surface operators alert on, so they stay next to the rules
that produce them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from listener.gojson import Fields, type_name


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
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1

LOG_LEVELS: Final = ("debug", "info", "warn", "error")
LOG_FORMATS: Final = ("json", "text")
VAULT_TYPE_AZURE_KEY_VAULT: Final = "azure_key_vault"
# Shorter "secrets" are not masked in messages: masking a 2-letter token would garble them.
_MIN_SECRET_LEN: Final = 6

# The four credential keys live in ARC's embedded AppConfig struct. Go allocates that struct
# as soon as any one of them appears in the file (even as null); when none appears, ARC
# reports "missing app config".
_CREDENTIAL_KEYS: Final = (
    "github_app_id",
    "github_app_installation_id",
    "github_app_private_key",
    "github_token",
)


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


def _empty_specs() -> Mapping[str, MetricSpec]:
    return MappingProxyType({})


@dataclass(frozen=True)
class MetricsConfig:
    """ARS ``spec.listenerMetrics``: the allow-list of metrics and their labels/buckets."""

    counters: Mapping[str, MetricSpec] = field(default_factory=_empty_specs)
    gauges: Mapping[str, MetricSpec] = field(default_factory=_empty_specs)
    histograms: Mapping[str, MetricSpec] = field(default_factory=_empty_specs)


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


# --------------------------------------------------------------------------- URL


def _redact_userinfo(url: str) -> str:
    """The URL with any ``user:password@`` replaced, for use in error messages."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1***@", url)


def _is_hosted(host: str, force_ghes: bool) -> bool:
    if force_ghes:
        return False
    # Same comparisons as scaleset: the three names case-insensitively, the suffix exactly.
    return host.lower() in ("github.com", "www.github.com", "github.localhost") or host.endswith(
        ".ghe.com"
    )


def parse_github_target(url: str, *, force_ghes: bool = False) -> GitHubTarget:
    """Parse ``configure_url`` the way ARC does: org, ``org/repo`` or ``enterprises/<name>``.

    Surrounding "/" are trimmed; the path must have one or two segments; two segments whose
    first is ``enterprises`` (any case) mean an enterprise.
    """
    trimmed = url.strip("/")
    shown = _redact_userinfo(trimmed)
    invalid = ConfigError(
        f"{_go_quote(shown)}: invalid config URL, should point to an enterprise, org, or "
        "repository",
        field="configure_url",
    )
    try:
        parts = urlsplit(trimmed)
    except ValueError:
        raise invalid from None
    host = parts.netloc.rpartition("@")[2]
    if parts.scheme.lower() not in ("http", "https") or not host:
        raise ConfigError(
            f"configure_url {_go_quote(shown)} must be an absolute http(s) URL, "
            "e.g. https://github.com/<org>",
            field="configure_url",
        )

    segments = unquote(parts.path).strip("/").split("/")
    enterprise = organization = repository = ""
    if len(segments) == 1:
        if segments[0] == "":
            raise invalid
        scope = Scope.ORGANIZATION
        organization = segments[0]
    elif len(segments) == 2:
        if segments[0].lower() == "enterprises":
            scope = Scope.ENTERPRISE
            enterprise = segments[1]
        else:
            scope = Scope.REPOSITORY
            organization, repository = segments
    else:
        raise invalid

    return GitHubTarget(
        configure_url=trimmed,
        scheme=parts.scheme.lower(),
        host=host,
        scope=scope,
        enterprise=enterprise,
        organization=organization,
        repository=repository,
        is_hosted=_is_hosted(host, force_ghes),
    )


# --------------------------------------------------------------------------- JSON decoding


def _go_quote(value: str) -> str:
    """Close to Go's ``%q`` for the values ARC quotes (names, URLs)."""
    return json.dumps(value, ensure_ascii=False)


def _decode_error(key: str, want: str, value: object) -> ConfigError:
    # Only the JSON type of the offending value is named, never the value: the field might
    # hold a secret.
    return ConfigError(
        f"failed to decode config: {key} must be {want}, got {type_name(value)}",
        field=key,
        stage="read",
    )


class _Object(Fields):
    """A config.json object: Go's field matching, ARC's decode errors."""

    def __init__(self, raw: Mapping[str, Any], where: str = "") -> None:
        # Go prefers an exact key match, then a case-insensitive one; for a file written by
        # the controller (exact keys, no duplicates) "last case-folded key wins" is identical.
        super().__init__(raw)
        self._where = where

    def name(self, key: str) -> str:
        return f"{self._where}{key}"

    def string(self, key: str) -> str:
        value = self.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise _decode_error(self.name(key), "a string", value)
        return value

    def integer(self, key: str, *, allow_digit_string: bool = False) -> int:
        value = self.get(key)
        if value is None:
            return 0
        if allow_digit_string and isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            want = "an integer (or a string of digits)" if allow_digit_string else "an integer"
            raise _decode_error(self.name(key), want, value)
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ConfigError(
                f"failed to decode config: {self.name(key)} {value} overflows a 64-bit integer",
                field=self.name(key),
                stage="read",
            )
        return value


def _metric_specs(raw: Any, where: str, *, with_buckets: bool) -> Mapping[str, MetricSpec]:
    if raw is None:
        return _empty_specs()
    if not isinstance(raw, dict):
        raise _decode_error(where, "an object", raw)
    specs: dict[str, MetricSpec] = {}
    for name, entry in raw.items():
        entry_where = f"{where}[{_go_quote(name)}]"
        if not isinstance(entry, dict):
            raise _decode_error(entry_where, "an object", entry)
        obj = _Object(entry, f"{entry_where}.")
        labels = obj.get("labels")
        if labels is None:
            labels = []
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise _decode_error(obj.name("labels"), "an array of strings", labels)
        buckets: list[float] = []
        if with_buckets:
            raw_buckets = obj.get("buckets")
            if raw_buckets is None:
                raw_buckets = []
            if not isinstance(raw_buckets, list) or not all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in raw_buckets
            ):
                raise _decode_error(obj.name("buckets"), "an array of numbers", raw_buckets)
            buckets = [float(x) for x in raw_buckets]
        specs[name] = MetricSpec(labels=tuple(labels), buckets=tuple(buckets))
    return MappingProxyType(specs)


def _metrics_config(raw: Any) -> MetricsConfig | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _decode_error("metrics", "an object or null", raw)
    obj = _Object(raw, "metrics.")
    return MetricsConfig(
        counters=_metric_specs(obj.get("counters"), obj.name("counters"), with_buckets=False),
        gauges=_metric_specs(obj.get("gauges"), obj.name("gauges"), with_buckets=False),
        histograms=_metric_specs(obj.get("histograms"), obj.name("histograms"), with_buckets=True),
    )


# --------------------------------------------------------------------------- validation


def _credentials(obj: _Object, prefix: str = "AppConfig validation failed: ") -> Credentials:
    """ARC ``AppConfig.Validate`` then ``tidy``: exactly one of a PAT or a full App."""
    if not any(obj.has(key) for key in _CREDENTIAL_KEYS):
        raise ConfigError(prefix + "missing app config", field="github_token")
    token = obj.string("github_token")
    app_id = obj.string("github_app_id")
    installation_id = obj.integer("github_app_installation_id", allow_digit_string=True)
    private_key = obj.string("github_app_private_key")

    has_token = token != ""
    has_app = app_id != "" and installation_id > 0 and private_key != ""
    if has_token and has_app:
        raise ConfigError(
            prefix + "both PAT and GitHub App credentials provided. should only provide one",
            field="github_token",
        )
    if not has_token and not has_app:
        raise ConfigError(
            prefix
            + "no credentials provided: either a PAT or GitHub App credentials should be provided",
            field="github_token",
        )
    if has_token:
        return TokenCredentials(token=token)
    return AppCredentials(app_id=app_id, installation_id=installation_id, private_key=private_key)


def _azure_key_vault(obj: _Object) -> AzureKeyVaultConfig:
    raw = obj.get("azure_key_vault")
    if raw is None:
        # ARC dereferences the missing object and panics; say what is missing instead.
        raise VaultError("azure_key_vault is not set", invalid_config=True)
    if not isinstance(raw, dict):
        raise _decode_error("azure_key_vault", "an object", raw)
    akv = _Object(raw, "azure_key_vault.")
    proxy = None
    raw_proxy = akv.get("proxy")
    if raw_proxy is not None:
        if not isinstance(raw_proxy, dict):
            raise _decode_error("azure_key_vault.proxy", "an object", raw_proxy)
        # Go's httpproxy.Config has no JSON tags: its field names are the keys.
        p = _Object(raw_proxy, "azure_key_vault.proxy.")
        proxy = (p.string("HTTPProxy"), p.string("HTTPSProxy"), p.string("NoProxy"))
    return AzureKeyVaultConfig(
        tenant_id=akv.string("tenant_id"),
        client_id=akv.string("client_id"),
        url=akv.string("url"),
        certificate_path=akv.string("certificate_path"),
        proxy=proxy,
    )


def _vault_credentials(obj: _Object, lookup_key: str, read_secret: VaultReader) -> Credentials:
    """ARC's vault path: check the vault config, read the secret, parse it as the app config."""
    try:
        raw = read_secret(_azure_key_vault(obj), lookup_key)
    except VaultError as exc:
        if exc.invalid_config:
            where = "failed to create Azure Key Vault client: failed to validate config"
        elif str(exc).startswith("failed to create azsecrets client"):
            where = "failed to create Azure Key Vault client"
        else:
            where = "failed to get app config from vault"
        raise ConfigError(f"{where}: {exc}", field="azure_key_vault", stage="read") from None
    prefix = "failed to read app config from string: "
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        # Only where the JSON broke, never the secret's text.
        raise ConfigError(
            f"{prefix}{exc.msg} at line {exc.lineno} column {exc.colno}",
            field="vault_lookup_key",
            stage="read",
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{prefix}expected a JSON object, got {type_name(data)}",
            field="vault_lookup_key",
            stage="read",
        )
    try:
        return _credentials(
            _Object(data), f"{prefix}failed to validate app config decoded from string: "
        )
    except ConfigError as exc:
        message = str(exc)
        if not message.startswith(prefix):
            message = prefix + message
        raise ConfigError(message, field="vault_lookup_key", stage="read") from None


_PEM_CERT = re.compile(
    r"-----BEGIN CERTIFICATE-----\s.*?-----END CERTIFICATE-----", re.DOTALL | re.ASCII
)


def _check_root_ca(pem: str) -> None:
    """Like Go's ``AppendCertsFromPEM``: fine when at least one certificate parses."""
    # Imported here: cryptography costs ~9 MiB of RSS, and only a GHES root CA needs it.
    from cryptography import x509

    for block in _PEM_CERT.findall(pem):
        try:
            x509.load_pem_x509_certificate(block.encode("ascii"))
        except ValueError:
            continue
        return
    raise ConfigError(
        "failed to parse root certificate: server_root_ca holds no valid PEM certificate",
        field="server_root_ca",
    )


def parse_config(
    raw: bytes | str, *, force_ghes: bool = False, read_vault_secret: VaultReader | None = None
) -> Config:
    """Decode and validate config.json. Raises :class:`ConfigError` on the first problem.

    With ``vault_type`` ``azure_key_vault`` the credentials are read with
    ``read_vault_secret`` (the composition root passes :func:`listener.vault.read_secret`, a
    network call; this module stays free of I/O). Without one, such a config is refused.
    """
    try:
        text = raw.decode("utf-8-sig") if isinstance(raw, bytes) else raw
        data = json.loads(text)
    except UnicodeDecodeError:
        raise ConfigError("failed to decode config: the file is not UTF-8", stage="read") from None
    except json.JSONDecodeError as exc:
        # JSONDecodeError's own text names only the position, never file content.
        raise ConfigError(
            f"failed to decode config: {exc.msg} at line {exc.lineno} column {exc.colno}",
            stage="read",
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"failed to decode config: expected a JSON object, got {type_name(data)}",
            stage="read",
        )
    obj = _Object(data)
    try:
        return _validate(
            obj, force_ghes=force_ghes, read_vault_secret=read_vault_secret or _no_vault
        )
    except ConfigError as exc:
        raise _scrubbed(exc, obj) from None


def _no_vault(_config: AzureKeyVaultConfig, _name: str) -> str:
    raise VaultError("this program was given no Azure Key Vault reader")


def _scrubbed(exc: ConfigError, obj: _Object) -> ConfigError:
    """``exc`` with the token and private key masked, wherever they turned up.

    The messages above only quote non-secret fields, but those can contain a secret by
    mistake (a token pasted into ``configure_url``); this is the safety net.
    """
    message = str(exc)
    for key in ("github_token", "github_app_private_key"):
        value = obj.get(key)
        if not isinstance(value, str):
            continue
        # The whole value, and each long line of a multi-line PEM key (messages are one line).
        pieces = [value, *(line.strip() for line in value.splitlines())]
        for piece in sorted(pieces, key=len, reverse=True):
            if len(piece) >= _MIN_SECRET_LEN:
                message = message.replace(piece, "***")
    return ConfigError(message, field=exc.field, stage=exc.stage)


def _check_arc_fields(
    configure_url: str,
    namespace: str,
    ers_name: str,
    scale_set_id: int,
    min_runners: int,
    max_runners: int,
) -> None:
    """ARC Config.Validate, in its order and words (credentials and vault are checked apart)."""
    if configure_url == "":
        raise ConfigError("GitHubConfigUrl is not provided", field="configure_url")
    if namespace == "" or ers_name == "":
        raise ConfigError(
            f"EphemeralRunnerSetNamespace {_go_quote(namespace)} or "
            f"EphemeralRunnerSetName {_go_quote(ers_name)} is missing",
            field="ephemeral_runner_set_namespace"
            if namespace == ""
            else "ephemeral_runner_set_name",
        )
    if scale_set_id == 0:
        raise ConfigError(
            f'RunnerScaleSetId "{scale_set_id}" is missing', field="runner_scale_set_id"
        )
    if max_runners < min_runners:
        raise ConfigError(
            f'MinRunners "{min_runners}" cannot be greater than MaxRunners "{max_runners}"',
            field="min_runners",
        )


def _validate(obj: _Object, *, force_ghes: bool, read_vault_secret: VaultReader) -> Config:
    configure_url = obj.string("configure_url")
    vault_type = obj.string("vault_type")
    vault_lookup_key = obj.string("vault_lookup_key")
    namespace = obj.string("ephemeral_runner_set_namespace")
    ers_name = obj.string("ephemeral_runner_set_name")
    max_runners = obj.integer("max_runners")
    min_runners = obj.integer("min_runners")
    scale_set_id = obj.integer("runner_scale_set_id")
    scale_set_name = obj.string("runner_scale_set_name")
    server_root_ca = obj.string("server_root_ca")
    log_level = obj.string("log_level")
    log_format = obj.string("log_format")
    metrics_addr = obj.string("metrics_addr")
    metrics_endpoint = obj.string("metrics_endpoint")
    metrics = _metrics_config(obj.get("metrics"))

    # ARC looks at the vault type before validating anything else.
    if vault_type not in ("", VAULT_TYPE_AZURE_KEY_VAULT):
        raise ConfigError(f"unsupported vault type: {vault_type}", field="vault_type", stage="read")
    try:
        _check_arc_fields(
            configure_url, namespace, ers_name, scale_set_id, min_runners, max_runners
        )
        if vault_type != "" and vault_lookup_key == "":
            raise ConfigError(
                f"VaultLookupKey is required when VaultType is set to {_go_quote(vault_type)}",
                field="vault_lookup_key",
            )
    except ConfigError as exc:
        if vault_type == "":
            raise
        # Behind a vault ARC reports validation as "config validation failed".
        raise ConfigError(str(exc), field=exc.field, stage="vault-validate") from None
    if vault_type != "":
        credentials = _vault_credentials(obj, vault_lookup_key, read_vault_secret)
    else:
        credentials = _credentials(obj)

    # scaleset listener.Config.Validate: the max must fit the service's int32.
    if not 0 <= max_runners <= MAX_INT32:
        raise ConfigError(
            f"maxRunners must be between 0 and MaxInt32 ({MAX_INT32}), got max_runners "
            f"{max_runners}",
            field="max_runners",
        )
    # ARC's logger set-up: level compared case-insensitively, format exactly.
    if log_level.lower() not in LOG_LEVELS:
        raise ConfigError(
            f"invalid log level: {_go_quote(log_level)} (log_level must be one of "
            f"{'|'.join(LOG_LEVELS)})",
            field="log_level",
        )
    if log_format not in LOG_FORMATS:
        raise ConfigError(
            f"invalid log format: {_go_quote(log_format)} (log_format must be json or text)",
            field="log_format",
        )
    target = parse_github_target(configure_url, force_ghes=force_ghes)
    if server_root_ca != "":
        _check_root_ca(server_root_ca)

    return Config(
        configure_url=configure_url,
        target=target,
        credentials=credentials,
        ephemeral_runner_set_namespace=namespace,
        ephemeral_runner_set_name=ers_name,
        max_runners=max_runners,
        min_runners=min_runners,
        runner_scale_set_id=scale_set_id,
        runner_scale_set_name=scale_set_name,
        server_root_ca=server_root_ca,
        log_level=log_level.lower(),
        log_format=log_format,
        metrics_addr=metrics_addr,
        metrics_endpoint=metrics_endpoint,
        metrics=metrics,
    )


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
