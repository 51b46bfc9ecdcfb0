"""Response headers that say when to call again: ``Retry-After`` (RFC 9110 §10.2.3) and
GitHub's rate-limit headers. Pure: the time is passed in, headers are any mapping whose
``get`` ignores case (``httpx.Headers``, or lower-case keys)."""

from __future__ import annotations

import email.utils
from collections.abc import Mapping
from dataclasses import dataclass


def retry_after(headers: Mapping[str, str], now: float) -> float | None:
    """Seconds the server asked us to wait, from ``Retry-After`` (whole seconds, or an
    HTTP date in GMT compared with ``now``, Unix seconds); never negative. None when the
    header is absent or unreadable."""
    value = headers.get("retry-after", "").strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000" dates parse naive; HTTP dates are always GMT
        return None
    return max(0.0, when.timestamp() - now)


@dataclass(frozen=True)
class RateLimit:
    """GitHub's ``X-RateLimit-Remaining`` and ``X-RateLimit-Reset`` (Unix seconds), each
    None when the answer did not carry it."""

    remaining: int | None
    reset_at: float | None


def rate_limit(headers: Mapping[str, str]) -> RateLimit:
    """What an answer says about the token's rate limit."""
    remaining = headers.get("x-ratelimit-remaining", "")
    reset = headers.get("x-ratelimit-reset", "")
    return RateLimit(
        int(remaining) if remaining.isdigit() else None,
        float(reset) if reset.isdigit() else None,
    )


def rate_limited(status: int, headers: Mapping[str, str]) -> bool:
    """Whether GitHub refused the call for its rate limits: a 429, or a 403 carrying
    ``Retry-After`` (secondary limits) or ``X-RateLimit-Remaining: 0`` (the primary one)."""
    return status == 429 or (
        status == 403 and ("retry-after" in headers or headers.get("x-ratelimit-remaining") == "0")
    )
