"""What an HTTP failure becomes: error bodies read without secrets, and the error tree the
listener's calls raise."""

from __future__ import annotations

import json

import httpx

from base.http import client as base_client
from listener.errors import (
    ActionsHTTPError,
    RetriesExhaustedError,
    SessionConflictError,
    UnauthorizedError,
)
from listener.http import error_from_response
from tests.unit.test_http import URL

# --- error bodies ------------------------------------------------------------------------------


def _response(status: int, content: bytes, headers: dict[str, str]) -> httpx.Response:
    request = httpx.Request("POST", URL, headers={"Authorization": "Bearer s3cr3t-header-token"})
    return httpx.Response(status, content=content, headers=headers, request=request)


def test_error_from_json_body_with_bom_and_ids() -> None:
    body = (
        b"\xef\xbb\xbf"
        + json.dumps(
            {
                "$id": "1",
                "innerException": None,
                "message": "The actions runner scaleset linux already has an active session.",
                "typeName": "GitHub.Actions.Runtime.WebApi.RunnerScaleSetSessionConflictException, "
                "GitHub.Actions.Runtime.WebApi",
                "typeKey": "RunnerScaleSetSessionConflictException",
                "errorCode": 0,
            }
        ).encode()
    )
    error = error_from_response(
        _response(
            409,
            body,
            {
                "Content-Type": "application/json",
                "ActivityId": "act-123",
                "X-GitHub-Request-Id": "GH:REQ:1",
            },
        )
    )
    assert error.status == 409
    assert error.type_name.startswith("GitHub.Actions.Runtime.WebApi.RunnerScaleSetSession")
    assert error.message == "The actions runner scaleset linux already has an active session."
    assert (error.activity_id, error.github_request_id) == ("act-123", "GH:REQ:1")
    text = str(error)
    assert text.startswith("POST https://api.example.test/thing: status 409: GitHub.Actions")
    assert text.endswith("(activity_id=act-123, github_request_id=GH:REQ:1)")


def test_error_from_text_plain_body() -> None:
    error = error_from_response(
        _response(400, b"line one\nline two", {"Content-Type": "text/plain; charset=utf-8"})
    )
    assert (error.type_name, error.message) == ("", "line one\nline two")
    assert "\n" not in str(error)
    assert str(error).endswith("status 400: line one line two")


def test_error_from_unparseable_body_keeps_a_short_excerpt() -> None:
    html = b"<html>" + b"x" * 5000 + b"</html>"
    error = error_from_response(_response(502, html, {"Content-Type": "text/html"}))
    prefix = "POST https://api.example.test/thing: status 502: "
    assert str(error).startswith(prefix + "<html>xxx")
    assert len(str(error)) <= len(prefix) + 300
    assert str(error).endswith("…")
    assert len(error.message) <= 2000


def test_error_for_401_is_unauthorized() -> None:
    error = error_from_response(_response(401, b"{}", {}))
    assert isinstance(error, UnauthorizedError)
    assert str(error) == "POST https://api.example.test/thing: status 401"


def test_errors_never_contain_tokens_from_headers_or_query() -> None:
    error = error_from_response(_response(500, b'{"message": "boom"}', {}))
    exhausted = RetriesExhaustedError("POST", base_client.redact_url(httpx.URL(URL)), 5, error)
    for text in (str(error), repr(error), str(exhausted), repr(exhausted)):
        assert "s3cr3t" not in text


def test_redact_url_drops_credentials_and_query() -> None:
    url = httpx.URL("https://user:pw@queue.example/_apis/q?sessionId=1&token=t#frag")
    assert base_client.redact_url(url) == "https://queue.example/_apis/q"


# --- the error tree ----------------------------------------------------------------------------


def test_session_conflict_error_explains_itself_on_one_line() -> None:
    error = SessionConflictError(
        409,
        "GitHub.Actions.Runtime.WebApi.RunnerScaleSetSessionConflictException",
        "The actions runner scaleset linux already has an active session.",
        "act-1",
        method="POST",
        url="https://pipelines.example/_apis/runtime/runnerscalesets/7/sessions",
        waited=300,
    )
    text = str(error)
    assert "\n" not in text
    assert text.startswith("POST https://pipelines.example/_apis/runtime/runnerscalesets/7/")
    assert "status 409" in text
    assert "already has an active session" in text
    assert "still conflicting after 300 s" in text
    assert isinstance(error, ActionsHTTPError)
    assert error.status == 409
