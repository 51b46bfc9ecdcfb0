"""A loopback HTTPS stand-in for Microsoft Entra ID (token endpoint) and one Azure Key Vault.

Served with a self-signed certificate generated per instance (``ca_path`` is the PEM to trust).
What it checks, as the real services do:

* Entra ID: the tenant's OpenID metadata, then ``POST /{tenant}/oauth2/v2.0/token`` with the
  client-credentials grant and a ``client_assertion`` JWT, whose signature is verified with the
  registered client certificate and whose ``aud`` must be the token endpoint.
* Key Vault: ``GET /secrets/{name}`` without a valid bearer token answers 401 with the
  ``WWW-Authenticate`` challenge naming the tenant's authority; with one, the secret (or 404).
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from tools.fake_http import LoopbackFake, LoopbackServer, json_response

__all__ = ["FakeAzure", "self_signed"]


def self_signed(common_name: str, *, ip: str | None = None) -> tuple[str, str]:
    """(certificate PEM, private key PEM) for a fresh RSA key."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    )
    if ip is not None:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]),
            critical=False,
        )
    cert = builder.sign(key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem


@dataclass
class FakeAzure(LoopbackFake):
    """Entra ID + Key Vault on one HTTPS port. ``await start()``, then use the paths/URLs."""

    workdir: Path
    tenant_id: str = "tenant-0000"
    client_id: str = "client-1111"
    secrets: dict[str, str] = field(default_factory=dict)
    token_requests: int = 0
    secret_requests: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        cert, key = self_signed("127.0.0.1", ip="127.0.0.1")
        self.ca_path = self.workdir / "fake-azure-ca.pem"
        self.ca_path.write_text(cert)
        (self.workdir / "fake-azure-key.pem").write_text(key)
        # The service principal's certificate and key, one PEM file as ARC mounts it.
        client_cert, client_key = self_signed(self.client_id)
        self.client_certificate_path = self.workdir / "client.pem"
        self.client_certificate_path.write_text(client_key + client_cert)
        self._client_public_key = x509.load_pem_x509_certificate(client_cert.encode()).public_key()
        self._tokens: set[str] = set()

    @property
    def vault_url(self) -> str:
        return f"{self.url}/"

    async def start(self) -> None:
        app = web.Application()
        tenant = "/{tenant}"
        app.router.add_get(tenant + "/v2.0/.well-known/openid-configuration", self._metadata)
        app.router.add_post(tenant + "/oauth2/v2.0/token", self._token)
        app.router.add_get("/secrets/{name}", self._secret)
        app.router.add_get("/secrets/{name}/", self._secret)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.ca_path, self.workdir / "fake-azure-key.pem")
        self._server = LoopbackServer(app, ssl_context=context)
        await super().start()

    async def _metadata(self, request: web.Request) -> web.Response:
        tenant = request.match_info["tenant"]
        base = f"{self.url}/{tenant}"
        return json_response(
            {
                "token_endpoint": f"{base}/oauth2/v2.0/token",
                "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
                "device_authorization_endpoint": f"{base}/oauth2/v2.0/devicecode",
                "issuer": f"{base}/v2.0",
                "tenant_region_scope": "WW",
            }
        )

    async def _token(self, request: web.Request) -> web.Response:
        self.token_requests += 1
        form = await request.post()
        tenant = request.match_info["tenant"]

        def refuse(code: str, text: str) -> web.Response:
            return json_response({"error": code, "error_description": text}, status=400)

        if tenant != self.tenant_id:
            return refuse("invalid_tenant", f"AADSTS90002: Tenant '{tenant}' not found.")
        if (
            form.get("grant_type") != "client_credentials"
            or form.get("client_id") != self.client_id
        ):
            return refuse("unauthorized_client", "AADSTS700016: unknown application")
        assertion = str(form.get("client_assertion", ""))
        try:
            jwt.decode(
                assertion,
                self._client_public_key,  # type: ignore[arg-type]
                algorithms=["RS256", "PS256"],
                audience=f"{self.url}/{tenant}/oauth2/v2.0/token",
            )
        except jwt.PyJWTError as exc:
            return refuse("invalid_client", f"AADSTS700027: client assertion rejected: {exc}")
        token = "eyfake." + secrets.token_hex(16)
        self._tokens.add(token)
        return json_response({"token_type": "Bearer", "expires_in": 3600, "access_token": token})

    async def _secret(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme != "Bearer" or token not in self._tokens:
            challenge = (
                f'Bearer authorization="{self.url}/{self.tenant_id}", '
                'resource="https://vault.azure.net"'
            )
            return web.Response(status=401, headers={"WWW-Authenticate": challenge})
        self.secret_requests.append(name)
        value = self.secrets.get(name)
        if value is None:
            body: dict[str, Any] = {
                "error": {
                    "code": "SecretNotFound",
                    "message": f"A secret with (name/id) {name} was not found in this key vault.",
                }
            }
            return json_response(body, status=404)
        return json_response(
            {
                "value": value,
                "id": f"{self.url}/secrets/{name}/{secrets.token_hex(8)}",
                "attributes": {"enabled": True},
            }
        )
