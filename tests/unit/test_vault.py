"""Azure Key Vault: ARC's vault config checks and a real read through Microsoft's clients
(azure-identity's certificate credential, azure-keyvault-secrets) against a loopback HTTPS
stand-in for Entra ID and the vault; and config.json with ``vault_type: azure_key_vault``."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from listener.config import (
    AppCredentials,
    AzureKeyVaultConfig,
    ConfigError,
    TokenCredentials,
    VaultError,
)
from listener.startup import load_config
from listener.vault import check, read_secret
from tests.support.config_files import scale_set_config
from tests.support.fake_azure import FakeAzure

TOKEN = "ghp_fromTheVaultNotTheConfig123456"
APP_KEY = "-----BEGIN RSA PRIVATE KEY-----\nVAULTkeyMATERIAL\n-----END RSA PRIVATE KEY-----"


@pytest.fixture
async def azure(tmp_path: Path) -> AsyncIterator[FakeAzure]:
    fake = FakeAzure(tmp_path)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


def vault_config(fake: FakeAzure, **overrides: Any) -> AzureKeyVaultConfig:
    values: dict[str, Any] = {
        "tenant_id": fake.tenant_id,
        "client_id": fake.client_id,
        "url": fake.vault_url,
        "certificate_path": str(fake.client_certificate_path),
    }
    values.update(overrides)
    return AzureKeyVaultConfig(**values)


def reader(fake: FakeAzure) -> functools.partial[str]:
    return functools.partial(
        read_secret,
        authority=fake.url,
        connection_verify=str(fake.ca_path),
        # The stand-in's challenge names vault.azure.net, which 127.0.0.1 is not under.
        verify_challenge_resource=False,
    )


async def test_reads_the_secret_with_a_certificate_credential(azure: FakeAzure) -> None:
    azure.secrets["github-app"] = json.dumps({"github_token": TOKEN})
    value = await asyncio.to_thread(reader(azure), vault_config(azure), "github-app")
    assert json.loads(value) == {"github_token": TOKEN}
    assert azure.token_requests == 1  # the client assertion was signed with the certificate
    assert azure.secret_requests == ["github-app"]


async def test_a_missing_secret_is_one_line(azure: FakeAzure) -> None:
    with pytest.raises(VaultError) as info:
        await asyncio.to_thread(reader(azure), vault_config(azure), "nope")
    assert str(info.value) == (
        "failed to get secret: (SecretNotFound) A secret with (name/id) nope was not found in "
        "this key vault."
    )


async def test_an_unknown_client_is_refused_by_the_token_endpoint(azure: FakeAzure) -> None:
    azure.secrets["s"] = "{}"
    with pytest.raises(VaultError, match=r"^failed to get secret: .*AADSTS700016") as info:
        await asyncio.to_thread(reader(azure), vault_config(azure, client_id="other"), "s")
    assert "\n" not in str(info.value)
    assert azure.secret_requests == []


async def test_a_vault_in_another_tenant_is_refused(azure: FakeAzure) -> None:
    # The vault's challenge names the tenant it belongs to; the credential is for another.
    azure.secrets["s"] = "{}"
    with pytest.raises(VaultError, match=r"^failed to get secret: .*tenant-0000"):
        await asyncio.to_thread(reader(azure), vault_config(azure, tenant_id="other"), "s")


async def test_an_untrusted_vault_certificate_is_refused(
    azure: FakeAzure, monkeypatch: pytest.MonkeyPatch
) -> None:
    # azure-core's retries back off with time.sleep in the worker thread, out of the event
    # loop's virtual time and with no clock to pass: record the back-offs instead of waiting.
    from azure.core.pipeline.transport import HttpTransport

    backoffs: list[float] = []
    monkeypatch.setattr(HttpTransport, "sleep", lambda _self, seconds: backoffs.append(seconds))
    azure.secrets["s"] = "{}"
    strict = functools.partial(read_secret, authority=azure.url, verify_challenge_resource=False)
    with pytest.raises(VaultError, match=r"^failed to get secret: .*(?i:certificate)"):
        await asyncio.to_thread(strict, vault_config(azure), "s")
    assert azure.secret_requests == []
    assert backoffs  # the refusal went through the library's retries


def test_a_certificate_file_that_is_not_one(tmp_path: Path) -> None:
    bad = tmp_path / "cert.pem"
    bad.write_text("not a certificate")
    config = AzureKeyVaultConfig("t", "c", "https://v.vault.azure.net/", str(bad))
    with pytest.raises(VaultError, match=r"^failed to create azsecrets client from config: "):
        read_secret(config, "s")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"tenant_id": ""}, "tenant_id is not set"),
        ({"client_id": ""}, "client_id is not set"),
        ({"url": "vault"}, 'failed to parse url: parse "vault": invalid URI for request'),
        ({"certificate_path": ""}, "cert path must be provided"),
        (
            {"certificate_path": "/nonexistent/cert.pem"},
            'cert path "/nonexistent/cert.pem" does not exist: stat /nonexistent/cert.pem: '
            "no such file or directory",
        ),
        ({"proxy": ("", "", "")}, "proxy configuration is empty, at least one proxy must be set"),
    ],
)
def test_checks_are_arcs(tmp_path: Path, overrides: dict[str, Any], message: str) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    values: dict[str, Any] = {
        "tenant_id": "t",
        "client_id": "c",
        "url": "https://v.vault.azure.net/",
        "certificate_path": str(cert),
    }
    values.update(overrides)
    with pytest.raises(VaultError) as info:
        check(AzureKeyVaultConfig(**values))
    assert str(info.value) == message


# --- config.json with vault_type azure_key_vault -------------------------------------------------


def write_config(tmp_path: Path, fake: FakeAzure, **overrides: Any) -> dict[str, str]:
    config = scale_set_config(
        vault_type="azure_key_vault",
        vault_lookup_key="github-app",
        azure_key_vault={
            "tenant_id": fake.tenant_id,
            "client_id": fake.client_id,
            "url": fake.vault_url,
            "certificate_path": str(fake.client_certificate_path),
        },
        log_format="json",
    )
    config.update(overrides)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return {"LISTENER_CONFIG_PATH": str(path)}


async def load(env: dict[str, str], fake: FakeAzure) -> Any:
    return await asyncio.to_thread(load_config, env, read_vault_secret=reader(fake))


async def test_config_credentials_come_from_the_vault(tmp_path: Path, azure: FakeAzure) -> None:
    azure.secrets["github-app"] = json.dumps({"github_token": TOKEN})
    cfg = await load(write_config(tmp_path, azure), azure)
    assert cfg.credentials == TokenCredentials(TOKEN)


async def test_config_app_credentials_from_the_vault(tmp_path: Path, azure: FakeAzure) -> None:
    app = {
        "github_app_id": "123",
        "github_app_installation_id": 456,
        "github_app_private_key": APP_KEY,
    }
    azure.secrets["github-app"] = json.dumps(app)
    cfg = await load(write_config(tmp_path, azure), azure)
    assert cfg.credentials == AppCredentials("123", 456, APP_KEY)


@pytest.mark.parametrize(
    ("secret", "overrides", "line"),
    [
        pytest.param(
            None,
            {},
            "Failed to read config: failed to get app config from vault: failed to get secret: "
            "(SecretNotFound) A secret with (name/id) github-app was not found in this key vault.",
            id="no-secret",
        ),
        pytest.param(
            json.dumps({"github_token": ""}),
            {},
            "Failed to read config: failed to read app config from string: failed to validate "
            "app config decoded from string: no credentials provided: either a PAT or GitHub "
            "App credentials should be provided",
            id="empty-app-config",
        ),
        pytest.param(
            "{" + TOKEN,
            {},
            "Failed to read config: failed to read app config from string: Expecting property "
            "name enclosed in double quotes at line 1 column 2",
            id="not-json",
        ),
        pytest.param(
            json.dumps({"github_token": TOKEN}),
            {"configure_url": ""},
            "Failed to read config: config validation failed: GitHubConfigUrl is not provided",
            id="validation-behind-a-vault",
        ),
        pytest.param(
            json.dumps({"github_token": TOKEN}),
            {"azure_key_vault": {"client_id": "c", "url": "https://v/", "certificate_path": "x"}},
            "Failed to read config: failed to create Azure Key Vault client: failed to validate "
            "config: tenant_id is not set",
            id="bad-vault-config",
        ),
    ],
)
async def test_bad_vault_setups_give_arcs_line(
    tmp_path: Path, azure: FakeAzure, secret: str | None, overrides: dict[str, Any], line: str
) -> None:
    if secret is not None:
        azure.secrets["github-app"] = secret
    with pytest.raises(ConfigError) as info:
        await load(write_config(tmp_path, azure, **overrides), azure)
    assert info.value.line == line
    assert TOKEN not in info.value.line


def test_the_proxy_object_uses_gos_field_names(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    seen: list[AzureKeyVaultConfig] = []

    def fake_read(config: AzureKeyVaultConfig, name: str) -> str:
        seen.append(config)
        assert name == "github-app"
        return json.dumps({"github_token": TOKEN})

    raw = {
        "configure_url": "https://github.com/acme",
        "vault_type": "azure_key_vault",
        "vault_lookup_key": "github-app",
        "azure_key_vault": {
            "tenant_id": "t",
            "client_id": "c",
            "url": "https://v.vault.azure.net/",
            "certificate_path": str(cert),
            "proxy": {"HTTPSProxy": "http://proxy:3128", "noproxy": "10.0.0.0/8"},
        },
        "ephemeral_runner_set_namespace": "arc-runners",
        "ephemeral_runner_set_name": "linux-abcde",
        "runner_scale_set_id": 7,
        "log_level": "info",
        "log_format": "json",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    cfg = load_config({"LISTENER_CONFIG_PATH": str(path)}, read_vault_secret=fake_read)
    assert cfg.credentials == TokenCredentials(TOKEN)
    assert seen[0].proxy == ("", "http://proxy:3128", "10.0.0.0/8")
