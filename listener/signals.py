"""Stop signals from the first moment of the process on (stdlib only, import it first).

The kubelet sends SIGTERM when the pod is deleted, which can be while the interpreter is still
importing the listener's dependencies (about a second). Python's default action for SIGTERM
kills the process (exit status -15, no clean-up, a session possibly left behind), so the
handler is installed before anything else is imported: :func:`install_early` records the
signal, and :func:`attach` hands over to the event loop and replays a signal that arrived
before it, so start-up ends at once and the process exits 0 as after any SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # SIGTERM is what the kubelet sends

_received: list[int] = []


def _record(signum: int, _frame: FrameType | None) -> None:
    _received.append(signum)


def install_early() -> None:
    """Record SIGTERM/SIGINT until :func:`attach` takes over (call before heavy imports)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _record)


def attach(loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> None:
    """Route the stop signals to ``stop`` on ``loop``; call it now if one came in already."""
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop)
    if _received:
        stop()
