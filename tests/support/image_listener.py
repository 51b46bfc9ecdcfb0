"""Our listener run from the built image (test infrastructure for tests/image): its
ENTRYPOINT as its USER in a working container (``buildah run``), started, observed and
stopped like ``python -m listener`` (tools/listener_process.py). The image itself
is built by tools/image.py.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path
from typing import Any

from tools.image import Container
from tools.listener_process import ListenerProcess


def descendants(pid: int) -> dict[int, int]:
    """Every process below ``pid`` and its parent, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the ppid follows the last ")".
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    below: dict[int, int] = {}
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        below.update({child: parents[child] for child in frontier})
    return below


def process_uid(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class ImageListenerProcess(ListenerProcess):
    """The listener as the image runs it: its ENTRYPOINT, as its USER, in a working container
    (``buildah run``). The directories of the config files and of the kubeconfig are bound
    read-only at MOUNT_POINTS (a cluster mounts ConfigMaps the same way), the environment's
    paths rewritten to match; the container shares this machine's network, so the loopback
    fakes and the local control plane are reachable as they are for ``python -m listener``.

    Stopping signals the entrypoint's process, as a container runtime signals a container's
    main process; ``buildah run`` then exits with that process's status.
    """

    # Only these variables reach the container: the image keeps its own PATH and the rest.
    FORWARDED = ("LISTENER_", "CAPACITY_", "HUD_")
    FORWARDED_NAMES = frozenset({"KUBECONFIG", "NO_PROXY", "no_proxy", "PYTHONUNBUFFERED"})
    CONFIG_DIR = "/etc/capacity-listener"
    KUBE_DIR = "/etc/kube"
    MOUNT_POINTS = (CONFIG_DIR, KUBE_DIR)

    def __init__(self, *args: Any, container: Container, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.container = container

    def start(self) -> ImageListenerProcess:
        # The kubeconfig is root's (0600); the container user gets its own copy, as a
        # Secret volume would give it the pod's user.
        kube_dir = self.workdir / f"{self.name}-kube"
        kube_dir.mkdir(parents=True, exist_ok=True)
        kubeconfig = kube_dir / self.kubeconfig.name
        shutil.copyfile(self.kubeconfig, kubeconfig)
        uid, _, gid = self.container.user.partition(":")
        os.chown(kubeconfig, int(uid), int(gid or uid))
        kubeconfig.chmod(0o600)
        self.kubeconfig = kubeconfig
        volumes = [(self.workdir, self.CONFIG_DIR), (kube_dir, self.KUBE_DIR)]
        env: dict[str, str] = {}
        for key, value in self.environment().items():
            if key.startswith(self.FORWARDED) or key in self.FORWARDED_NAMES:
                for source, target in volumes:
                    if value.startswith(f"{source}/"):
                        value = target + value.removeprefix(str(source))
                env[key] = value
        argv = self.container.argv(self.container.entrypoint, env=env, volumes=volumes)
        self.launch(argv, how=" (image)")
        return self

    def main_pid(self) -> int | None:
        """The entrypoint's process: the innermost process below ``buildah run`` running as
        the image's user (buildah's exec helper, its parent, switches user first)."""
        if self.proc is None:
            return None
        below = descendants(self.proc.pid)
        mine = {p for p in below if process_uid(p) == self.container.uid}
        leaves = [p for p in mine if not any(below[q] == p for q in mine)]
        return leaves[0] if len(leaves) == 1 else None

    async def stop(self, within: float = 30.0) -> int:
        if self.proc is None:
            raise RuntimeError("listener not started")
        if self.proc.poll() is None:
            pid = self.main_pid()
            if pid is None:
                raise AssertionError(f"{self.name}: no single process of uid {self.container.uid}")
            os.kill(pid, signal.SIGTERM)
            if await self.wait_exit(within) is None:
                self.killed = True
                os.kill(pid, signal.SIGKILL)
                await self.wait_exit(5.0)
        return int(self.proc.returncode)
