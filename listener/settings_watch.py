"""Notice a change of the mounted capacity settings, so the listener can exit and be recreated.

The listener reads its capacity settings once, at start-up (`CAPACITY_CONFIG_FILE`, the
ConfigMap `capacity-listener-<scale set>` mounted into the pod). The kubelet updates a
ConfigMap volume in place (it writes the new content beside the old and swaps the `..data`
symlink), so the file changes under a running listener; and ARC's controller deletes and
recreates the listener pod whenever its container terminates, whatever the exit status. So a
settings change takes effect by itself: :func:`wait_for_change` returns when the file holds
*different, valid* settings, the composition root stops the listener as after SIGTERM
(placeholders and session deleted, exit 0) and ARC starts a pod that reads the new file.

- The file is read every ``interval`` seconds and parsed only when its bytes differ from the
  last ones seen: a few hundred bytes of a local volume, read on the event loop.
- Bytes that parse to the settings already running (a comment, a reordering) change nothing.
- Settings that do not load (bad YAML, a bad value, the file gone) are logged once per
  content and ignored: the running listener keeps its valid settings instead of being
  replaced by a pod that cannot start. A later valid change still ends it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

log = logging.getLogger("listener.settings")

S = TypeVar("S")


def _content(path: Path) -> bytes:
    """The file's bytes, or a stand-in naming why it cannot be read (a change too)."""
    # A few hundred bytes of a local volume: cheaper on the loop than a worker thread.
    try:
        return path.read_bytes()
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}".encode()


async def wait_for_change(
    path: Path,
    running: S,
    load: Callable[[], S],
    *,
    interval: float,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> S:
    """Return the new settings once ``load()`` (which reads ``path``) gives settings that
    differ from ``running``; never returns while they stay the same or fail to load."""
    seen: bytes | None = None
    failed: bytes | None = None
    while True:
        content = _content(path)
        if content != seen:
            seen = content
            try:
                settings = load()
            except Exception as exc:  # any load error: the running settings stay in force
                if content != failed:
                    failed = content
                    log.warning(
                        "capacity settings changed but do not load; keeping the running ones",
                        extra={"path": str(path), "error": " | ".join(str(exc).splitlines())},
                    )
            else:
                if settings != running:
                    log.info(
                        "capacity settings changed; exiting so the controller recreates the "
                        "listener with them",
                        extra={"path": str(path)},
                    )
                    return settings
        await sleep(interval)
