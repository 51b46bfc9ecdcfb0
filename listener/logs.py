"""Logging set-up: ARC's levels and formats on stdlib logging, and secret redaction.

``configure_logging`` installs one stdout handler on the root logger (as ARC's slog handler
writes to stdout):

* ``json`` — one JSON object per line: ``time`` (UTC, RFC 3339 with milliseconds),
  ``level`` (DEBUG/INFO/WARN/ERROR, slog's names), ``logger``, ``msg``, then every ``extra``
  field, then ``exc`` when an exception is attached.
* ``text`` — one line of ``key=value`` pairs in the same order; values with spaces, quotes or
  ``=`` are quoted, so a traceback stays on its line.

Every value passed to :func:`register_secret` is replaced by ``***`` in each record's
message, arguments, ``extra`` fields, exception and stack text before any formatter sees it.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final, TextIO

REDACTED: Final = "***"

LEVELS: Final[Mapping[str, int]] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}
_LEVEL_NAMES: Final[Mapping[int, str]] = {
    logging.DEBUG: "DEBUG",
    logging.INFO: "INFO",
    logging.WARNING: "WARN",
    logging.ERROR: "ERROR",
    logging.CRITICAL: "CRITICAL",
}

# Fragments shorter than this are not treated as secrets: masking every "ab" in every line
# would garble the logs without protecting anything real.
_MIN_SECRET_LEN: Final = 6
# Long lines of a multi-line secret (a PEM key) are registered on their own too.
_MIN_LINE_LEN: Final = 16

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_RECORD_ATTRS: Final = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}

# Loggers that are too chatty, or log request/response bodies, below these levels.
_FLOOR_LEVELS: Final[Mapping[str, int]] = {
    "kubernetes_asyncio": logging.INFO,  # logs HTTP bodies (Secrets included) at DEBUG
    "httpcore": logging.INFO,  # wire-level trace at DEBUG
}


# --------------------------------------------------------------------------- redaction


class _Secrets:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None

    def add(self, value: str) -> None:
        pieces = {value} if len(value) >= _MIN_SECRET_LEN else set()
        if "\n" in value:
            pieces |= {
                line.strip() for line in value.splitlines() if len(line.strip()) >= _MIN_LINE_LEN
            }
        if not pieces - self._values:
            return
        with self._lock:
            self._values |= pieces
            # Longest first, so a secret containing another is masked whole.
            ordered = sorted(self._values, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(v) for v in ordered))

    @property
    def pattern(self) -> re.Pattern[str] | None:
        return self._pattern


_secrets = _Secrets()


def register_secret(value: str) -> None:
    """Mask ``value`` in every log record from now on. Short values (< 6 chars) are ignored."""
    if value:
        _secrets.add(value)


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by ``***``."""
    pattern = _secrets.pattern
    return text if pattern is None else pattern.sub(REDACTED, text)


def _redact_value(value: object) -> object:
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    # Anything else is shown through str() by the formatters; only replace it when that
    # text actually holds a secret, so structured values stay structured otherwise.
    text = str(value)
    cleaned = redact(text)
    return value if cleaned == text else cleaned


class RedactingFilter(logging.Filter):
    """Rewrites a record in place so no registered secret survives in it.

    The message is rendered (``msg % args``) and redacted, the exception and stack are
    rendered to text and redacted; every handler sees the cleaned record afterwards.
    """

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            # Broken format arguments: keep everything, as text, so the masking still works.
            message = f"{record.msg} {record.args!r}"
        record.msg = redact(message)
        record.args = ()
        if record.exc_info:
            record.exc_text = self._formatter.formatException(record.exc_info)
            record.exc_info = None
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        for key, value in list(record.__dict__.items()):
            if key not in _RECORD_ATTRS:
                record.__dict__[key] = _redact_value(value)
        return True


# --------------------------------------------------------------------------- formatting


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    moment = datetime.fromtimestamp(record.created, UTC)
    fields: dict[str, Any] = {
        "time": moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z",
        "level": _LEVEL_NAMES.get(record.levelno, record.levelname),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    for key, value in record.__dict__.items():
        if key not in _RECORD_ATTRS:
            # An extra may not hide one of the four fields above.
            fields[f"extra_{key}" if key in fields else key] = value
    if record.exc_text:
        fields["exc"] = record.exc_text
    if record.stack_info:
        fields["stack"] = record.stack_info
    return fields


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        return json.dumps(_fields(record), default=str, ensure_ascii=False)


_BARE_VALUE: Final = re.compile(r"[^\s\"=\\]+")


def _text_value(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if isinstance(value, str) and not _BARE_VALUE.fullmatch(text):
        return json.dumps(text, ensure_ascii=False)
    return text


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        return " ".join(f"{k}={_text_value(v)}" for k, v in _fields(record).items())


# --------------------------------------------------------------------------- set-up


def _level(level: str) -> int:
    try:
        return LEVELS[level.lower()]
    except KeyError:
        raise ValueError(
            f"invalid log level: {level!r} (must be one of {'|'.join(LEVELS)})"
        ) from None


def configure_logging(level: str, fmt: str, *, stream: TextIO | None = None) -> None:
    """Install the listener's handler on the root logger, replacing an earlier one.

    ``level`` is debug|info|warn|error (any case), ``fmt`` json|text. ``stream`` defaults
    to stdout.
    """
    levelno = _level(level)
    formatter: logging.Formatter
    if fmt == "json":
        formatter = JsonFormatter()
    elif fmt == "text":
        formatter = TextFormatter()
    else:
        raise ValueError(f"invalid log format: {fmt!r} (must be json or text)")

    handler = logging.StreamHandler(sys.stdout if stream is None else stream)
    handler.setFormatter(formatter)
    handler.addFilter(RedactingFilter())
    handler.set_name("listener")

    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "listener"]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(levelno)
    for name, floor in _FLOOR_LEVELS.items():
        logging.getLogger(name).setLevel(max(floor, levelno))
    # httpx logs every request (each long poll) at INFO; only let that through at debug.
    logging.getLogger("httpx").setLevel(
        logging.DEBUG if levelno <= logging.DEBUG else logging.WARNING
    )
