"""``ghalistener`` / ``python -m listener``: run the listener, turn failures into one line.

Exit status 0 after a clean shutdown (SIGTERM), 1 on any error. The ARC controller recreates
the pod whenever the container exits, so exiting is the recovery path for fatal errors.
"""

from __future__ import annotations

# Only the standard library and listener.signals before the stop handler is installed: the
# imports below main() take about a second, and a SIGTERM in that time must not kill the
# process uncleanly.
import asyncio
import logging
import os
import sys

from listener import signals

__all__ = ["main"]


def _expected() -> tuple[type[BaseException], ...]:
    """Errors whose message says it all; anything else is a bug, reported with its type."""
    from capacity.kube import KubeError
    from capacity.settings import CapacitySettingsError
    from listener import app
    from listener.config import ConfigError
    from listener.errors import ActionsError

    return (ConfigError, CapacitySettingsError, app.StartupError, ActionsError, KubeError)


def _leaf_errors(exc: BaseException) -> list[BaseException]:
    """Flatten the ExceptionGroups a TaskGroup raises into the errors that caused them."""
    if isinstance(exc, BaseExceptionGroup):
        leaves: list[BaseException] = []
        for inner in exc.exceptions:
            leaves.extend(_leaf_errors(inner))
        return leaves
    return [exc]


def error_lines(exc: BaseException) -> list[str]:
    """One ``Error: ...`` line per cause, secrets masked."""
    from listener.logs import redact

    expected = _expected()
    lines = []
    for error in _leaf_errors(exc):
        message = " ".join(str(error).splitlines())
        if not isinstance(error, expected):
            message = f"{type(error).__name__}: {message}".rstrip(": ")
        lines.append(f"Error: {redact(message)}")
    return lines


def main() -> None:
    signals.install_early()
    from listener import app

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
