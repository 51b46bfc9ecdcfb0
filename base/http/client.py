"""The one httpx module: client construction, one attempt under a deadline, capped reads.

Client (:func:`make_client`):

- TLS: the system trust store, with ``root_ca_pem`` *appended* (ARC adds a GHES root CA to
  the system pool rather than replacing it).
- Proxies: ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY`` with Go's rules
  (:mod:`base.http.proxy`); the client is built with ``trust_env=False`` and a small router
  picks the direct or the proxied transport per request.
- Deadlines: per-operation :class:`Timeout` limits on the client (``DEFAULT_TIMEOUT``), and
  every call here bounds the whole exchange as well (:func:`send_once`, :func:`get_capped`),
  so a server that trickles bytes cannot hold a call forever.
- User-Agent: the caller's; httpx's default ``Accept: */*`` is removed because GitHub API
  calls carry no Accept header.

Failures become the error tree of :mod:`base.http.errors`, with URLs stripped of their query
and user info (:func:`redact_url`). Nothing here retries: the Actions client's one retry
layer is ``listener.http``; the demand sources never retry.

Other modules use the httpx types through the names below (``Client``, ``Response``, …), so
this stays the only importer of httpx (an import-linter contract).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from base.http.errors import TooLargeError, TransportError
from base.http.proxy import ProxySettings

Client = httpx.AsyncClient
Request = httpx.Request
Response = httpx.Response
URL = httpx.URL
Headers = httpx.Headers
Timeout = httpx.Timeout

CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 30.0
DEFAULT_TIMEOUT = Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT)
"""Per-operation limits (connect 10 s, others 30 s) for every call but the long poll."""

_DISTRIBUTION = "capacity-listener"


def package_version() -> str:
    """This program's version, for User-Agents (``0.0.0`` when not installed)."""
    try:
        return importlib.metadata.version(_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"


def product_user_agent() -> str:
    """A plain ``capacity-listener/<version>`` User-Agent, for services other than GitHub's
    (HUD), which have no use for ARC's JSON document."""
    return f"{_DISTRIBUTION}/{package_version()}"


# --- client ------------------------------------------------------------------------------------


class _ProxyRouter(httpx.AsyncBaseTransport):
    """Sends each request directly or through the proxy :class:`ProxySettings` picks."""

    def __init__(self, settings: ProxySettings, verify: ssl.SSLContext) -> None:
        self._settings = settings
        self._direct = httpx.AsyncHTTPTransport(verify=verify)
        self._proxied = {
            url: httpx.AsyncHTTPTransport(verify=verify, proxy=httpx.Proxy(url))
            for url in {settings.http_proxy, settings.https_proxy}
            if url
        }

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        proxy = self._settings.proxy_for(str(request.url))
        transport = self._direct if proxy is None else self._proxied[proxy]
        return await transport.handle_async_request(request)

    async def aclose(self) -> None:
        for transport in (self._direct, *self._proxied.values()):
            await transport.aclose()


@functools.lru_cache(maxsize=4)
def ssl_context(root_ca_pem: str = "") -> ssl.SSLContext:
    """System trust store plus ``root_ca_pem`` (PEM, may hold several certificates).

    Cached: loading the system store costs tens of milliseconds, and a context is safe to
    share between clients (nothing here changes it after creation).
    """
    context = ssl.create_default_context()
    if root_ca_pem.strip():
        try:
            context.load_verify_locations(cadata=root_ca_pem)
        except (ssl.SSLError, ValueError):
            raise ValueError("server_root_ca: not a valid PEM certificate bundle") from None
    return context


def make_client(
    *,
    root_ca_pem: str = "",
    user_agent: str,
    timeout: Timeout = DEFAULT_TIMEOUT,
    env: Mapping[str, str] | None = None,
) -> Client:
    """The client every GitHub, Actions-service and HUD call uses (see the module docstring).

    ``env`` defaults to ``os.environ``; it is read once, here. Raises ValueError with one line
    naming the setting when ``root_ca_pem`` or a proxy variable is unusable.
    """
    transport = _ProxyRouter(ProxySettings.from_env(env), ssl_context(root_ca_pem))
    client = httpx.AsyncClient(
        transport=transport,
        timeout=timeout,
        trust_env=False,  # proxies are handled by _ProxyRouter; see the module docstring
        follow_redirects=True,  # like Go's http.Client, up to 10 hops
        max_redirects=10,
        headers={"User-Agent": user_agent},
    )
    del client.headers["Accept"]
    return client


def plain_client(timeout: float) -> Client:
    """A client with httpx's own defaults (its environment handling, no redirects), for a
    HUD source built without the composition root's client (a library use, tests)."""
    return httpx.AsyncClient(timeout=Timeout(timeout), follow_redirects=False)


# --- one call ----------------------------------------------------------------------------------


def redact_url(url: URL) -> str:
    """``url`` without user info and query, for logs and errors (queries may carry ids)."""
    return str(url.copy_with(query=None, fragment=None, username=None, password=None))


def transport_error(request: Request, exc: httpx.HTTPError) -> TransportError:
    """``exc`` (no usable response to ``request``) as a :class:`TransportError`: whether a
    retry could help, whether it timed out, and one line saying what happened."""
    method, url, kind = request.method, redact_url(request.url), type(exc).__name__
    detail = str(exc) or kind
    cert_error = _cert_error(exc)
    if cert_error is not None:
        reason = cert_error.verify_message or str(cert_error)
        return TransportError(
            method,
            url,
            f"TLS certificate verification failed: {reason}",
            transient=False,
            kind=kind,
        )
    if isinstance(exc, httpx.TimeoutException):
        return TransportError(
            method, url, f"{kind}: {detail}", transient=True, timed_out=True, kind=kind
        )
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.LocalProtocolError):
        return TransportError(method, url, f"{kind}: {detail}", transient=False, kind=kind)
    transient = isinstance(exc, httpx.TransportError)  # TooManyRedirects, DecodingError: no
    return TransportError(method, url, f"{kind}: {detail}", transient=transient, kind=kind)


def _cert_error(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLCertVerificationError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _out_of_time(request: Request, reason: str) -> TransportError:
    """The whole exchange's deadline ran out (``kind`` ``deadline``)."""
    return TransportError(
        request.method,
        redact_url(request.url),
        reason,
        transient=True,
        timed_out=True,
        kind="deadline",
    )


async def send_once(client: Client, request: Request, *, deadline: float) -> Response:
    """One attempt at ``request``, the whole of it (connect, send, wait, read the body)
    within ``deadline`` seconds. Raises :class:`TransportError` when no response came."""
    try:
        async with asyncio.timeout(deadline):
            return await client.send(request)
    except TimeoutError:
        raise _out_of_time(request, f"no complete response within {deadline:g} s") from None
    except httpx.HTTPError as exc:
        raise transport_error(request, exc) from exc


async def read_capped(response: Response, max_bytes: int) -> bytes:
    """The body of a streamed ``response``, abandoned as soon as it is known to be over
    ``max_bytes`` (declared so, or read past it): :class:`TooLargeError`."""
    method, url = response.request.method, redact_url(response.request.url)
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise TooLargeError(method, url, f"declared {declared} bytes")
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > max_bytes:
            raise TooLargeError(method, url, f"over {max_bytes} bytes")
    return bytes(body)


@dataclass(frozen=True)
class Answer:
    """A response to :func:`get_capped`: its status, headers and (for a 200 only) body."""

    status: int
    headers: Headers
    body: bytes


async def get_capped(
    client: Client,
    url: str,
    *,
    max_bytes: int,
    deadline: float,
    headers: Mapping[str, str] | None = None,
    params: Mapping[str, str] | None = None,
    limits: float | None = None,
    follow_redirects: bool | None = None,
) -> Answer:
    """One GET, its body streamed and read only for a 200, at most ``max_bytes`` of it, the
    whole exchange within ``deadline`` seconds. ``limits`` (seconds) replaces the client's
    per-operation timeouts and ``follow_redirects`` its redirect rule, for this call only.

    Raises :class:`TransportError` (``kind`` ``deadline`` when the deadline ran out) or
    :class:`TooLargeError`. Never retries.
    """
    request = client.build_request(
        "GET",
        url,
        params=params,
        headers=headers,
        timeout=Timeout(limits) if limits is not None else httpx.USE_CLIENT_DEFAULT,
    )
    redirects = client.follow_redirects if follow_redirects is None else follow_redirects
    try:
        async with asyncio.timeout(deadline):
            response = await client.send(request, stream=True, follow_redirects=redirects)
            try:
                body = (
                    b"" if response.status_code != 200 else await read_capped(response, max_bytes)
                )
            finally:
                await response.aclose()
    except TimeoutError:
        raise _out_of_time(request, f"no answer within {deadline:g}s") from None
    except httpx.HTTPError as exc:
        raise transport_error(request, exc) from exc
    return Answer(response.status_code, response.headers, body)
