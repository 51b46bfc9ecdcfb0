"""Log formats, levels and secret redaction (listener/logs.py)."""

from __future__ import annotations

import io
import json
import logging
import re
import uuid
from collections.abc import Iterator

import pytest

from listener.logs import configure_logging, redact, register_secret


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    others = {
        name: logging.getLogger(name).level for name in ("kubernetes_asyncio", "httpcore", "httpx")
    }
    yield
    # Only our handler goes: pytest attaches and detaches its own capture handlers per phase.
    for handler in [h for h in root.handlers if h.get_name() == "listener"]:
        root.removeHandler(handler)
    root.setLevel(level)
    for name, old in others.items():
        logging.getLogger(name).setLevel(old)


def fresh_secret() -> str:
    # Unique per test: the registry of secrets is process-wide by design.
    return f"s3cr3t-{uuid.uuid4().hex}"


def setup(level: str, fmt: str) -> io.StringIO:
    stream = io.StringIO()
    configure_logging(level, fmt, stream=stream)
    return stream


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


# --------------------------------------------------------------------------- shapes


def test_json_is_one_object_per_line_with_extras() -> None:
    stream = setup("info", "json")
    logging.getLogger("listener.test").info(
        "poll %s", "done", extra={"job_id": "j-1", "count": 3, "ok": True}
    )
    [line] = lines(stream)
    record = json.loads(line)
    assert list(record) == ["time", "level", "logger", "msg", "job_id", "count", "ok"]
    assert TIME.fullmatch(record["time"])
    assert record["level"] == "INFO"
    assert record["logger"] == "listener.test"
    assert record["msg"] == "poll done"
    assert (record["job_id"], record["count"], record["ok"]) == ("j-1", 3, True)


def test_json_exception_stays_on_one_line() -> None:
    stream = setup("info", "json")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("listener.test").exception("failed")
    [line] = lines(stream)
    record = json.loads(line)
    assert record["level"] == "ERROR"
    assert record["exc"].startswith("Traceback (most recent call last):")
    assert record["exc"].endswith("RuntimeError: boom")


def test_json_extra_cannot_hide_a_base_field() -> None:
    stream = setup("info", "json")
    logging.getLogger("listener.test").info("hi", extra={"time": "forged", "level": "x"})
    record = json.loads(lines(stream)[0])
    assert TIME.fullmatch(record["time"])
    assert record["level"] == "INFO"
    assert (record["extra_time"], record["extra_level"]) == ("forged", "x")


def test_json_non_serialisable_extra_is_shown_as_text() -> None:
    stream = setup("info", "json")
    logging.getLogger("listener.test").info("hi", extra={"obj": object.__new__(Marker)})
    assert json.loads(lines(stream)[0])["obj"] == "<marker>"


class Marker:
    def __str__(self) -> str:
        return "<marker>"


def test_text_is_readable_key_value() -> None:
    stream = setup("debug", "text")
    logging.getLogger("listener.test").warning(
        "job started", extra={"runner": "linux-x1", "note": 'says "hi"', "n": 2, "empty": ""}
    )
    [line] = lines(stream)
    match = re.fullmatch(
        r"time=(\S+) level=WARN logger=listener\.test msg=\"job started\" "
        r"runner=linux-x1 note=\"says \\\"hi\\\"\" n=2 empty=\"\"",
        line,
    )
    assert match, line
    assert TIME.fullmatch(match.group(1))


def test_text_exception_stays_on_one_line() -> None:
    stream = setup("info", "text")
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        logging.getLogger("listener.test").error("failed", exc_info=True)
    [line] = lines(stream)
    assert line.startswith("time=")
    assert 'msg=failed exc="Traceback (most recent call last):\\n' in line
    assert line.endswith('ValueError: bad\\nvalue"')


# --------------------------------------------------------------------------- levels


@pytest.mark.parametrize(
    ("level", "shown"),
    [
        ("debug", ["DEBUG", "INFO", "WARN", "ERROR"]),
        ("INFO", ["INFO", "WARN", "ERROR"]),
        ("warn", ["WARN", "ERROR"]),
        ("Error", ["ERROR"]),
    ],
)
def test_levels(level: str, shown: list[str]) -> None:
    stream = setup(level, "json")
    log = logging.getLogger("listener.test")
    log.debug("d")
    log.info("i")
    log.warning("w")
    log.error("e")
    assert [json.loads(line)["level"] for line in lines(stream)] == shown


def test_kubernetes_client_is_kept_at_info_even_at_debug() -> None:
    stream = setup("debug", "json")
    kube = logging.getLogger("kubernetes_asyncio.client.rest")
    kube.debug("response body: {secret data}")
    kube.info("kept")
    logging.getLogger("httpcore.http11").debug("send_request_headers.started")
    logging.getLogger("listener.test").debug("ours")
    assert [json.loads(line)["msg"] for line in lines(stream)] == ["kept", "ours"]


def test_kubernetes_client_follows_a_stricter_level() -> None:
    setup("error", "json")
    assert logging.getLogger("kubernetes_asyncio").getEffectiveLevel() == logging.ERROR


def test_httpx_request_lines_only_at_debug() -> None:
    stream = setup("info", "json")
    logging.getLogger("httpx").info("HTTP Request: GET https://example/ 200")
    assert lines(stream) == []
    stream = setup("debug", "json")
    logging.getLogger("httpx").info("HTTP Request: GET https://example/ 200")
    assert len(lines(stream)) == 1


def test_reconfiguring_replaces_the_handler() -> None:
    first = setup("info", "json")
    second = setup("info", "text")
    logging.getLogger("listener.test").info("once")
    assert lines(first) == []
    assert len(lines(second)) == 1


@pytest.mark.parametrize(
    ("level", "fmt", "message"),
    [
        ("trace", "json", "invalid log level: 'trace'"),
        ("", "json", "invalid log level: ''"),
        ("info", "JSON", "invalid log format: 'JSON'"),
        ("info", "", "invalid log format: ''"),
    ],
)
def test_bad_level_or_format(level: str, fmt: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        configure_logging(level, fmt)


# --------------------------------------------------------------------------- redaction


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_registered_secret_never_appears(fmt: str) -> None:
    secret = fresh_secret()
    register_secret(secret)
    stream = setup("debug", fmt)
    log = logging.getLogger("listener.test")

    log.info(f"in the message {secret}")
    log.info("in args %s and %r", secret, {"token": secret})
    log.info("in extra", extra={"token": secret, "nested": {"a": [secret]}, "n": 1})
    try:
        raise RuntimeError(f"exception text {secret}")
    except RuntimeError:
        log.exception("in exception")
    try:
        raise ValueError(f"as an argument {secret}")
    except ValueError as exc:
        log.error("failed: %s", exc)
    log.info("in a stack", stack_info=True, extra={"where": secret})
    logging.getLogger("some.library").warning("third party %s", secret)

    output = stream.getvalue()
    assert len(lines(stream)) == 7
    assert secret not in output
    assert output.count("***") >= 8


def test_broken_format_arguments_do_not_leak_a_secret() -> None:
    secret = fresh_secret()
    register_secret(secret)
    stream = setup("info", "json")
    [handler] = [h for h in logging.getLogger().handlers if h.get_name() == "listener"]
    # Handed to our handler directly: pytest's own capture handler would raise on it first.
    record = logging.LogRecord("listener.test", logging.INFO, __file__, 1, "n=%d", (secret,), None)
    handler.handle(record)
    [line] = lines(stream)
    assert secret not in line
    assert json.loads(line)["msg"] == "n=%d ('***',)"


def test_redaction_keeps_structured_extras_that_hold_no_secret() -> None:
    register_secret(fresh_secret())
    stream = setup("info", "json")
    logging.getLogger("listener.test").info("x", extra={"ids": [1, 2], "n": 5})
    record = json.loads(lines(stream)[0])
    assert (record["ids"], record["n"]) == ([1, 2], 5)


def test_multiline_private_key_lines_are_masked_one_by_one() -> None:
    body = uuid.uuid4().hex + uuid.uuid4().hex
    key = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----\n"
    register_secret(key)
    stream = setup("info", "text")
    logging.getLogger("listener.test").info("whole %s; one line %s", key, body)
    output = stream.getvalue()
    assert body not in output
    assert len(lines(stream)) == 1


def test_longest_secret_wins_and_short_values_are_ignored() -> None:
    inner = fresh_secret()
    outer = f"prefix-{inner}-suffix"
    register_secret(inner)
    register_secret(outer)
    register_secret("ab")
    register_secret("")
    assert redact(f"x {outer} y {inner} about") == "x *** y *** about"


def test_secret_registered_after_configuration_is_masked() -> None:
    stream = setup("info", "json")
    secret = fresh_secret()
    logging.getLogger("listener.test").info("before %s", "nothing")
    register_secret(secret)
    logging.getLogger("listener.test").info("after %s", secret)
    assert secret not in stream.getvalue()
