"""The listener image built from the real Dockerfile and run, without a Docker engine
(``make image``; the image tier, tests/image, runs it too).

* The Dockerfile's base, ``python:3.13-slim``, comes from a registry this project does not
  reach, so an equivalent base is bootstrapped from Debian packages: ``mmdebstrap`` makes a
  Debian trixie (the distribution that image is built on, with Python 3.13) minbase root
  file system with ``python3``, then mirrors the layout the Dockerfile relies on: the
  interpreter as ``/usr/local/bin/python3`` and pip installed for that interpreter (from
  Debian's own pip wheel, no download), so the builder stage can run pip and the runtime
  stage can uninstall it. The tarball is cached under
  ``${XDG_CACHE_HOME:-~/.cache}/capacity-listener/image-base/<key>.tar``, the key hashing
  the whole mmdebstrap command line, and imported into the local container storage as
  ``localhost/capacity-listener-base:<key>``.
* ``buildah bud --isolation chroot`` builds the repository's Dockerfile on it, with the base
  passed as the ``PYTHON_IMAGE`` build argument; ``buildah run --isolation chroot`` runs a
  working container of the result as the image's user. The listener itself runs from the
  image through tests/support/image_listener.py.

``python -m tools.image`` builds and prints the image's numbers as JSON.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.build_cache import build_once, cache_dir, input_key, locked

REPO_ROOT = Path(__file__).resolve().parents[1]
SUITE = "trixie"
BASE_REPOSITORY = "localhost/capacity-listener-base"
IMAGE = "localhost/capacity-listener:test"
SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
TOOLS = ("buildah", "mmdebstrap")

# Runs with the new root file system as $1, after the packages are installed. It gives the
# root file system the shape of python:3.13-slim where the Dockerfile depends on it.
_CUSTOMIZE = (
    # The official image's interpreter is not Debian-managed; without the marker pip installs
    # into it as it does there.
    'rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED'
    ' && ln -s /usr/bin/python3 "$1/usr/local/bin/python3"'
    ' && ln -s python3 "$1/usr/local/bin/python"'
    # pip from Debian's wheel into /usr/local, as the official image has it; then drop the
    # wheel so the only pip left is the one the runtime stage uninstalls.
    ' && chroot "$1" sh -c \'whl=$(echo /usr/share/python-wheels/pip-*.whl)'
    ' && python3 "$whl/pip" install --quiet --no-index --no-cache-dir'
    ' --root-user-action=ignore "$whl"\''
    ' && chroot "$1" dpkg --purge python3-pip-whl'
)


def _stderr(line: str) -> None:
    print(f"image: {line}", file=sys.stderr, flush=True)


Progress = Callable[[str], None]


class ImageError(RuntimeError):
    """The image could not be bootstrapped, built or run; the message says which step."""


def missing_tools() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def cache_root() -> Path:
    return cache_dir("image-base")


def mmdebstrap_argv(output: Path) -> list[str]:
    return [
        "mmdebstrap",
        "--quiet",
        "--variant=minbase",
        "--include=python3,python3-pip-whl",
        # Documentation is dead weight in an image (python:3.13-slim drops it too); the
        # copyright files stay.
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-include=/usr/share/doc/*/copyright",
        "--dpkgopt=path-exclude=/usr/share/info/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        f"--customize-hook={_CUSTOMIZE}",
        SUITE,
        str(output),
    ]


def base_key() -> str:
    """Hash of the bootstrap command line: a changed package list or hook is a new base."""
    argv = mmdebstrap_argv(Path("OUT"))
    return input_key("\0".join(argv))


def _run(argv: Sequence[str], what: str, timeout: float) -> str:
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise ImageError(f"{what}: no result within {timeout:.0f}s") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise ImageError(f"{what} failed ({proc.returncode}):\n" + "\n".join(tail))
    return proc.stdout


def image_exists(name: str) -> bool:
    proc = subprocess.run(
        ["buildah", "inspect", "--type", "image", name],
        capture_output=True,
        timeout=60,
        check=False,
    )
    return proc.returncode == 0


def ensure_base(progress: Progress = _stderr) -> str:
    """The local stand-in for python:3.13-slim, bootstrapped and imported on first use."""
    key = base_key()
    name = f"{BASE_REPOSITORY}:{key}"
    tarball = cache_root() / f"{key}.tar"
    # One bootstrap or build at a time on this machine (they share the container storage).
    with locked(cache_root() / "lock"):
        if image_exists(name):
            return name

        def bootstrap(staging: Path) -> None:
            progress(f"bootstrapping Debian {SUITE} with python3 (mmdebstrap)")
            started = time.monotonic()
            # mmdebstrap reads the output format from the name: staging ends in .tar.
            _run(mmdebstrap_argv(staging), "mmdebstrap", timeout=1200)
            progress(f"base root file system in {time.monotonic() - started:.0f}s")

        build_once(tarball, Path.exists, bootstrap)
        container = _run(["buildah", "from", "scratch"], "buildah from scratch", 60).strip()
        try:
            # `add` unpacks a local tarball, as the Dockerfile instruction does.
            _run(["buildah", "add", "--quiet", container, str(tarball), "/"], "import", 600)
            _run(["buildah", "commit", "--quiet", container, name], "commit base", 600)
        finally:
            subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
    return name


@dataclass(frozen=True)
class Built:
    """The built image and its numbers."""

    name: str
    base: str
    seconds: float
    size_bytes: int
    layers: int
    config: Mapping[str, Any]

    def summary(self) -> dict[str, Any]:
        return {
            "image": self.name,
            "base": self.base,
            "build_seconds": round(self.seconds, 1),
            "size_bytes": self.size_bytes,
            "size_mib": round(self.size_bytes / 2**20, 1),
            "layers": self.layers,
            "user": self.config.get("User"),
            "entrypoint": self.config.get("Entrypoint"),
        }


def inspect_image(name: str) -> dict[str, Any]:
    out = _run(["buildah", "inspect", "--type", "image", name], f"inspect {name}", 60)
    data: dict[str, Any] = json.loads(out)
    return data


def pip_trust_volumes() -> list[str]:
    """``buildah bud`` options that let the build's pip trust what this machine trusts.

    Behind a TLS-inspecting proxy pip needs the proxy's CA: the bundle pip is told to use
    here (``PIP_CERT``, ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``), else this machine's system
    bundle. It is bind-mounted over the base's system bundle, which pip reads, in the RUN
    steps only: a mount over an existing file leaves no trace in the layers, and the
    Dockerfile stays as users build it.
    """
    for candidate in (
        os.environ.get("PIP_CERT"),
        os.environ.get("SSL_CERT_FILE"),
        os.environ.get("REQUESTS_CA_BUNDLE"),
        SYSTEM_CA_BUNDLE,
    ):
        if candidate and Path(candidate).is_file():
            return ["--volume", f"{candidate}:{SYSTEM_CA_BUNDLE}:ro"]
    return []


def build_image(tag: str = IMAGE, progress: Progress = _stderr) -> Built:
    """Build the repository's Dockerfile (unchanged) on the local base."""
    base = ensure_base(progress)
    started = time.monotonic()
    with locked(cache_root() / "lock"):
        progress(f"buildah bud {tag} on {base}")
        _run(
            [
                "buildah", "bud", "--quiet", "--isolation", "chroot", "--layers", "--force-rm",
                *pip_trust_volumes(),
                "--build-arg", f"PYTHON_IMAGE={base}",
                "--tag", tag, "--file", str(REPO_ROOT / "Dockerfile"), str(REPO_ROOT),
            ],
            "buildah bud",
            timeout=1200,
        )  # fmt: skip
    seconds = time.monotonic() - started
    info = inspect_image(tag)
    with Container(tag) as container:
        size = container.unpacked_bytes()
    oci = info["OCIv1"]
    return Built(
        name=tag,
        base=base,
        seconds=seconds,
        size_bytes=size,
        layers=len(oci["rootfs"]["diff_ids"]),
        config=oci.get("config") or {},
    )


class Container:
    """A working container of an image: ``buildah run`` commands in it; ``remove()`` it.

    ``read_only`` gives it a read-only root file system, as ``readOnlyRootFilesystem`` does in
    Kubernetes. buildah has no such run option, so the container's root (an overlay mount in
    this machine's mount namespace, which every ``buildah run`` binds as the command's root)
    is remounted read-only. buildah itself needs to create and remove a file under /run for
    each command; /run gets a small root-owned tmpfs for that, which the image's non-root
    user cannot write either.
    """

    def __init__(
        self, image: str, *, read_only: bool = False, mount_points: Sequence[str] = ()
    ) -> None:
        self.image = image
        self.name = _run(["buildah", "from", "--pull-never", image], "buildah from", 120).strip()
        self.root = Path(_run(["buildah", "mount", self.name], "buildah mount", 60).strip())
        self.read_only = read_only
        # Directories to bind volumes on must exist before the root turns read-only (a
        # container runtime creates them the same way, before the read-only remount).
        for point in mount_points:
            (self.root / point.lstrip("/")).mkdir(parents=True, exist_ok=True)
        if read_only:
            _run(["mount", "-o", "remount,ro", str(self.root)], "remount read-only", 60)
            run_dir = str(self.root / "run")
            _run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=1m", "tmpfs", run_dir], "/run", 60)
        config = inspect_image(image)["OCIv1"].get("config") or {}
        self.user: str = config.get("User") or "0:0"
        self.entrypoint: list[str] = list(config.get("Entrypoint") or [])

    @property
    def uid(self) -> int:
        return int(self.user.split(":")[0])

    def argv(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        volumes: Sequence[tuple[Path, str]] = (),
        user: str | None = None,
    ) -> list[str]:
        """``buildah run`` for ``command`` as ``user`` (default: the image's USER);
        ``volumes`` are (host directory, container directory), bound read-only."""
        argv = ["buildah", "run", "--isolation", "chroot", "--user", user or self.user]
        for key, value in (env or {}).items():
            argv += ["--env", f"{key}={value}"]
        for source, target in volumes:
            argv += ["--volume", f"{source}:{target}:ro"]
        return [*argv, self.name, "--", *command]

    def run(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(command, env=env, user=user),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def unpacked_bytes(self) -> int:
        """Bytes of every file in the image's root file system (hard links counted once)."""
        seen: set[int] = set()
        total = 0
        for directory, _dirs, files in os.walk(self.root):
            for name in files:
                stat = os.lstat(os.path.join(directory, name))
                if stat.st_ino not in seen:
                    seen.add(stat.st_ino)
                    total += stat.st_size
        return total

    def remove(self) -> None:
        if self.read_only:
            subprocess.run(["umount", str(self.root / "run")], capture_output=True, check=False)
        subprocess.run(["buildah", "umount", self.name], capture_output=True, check=False)
        subprocess.run(["buildah", "rm", self.name], capture_output=True, check=False)

    def __enter__(self) -> Container:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


# buildah's own lines on a command's exit, around whatever the command wrote to stderr.
_BUILDAH_EXIT_LINE = re.compile(
    r"subprocess exited (with status \d+|on \w+)|Error: exit status \d+"
)


def command_stderr(stderr: str) -> list[str]:
    """The command's stderr lines, without buildah's report of its exit status."""
    return [line for line in stderr.splitlines() if not _BUILDAH_EXIT_LINE.fullmatch(line)]


def main() -> int:
    missing = missing_tools()
    if missing:
        print(f"image: missing tools: {', '.join(missing)} (apt-get install {' '.join(missing)})")
        return 1
    built = build_image()
    print(json.dumps(built.summary(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
