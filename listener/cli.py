"""``ghalistener`` / ``python -m listener``: run the listener, turn failures into one line.

Exit status 0 after a clean shutdown (SIGTERM), 1 on any error. The ARC controller recreates
the pod whenever the container exits, so exiting is the recovery path for fatal errors.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys

__all__ = ["main"]


def _leaf_errors(exc: BaseException) -> list[BaseException]:
    """Flatten the ExceptionGroups a TaskGroup raises into the errors that caused them."""
    if isinstance(exc, BaseExceptionGroup):
        leaves: list[BaseException] = []
        for inner in exc.exceptions:
            leaves.extend(_leaf_errors(inner))
        return leaves
    return [exc]


def main() -> None:
    from listener import app

    try:
        asyncio.run(app.main(os.environ))
    except KeyboardInterrupt:
        sys.exit(0)
    except BaseException as exc:
        if isinstance(exc, SystemExit):
            raise
        errors = _leaf_errors(exc)
        for error in errors:
            # One line per cause; the logging handler may not exist yet (bad config).
            message = " ".join(str(error).splitlines()) or type(error).__name__
            print(f"Error: {message}", file=sys.stderr)
        logging.getLogger("listener").debug("exit", exc_info=exc)
        sys.exit(1)


if __name__ == "__main__":
    main()
