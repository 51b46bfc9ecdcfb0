"""The real cluster-autoscaler (its kwok cloud provider) on the local control plane, for the
opt-in tier ``make test-cluster-autoscaler`` (tests/integration/test_cluster_autoscaler.py).

CA's module (``k8s.io/autoscaler/cluster-autoscaler``) is not served by the Go module proxy,
so it is built from a source tree the developer names with ``CLUSTER_AUTOSCALER_SRC`` (a
checkout of a ``cluster-autoscaler-1.36.x`` tag; its dependencies do come from the proxy):
``go build -tags kwok`` in its ``cluster-autoscaler`` directory (only the kwok provider; the
default build with every cloud's SDK took over an hour on 2 busy cores), cached
under ``~/.cache/capacity-listener/cluster-autoscaler/<commit>/`` (build_cache). Without the
variable the tier is skipped, with one line saying why.

``ClusterAutoscaler`` runs one CA process against the cluster for one test: its kwok
provider reads its config and its node templates from two ConfigMaps in ``POD_NAMESPACE``
(the test's namespace), with ``KWOK_PROVIDER_MODE=local`` (a kubeconfig, not in-cluster
credentials); nodes it creates carry ``kwok.x-k8s.io/node: fake``, which the harness's kwok
manages. CA writes its status ConfigMap into the same namespace (``--namespace``).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tools.build_cache import build_once, cache_dir, source_key
from tools.localcluster import LocalCluster
from tools.localcluster.ports import free_port
from tools.localcluster.rest import KubeError
from tools.localcluster.testkit import OWNER_KEY
from tools.waits import WaitFailed, eventually_sync

SRC_ENV = "CLUSTER_AUTOSCALER_SRC"
GROUP_LABEL = "ca-test.capacity-listener.dev/group"
NG_NAME_ANNOTATION = "cluster-autoscaler.kwok.nodegroup/name"
TO_BE_DELETED = "ToBeDeletedByClusterAutoscaler"


def source_dir() -> Path | None:
    """The ``cluster-autoscaler`` module directory of the tree named by the variable."""
    raw = os.environ.get(SRC_ENV, "")
    if not raw:
        return None
    root = Path(raw).expanduser()
    for candidate in (root / "cluster-autoscaler", root):
        if (candidate / "go.mod").is_file() and (candidate / "main.go").is_file():
            return candidate
    raise RuntimeError(f"{SRC_ENV}={raw}: no cluster-autoscaler module (go.mod, main.go) there")


def skip_reason() -> str | None:
    if os.environ.get(SRC_ENV):
        return None
    return (
        f"cluster-autoscaler tier: set {SRC_ENV} to a cluster-autoscaler 1.36 source tree "
        "(not on the Go module proxy); see CONTRIBUTING.md"
    )


def ensure_built() -> Path:
    """CA's binary for the tree in ``CLUSTER_AUTOSCALER_SRC``, built once per commit."""
    src = source_dir()
    if src is None:
        raise RuntimeError(skip_reason() or SRC_ENV)
    target = cache_dir("cluster-autoscaler") / source_key(src) / "cluster-autoscaler"

    def build(staging: Path) -> None:
        staging.parent.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "CGO_ENABLED": "0",
            "GOTOOLCHAIN": "local",
            "GOFLAGS": "-mod=readonly -buildvcs=false",
        }
        log = target.with_name("build.log")
        with log.open("w") as out:
            subprocess.run(
                # Only the kwok provider (CA's router build tags): every cloud's SDK would
                # triple the build.
                ["go", "build", "-tags", "kwok", "-o", str(staging), "."],
                cwd=src,
                env=env,
                check=True,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=3600,
            )

    build_once(target, lambda p: p.is_file() and os.access(p, os.X_OK), build)
    return target


@dataclass(frozen=True)
class Group:
    """A kwok node group: nodes of one template (labelled for the test's namespace, so only
    its pods select them, and with its taint)."""

    name: str
    cpu: str = "4"
    memory: str = "8Gi"
    pods: int = 50
    max_size: int = 3


def template(owner: str, group: Group) -> dict[str, Any]:
    resources = {"cpu": group.cpu, "memory": group.memory, "pods": str(group.pods)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"{owner}-{group.name}",
            "labels": {
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                OWNER_KEY: owner,
                GROUP_LABEL: group.name,
            },
            "annotations": {
                "cluster-autoscaler.kwok.nodegroup/min-count": "0",
                "cluster-autoscaler.kwok.nodegroup/max-count": str(group.max_size),
            },
        },
        "spec": {"taints": [{"key": OWNER_KEY, "value": owner, "effect": "NoSchedule"}]},
        "status": {"capacity": resources, "allocatable": dict(resources)},
    }


@dataclass
class ClusterAutoscaler:
    """One CA process for one test namespace."""

    cluster: LocalCluster
    namespace: str
    groups: tuple[Group, ...]
    unneeded_time: str = "5s"
    extra_flags: tuple[str, ...] = ()
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = field(default_factory=Path)

    def configmaps(self) -> list[dict[str, Any]]:
        config = {
            "apiVersion": "v1alpha1",
            "readNodesFrom": "configmap",
            "nodegroups": {"fromNodeLabelKey": GROUP_LABEL},
            "nodes": {"skipTaint": True},
            "configmap": {"name": "kwok-provider-templates"},
        }
        templates = {
            "apiVersion": "v1",
            "kind": "List",
            "items": [template(self.namespace, g) for g in self.groups],
        }
        return [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "kwok-provider-config", "namespace": self.namespace},
                "data": {"config": yaml.safe_dump(config)},
            },
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "kwok-provider-templates", "namespace": self.namespace},
                "data": {"templates": yaml.safe_dump(templates)},
            },
        ]

    def start(self, binary: Path) -> None:
        for cm in self.configmaps():
            self.cluster.rest.request("POST", f"/api/v1/namespaces/{self.namespace}/configmaps", cm)
        self.log_path = self.cluster.workdir / f"cluster-autoscaler-{self.namespace}.log"
        argv = [
            str(binary),
            "--cloud-provider=kwok",
            f"--kubeconfig={self.cluster.kubeconfig}",
            f"--namespace={self.namespace}",
            "--leader-elect=false",
            f"--address=127.0.0.1:{free_port()}",
            "--scan-interval=1s",
            # Short on purpose: CA's default is 10 minutes.
            f"--scale-down-unneeded-time={self.unneeded_time}",
            "--scale-down-delay-after-add=0s",
            "--scale-down-delay-after-delete=0s",
            "--scale-down-delay-after-failure=1s",
            "--unremovable-node-recheck-timeout=1s",
            "--max-node-provision-time=60s",
            "--max-graceful-termination-sec=5",
            "--skip-nodes-with-local-storage=false",
            "--expander=least-waste",
            "--logtostderr=true",
            "--v=2",
            *self.extra_flags,
        ]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/tmp"),
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "KWOK_PROVIDER_MODE": "local",
            "POD_NAMESPACE": self.namespace,
        }
        out = self.log_path.open("wb")
        self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def count(self, pattern: str) -> int:
        return len(re.findall(pattern, self.log()))

    def status(self) -> str | None:
        """CA's status document, or None before it has written one."""
        try:
            cm: Mapping[str, Any] = self.cluster.rest.get(
                f"/api/v1/namespaces/{self.namespace}/configmaps/cluster-autoscaler-status"
            )
        except KubeError:
            return None
        return str((cm.get("data") or {}).get("status") or "") or None

    def nodes(self, group: str) -> list[dict[str, Any]]:
        """Nodes CA has made for ``group`` (not the hand-made spares)."""
        found: dict[str, Any] = self.cluster.rest.request(
            "GET", "/api/v1/nodes", params={"labelSelector": f"{OWNER_KEY}={self.namespace}"}
        )
        return [
            n
            for n in found.get("items") or []
            if (n["metadata"].get("annotations") or {}).get(NG_NAME_ANNOTATION) == group
        ]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        # CA's nodes outlive it: remove them, so later tests start from a clean cluster.
        found: dict[str, Any] = self.cluster.rest.request(
            "GET", "/api/v1/nodes", params={"labelSelector": f"{OWNER_KEY}={self.namespace}"}
        )
        for n in found.get("items") or []:
            if NG_NAME_ANNOTATION in (n["metadata"].get("annotations") or {}):
                self.cluster.remove_node(n["metadata"]["name"])


def wait_status(ca: ClusterAutoscaler, timeout: float = 60.0) -> str:
    """Until CA has written its status (it is up and has looked at the cluster)."""

    def alive() -> None:
        if ca.proc is not None and ca.proc.poll() is not None:
            raise WaitFailed(f"cluster-autoscaler exited:\n{ca.log_tail()}")

    return eventually_sync(
        ca.status,
        "cluster-autoscaler's status",
        timeout,
        interval=0.5,
        alive=alive,
        detail=lambda: f":\n{ca.log_tail()}",
    )
