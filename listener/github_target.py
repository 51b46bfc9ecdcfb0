"""What ``configure_url`` points at: GitHub's host, scope and names, by the rules of ARC's
scaleset ``ParseGitHubConfigFromURL``. PURE: no I/O."""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

from listener.config import ConfigError, GitHubTarget, Scope
from listener.config_json import go_quote


def _redact_userinfo(url: str) -> str:
    """The URL with any ``user:password@`` replaced, for use in error messages."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1***@", url)


def _is_hosted(host: str, force_ghes: bool) -> bool:
    if force_ghes:
        return False
    # Same comparisons as scaleset: the three names case-insensitively, the suffix exactly.
    return host.lower() in ("github.com", "www.github.com", "github.localhost") or host.endswith(
        ".ghe.com"
    )


def parse_github_target(url: str, *, force_ghes: bool = False) -> GitHubTarget:
    """Parse ``configure_url`` the way ARC does: org, ``org/repo`` or ``enterprises/<name>``.

    Surrounding "/" are trimmed; the path must have one or two segments; two segments whose
    first is ``enterprises`` (any case) mean an enterprise.
    """
    trimmed = url.strip("/")
    shown = _redact_userinfo(trimmed)
    invalid = ConfigError(
        f"{go_quote(shown)}: invalid config URL, should point to an enterprise, org, or repository",
        field="configure_url",
    )
    try:
        parts = urlsplit(trimmed)
    except ValueError:
        raise invalid from None
    host = parts.netloc.rpartition("@")[2]
    if parts.scheme.lower() not in ("http", "https") or not host:
        raise ConfigError(
            f"configure_url {go_quote(shown)} must be an absolute http(s) URL, "
            "e.g. https://github.com/<org>",
            field="configure_url",
        )

    segments = unquote(parts.path).strip("/").split("/")
    enterprise = organization = repository = ""
    if len(segments) == 1:
        if segments[0] == "":
            raise invalid
        scope = Scope.ORGANIZATION
        organization = segments[0]
    elif len(segments) == 2:
        if segments[0].lower() == "enterprises":
            scope = Scope.ENTERPRISE
            enterprise = segments[1]
        else:
            scope = Scope.REPOSITORY
            organization, repository = segments
    else:
        raise invalid

    return GitHubTarget(
        configure_url=trimmed,
        scheme=parts.scheme.lower(),
        host=host,
        scope=scope,
        enterprise=enterprise,
        organization=organization,
        repository=repository,
        is_hosted=_is_hosted(host, force_ghes),
    )
