"""``ghalistener`` / ``python -m listener``: run the listener, turn failures into one line.

Exit status 0 after a clean shutdown (SIGTERM), 1 on any error. A bad config prints ARC's
own fatal line; other errors print ``Error: ...``. The ARC controller recreates
the pod whenever the container exits, so exiting is the recovery path for fatal errors.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time

from capacity.kube import KubeError
from capacity.settings import CapacitySettingsError
from listener import app
from listener.config import ConfigError
from listener.errors import ActionsError
from listener.logs import redact

# Errors whose message says it all; anything else is a bug, reported with its type name.
_EXPECTED = (ConfigError, CapacitySettingsError, app.StartupError, ActionsError, KubeError)


def _leaf_errors(exc: BaseException) -> list[BaseException]:
    """Flatten the ExceptionGroups a TaskGroup raises into the errors that caused them."""
    if isinstance(exc, BaseExceptionGroup):
        leaves: list[BaseException] = []
        for inner in exc.exceptions:
            leaves.extend(_leaf_errors(inner))
        return leaves
    return [exc]


def _go_log_prefix() -> str:
    # Go's log.Printf prefix (LstdFlags): local date and time, then a space.
    return time.strftime("%Y/%m/%d %H:%M:%S ")


def error_lines(exc: BaseException) -> list[str]:
    """One line per cause, secrets masked: ``Error: ...``, or ARC's own line for config errors.

    A bad config gives exactly the line ARC's listener prints (``Failed to read config: ...``
    after Go's log timestamp), because operators alert on it.
    """
    lines = []
    for error in _leaf_errors(exc):
        if isinstance(error, ConfigError):
            line = " ".join(error.line.splitlines())
            prefix = "" if error.stage == "env" else _go_log_prefix()
            lines.append(prefix + redact(line))
            continue
        message = " ".join(str(error).splitlines())
        if not isinstance(error, _EXPECTED):
            message = f"{type(error).__name__}: {message}".rstrip(": ")
        lines.append(f"Error: {redact(message)}")
    return lines


def main() -> None:
    try:
        asyncio.run(app.main(os.environ))
    except KeyboardInterrupt:
        sys.exit(0)
    except Exception as exc:  # the process boundary: report, then exit 1
        # Printed, not logged: the logging handler may not exist yet (bad config).
        for line in error_lines(exc):
            print(line, file=sys.stderr)
        logging.getLogger("listener").debug("exit", exc_info=exc)
        sys.exit(1)


if __name__ == "__main__":
    main()
