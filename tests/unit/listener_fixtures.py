"""Shared helpers for the listener HTTP tests: fake time, keys, certificates, tiny servers."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from listener.http import user_agent
from tests.support.fake_clock import FakeClock

UA = user_agent(7)
"""The User-Agent of scale set 7, the id the HTTP tests use."""


def loop_clock() -> Callable[[], float]:
    """The running event loop's clock, for a fake that reads the time itself (``FakeActions``):
    virtual in the unit tier, so its holds and expiries pass with the loop's sleeps."""
    return asyncio.get_running_loop().time


class FakeTime(FakeClock):
    """The one fake clock, with ``clock`` as the HTTP tests name the callable."""

    def clock(self) -> float:
        return self.now


# --- keys and certificates ---------------------------------------------------------------------


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def pem_pkcs1(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()


def pem_pkcs8(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def public_pem(key: rsa.RSAPrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


@dataclass(frozen=True)
class CertificateAuthority:
    name: str
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    @classmethod
    def create(cls, name: str) -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        return cls(name, key, cert)

    def server_context(self, tmp: Path, host: str = "127.0.0.1") -> ssl.SSLContext:
        """A server-side TLS context whose certificate (for ``host``) this CA signed."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        cert_file = tmp / f"{self.name}-server.pem"
        key_file = tmp / f"{self.name}-server.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        return context


# --- tiny raw HTTP servers ---------------------------------------------------------------------

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def serve(handler: Handler, *, tls: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    """Run ``handler`` for each connection on 127.0.0.1; yields the port."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=tls)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        # Do not wait for handlers still blocked on purpose (e.g. a held long poll).
        await asyncio.sleep(0)


async def read_head(reader: asyncio.StreamReader) -> list[str]:
    """Read a request line and headers (no body); returns the lines."""
    raw = await reader.readuntil(b"\r\n\r\n")
    return raw.decode("latin-1").split("\r\n")[:-2]


def ok_response(body: bytes = b"ok", status: str = "200 OK") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nContent-Type: text/plain\r\n\r\n"
    ).encode() + body


# --- Actions-service payloads ------------------------------------------------------------------

SESSION_ID = "6f1d0c0e-7a3b-4c55-9d7e-1f2a3b4c5d6e"
STATISTICS = {
    "totalAvailableJobs": 0,
    "totalAcquiredJobs": 1,
    "totalAssignedJobs": 2,
    "totalRunningJobs": 1,
    "totalRegisteredRunners": 2,
    "totalBusyRunners": 1,
    "totalIdleRunners": 1,
}


def admin_jwt(exp: float) -> str:
    """An admin token shaped like the service's (a JWT; only ``exp`` matters to us)."""
    return jwt.encode(
        {"exp": int(exp), "aud": "tenant"},
        "fake-actions-service-signing-key-0123456789",
        algorithm="HS256",
    )


def session_json(
    *,
    token: str = "queue-token-1",
    queue_url: str = "https://queue.example/_apis/q?sessionId=abc",
    session_id: str = SESSION_ID,
) -> dict[str, object]:
    return {
        "sessionId": session_id,
        "ownerName": "listener-pod",
        "runnerScaleSet": {"id": 7, "name": "linux", "labels": [{"name": "linux"}]},
        "messageQueueUrl": queue_url,
        "messageQueueAccessToken": token,
        "statistics": STATISTICS,
    }
