"""How the GitHub auth chain handles the statuses and bodies GitHub answers: the registration
token's 201, auth errors retried or not, bad answers, an admin token without an expiry."""

from __future__ import annotations

import json

import httpx
import jwt
import pytest
import respx

from listener.errors import (
    ActionsHTTPError,
    ProtocolError,
    RetriesExhaustedError,
    UnauthorizedError,
)
from tests.unit.listener_fixtures import FakeTime, admin_jwt
from tests.unit.test_github_auth import (
    ACTIONS_URL,
    PAT,
    REG_TOKEN_URL,
    REGISTRATION_TOKEN,
    RUNNER_REGISTRATION_URL,
    pat_auth,
)


@pytest.mark.parametrize("status", [200, 403, 404, 422])
@respx.mock
async def test_registration_token_must_be_201(
    client: httpx.AsyncClient, fake: FakeTime, status: int
) -> None:
    respx.post(REG_TOKEN_URL).respond(
        status,
        json={"message": "Resource not accessible by integration", "token": "x"},
        headers={"X-GitHub-Request-Id": "ABCD:1234"},
    )
    admin = respx.post(RUNNER_REGISTRATION_URL).respond(200)
    with pytest.raises(ActionsHTTPError) as info:
        await pat_auth(client, fake).admin_connection()
    assert info.value.status == status
    assert info.value.github_request_id == "ABCD:1234"
    assert admin.call_count == 0
    assert PAT not in str(info.value)
    assert PAT not in repr(info.value)


@pytest.mark.parametrize("status", [401, 403])
@respx.mock
async def test_runner_registration_retries_auth_errors(
    client: httpx.AsyncClient, fake: FakeTime, status: int
) -> None:
    respx.post(REG_TOKEN_URL).respond(201, json={"token": REGISTRATION_TOKEN})
    admin = respx.post(RUNNER_REGISTRATION_URL).mock(
        side_effect=[
            httpx.Response(status),
            httpx.Response(status),
            httpx.Response(201, json={"url": ACTIONS_URL, "token": admin_jwt(fake.now + 3600)}),
        ]
    )
    connection = await pat_auth(client, fake).admin_connection()
    assert connection.actions_url == ACTIONS_URL
    assert admin.call_count == 3
    assert fake.sleeps == [1.0, 2.0]


@respx.mock
async def test_runner_registration_auth_errors_exhausted(
    client: httpx.AsyncClient, fake: FakeTime
) -> None:
    respx.post(REG_TOKEN_URL).respond(201, json={"token": REGISTRATION_TOKEN})
    admin = respx.post(RUNNER_REGISTRATION_URL).respond(401, text="Bad registration token")
    with pytest.raises(RetriesExhaustedError, match="giving up after 5 attempts") as info:
        await pat_auth(client, fake).admin_connection()
    assert admin.call_count == 5
    assert isinstance(info.value.last_error, UnauthorizedError)
    assert REGISTRATION_TOKEN not in str(info.value)


@respx.mock
async def test_registration_token_401_is_not_retried(
    client: httpx.AsyncClient, fake: FakeTime
) -> None:
    reg = respx.post(REG_TOKEN_URL).respond(401, json={"message": "Bad credentials"})
    with pytest.raises(UnauthorizedError, match="Bad credentials"):
        await pat_auth(client, fake).admin_connection()
    assert reg.call_count == 1


@respx.mock
async def test_runner_registration_accepts_any_2xx_and_a_bom(
    client: httpx.AsyncClient, fake: FakeTime
) -> None:
    respx.post(REG_TOKEN_URL).respond(201, json={"token": REGISTRATION_TOKEN})
    body = json.dumps({"URL": ACTIONS_URL, "Token": admin_jwt(fake.now + 3600)}).encode()
    respx.post(RUNNER_REGISTRATION_URL).respond(202, content=b"\xef\xbb\xbf" + body)
    assert (await pat_auth(client, fake).admin_connection()).actions_url == ACTIONS_URL


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"url": ACTIONS_URL}, r"response has no 'token'"),
        ({"url": "", "token": "x.y.z"}, r"response has no 'url'"),
        ({"url": ACTIONS_URL, "token": "opaque"}, r"admin token is not a JWT"),
        ([1, 2], r"response has no 'token'"),
    ],
)
@respx.mock
async def test_runner_registration_bad_answers(
    client: httpx.AsyncClient, fake: FakeTime, body: object, message: str
) -> None:
    respx.post(REG_TOKEN_URL).respond(201, json={"token": REGISTRATION_TOKEN})
    respx.post(RUNNER_REGISTRATION_URL).respond(200, json=body)
    with pytest.raises(ProtocolError, match=message) as info:
        await pat_auth(client, fake).admin_connection()
    assert "opaque" not in str(info.value)


@respx.mock
async def test_admin_token_without_exp_is_refused(
    client: httpx.AsyncClient, fake: FakeTime
) -> None:
    respx.post(REG_TOKEN_URL).respond(201, json={"token": REGISTRATION_TOKEN})
    token = jwt.encode({"sub": "x"}, "k" * 32, algorithm="HS256")
    respx.post(RUNNER_REGISTRATION_URL).respond(200, json={"url": ACTIONS_URL, "token": token})
    with pytest.raises(ProtocolError, match="no numeric exp"):
        await pat_auth(client, fake).admin_connection()


@respx.mock
async def test_registration_token_missing_from_201(
    client: httpx.AsyncClient, fake: FakeTime
) -> None:
    respx.post(REG_TOKEN_URL).respond(201, content=b"not json")
    with pytest.raises(
        ProtocolError, match=r"^POST https://api\.github\.com/orgs/acme/.*not valid"
    ):
        await pat_auth(client, fake).admin_connection()
