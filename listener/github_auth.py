"""GitHub credentials → Actions-service admin connection (docs/wire-protocol.md §2).

The chain, re-run in full whenever a new admin token is needed:

1. GitHub App only: sign an RS256 JWT (``iat`` = now − 60 s, ``exp`` = ``iat`` + 9 min,
   ``iss`` = the App id or client id as a string) and exchange it at
   ``POST {api}/app/installations/{id}/access_tokens`` (201) for an installation token.
   The installation token is not cached, as in ARC.
2. ``POST {api}{registration-token path}`` with the PAT or installation token (201).
3. ``POST {api}/actions/runner-registration`` with ``Authorization: RemoteAuth <token>``
   (any 2xx; 401/403 are retried because a fresh registration token can take a moment to
   become valid) → the Actions service URL and an admin JWT.

:meth:`GitHubAuth.admin_connection` returns the cached connection until ``now + 60 s`` passes
the admin token's ``exp`` (read without verifying the signature), then runs the chain again.
GitHub API calls carry no ``Accept`` and no ``X-GitHub-Api-Version`` header, like ARC's.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from base.http.client import URL, Client, Response, redact_url
from listener.config import AppCredentials, Credentials, GitHubTarget
from listener.errors import CredentialsError, ProtocolError
from listener.http import Clock, Sleep, error_from_response, send
from listener.wire import WireError, decode_json

log = logging.getLogger(__name__)

ADMIN_TOKEN_REFRESH_MARGIN = 60.0
"""Seconds before the admin token's ``exp`` at which a new one is fetched."""

_JWT_BACKDATE = 60  # seconds; tolerates clock skew between us and GitHub
_JWT_LIFETIME = 9 * 60  # GitHub accepts at most 10 minutes
# Installation tokens live one hour; one is reused for REST reads for a little less.
_INSTALLATION_TOKEN_REUSE = 50 * 60


@dataclass(frozen=True)
class AdminConnection:
    """Where the Actions service is and the admin token for it."""

    actions_url: str
    admin_token: str = field(repr=False)
    expires_at: float
    """The admin token's ``exp`` claim (Unix seconds)."""


def github_api_url(target: GitHubTarget, *, force_ghes: bool = False) -> str:
    """GitHub REST base URL for ``target``; ``force_ghes`` is GITHUB_ACTIONS_FORCE_GHES.

    ``target.is_hosted`` already reflects the variable when the config was parsed with it;
    passing it here as well makes the GHES form certain either way.
    """
    if force_ghes and target.is_hosted:
        return f"{target.scheme}://{target.host}/api/v3"
    return target.api_url


def app_jwt(credentials: AppCredentials, now: float) -> str:
    """The GitHub App JWT ARC signs (RS256; PKCS#1 or PKCS#8 PEM key)."""
    # Imported here: PyJWT loads cryptography (~9 MiB of RSS), which only GitHub App
    # credentials need; a PAT listener never signs anything.
    import jwt

    issued_at = int(now) - _JWT_BACKDATE
    claims = {"iat": issued_at, "exp": issued_at + _JWT_LIFETIME, "iss": str(credentials.app_id)}
    try:
        return jwt.encode(claims, credentials.private_key, algorithm="RS256")
    except (ValueError, TypeError, jwt.PyJWTError):
        # The library's message may quote key material; say what is wrong, not what it saw.
        raise CredentialsError(
            "github_app_private_key: not a usable RSA private key in PEM format (PKCS#1 or PKCS#8)"
        ) from None


def _token_expiry(token: str) -> float:
    """The admin token's ``exp``, read without verifying the signature (we only need to know
    when to fetch a new one). Decoded with the standard library rather than PyJWT, which
    would load cryptography into every listener for this one unverified read."""
    try:
        header, payload, _signature = token.split(".")
        claims = json.loads(_b64url(payload))
        if not isinstance(json.loads(_b64url(header)), dict) or not isinstance(claims, dict):
            raise ValueError("not a JSON object")
    except (ValueError, binascii.Error):  # UnicodeDecodeError and JSONDecodeError included
        raise ProtocolError("actions/runner-registration: the admin token is not a JWT") from None
    exp = claims.get("exp")
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        raise ProtocolError("actions/runner-registration: the admin token has no numeric exp")
    return float(exp)


def _b64url(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def _string_field(response: Response, key: str) -> str:
    where = f"{response.request.method} {redact_url(response.request.url)}"
    try:
        body = decode_json(response.content)
    except WireError as exc:
        raise ProtocolError(f"{where}: {exc}") from None
    if isinstance(body, dict):
        # Go decodes into a struct, so keys match case-insensitively.
        folded = {str(k).lower(): v for k, v in body.items()}
        value = folded.get(key)
        if isinstance(value, str) and value:
            return value
    raise ProtocolError(f"{where}: response has no {key!r}")


class GitHubAuth:
    """Produces the Actions-service admin connection, refreshing it before it expires."""

    def __init__(
        self,
        client: Client,
        target: GitHubTarget,
        credentials: Credentials,
        *,
        force_ghes: bool = False,
        clock: Clock = time.time,
        sleep: Sleep = asyncio.sleep,
        on_secret: Callable[[str], None] = lambda _secret: None,
    ) -> None:
        """``on_secret`` is called with every token obtained (e.g. to mask it in logs)."""
        self._client = client
        self._target = target
        self._credentials = credentials
        self._api_url = github_api_url(target, force_ghes=force_ghes)
        self._clock = clock
        self._sleep = sleep
        self._on_secret = on_secret
        self._connection: AdminConnection | None = None
        self._lock = asyncio.Lock()
        self._api_token: tuple[str, float] | None = None  # (installation token, reuse until)
        self._api_token_lock = asyncio.Lock()

    @property
    def api_url(self) -> str:
        return self._api_url

    async def admin_connection(self) -> AdminConnection:
        """The current connection; runs the whole chain when there is none or it is stale."""
        async with self._lock:  # concurrent callers share one refresh
            current = self._connection
            if current is None or self._clock() + ADMIN_TOKEN_REFRESH_MARGIN > current.expires_at:
                current = await self._connect()
                self._connection = current
            return current

    async def api_token(self) -> str:
        """A bearer token for GitHub REST reads (the demand source): the PAT, or an App
        installation token, reused for 50 minutes (they live an hour) so that reads every
        few seconds do not each mint one."""
        credentials = self._credentials
        if not isinstance(credentials, AppCredentials):
            return credentials.token
        async with self._api_token_lock:
            cached = self._api_token
            if cached is None or self._clock() >= cached[1]:
                token = await self._installation_token(credentials)
                cached = (token, self._clock() + _INSTALLATION_TOKEN_REUSE)
                self._api_token = cached
            return cached[0]

    async def renew_admin_connection(self) -> AdminConnection:
        """Run the whole chain now, even if the current admin token has not expired yet.

        For when the Actions service refuses a token whose ``exp`` is still ahead.
        """
        async with self._lock:
            self._connection = await self._connect()
            return self._connection

    async def _connect(self) -> AdminConnection:
        registration_token = await self._registration_token()
        url = f"{self._api_url}/actions/runner-registration"
        # Go's json.Encoder: no HTML escaping, UTF-8 as is, and a trailing newline.
        body = (
            json.dumps(
                {"url": self._target.configure_url.strip("/"), "runner_event": "register"},
                ensure_ascii=False,
                separators=(",", ":"),
            )
            + "\n"
        ).encode()
        headers = {
            "Authorization": f"RemoteAuth {registration_token}",
            "Content-Type": "application/json",
        }
        response = await send(
            self._client,
            lambda: self._client.build_request("POST", url, content=body, headers=headers),
            retry_auth_errors=True,
            sleep=self._sleep,
            clock=self._clock,
        )
        if not response.is_success:
            raise error_from_response(response)
        admin_token = _string_field(response, "token")
        self._on_secret(admin_token)
        connection = AdminConnection(
            actions_url=_string_field(response, "url"),
            admin_token=admin_token,
            expires_at=_token_expiry(admin_token),
        )
        log.info(
            "obtained an Actions service admin token",
            extra={
                "actions_url": redact_url(URL(connection.actions_url)),
                "expires_in_s": round(connection.expires_at - self._clock()),
            },
        )
        return connection

    async def _registration_token(self) -> str:
        if isinstance(self._credentials, AppCredentials):
            bearer = await self._installation_token(self._credentials)
        else:
            bearer = self._credentials.token
        self._on_secret(bearer)
        url = f"{self._api_url}{self._target.registration_token_path}"
        return await self._created_token(url, bearer, "application/vnd.github.v3+json")

    async def _installation_token(self, app: AppCredentials) -> str:
        url = f"{self._api_url}/app/installations/{app.installation_id}/access_tokens"
        token = app_jwt(app, self._clock())
        self._on_secret(token)
        return await self._created_token(url, token, "application/vnd.github+json")

    async def _created_token(self, url: str, bearer: str, content_type: str) -> str:
        """POST with no body to a GitHub endpoint that must answer 201 with a ``token``."""
        headers = {"Authorization": f"Bearer {bearer}", "Content-Type": content_type}
        response = await send(
            self._client,
            lambda: self._client.build_request("POST", url, headers=headers),
            sleep=self._sleep,
            clock=self._clock,
        )
        if response.status_code != 201:
            raise error_from_response(response)
        token = _string_field(response, "token")
        self._on_secret(token)
        return token
