"""ARC's real gha-runner-scale-set controller on the local control plane, for the opt-in tier
``make test-arc`` (tests/integration/test_arc_controller.py).

The controller is built from the source tree the developer names with ``ARC_SRC`` (a checkout
of ``actions/actions-runner-controller``, e.g. the tag ``gha-runner-scale-set-0.14.2``; its
dependencies come from the Go module proxy): ``go build`` of the tree's ``main`` package with
``build.Version`` set to the version of the tree's ``gha-runner-scale-set`` chart, as ARC's
Dockerfile sets it. The controller deletes every AutoscalingRunnerSet whose
``app.kubernetes.io/version`` label (the chart's version) it does not accept, so a binary
without the ldflag (version ``NA``) would delete the scale set the test installs. The binary is
cached under ``~/.cache/capacity-listener/arc-controller/<commit>-<version>/`` (build_cache).
Without the variable the tier is skipped, with one line saying why.

``ArcController`` runs it as a process with the cluster's admin kubeconfig, in the mode the
controller chart runs it (``--auto-scaling-runner-set-only``), its "pod namespace" being the
test's controller namespace. ``install_crds`` replaces the cluster's ARC CRDs with the tree's;
``install_scale_set`` installs the tree's ``gha-runner-scale-set`` chart with the pinned Helm.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.helm_chart import helm, write_values
from tools.build_cache import build_once, cache_dir, source_key
from tools.localcluster import LocalCluster
from tools.localcluster.ports import free_port
from tools.localcluster.rest import KubeError, wait_for

SRC_ENV = "ARC_SRC"
MODULE = "github.com/actions/actions-runner-controller"
VERSION_VAR = f"{MODULE}/build.Version"
SCALE_SET_CHART = Path("charts/gha-runner-scale-set")
CRD_DIR = Path("charts/gha-runner-scale-set-controller/crds")
LISTENER_DEFAULT_IMAGE = "ghcr.io/actions/gha-runner-scale-set-controller:test"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def source_dir() -> Path | None:
    """The ARC module root named by the variable (None without it)."""
    raw = os.environ.get(SRC_ENV, "")
    if not raw:
        return None
    root = Path(raw).expanduser()
    go_mod = root / "go.mod"
    if not go_mod.is_file() or f"module {MODULE}" not in go_mod.read_text():
        raise RuntimeError(f"{SRC_ENV}={raw}: no {MODULE} module (go.mod) there")
    return root


def skip_reason() -> str | None:
    if os.environ.get(SRC_ENV):
        return None
    return (
        f"ARC tier: set {SRC_ENV} to an actions-runner-controller source tree "
        "(e.g. the tag gha-runner-scale-set-0.14.2); see CONTRIBUTING.md"
    )


def chart_version(src: Path) -> str:
    """The gha-runner-scale-set chart's version: what the controller must report."""
    chart = yaml.safe_load((src / SCALE_SET_CHART / "Chart.yaml").read_text())
    return str(chart["version"])


@dataclass(frozen=True)
class Build:
    binary: Path
    version: str
    commit: str
    seconds: float | None  # None: found in the cache


def ensure_built() -> Build:
    """The controller for the tree in ``ARC_SRC``, built once per commit and chart version."""
    src = source_dir()
    if src is None:
        raise RuntimeError(skip_reason() or SRC_ENV)
    version = chart_version(src)
    commit = source_key(src)
    target = cache_dir("arc-controller") / f"{commit}-{version}" / "manager"
    took: list[float] = []

    def build(staging: Path) -> None:
        staging.parent.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "CGO_ENABLED": "0",
            "GOTOOLCHAIN": "local",
            "GOFLAGS": "-mod=readonly -buildvcs=false",
        }
        started = time.monotonic()
        with target.with_name("build.log").open("w") as out:
            subprocess.run(
                # ARC's Dockerfile sets build.Version (and CommitSHA) the same way.
                ["go", "build", "-trimpath", "-ldflags",
                 f"-X '{VERSION_VAR}={version}' -X '{MODULE}/build.CommitSHA={commit}'",
                 "-o", str(staging), "."],
                cwd=src, env=env, check=True, stdout=out, stderr=subprocess.STDOUT,
                timeout=3600,
            )  # fmt: skip
        took.append(time.monotonic() - started)

    build_once(target, lambda p: p.is_file() and os.access(p, os.X_OK), build)
    return Build(target, version, commit, took[0] if took else None)


def install_crds(cluster: LocalCluster, src: Path, timeout: float = 30.0) -> list[str]:
    """Create or replace ARC's four CRDs with the tree's, and wait until they are served."""
    names = []
    for path in sorted((src / CRD_DIR).glob("*.yaml")):
        crd: dict[str, Any] = yaml.load(path.read_text(), Loader=yaml.CSafeLoader)
        name = crd["metadata"]["name"]
        crd["metadata"].pop("creationTimestamp", None)
        try:
            current = cluster.rest.get(f"{CRD_PATH}/{name}")
        except KubeError as exc:
            if exc.status != 404:
                raise
            cluster.rest.request("POST", CRD_PATH, crd)
        else:
            crd["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            cluster.rest.request("PUT", f"{CRD_PATH}/{name}", crd)
        names.append(name)

    def established(name: str) -> bool:
        conds = cluster.rest.get(f"{CRD_PATH}/{name}").get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

    for name in names:
        wait_for(lambda n=name: established(n), timeout, f"CRD {name} Established")  # type: ignore[misc]
    return names


@dataclass
class ArcController:
    """One controller process for one controller namespace."""

    cluster: LocalCluster
    namespace: str
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = field(default_factory=Path)

    def start(self, binary: Path, watch: str, *extra: str) -> None:
        """Start it, reconciling scale sets of the namespace ``watch`` only (the controller
        chart's ``flags.watchSingleNamespace``): a controller left by a failed test cannot
        act on the next test's scale set."""
        self.log_path = self.cluster.workdir / f"arc-controller-{self.namespace}.log"
        argv = [
            str(binary),
            "--auto-scaling-runner-set-only",
            # No admission webhook (ARC's scale-set mode registers none) and no metrics page.
            "--port=0",
            f"--metrics-addr=127.0.0.1:{free_port()}",
            # What the controller chart passes with `metrics.listenerAddr: ":8080"` (without
            # it the chart turns the listener's metrics off: no `metrics` port on the pod).
            "--listener-metrics-addr=:8080",
            "--listener-metrics-endpoint=/metrics",
            "--log-level=debug",
            f"--watch-single-namespace={watch}",
            *extra,
        ]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/tmp"),
            "KUBECONFIG": str(self.cluster.kubeconfig),
            # What the controller chart's Deployment sets from the pod: the listener pods go
            # to this namespace; the image is ARC's listener default (our overlay replaces it).
            "CONTROLLER_MANAGER_POD_NAMESPACE": self.namespace,
            "CONTROLLER_MANAGER_CONTAINER_IMAGE": LISTENER_DEFAULT_IMAGE,
            "NO_PROXY": "127.0.0.1,localhost",
        }
        out = self.log_path.open("ab")
        self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def errors(self) -> list[str]:
        """The controller's ERROR lines (its text log format)."""
        return [line for line in self.log().splitlines() if re.search(r"\tERROR\t", line)]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)


def install_scale_set(
    helm_bin: Path,
    cluster: LocalCluster,
    src: Path,
    release: str,
    namespace: str,
    values: dict[str, Any],
    workdir: Path,
    *,
    upgrade: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``helm install`` (or ``upgrade``) of the tree's gha-runner-scale-set chart."""
    path = write_values(values, workdir, f"{release}-values-{time.monotonic_ns()}.json")
    verb = "upgrade" if upgrade else "install"
    return helm(
        helm_bin, verb, release, str(src / SCALE_SET_CHART), "--namespace", namespace,
        "--values", str(path), kubeconfig=cluster.kubeconfig,
    )  # fmt: skip


def uninstall(
    helm_bin: Path, cluster: LocalCluster, release: str, namespace: str
) -> subprocess.CompletedProcess[str]:
    return helm(
        helm_bin, "uninstall", release, "--namespace", namespace, "--wait", "--timeout", "90s",
        kubeconfig=cluster.kubeconfig, timeout=120,
    )  # fmt: skip
