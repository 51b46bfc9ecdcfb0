"""What the listener reads and checks before it builds anything: its options from the
environment (the settings ARC's config.json has no key for), ARC's config file (parsed by the
pure listener.config_parse), the secrets its logs mask and the owner name of its session."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from listener import http, vault
from listener.config import (
    AppCredentials,
    Config,
    TokenCredentials,
    VaultReader,
    config_path,
    forces_ghes,
    unreadable,
)
from listener.config_parse import parse_config
from listener.logs import register_secret
from listener.server import parse_addr
from listener.shutdown import DEFAULT_GRACE


class StartupError(Exception):
    """A configuration problem found at start-up; printed as one line, exit status 1."""


@dataclass(frozen=True)
class Options:
    """Listener settings that ARC's config.json has no key for (environment variables)."""

    probe_addr: str = ":8081"
    session_conflict_timeout: float = 600.0
    session_lease: float = http.SESSION_LEASE
    scale_set_gone_timeout: float = http.GONE_TIMEOUT
    reissue_interval: float = 1.0
    kube_outage_timeout: float = 300.0
    shutdown_grace: float = DEFAULT_GRACE
    settings_check_interval: float = 10.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Options:
        def seconds(key: str, default: float) -> float:
            raw = env.get(key, "")
            if not raw:
                return default
            try:
                value = float(raw)
            except ValueError:
                raise StartupError(f"{key}: not a number of seconds: {raw!r}") from None
            if value < 0:
                raise StartupError(f"{key}: must not be negative: {raw!r}")
            return value

        return cls(
            probe_addr=env.get("LISTENER_PROBE_ADDR", cls.probe_addr),
            session_conflict_timeout=seconds(
                "LISTENER_SESSION_CONFLICT_TIMEOUT", cls.session_conflict_timeout
            ),
            session_lease=seconds("LISTENER_SESSION_LEASE", cls.session_lease),
            scale_set_gone_timeout=seconds(
                "LISTENER_SCALE_SET_GONE_TIMEOUT", cls.scale_set_gone_timeout
            ),
            reissue_interval=seconds("LISTENER_REISSUE_INTERVAL", cls.reissue_interval),
            kube_outage_timeout=seconds("LISTENER_KUBE_OUTAGE_TIMEOUT", cls.kube_outage_timeout),
            shutdown_grace=seconds("LISTENER_SHUTDOWN_GRACE", cls.shutdown_grace),
            settings_check_interval=seconds(
                "LISTENER_SETTINGS_CHECK_INTERVAL", cls.settings_check_interval
            ),
        )


def load_config(
    env: Mapping[str, str], *, read_vault_secret: VaultReader = vault.read_secret
) -> Config:
    """Read the file named by ``LISTENER_CONFIG_PATH`` and parse it (config_parse.py stays pure).

    Blocking (the file, and for a config kept in Azure Key Vault the vault read): the caller
    runs it in a worker thread.
    """
    path = config_path(env)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise unreadable(path, exc.strerror or str(exc)) from None
    return parse_config(raw, force_ghes=forces_ghes(env), read_vault_secret=read_vault_secret)


def owner_name() -> str:
    # ARC uses the hostname, which in Kubernetes is the pod name.
    try:
        return socket.gethostname() or str(uuid.uuid4())
    except OSError:
        return str(uuid.uuid4())


def register_secrets(cfg: Config) -> None:
    creds = cfg.credentials
    if isinstance(creds, TokenCredentials):
        register_secret(creds.token)
    elif isinstance(creds, AppCredentials):
        register_secret(creds.private_key)


def same_port(probe_addr: str, metrics_addr: str) -> bool:
    """Whether the probes can ride on the metrics server (its app serves them too)."""
    if not metrics_addr:
        return False
    try:
        return parse_addr(probe_addr)[1] == parse_addr(metrics_addr)[1]
    except ValueError as exc:
        raise StartupError(f"LISTENER_PROBE_ADDR or metrics_addr: {exc}") from None
