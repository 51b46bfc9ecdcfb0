"""Azure Key Vault: the GitHub credentials ARC keeps there (``vault_type: azure_key_vault``).

The one module that talks to Azure, through Microsoft's own clients: ``azure-identity``'s
client-certificate credential (the service principal's certificate and key, PEM or PKCS#12,
at ``certificate_path``) and ``azure-keyvault-secrets``. The secret named by
``vault_lookup_key`` holds the GitHub app config as JSON (the four ``github_*`` keys).

Errors are ARC's words (its ``vault/azurekeyvault`` package), one line each, never holding the
secret: :class:`VaultError` for a config that cannot work or a vault that cannot be read.

The call is blocking (``azure-core``'s requests transport) and happens once, at start-up,
before anything else runs; the caller runs it in a worker thread. Every request has the
connect and read timeouts every other client has (``base.http.client``), and messages are
cut to one line as every HTTP error is (``base.http.errors.one_line``); ``azure-core``'s own
retry policy (4 retries, ARC's count) is the only retry layer for these calls.
"""

from __future__ import annotations

import logging
import os
from urllib.parse import urlsplit

from base.http.client import CONNECT_TIMEOUT, READ_TIMEOUT
from base.http.errors import one_line
from listener.config import AzureKeyVaultConfig, VaultError

# The vault is read before logging is set up. Without a handler on its logger, the Azure
# clients' warnings would reach Python's last-resort stderr handler and break the promise of
# one error line; once logging is configured they flow to it (and its redaction) as usual.
logging.getLogger("azure").addHandler(logging.NullHandler())

_RETRIES = 4


def check(config: AzureKeyVaultConfig) -> None:
    """ARC's ``Config.Validate``, in its order and words."""
    if not config.tenant_id:
        raise VaultError("tenant_id is not set", invalid_config=True)
    if not config.client_id:
        raise VaultError("client_id is not set", invalid_config=True)
    parsed = urlsplit(config.url)
    # Go's url.ParseRequestURI wants an absolute URI (or an absolute path).
    if not (parsed.scheme and (parsed.netloc or parsed.path.startswith("/"))):
        raise VaultError(
            f'failed to parse url: parse "{config.url}": invalid URI for request',
            invalid_config=True,
        )
    if not config.certificate_path:
        raise VaultError("cert path must be provided", invalid_config=True)
    if not os.path.exists(config.certificate_path):
        raise VaultError(
            f'cert path "{config.certificate_path}" does not exist: stat '
            f"{config.certificate_path}: no such file or directory",
            invalid_config=True,
        )
    if config.proxy is not None and not any(config.proxy):
        raise VaultError(
            "proxy configuration is empty, at least one proxy must be set", invalid_config=True
        )


def read_secret(
    config: AzureKeyVaultConfig,
    name: str,
    *,
    authority: str | None = None,
    connection_verify: bool | str = True,
    verify_challenge_resource: bool = True,
) -> str:
    """The value of secret ``name`` (its latest version).

    ``authority`` is the Entra ID host (default: Azure's public cloud, or the library's
    ``AZURE_AUTHORITY_HOST``); naming one also turns off Microsoft's instance discovery, which
    only knows Microsoft's own hosts. ``connection_verify`` is a CA bundle path, or True for
    the system store. ``verify_challenge_resource`` keeps the library's check that the vault's
    token challenge names the vault's own domain; only a local stand-in turns it off.
    """
    check(config)
    # Imported here: the Azure clients are only needed (and only loaded) when a vault is used.
    from azure.core.exceptions import AzureError
    from azure.identity import CertificateCredential
    from azure.keyvault.secrets import SecretClient

    transport: dict[str, object] = {
        "connection_timeout": CONNECT_TIMEOUT,
        "read_timeout": READ_TIMEOUT,
        "retry_total": _RETRIES,
        "connection_verify": connection_verify,
    }
    if config.proxy is not None:
        http_proxy, https_proxy, no_proxy = config.proxy
        proxies = {"http": http_proxy, "https": https_proxy, "no_proxy": no_proxy}
        transport["proxies"] = {key: value for key, value in proxies.items() if value}
    identity: dict[str, object] = dict(transport)
    if authority:
        identity.update(authority=authority, disable_instance_discovery=True)
    try:
        credential = CertificateCredential(
            config.tenant_id,
            config.client_id,
            certificate_path=config.certificate_path,
            **identity,
        )
    except (ValueError, OSError) as exc:
        raise VaultError(
            "failed to create azsecrets client from config: failed to parse certificates: "
            f"{one_line(str(exc))}"
        ) from None
    try:
        with (
            credential,
            SecretClient(
                config.url,
                credential,
                verify_challenge_resource=verify_challenge_resource,
                **transport,
            ) as client,
        ):
            secret = client.get_secret(name)
    except AzureError as exc:
        # azure-core repeats code and message on further lines; the first says it all.
        first = (exc.message or str(exc) or type(exc).__name__).splitlines()[0]
        raise VaultError(f"failed to get secret: {one_line(first)}") from None
    except ValueError as exc:  # e.g. a challenge naming another domain
        raise VaultError(f"failed to get secret: {one_line(str(exc))}") from None
    if secret.value is None:
        raise VaultError("secret value is nil")
    return secret.value
