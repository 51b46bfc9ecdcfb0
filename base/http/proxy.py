"""Proxy selection with Go's rules (``golang.org/x/net/http/httpproxy``), as ARC applies them.

``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY`` in either case. httpx's own environment support
does not fully match Go: it treats a ``NO_PROXY`` CIDR such as ``10.0.0.0/8`` as a single
address, proxies loopback addresses, reads ``ALL_PROXY`` and prefers the lower-case variable
when both are set. :mod:`base.http.client` therefore builds its clients with ``trust_env=False``
and asks :meth:`ProxySettings.proxy_for` per request.

Remaining gaps: a ``socks5://`` proxy (which Go would use) is refused at start-up with a
one-line error, because httpx needs an extra package for it; Go's CGI rule (ignore
``HTTP_PROXY`` when ``REQUEST_METHOD`` is set) is not reproduced.

Pure apart from reading ``os.environ`` when no environment is passed in.
"""

from __future__ import annotations

import functools
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit


def _env_any(env: Mapping[str, str], *names: str) -> str:
    # Go's getEnvAny: the first variable that is set to a non-empty value wins, so the
    # upper-case spelling takes precedence over the lower-case one.
    for name in names:
        value = env.get(name, "")
        if value:
            return value
    return ""


def _proxy_url(value: str, name: str) -> str:
    if not value:
        return ""
    url = value if "://" in value else f"http://{value}"
    try:
        parsed = urlsplit(url)
        parsed.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError:
        raise ValueError(f"{name}: not a valid proxy URL") from None
    if parsed.scheme not in ("http", "https"):
        raise ValueError(f"{name}: unsupported proxy scheme {parsed.scheme!r} (use http or https)")
    if not parsed.hostname:
        raise ValueError(f"{name}: proxy URL has no host")
    return url


@dataclass(frozen=True)
class _NoProxyRule:
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
    domain: str = ""  # always starts with "."
    match_bare: bool = False  # "example.com" also matches the host "example.com" itself
    port: str = ""

    def matches(
        self, host: str, port: str, ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None
    ) -> bool:
        if self.port and self.port != port:
            return False
        if self.network is not None:
            return ip is not None and ip in self.network
        return host.endswith(self.domain) or (self.match_bare and host == self.domain[1:])


def _parse_no_proxy(value: str) -> tuple[bool, tuple[_NoProxyRule, ...]]:
    """Go's NO_PROXY grammar: ``*``, CIDR, IP[:port], [IPv6][:port], [*.|.]domain[:port]."""
    rules: list[_NoProxyRule] = []
    for raw in value.split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True, ()
        try:
            rules.append(_NoProxyRule(network=ipaddress.ip_network(entry, strict=False)))
            continue
        except ValueError:
            pass
        host, port = _split_host_port(entry)
        if not host:
            continue
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            pass
        else:
            rules.append(_NoProxyRule(network=ipaddress.ip_network(ip), port=port))
            continue
        if host.startswith("*."):
            host = host[1:]
        match_bare = not host.startswith(".")
        rules.append(
            _NoProxyRule(
                domain=host if not match_bare else f".{host}", match_bare=match_bare, port=port
            )
        )
    return False, tuple(rules)


def _split_host_port(entry: str) -> tuple[str, str]:
    if entry.startswith("["):
        end = entry.find("]")
        if end < 0:
            return entry, ""
        rest = entry[end + 1 :]
        return entry[1:end], rest[1:] if rest.startswith(":") else ""
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, port
    return entry, ""  # a bare IPv6 address, or a plain name


@dataclass(frozen=True)
class ProxySettings:
    """Proxy configuration from the environment, applied with Go's rules."""

    http_proxy: str = ""
    https_proxy: str = ""
    no_proxy: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ProxySettings:
        """Read ``HTTP_PROXY``/``http_proxy``, ``HTTPS_PROXY``/``https_proxy``, ``NO_PROXY``."""
        env = os.environ if env is None else env
        return cls(
            http_proxy=_proxy_url(_env_any(env, "HTTP_PROXY", "http_proxy"), "http_proxy"),
            https_proxy=_proxy_url(_env_any(env, "HTTPS_PROXY", "https_proxy"), "https_proxy"),
            no_proxy=_env_any(env, "NO_PROXY", "no_proxy"),
        )

    @functools.cached_property
    def _no_proxy_rules(self) -> tuple[bool, tuple[_NoProxyRule, ...]]:
        return _parse_no_proxy(self.no_proxy)

    def proxy_for(self, url: str) -> str | None:
        """The proxy URL to use for ``url``, or None to connect directly."""
        parts = urlsplit(url)
        proxy = {"https": self.https_proxy, "http": self.http_proxy}.get(parts.scheme, "")
        if not proxy:
            return None
        host = (parts.hostname or "").lower()
        if host == "localhost":
            return None
        try:
            ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
        except ValueError:
            ip = None
        if ip is not None and ip.is_loopback:
            return None
        bypass_all, rules = self._no_proxy_rules
        if bypass_all:
            return None
        port = str(parts.port or (443 if parts.scheme == "https" else 80))
        if any(rule.matches(host, port, ip) for rule in rules):
            return None
        return proxy
