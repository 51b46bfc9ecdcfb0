"""config.json decoded as Go decodes it and validated by ARC's rules → :class:`Config`.

PURE: no I/O. ``listener.config.config_path`` says which file to read
(``LISTENER_CONFIG_PATH``); the composition root (``listener.startup.load_config``) reads it
and hands the bytes to :func:`parse_config`, with the Azure Key Vault reader
(``listener.vault.read_secret``) for a config whose credentials are in a vault. The decoding
follows Go's ``encoding/json`` as ARC uses it (``listener.config_json``) and the validation
reproduces ARC's rules and messages, in ARC's order, so a config that ARC refuses is refused
here with the same words.

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
from typing import Final

from listener.config import (
    LOG_FORMATS,
    LOG_LEVELS,
    MAX_INT32,
    VAULT_TYPE_AZURE_KEY_VAULT,
    AppCredentials,
    AzureKeyVaultConfig,
    Config,
    ConfigError,
    Credentials,
    TokenCredentials,
    VaultError,
    VaultReader,
)
from listener.config_json import ConfigObject, decode_error, go_quote, metrics_config
from listener.github_target import parse_github_target
from listener.gojson import type_name

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


# --------------------------------------------------------------------------- validation


def _credentials(obj: ConfigObject, prefix: str = "AppConfig validation failed: ") -> Credentials:
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


def _azure_key_vault(obj: ConfigObject) -> AzureKeyVaultConfig:
    raw = obj.get("azure_key_vault")
    if raw is None:
        # ARC dereferences the missing object and panics; say what is missing instead.
        raise VaultError("azure_key_vault is not set", invalid_config=True)
    if not isinstance(raw, dict):
        raise decode_error("azure_key_vault", "an object", raw)
    akv = ConfigObject(raw, "azure_key_vault.")
    proxy = None
    raw_proxy = akv.get("proxy")
    if raw_proxy is not None:
        if not isinstance(raw_proxy, dict):
            raise decode_error("azure_key_vault.proxy", "an object", raw_proxy)
        # Go's httpproxy.Config has no JSON tags: its field names are the keys.
        p = ConfigObject(raw_proxy, "azure_key_vault.proxy.")
        proxy = (p.string("HTTPProxy"), p.string("HTTPSProxy"), p.string("NoProxy"))
    return AzureKeyVaultConfig(
        tenant_id=akv.string("tenant_id"),
        client_id=akv.string("client_id"),
        url=akv.string("url"),
        certificate_path=akv.string("certificate_path"),
        proxy=proxy,
    )


def _vault_credentials(obj: ConfigObject, lookup_key: str, read_secret: VaultReader) -> Credentials:
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
            ConfigObject(data), f"{prefix}failed to validate app config decoded from string: "
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
    obj = ConfigObject(data)
    try:
        return _validate(
            obj, force_ghes=force_ghes, read_vault_secret=read_vault_secret or _no_vault
        )
    except ConfigError as exc:
        raise _scrubbed(exc, obj) from None


def _no_vault(_config: AzureKeyVaultConfig, _name: str) -> str:
    raise VaultError("this program was given no Azure Key Vault reader")


def _scrubbed(exc: ConfigError, obj: ConfigObject) -> ConfigError:
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
            f"EphemeralRunnerSetNamespace {go_quote(namespace)} or "
            f"EphemeralRunnerSetName {go_quote(ers_name)} is missing",
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


def _validate(obj: ConfigObject, *, force_ghes: bool, read_vault_secret: VaultReader) -> Config:
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
    metrics = metrics_config(obj.get("metrics"))

    # ARC looks at the vault type before validating anything else.
    if vault_type not in ("", VAULT_TYPE_AZURE_KEY_VAULT):
        raise ConfigError(f"unsupported vault type: {vault_type}", field="vault_type", stage="read")
    try:
        _check_arc_fields(
            configure_url, namespace, ers_name, scale_set_id, min_runners, max_runners
        )
        if vault_type != "" and vault_lookup_key == "":
            raise ConfigError(
                f"VaultLookupKey is required when VaultType is set to {go_quote(vault_type)}",
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
            f"invalid log level: {go_quote(log_level)} (log_level must be one of "
            f"{'|'.join(LOG_LEVELS)})",
            field="log_level",
        )
    if log_format not in LOG_FORMATS:
        raise ConfigError(
            f"invalid log format: {go_quote(log_format)} (log_format must be json or text)",
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
