"""The error tree of every HTTP client in the project.

::

    HTTPError                 root; str() is one line and never holds a secret
    ├── StatusError           a response whose status the call does not accept
    ├── TransportError        no response at all: connect/TLS/timeout/protocol failure
    └── TooLargeError         a body over the caller's cap (abandoned at the cap)

Clients derive their own errors from these (``listener.errors``: the Actions service's, whose
status errors also carry its error body and request ids). Server-provided text is flattened
to one line and shortened (:func:`one_line`); URLs are passed in without their query
(``base.http.client.redact_url``), which may carry ids. Tokens never reach an error: no
message here is built from request headers.
"""

from __future__ import annotations

# Longest server- or library-provided text kept in an error; bodies can be large HTML pages.
MAX_TEXT = 300


def one_line(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` on one line, at most ``limit`` characters (an ellipsis marks a cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class HTTPError(Exception):
    """Base of every error an HTTP client of the project raises."""


class StatusError(HTTPError):
    """The server answered with a status the call does not accept."""

    def __init__(self, status: int, *, method: str = "", url: str = "") -> None:
        self.status = status
        self.method = method
        self.url = url  # callers pass it without the query string
        super().__init__(self._render())

    def _render(self) -> str:
        head = f"{self.method} {self.url}".strip()
        return f"{head}: status {self.status}" if head else f"status {self.status}"

    def __str__(self) -> str:
        return self._render()


class TransportError(HTTPError):
    """No usable response: connection, TLS, timeout or HTTP protocol failure.

    ``transient`` is False for failures retrying cannot fix: an untrusted or invalid server
    certificate, an unsupported URL scheme, an invalid request, too many redirects.
    ``timed_out`` says the deadline (or one of the client's timeouts) ran out; ``kind`` names
    the failure (the transport library's exception class, or ``deadline``).
    """

    def __init__(
        self,
        method: str,
        url: str,
        reason: str,
        *,
        transient: bool,
        timed_out: bool = False,
        kind: str = "",
    ) -> None:
        self.method = method
        self.url = url
        self.reason = reason
        self.transient = transient
        self.timed_out = timed_out
        self.kind = kind
        super().__init__(f"{method} {url}: {one_line(reason)}")


class TooLargeError(HTTPError):
    """The body is over the cap: ``reason`` says whether declared so or read past it."""

    def __init__(self, method: str, url: str, reason: str) -> None:
        self.method = method
        self.url = url
        self.reason = reason
        super().__init__(f"{method} {url}: response too large ({reason})")
