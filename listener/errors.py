"""Errors raised by the GitHub and Actions-service clients, within the project's one HTTP
error tree (``base.http.errors``; the base's classes are marked ◇)::

    HTTPError ◇                       root; str() is always one line and never holds a token
    ├── TransportError ◇              no response at all: connect/TLS/timeout/protocol failure
    ├── StatusError ◇                 a response with a status the call does not accept
    │   └── ActionsHTTPError          … with the service's error body and request ids
    │       ├── UnauthorizedError     401
    │       ├── SessionConflictError  409 on session create, still there when we gave up
    │       └── ScaleSetGoneError     404 on session create: the scale set no longer exists
    └── ActionsError                  what only these clients raise (ActionsHTTPError too)
        ├── RetriesExhaustedError     the retry policy gave up; ``last_error`` says on what
        ├── ProtocolError             a success status whose body does not have the wire shape
        └── CredentialsError          local credentials unusable (e.g. a bad App private key)

Retrying is the job of ``listener.http``, which reads ``TransportError.transient`` and
the status of ``ActionsHTTPError`` (:func:`is_retryable_status`).
"""

from __future__ import annotations

from base.http.errors import HTTPError, StatusError, one_line


class ActionsError(HTTPError):
    """Base of the errors only the GitHub/Actions clients raise."""


class ActionsHTTPError(ActionsError, StatusError):
    """The server answered with a status the call does not accept.

    ``type_name`` and ``message`` come from the error body (docs/wire-protocol.md §2):
    ``text/plain`` bodies are the message; JSON bodies give ``typeName`` and ``message``.
    ``activity_id`` and ``github_request_id`` are the ``ActivityId`` and
    ``X-GitHub-Request-Id`` response headers, which GitHub support asks for.
    """

    def __init__(
        self,
        status: int,
        type_name: str = "",
        message: str = "",
        activity_id: str = "",
        github_request_id: str = "",
        *,
        method: str = "",
        url: str = "",
    ) -> None:
        self.type_name = type_name
        self.message = message
        self.activity_id = activity_id
        self.github_request_id = github_request_id
        StatusError.__init__(self, status, method=method, url=url)

    def _render(self) -> str:
        # Only server-provided text is shortened; our own context always survives.
        text = super()._render()
        detail = ": ".join(one_line(p) for p in (self.type_name, self.message) if p.strip())
        if detail:
            text += f": {detail}"
        ids = [
            f"{key}={one_line(value)}"
            for key, value in (
                ("activity_id", self.activity_id),
                ("github_request_id", self.github_request_id),
            )
            if value
        ]
        if ids:
            text += f" ({', '.join(ids)})"
        return text


class UnauthorizedError(ActionsHTTPError):
    """401: the token was refused (for message-queue calls: the queue token expired)."""


class _GaveUpError(ActionsHTTPError):
    """An answer we kept retrying before giving up; ``waited`` is for how long (seconds)."""

    def __init__(
        self,
        status: int,
        type_name: str = "",
        message: str = "",
        activity_id: str = "",
        github_request_id: str = "",
        *,
        method: str = "",
        url: str = "",
        waited: float = 0.0,
    ) -> None:
        self.waited = waited
        super().__init__(
            status, type_name, message, activity_id, github_request_id, method=method, url=url
        )


class SessionConflictError(_GaveUpError):
    """409 on session create: another listener holds the scale set's session.

    ``waited`` is how long we kept retrying before giving up (seconds).
    """

    def _render(self) -> str:
        base = super()._render()
        if self.waited > 0:
            return (
                f"{base}; still conflicting after {self.waited:.0f} s of retries: another "
                "listener owns this scale set's session, or a dead one's has not expired yet"
            )
        return base


class ScaleSetGoneError(_GaveUpError):
    """404 on session create: the service no longer knows the scale set (deleted on GitHub's
    side, or registered again under a new id), still so after ``waited`` seconds."""

    def _render(self) -> str:
        return (
            f"{super()._render()}; the runner scale set does not exist on the Actions service "
            f"(still so after {self.waited:.0f} s): it must be registered again by ARC's "
            "controller (its runner-scale-set-id annotation is stale)"
        )


class RetriesExhaustedError(ActionsError):
    """Every attempt the retry policy allows failed; ``last_error`` is the final failure."""

    def __init__(self, method: str, url: str, attempts: int, last_error: HTTPError) -> None:
        self.method = method
        self.url = url
        self.attempts = attempts
        self.last_error = last_error
        super().__init__(f"{method} {url}: giving up after {attempts} attempts; last: {last_error}")

    @property
    def status(self) -> int | None:
        """Status of the last response, or None when the last attempt got no response."""
        return self.last_error.status if isinstance(self.last_error, StatusError) else None


class ProtocolError(ActionsError):
    """A success status whose body does not match the protocol (wraps ``WireError``)."""


class CredentialsError(ActionsError):
    """Local credentials cannot be used (never includes the credential itself)."""


def is_retryable_status(status: int) -> bool:
    """Statuses ARC's HTTP client retries: 429 and every 5xx except 501
    (docs/wire-protocol.md §2)."""
    return status == 429 or (500 <= status <= 599 and status != 501)
