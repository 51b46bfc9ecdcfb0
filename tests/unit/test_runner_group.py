"""The start-up read of the scale set's runner group (listener/runner_group.py), over respx."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
import respx

from base.http.client import make_client
from listener.github_target import parse_github_target
from listener.runner_group import (
    RunnerGroup,
    check_runner_group,
    parse_runner_group,
    runner_group_path,
    warnings_for,
)
from listener.wire import WireError

API = "https://api.github.com"
GROUP = f"{API}/orgs/acme/actions/runner-groups/3"


def group(**changes: Any) -> dict[str, Any]:
    return {
        "id": 3,
        "name": "Default",
        "visibility": "all",
        "default": True,
        "allows_public_repositories": True,
        "restricted_to_workflows": False,
        **changes,
    }


async def token() -> str:
    return "ghp_runner_group_token"


async def check(url: str, group_id: int = 3) -> tuple[RunnerGroup | None, list[bool]]:
    reported: list[bool] = []
    async with make_client(user_agent="t", env={}) as client:
        found = await check_runner_group(
            client,
            api_url=API,
            token=token,
            target=parse_github_target(url),
            group_id=group_id,
            report=reported.append,
        )
    return found, reported


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("https://github.com/acme", "/orgs/acme/actions/runner-groups/3"),
        ("https://github.com/enterprises/big", "/enterprises/big/actions/runner-groups/3"),
        ("https://github.com/acme/app", None),  # a repository scale set has no runner group
    ],
)
def test_the_group_is_read_where_the_scope_has_one(url: str, path: str | None) -> None:
    assert runner_group_path(parse_github_target(url), 3) == path
    assert runner_group_path(parse_github_target(url), 0) is None


@respx.mock
async def test_a_group_without_public_repositories_is_a_warning_and_a_zero(
    caplog: pytest.LogCaptureFixture,
) -> None:
    route = respx.get(GROUP).respond(200, json=group(allows_public_repositories=False))
    with caplog.at_level(logging.INFO, logger="listener.runner_group"):
        found, reported = await check("https://github.com/acme")
    assert found is not None
    assert not found.allows_public_repositories
    assert reported == [False]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "does not allow public repositories" in warnings[0]
    assert "acme's public repositories" in warnings[0]
    assert route.calls.last.request.headers["Authorization"] == "Bearer ghp_runner_group_token"
    assert "ghp_runner_group_token" not in caplog.text


@respx.mock
async def test_a_group_open_to_all_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    respx.get(GROUP).respond(200, json=group())
    with caplog.at_level(logging.INFO, logger="listener.runner_group"):
        _, reported = await check("https://github.com/acme")
    assert reported == [True]
    assert caplog.records == []


@pytest.mark.parametrize("status", [403, 404])
@respx.mock
async def test_an_unreadable_group_is_one_line_and_no_gauge(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    respx.get(GROUP).respond(status, json={"message": "Resource not accessible by integration"})
    with caplog.at_level(logging.INFO, logger="listener.runner_group"):
        found, reported = await check("https://github.com/acme")
    assert (found, reported) == (None, [])
    assert [r.levelname for r in caplog.records] == ["INFO"]


@respx.mock
async def test_a_repository_scale_set_reads_nothing() -> None:
    found, reported = await check("https://github.com/acme/app")
    assert (found, reported) == (None, [])
    assert len(respx.calls) == 0


def test_selected_repositories_and_workflows_are_named() -> None:
    limited = parse_runner_group(
        httpx.Response(200, json=group(visibility="selected", restricted_to_workflows=True)).content
    )
    lines = warnings_for(limited, "acme")
    assert len(lines) == 2
    assert "selected repositories" in lines[0]
    assert "selected workflows" in lines[1]


@pytest.mark.parametrize(
    "body",
    [b"[]", b'{"id": "3", "name": "x", "visibility": "all", "allows_public_repositories": true}',
     b'{"id": 3, "name": "x", "visibility": "all"}'],
)  # fmt: skip
def test_a_malformed_group_is_a_wire_error(body: bytes) -> None:
    with pytest.raises(WireError, match="runner group"):
        parse_runner_group(body)
