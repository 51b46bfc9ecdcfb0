"""The on-disk cache of the slow builds the tests need (test infrastructure): the local
control plane and Karpenter (tools/localcluster/build.py), the conformance tier's
reference listener (tools/conformance/build.py) and the image tier's base root file
system (tools/image.py).

* ``cache_dir``: ``${XDG_CACHE_HOME:-~/.cache}/capacity-listener/<name>``, outside the
  repository, so a fresh clone or another worktree reuses what this machine built.
* ``locked``: an exclusive file lock across processes (CI, a developer, several test runs).
* ``input_key``: the one hasher of a build's inputs (recipe strings, pins, source files), the
  key a target is named by;
* ``build_once``: a target (file or directory, named by a key that hashes its inputs) built
  under its lock into a staging path beside it and renamed into place, so a reader sees a
  complete target or none; a build that fails or is killed leaves only the staging path,
  which the next build removes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path


def input_key(*parts: str | bytes | Path) -> str:
    """16 hex digits of SHA-256 over ``parts`` in order: a string as UTF-8, bytes as they
    are, a path as its file's content (name it with a string part where the name matters).
    Any change to an input is a new key, so a new cache entry; an old one is never reused."""
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            digest.update(part.read_bytes())
        else:
            digest.update(part.encode() if isinstance(part, str) else part)
    return digest.hexdigest()[:16]


def source_key(src: Path) -> str:
    """A source tree's cache key: its git commit (16 hex digits), or outside git a hash of
    its go.mod and go.sum (the opt-in tiers build cluster-autoscaler and ARC from a tree)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(src), "rev-parse", "HEAD"],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        )
        return out.stdout.strip()[:16]
    except (OSError, subprocess.SubprocessError):
        return "tree-" + input_key(src / "go.mod", src / "go.sum")


def cache_dir(name: str) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "capacity-listener" / name


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def build_once(
    target: Path, complete: Callable[[Path], bool], build: Callable[[Path], None]
) -> None:
    """Make sure ``target`` is complete: if ``complete(target)`` does not hold, take the lock
    ``<target>.lock``, check again (another process may have finished while this one waited),
    then ``build(staging)``, which must create ``staging`` (a file or a directory; the name
    keeps ``target``'s suffix, which some tools read the output format from), and rename it
    to ``target``, replacing an incomplete one."""
    if complete(target):
        return
    staging = target.with_name(f"{target.stem}.partial{target.suffix}")
    with locked(target.with_name(f"{target.name}.lock")):
        if complete(target):
            return
        _remove(staging)  # left by a build that was killed
        try:
            build(staging)
            _remove(target)
            staging.rename(target)
        except BaseException:
            _remove(staging)
            raise
