"""Whether the scale set's runner group lets every job of its scope through.

GitHub offers an organization's (or enterprise's) jobs to a scale set only through the
scale set's runner group, and it says nothing when the group keeps a job out: the scale set
just never sees it. The common case is a public repository and a group that does not allow
public repositories, which is the default group's default: a live probe of GitHub.com saw
`totalAvailableJobs` stay 0 for minutes while such a job was queued. A group limited to
selected repositories or workflows keeps the others out the same way.

With capacity-awareness on, the listener reads the group once at start-up (one GitHub REST
call with its own credentials, on the scale set's ``runnerGroupId``) and turns that silence
into a log line and the gauge ``gha_listener_runner_group_public_repositories``. A
repository-scoped scale set has no runner group to read. A failed read (a PAT without
``admin:org``, an App without the organization's self-hosted runners permission) is one
line and no gauge: nothing here may stop the listener.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from base.http.client import Client, redact_url
from base.http.errors import HTTPError
from listener.config import GitHubTarget, Scope
from listener.http import send
from listener.wire import WireError, decode_json

log = logging.getLogger(__name__)

# A start-up read that may not hold the listener up for long.
_DEADLINE = 30.0


@dataclass(frozen=True)
class RunnerGroup:
    """The settings of a runner group that decide which jobs reach its runners."""

    id: int
    name: str
    visibility: str  # "all", "selected" or "private"
    allows_public_repositories: bool
    restricted_to_workflows: bool


def runner_group_path(target: GitHubTarget, group_id: int) -> str | None:
    """The REST path of the group, or None where there is none to read (repository scope,
    or a scale set without a group id)."""
    if group_id <= 0:
        return None
    if target.scope is Scope.ORGANIZATION:
        return f"/orgs/{target.organization}/actions/runner-groups/{group_id}"
    if target.scope is Scope.ENTERPRISE:
        return f"/enterprises/{target.enterprise}/actions/runner-groups/{group_id}"
    return None


def parse_runner_group(body: bytes) -> RunnerGroup:
    """Parse GitHub's runner-group object; a missing or mistyped field is a WireError."""
    data = decode_json(body)
    if not isinstance(data, dict):
        raise WireError("runner group: expected a JSON object")
    group_id, name = data.get("id"), data.get("name")
    visibility, public = data.get("visibility"), data.get("allows_public_repositories")
    if isinstance(group_id, bool) or not isinstance(group_id, int):
        raise WireError("runner group: id: expected an integer")
    if not isinstance(name, str) or not isinstance(visibility, str):
        raise WireError("runner group: name and visibility: expected strings")
    if not isinstance(public, bool):
        raise WireError("runner group: allows_public_repositories: expected a boolean")
    return RunnerGroup(
        id=group_id,
        name=name,
        visibility=visibility,
        allows_public_repositories=public,
        restricted_to_workflows=data.get("restricted_to_workflows") is True,
    )


def warnings_for(group: RunnerGroup, owner: str) -> list[str]:
    """What the group keeps out, as lines for the log (empty when it lets everything in)."""
    lines = []
    if not group.allows_public_repositories:
        lines.append(
            f"runner group {group.name!r} does not allow public repositories: jobs of "
            f"{owner}'s public repositories are never offered to this scale set (allow public "
            "repositories in the group's settings, or use a repository-scoped scale set)"
        )
    if group.visibility != "all":
        lines.append(
            f"runner group {group.name!r} is limited to {group.visibility} repositories: jobs "
            "of other repositories are never offered to this scale set"
        )
    if group.restricted_to_workflows:
        lines.append(
            f"runner group {group.name!r} is restricted to selected workflows: jobs of other "
            "workflows are never offered to this scale set"
        )
    return lines


async def check_runner_group(
    client: Client,
    *,
    api_url: str,
    token: Callable[[], Awaitable[str]],
    target: GitHubTarget,
    group_id: int,
    report: Callable[[bool], None],
) -> RunnerGroup | None:
    """Read the group, log what it keeps out, ``report`` whether it allows public
    repositories. None (and one log line) when it cannot be read; never raises for that."""
    path = runner_group_path(target, group_id)
    if path is None:
        return None
    url = f"{api_url}{path}"
    try:
        bearer = await token()
        headers = {"Authorization": f"Bearer {bearer}", "Accept": "application/vnd.github+json"}
        response = await send(
            client, lambda: client.build_request("GET", url, headers=headers), deadline=_DEADLINE
        )
        if response.status_code != 200:
            log.info(
                "could not read the runner group's settings; jobs it keeps out go unnoticed",
                extra={"url": redact_url(response.request.url), "status": response.status_code},
            )
            return None
        group = parse_runner_group(response.content)
    except (HTTPError, WireError) as exc:
        log.info(
            "could not read the runner group's settings; jobs it keeps out go unnoticed",
            extra={"error": str(exc)},
        )
        return None
    report(group.allows_public_repositories)
    owner = target.enterprise if target.scope is Scope.ENTERPRISE else target.organization
    for line in warnings_for(group, owner):
        log.warning(line, extra={"runner_group_id": group.id})
    return group
