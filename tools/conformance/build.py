"""Build the Go reference listener (``go/``) once, or find it in the cache.

The same mechanism as the local control plane (``tools.localcluster.build``): the
binary lives in ``${XDG_CACHE_HOME:-~/.cache}/capacity-listener/conformance/<key>/`` where
``<key>`` hashes go.mod, go.sum and the source, a file lock makes concurrent builds (CI, xdist
workers, a developer) wait for one another, and a missing or too-old Go is one clear line.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tools.build_cache import build_once, cache_dir, input_key
from tools.localcluster.build import (
    BuildError,
    Progress,
    _first_error,
    _go_env,
    _heartbeat,
    check_go,
)

__all__ = ["GO_DIR", "BuildError", "binary_path", "ensure_built"]

GO_DIR = Path(__file__).resolve().parent / "go"
INPUTS = ("go.mod", "go.sum", "main.go")
# Bump when the build steps change in a way the hashed inputs do not show.
RECIPE = "1"
BINARY = "arc-reference-listener"


def _stderr(line: str) -> None:
    print(f"conformance: {line}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    return cache_dir("conformance")


def cache_key() -> str:
    inputs = [part for name in INPUTS for part in (f"{name}\n", GO_DIR / name)]
    return input_key(f"recipe={RECIPE}\n", *inputs)


def binary_path() -> Path:
    """Where the binary for the current inputs is (or will be)."""
    return cache_root() / cache_key() / BINARY


def ensure_built(progress: Progress = _stderr) -> Path:
    """Return the cached reference binary, building it first if needed."""
    binary = binary_path()
    if binary.is_file():
        return binary
    go = check_go()
    key = cache_key()

    def build_into(staging: Path) -> None:
        started = time.monotonic()
        progress(f"building the ARC reference listener (actions/scaleset) into {binary.parent}")
        staging.mkdir(parents=True)
        log = cache_root() / f"{key}.build.log"
        cmd = [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(staging / BINARY), "."]
        with _heartbeat(progress, "the reference listener"), log.open("w") as fh:
            proc = subprocess.run(
                cmd, cwd=GO_DIR, stdout=fh, stderr=subprocess.STDOUT, env=_go_env(), check=False
            )
        if proc.returncode != 0:
            first = _first_error(log.read_text())
            raise BuildError(f"go build in {GO_DIR.name}/ failed (log {log}): {first}")
        progress(f"built in {time.monotonic() - started:.1f}s")

    build_once(binary.parent, lambda root: (root / BINARY).is_file(), build_into)
    return binary


if __name__ == "__main__":
    try:
        print(ensure_built())
    except BuildError as exc:
        print(f"conformance: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
