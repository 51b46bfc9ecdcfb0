"""listener.github_auth: PAT / App JWT → registration token → runner-registration → admin; how
it handles GitHub's statuses is test_github_auth_status.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import jwt
import pytest
import respx
from cryptography.hazmat.primitives.asymmetric import rsa

from listener.config import AppCredentials, TokenCredentials
from listener.errors import (
    ActionsHTTPError,
    CredentialsError,
)
from listener.github_auth import GitHubAuth, app_jwt, github_api_url
from listener.github_target import parse_github_target
from tests.unit.listener_fixtures import UA, FakeTime, admin_jwt, pem_pkcs1, pem_pkcs8, public_pem
from tests.unit.listener_fixtures import rsa_key as make_rsa_key

PAT = "ghp_0123456789abcdefPATPATPAT"
INSTALLATION_TOKEN = "ghs_installationTOKEN123"
REGISTRATION_TOKEN = "AREGISTRATIONTOKEN456"
ACTIONS_URL = "https://pipelines.example/tenant/"
ORG_URL = "https://github.com/acme"
REG_TOKEN_URL = "https://api.github.com/orgs/acme/actions/runners/registration-token"
RUNNER_REGISTRATION_URL = "https://api.github.com/actions/runner-registration"
ACCESS_TOKENS = "https://api.github.com/app/installations/9/access_tokens"


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return make_rsa_key()


def pat_auth(
    client: httpx.AsyncClient, fake: FakeTime, url: str = ORG_URL, *, force_ghes: bool = False
) -> GitHubAuth:
    return GitHubAuth(
        client,
        target=parse_github_target(url),
        credentials=TokenCredentials(PAT),
        clock=fake.clock,
        sleep=fake.sleep,
        force_ghes=force_ghes,
    )


def app_auth(
    client: httpx.AsyncClient,
    fake: FakeTime,
    rsa_key: rsa.RSAPrivateKey,
    on_secret: Callable[[str], None] = lambda _secret: None,
) -> GitHubAuth:
    """A GitHub App's auth (installation 9, the token at ``ACCESS_TOKENS``)."""
    return GitHubAuth(
        client,
        parse_github_target(ORG_URL),
        AppCredentials(app_id="1", installation_id=9, private_key=pem_pkcs1(rsa_key)),
        clock=fake.clock,
        sleep=fake.sleep,
        on_secret=on_secret,
    )


def mock_registration(
    fake: FakeTime, *, lifetime: float = 3600, base: str = "https://api.github.com"
) -> tuple[respx.Route, respx.Route]:
    reg = respx.post(f"{base}/orgs/acme/actions/runners/registration-token").respond(
        201, json={"token": REGISTRATION_TOKEN, "expires_at": "2026-05-01T11:00:00Z"}
    )
    admin = respx.post(f"{base}/actions/runner-registration").mock(
        side_effect=lambda request: httpx.Response(
            200, json={"url": ACTIONS_URL, "token": admin_jwt(fake.now + lifetime)}
        )
    )
    return reg, admin


# --- the PAT chain -------------------------------------------------------------------------------


@respx.mock
async def test_pat_chain_requests_are_exactly_arcs(
    client: httpx.AsyncClient, fake: FakeTime
) -> None:
    reg, admin = mock_registration(fake)
    connection = await pat_auth(client, fake).admin_connection()

    assert connection.actions_url == ACTIONS_URL
    assert jwt.decode(connection.admin_token, options={"verify_signature": False})["exp"] == int(
        fake.now + 3600
    )
    assert connection.expires_at == int(fake.now + 3600)

    request = reg.calls.last.request
    assert request.headers["Authorization"] == f"Bearer {PAT}"
    assert request.headers["Content-Type"] == "application/vnd.github.v3+json"
    assert request.headers["User-Agent"] == UA
    assert "Accept" not in request.headers
    assert "X-GitHub-Api-Version" not in request.headers
    assert request.content == b""

    request = admin.calls.last.request
    assert request.headers["Authorization"] == f"RemoteAuth {REGISTRATION_TOKEN}"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["User-Agent"] == UA
    assert "Accept" not in request.headers
    assert request.content == b'{"url":"https://github.com/acme","runner_event":"register"}\n'


def test_admin_connection_repr_hides_the_token(fake: FakeTime) -> None:
    from listener.github_auth import AdminConnection

    token = admin_jwt(fake.now)
    assert token not in repr(AdminConnection(ACTIONS_URL, token, fake.now))


@respx.mock
async def test_runner_registration_body_is_not_html_escaped(
    client: httpx.AsyncClient, fake: FakeTime
) -> None:
    respx.post("https://api.github.com/repos/a&b/r<1>/actions/runners/registration-token").respond(
        201, json={"token": REGISTRATION_TOKEN}
    )
    admin = respx.post(RUNNER_REGISTRATION_URL).respond(
        200, json={"url": ACTIONS_URL, "token": admin_jwt(fake.now + 3600)}
    )
    await pat_auth(client, fake, "https://github.com/a&b/r<1>/").admin_connection()
    assert admin.calls.last.request.content == (
        b'{"url":"https://github.com/a&b/r<1>","runner_event":"register"}\n'
    )


# --- URLs per scope and host --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config_url", "force_ghes", "registration_url", "api"),
    [
        (
            "https://github.com/acme/app",
            False,
            "https://api.github.com/repos/acme/app/actions/runners/registration-token",
            "https://api.github.com",
        ),
        (
            "https://github.com/enterprises/big",
            False,
            "https://api.github.com/enterprises/big/actions/runners/registration-token",
            "https://api.github.com",
        ),
        (
            "https://www.github.com/acme",
            False,
            "https://api.github.com/orgs/acme/actions/runners/registration-token",
            "https://api.github.com",
        ),
        (
            "https://tenant.ghe.com/acme",
            False,
            "https://api.tenant.ghe.com/orgs/acme/actions/runners/registration-token",
            "https://api.tenant.ghe.com",
        ),
        (
            "https://ghes.corp:8443/acme/app",
            False,
            "https://ghes.corp:8443/api/v3/repos/acme/app/actions/runners/registration-token",
            "https://ghes.corp:8443/api/v3",
        ),
        (
            "https://github.com/acme",
            True,  # GITHUB_ACTIONS_FORCE_GHES
            "https://github.com/api/v3/orgs/acme/actions/runners/registration-token",
            "https://github.com/api/v3",
        ),
    ],
)
@respx.mock
async def test_hosted_and_ghes_urls(
    client: httpx.AsyncClient,
    fake: FakeTime,
    config_url: str,
    force_ghes: bool,
    registration_url: str,
    api: str,
) -> None:
    reg = respx.post(registration_url).respond(201, json={"token": REGISTRATION_TOKEN})
    admin = respx.post(f"{api}/actions/runner-registration").respond(
        200, json={"url": ACTIONS_URL, "token": admin_jwt(fake.now + 3600)}
    )
    auth = pat_auth(client, fake, config_url, force_ghes=force_ghes)
    assert auth.api_url == api
    await auth.admin_connection()
    assert reg.call_count == 1
    assert admin.call_count == 1


def test_force_ghes_also_applies_to_a_target_parsed_with_it() -> None:
    target = parse_github_target("https://github.com/acme", force_ghes=True)
    assert github_api_url(target) == "https://github.com/api/v3"
    assert github_api_url(target, force_ghes=True) == "https://github.com/api/v3"


# --- GitHub App ---------------------------------------------------------------------------------


@pytest.mark.parametrize("pem", [pem_pkcs1, pem_pkcs8], ids=["pkcs1", "pkcs8"])
@respx.mock
async def test_app_chain_signs_arcs_jwt_and_uses_the_installation_token(
    client: httpx.AsyncClient, fake: FakeTime, rsa_key: rsa.RSAPrivateKey, pem: object
) -> None:
    assert callable(pem)
    fake.now = 1_800_000_000.75
    access = respx.post("https://api.github.com/app/installations/4242/access_tokens").respond(
        201, json={"token": INSTALLATION_TOKEN, "expires_at": "2026-05-01T11:00:00Z"}
    )
    reg, _ = mock_registration(fake)
    auth = GitHubAuth(
        client,
        target=parse_github_target(ORG_URL),
        credentials=AppCredentials(app_id="123456", installation_id=4242, private_key=pem(rsa_key)),
        clock=fake.clock,
        sleep=fake.sleep,
    )
    await auth.admin_connection()

    request = access.calls.last.request
    assert request.headers["Content-Type"] == "application/vnd.github+json"
    assert "Accept" not in request.headers
    assert request.content == b""
    scheme, token = request.headers["Authorization"].split(" ", 1)
    assert scheme == "Bearer"
    assert jwt.get_unverified_header(token)["alg"] == "RS256"
    claims = jwt.decode(
        token,
        public_pem(rsa_key),
        algorithms=["RS256"],
        options={"verify_exp": False, "verify_iat": False},
    )
    assert claims == {"iat": 1_800_000_000 - 60, "exp": 1_800_000_000 - 60 + 540, "iss": "123456"}
    assert reg.calls.last.request.headers["Authorization"] == f"Bearer {INSTALLATION_TOKEN}"


def test_app_jwt_issuer_is_a_string_even_for_client_ids(rsa_key: rsa.RSAPrivateKey) -> None:
    creds = AppCredentials(app_id="Iv1.abcdef", installation_id=1, private_key=pem_pkcs8(rsa_key))
    token = app_jwt(creds, 1000.0)
    claims = jwt.decode(
        token,
        public_pem(rsa_key),
        algorithms=["RS256"],
        options={"verify_exp": False, "verify_iat": False},
    )
    assert claims["iss"] == "Iv1.abcdef"


@pytest.mark.parametrize(
    "key",
    [
        "not a key",
        "-----BEGIN RSA PRIVATE KEY-----\nSECRETMATERIALxyz\n-----END RSA PRIVATE KEY-----\n",
    ],
)
def test_unusable_private_key_is_one_line_without_key_material(key: str) -> None:
    creds = AppCredentials(app_id="1", installation_id=1, private_key=key)
    with pytest.raises(CredentialsError, match=r"^github_app_private_key: not a usable") as info:
        app_jwt(creds, 1000.0)
    assert "SECRETMATERIAL" not in str(info.value)
    assert info.value.__cause__ is None


@respx.mock
async def test_installation_token_is_fetched_again_on_every_refresh(
    client: httpx.AsyncClient, fake: FakeTime, rsa_key: rsa.RSAPrivateKey
) -> None:
    access = respx.post(ACCESS_TOKENS).respond(201, json={"token": INSTALLATION_TOKEN})
    mock_registration(fake, lifetime=600)
    auth = app_auth(client, fake, rsa_key)
    await auth.admin_connection()
    fake.now += 600
    await auth.admin_connection()
    assert access.call_count == 2


@pytest.mark.parametrize("status", [200, 401, 404])
@respx.mock
async def test_installation_token_must_be_201(
    client: httpx.AsyncClient, fake: FakeTime, rsa_key: rsa.RSAPrivateKey, status: int
) -> None:
    respx.post(ACCESS_TOKENS).respond(status, json={"token": INSTALLATION_TOKEN, "message": "nope"})
    auth = app_auth(client, fake, rsa_key)
    with pytest.raises(ActionsHTTPError) as info:
        await auth.admin_connection()
    assert info.value.status == status
    assert info.value.message == "nope"
    assert INSTALLATION_TOKEN not in str(info.value)


# --- refresh ------------------------------------------------------------------------------------


@respx.mock
async def test_admin_token_is_cached_until_60_s_before_exp(
    client: httpx.AsyncClient, fake: FakeTime
) -> None:
    reg, admin = mock_registration(fake, lifetime=3600)
    auth = pat_auth(client, fake)
    first = await auth.admin_connection()
    assert (reg.call_count, admin.call_count) == (1, 1)

    fake.now = first.expires_at - 61
    assert await auth.admin_connection() is first
    fake.now = first.expires_at - 60
    assert await auth.admin_connection() is first
    assert admin.call_count == 1

    fake.now = first.expires_at - 59
    second = await auth.admin_connection()
    assert second is not first
    assert second.expires_at == int(fake.now + 3600)
    assert (reg.call_count, admin.call_count) == (2, 2)


@respx.mock
async def test_concurrent_callers_share_one_refresh(
    client: httpx.AsyncClient, fake: FakeTime
) -> None:
    reg, admin = mock_registration(fake)
    auth = pat_auth(client, fake)
    results = await asyncio.gather(*(auth.admin_connection() for _ in range(5)))
    assert len({id(r) for r in results}) == 1
    assert (reg.call_count, admin.call_count) == (1, 1)


# --- secrets -----------------------------------------------------------------------------------


@respx.mock
async def test_every_token_is_reported_for_log_masking(
    client: httpx.AsyncClient, fake: FakeTime, rsa_key: rsa.RSAPrivateKey
) -> None:
    respx.post(ACCESS_TOKENS).respond(201, json={"token": INSTALLATION_TOKEN})
    mock_registration(fake)
    secrets: list[str] = []
    auth = app_auth(client, fake, rsa_key, on_secret=secrets.append)
    connection = await auth.admin_connection()
    assert secrets[0].startswith("ey")  # the App JWT
    assert secrets[1:] == [
        INSTALLATION_TOKEN,
        INSTALLATION_TOKEN,
        REGISTRATION_TOKEN,
        connection.admin_token,
    ]


# --- the token for REST reads (the GitHub demand source) ------------------------------------------


async def test_api_token_is_the_pat(client: httpx.AsyncClient, fake: FakeTime) -> None:
    assert await pat_auth(client, fake).api_token() == PAT


@respx.mock
async def test_api_token_reuses_an_installation_token_for_50_minutes(
    client: httpx.AsyncClient, fake: FakeTime, rsa_key: rsa.RSAPrivateKey
) -> None:
    tokens = iter(["ghs_first", "ghs_second"])
    access = respx.post(ACCESS_TOKENS).mock(
        side_effect=lambda _request: httpx.Response(201, json={"token": next(tokens)})
    )
    auth = app_auth(client, fake, rsa_key)
    assert [await auth.api_token() for _ in range(3)] == ["ghs_first"] * 3
    fake.now += 49 * 60
    assert await auth.api_token() == "ghs_first"
    fake.now += 60
    assert await auth.api_token() == "ghs_second"
    assert access.call_count == 2


@respx.mock
async def test_renew_admin_connection_runs_the_chain_before_expiry(
    client: httpx.AsyncClient, fake: FakeTime
) -> None:
    reg, admin = mock_registration(fake)
    auth = pat_auth(client, fake)
    first = await auth.admin_connection()
    assert await auth.admin_connection() is first  # far from expiry: cached
    renewed = await auth.renew_admin_connection()
    assert renewed is not first
    assert (reg.call_count, admin.call_count) == (2, 2)
    assert await auth.admin_connection() is renewed
