"""Build the local control plane from the Go module proxy, or find it in the cache.

Inputs are the three consumer modules under ``go/`` (go.mod and go.sum pin every download),
ARC's module for the CRDs and kwok's stage files. Outputs live outside the repository in
``${XDG_CACHE_HOME:-~/.cache}/capacity-listener/localcluster/<key>/`` where ``<key>`` hashes
all inputs, so a warm cache is a directory lookup and a changed pin builds a fresh directory.
GOMODCACHE and GOCACHE are Go's defaults, shared with every other Go build on the machine.

Karpenter (``go/karpenter``: its pins, our ``main``) is a separate build with its own key and
directory (``karpenter-<key>/``): only runs that use it pay for it, and moving its pin does not
rebuild the control plane. The Helm CLI (``go/helm``: ``helm.sh/helm/v3/cmd/helm`` as a Go
``tool``, pinned) is built the same way into ``helm-<key>/``, for the chart tests, and kubectl
(``go/k8s`` plus the checksums of its extra modules, ``kubectl.sum``) into ``kubectl-<key>/``,
for the quick-start test.

The build cache itself (lock, build once) is tools/build_cache.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tools.build_cache import build_once, cache_dir, input_key

from . import arc_crds

GO_DIR = Path(__file__).resolve().parent / "go"
MODULES = ("etcd", "kwok", "k8s")
# Bump when the build steps change in a way the hashed inputs below do not show.
RECIPE = "1"
KWOK_STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    # Without a kubelet nothing finishes a graceful pod deletion; this stage does, which is
    # what lets preemption victims and garbage-collected pods actually disappear.
    "pod/fast/pod-delete.yaml",
)
K8S_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
BINARIES = ("etcd", *K8S_BINARIES, "kwok")
HEARTBEAT_SECONDS = 30.0

Progress = Callable[[str], None]
T = TypeVar("T")


class BuildError(RuntimeError):
    """The control plane could not be built; the message is one line saying why."""


@dataclass(frozen=True)
class Artifacts:
    """Where a finished build lives."""

    root: Path
    versions: Mapping[str, str]

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def crd_dir(self) -> Path:
        return self.root / "crds"

    @property
    def kwok_config(self) -> Path:
        return self.root / "kwok" / "stages.yaml"

    def binary(self, name: str) -> Path:
        return self.bin_dir / name


def _stderr(line: str) -> None:
    print(f"localcluster: {line}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    return cache_dir("localcluster")


def cache_key() -> str:
    """Hash of every input that decides what the build produces."""
    pins = [
        part
        for mod in MODULES
        for name in ("go.mod", "go.sum")
        for part in (f"{mod}/{name}\n", GO_DIR / mod / name)
    ]
    return input_key(
        f"recipe={RECIPE}\n",
        *pins,
        f"arc={arc_crds.ARC_VERSION} {arc_crds.ARC_SUM}\n",
        repr(arc_crds.SCHEMA_DELTA),
        "\n".join(KWOK_STAGE_FILES),
    )


def _manifest_path(root: Path) -> Path:
    return root / "manifest.json"


def find_built(root: Path | None = None) -> Artifacts | None:
    """Return the cached build for the current inputs, or None if it is not complete."""
    root = root or cache_root() / cache_key()
    try:
        manifest = json.loads(_manifest_path(root).read_text())
    except (OSError, ValueError):
        return None
    art = Artifacts(root=root, versions=manifest.get("versions", {}))
    needed = [art.binary(b) for b in BINARIES] + [art.kwok_config]
    needed += [art.crd_dir / f"actions.github.com_{p}.yaml" for p in arc_crds.CRD_NAMES]
    if all(p.is_file() for p in needed):
        return art
    return None


# --- Go toolchain -----------------------------------------------------------------------


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def _required_go() -> str:
    best = "0"
    for mod in (*MODULES, KARPENTER_MODULE, HELM_MODULE):
        match = re.search(r"^go (\d+(?:\.\d+)*)\s*$", (GO_DIR / mod / "go.mod").read_text(), re.M)
        if match and _version_tuple(match.group(1)) > _version_tuple(best):
            best = match.group(1)
    return best


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    # GOTOOLCHAIN=local: a too-old Go fails here instead of fetching a toolchain from
    # outside the module proxy. -mod=readonly: the committed go.mod/go.sum are the pins.
    env.update(CGO_ENABLED="0", GOTOOLCHAIN="local", GOFLAGS="-mod=readonly -buildvcs=false")
    return env


def check_go() -> str:
    """Return the path of a usable ``go`` or raise BuildError with one line saying why."""
    need = _required_go()
    go = shutil.which("go")
    if go is None:
        raise BuildError(f"`go` not found on PATH; the local control plane needs Go >= {need}")
    out = subprocess.run(
        [go, "env", "GOVERSION"], capture_output=True, text=True, env=_go_env(), check=False
    )
    match = re.match(r"go(\d+(?:\.\d+)*)", out.stdout.strip())
    if out.returncode != 0 or match is None:
        raise BuildError(f"cannot read the Go version from {go}: {out.stderr.strip()[:200]}")
    have = match.group(1)
    if _version_tuple(have) < _version_tuple(need):
        raise BuildError(f"{go} is Go {have}; the local control plane needs Go >= {need}")
    return go


def _go_json(go: str, args: list[str], cwd: Path) -> dict[str, object]:
    proc = subprocess.run(
        [go, *args], cwd=cwd, capture_output=True, text=True, env=_go_env(), timeout=600
    )
    if proc.returncode != 0:
        raise BuildError(f"go {' '.join(args)} failed: {_first_error(proc.stderr)}")
    data: dict[str, object] = json.loads(proc.stdout)
    return data


def _first_error(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if not ln.startswith("go: downloading")]
    return " | ".join(lines[:3]) or "(no output)"


def _module_version(go: str, module_dir: Path, module: str) -> tuple[str, str]:
    """Version and release time of ``module`` as the consumer module pins it."""
    info = _go_json(go, ["list", "-m", "-json", module], module_dir)
    return str(info["Version"]), str(info.get("Time", ""))


def k8s_ldflags(version: str, build_date: str) -> str:
    """Version stamps the release build would set; without them /version says v0.0.0-master."""
    match = re.match(r"v(\d+)\.(\d+)\.\d+", version)
    if match is None:
        raise BuildError(f"k8s.io/kubernetes version {version!r} is not vMAJOR.MINOR.PATCH")
    major, minor = match.groups()
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
        if build_date:
            flags.append(f"-X {pkg}.buildDate={build_date}")
    return " ".join(flags)


@contextlib.contextmanager
def _heartbeat(progress: Progress, what: str) -> Iterator[None]:
    """Print a line every HEARTBEAT_SECONDS so a long cold compile shows it is alive."""
    stop = threading.Event()
    start = time.monotonic()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_SECONDS):
            progress(f"  still building {what} ({time.monotonic() - start:.0f}s)")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _go_build(
    go: str,
    module: str,
    out: Path,
    pkgs: list[str],
    ldflags: str,
    log: Path,
    modfile: Path | None = None,
) -> None:
    cmd = [go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(out), *pkgs]
    if modfile is not None:
        cmd[2:2] = [f"-modfile={modfile}"]
    with log.open("a") as fh:
        fh.write(f"$ (cd go/{module} && {' '.join(cmd)})\n")
        fh.flush()
        proc = subprocess.run(
            cmd, cwd=GO_DIR / module, stdout=fh, stderr=subprocess.STDOUT, env=_go_env()
        )
    if proc.returncode != 0:
        tail = log.read_text().strip().splitlines()[-3:]
        raise BuildError(f"go build in go/{module} failed (log {log}): {' | '.join(tail)}")


# --- the build --------------------------------------------------------------------------


def _kwok_stages(go: str, out: Path) -> str:
    info = _go_json(go, ["mod", "download", "-json", "sigs.k8s.io/kwok"], GO_DIR / "kwok")
    stage_dir = Path(str(info["Dir"])) / "kustomize" / "stage"
    docs = []
    for rel in KWOK_STAGE_FILES:
        path = stage_dir / rel
        if not path.is_file():
            raise BuildError(f"kwok {info['Version']} has no stage file kustomize/stage/{rel}")
        docs.append(path.read_text().strip() + "\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("---\n".join(docs))
    return str(info["Version"])


def _build_into(go: str, tmp: Path, log: Path, progress: Progress) -> dict[str, str]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(parents=True)
    versions: dict[str, str] = {}
    k8s_version, k8s_time = _module_version(go, GO_DIR / "k8s", "k8s.io/kubernetes")
    etcd_version, _ = _module_version(go, GO_DIR / "etcd", "go.etcd.io/etcd/server/v3")
    kwok_version, _ = _module_version(go, GO_DIR / "kwok", "sigs.k8s.io/kwok")
    versions.update(kubernetes=k8s_version, etcd=etcd_version, kwok=kwok_version)
    steps = [
        ("etcd", f"etcd {etcd_version}", ["go.etcd.io/etcd/server/v3"], "-s -w", "etcd"),
        ("kwok", f"kwok {kwok_version}", ["sigs.k8s.io/kwok/cmd/kwok"], "-s -w", "kwok"),
        (
            "k8s",
            f"{', '.join(K8S_BINARIES)} {k8s_version}",
            [f"k8s.io/kubernetes/cmd/{b}" for b in K8S_BINARIES],
            k8s_ldflags(k8s_version, k8s_time),
            "",  # several packages: -o names a directory
        ),
    ]
    for module, what, pkgs, ldflags, name in steps:
        started = time.monotonic()
        progress(f"building {what} (go/{module})")
        with _heartbeat(progress, what):
            _go_build(go, module, bin_dir / name if name else bin_dir, pkgs, ldflags, log)
        progress(f"  built {what} in {time.monotonic() - started:.0f}s")

    progress(f"fetching ARC CRDs from {arc_crds.ARC_MODULE}@{arc_crds.ARC_VERSION}")
    try:
        module_dir = arc_crds.download_module(go, _go_env(), tmp)
        delta = arc_crds.install_into(module_dir, tmp / "crds")
    except arc_crds.CRDError as exc:
        raise BuildError(str(exc)) from None
    for line in delta:
        progress(f"  CRD schema: added {line}")
    versions["arc_crds"] = f"{arc_crds.ARC_MODULE}@{arc_crds.ARC_VERSION}"

    progress(f"writing kwok stages from sigs.k8s.io/kwok@{kwok_version}")
    _kwok_stages(go, tmp / "kwok" / "stages.yaml")
    return versions


def _build_cached(
    key: str,
    root: Path,
    what: str,
    find: Callable[[Path], T | None],
    build: Callable[[str, Path, Path, Progress], dict[str, str]],
    progress: Progress,
) -> T:
    """Return ``find(root)``, building into ``root`` first (under a lock) if it is empty."""
    art = find(root)
    if art is not None:
        return art
    go = check_go()

    def build_into(staging: Path) -> None:
        started = time.monotonic()
        progress(f"building {what} into {root}")
        staging.mkdir(parents=True)
        # The log sits beside the build directory so it survives a failed build.
        log = cache_root() / f"{key}.build.log"
        log.write_text("")
        versions = build(go, staging, log, progress)
        _manifest_path(staging).write_text(
            json.dumps({"key": key, "versions": versions}, indent=2) + "\n"
        )
        progress(f"done in {time.monotonic() - started:.0f}s")

    build_once(root, lambda r: find(r) is not None, build_into)
    art = find(root)
    if art is None:
        raise BuildError(f"build finished but {root} is incomplete")
    return art


def ensure_built(progress: Progress = _stderr) -> Artifacts:
    """Return the cached build for the current pins, building it first if needed."""
    key = cache_key()
    return _build_cached(
        key, cache_root() / key, "the local control plane", find_built, _build_into, progress
    )


# --- Karpenter ----------------------------------------------------------------------------

KARPENTER_MODULE = "karpenter"
KARPENTER_RECIPE = "1"
# From the sigs.k8s.io/karpenter module directory: the CRDs its kwok provider needs.
KARPENTER_CRDS = (
    "kwok/charts/crds/karpenter.sh_nodepools.yaml",
    "kwok/charts/crds/karpenter.sh_nodeclaims.yaml",
    "kwok/charts/crds/karpenter.sh_nodeoverlays.yaml",
    "kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml",
)


@dataclass(frozen=True)
class KarpenterArtifacts:
    """Where a finished Karpenter build lives."""

    root: Path
    version: str

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "karpenter"

    @property
    def crd_dir(self) -> Path:
        return self.root / "crds"


def karpenter_cache_key() -> str:
    """Hash of go/karpenter's pins and sources (our main is part of the binary)."""
    mod_dir = GO_DIR / KARPENTER_MODULE
    paths = sorted([mod_dir / "go.mod", mod_dir / "go.sum", *mod_dir.glob("*.go")])
    sources = [part for path in paths for part in (f"{path.name}\n", path)]
    key = input_key(f"karpenter-recipe={KARPENTER_RECIPE}\n", "\n".join(KARPENTER_CRDS), *sources)
    return f"karpenter-{key}"


def find_karpenter(root: Path | None = None) -> KarpenterArtifacts | None:
    root = root or cache_root() / karpenter_cache_key()
    try:
        manifest = json.loads(_manifest_path(root).read_text())
    except (OSError, ValueError):
        return None
    art = KarpenterArtifacts(root=root, version=str(manifest.get("versions", {}).get("karpenter")))
    needed = [art.binary] + [art.crd_dir / Path(rel).name for rel in KARPENTER_CRDS]
    return art if all(p.is_file() for p in needed) else None


def _build_karpenter_into(go: str, tmp: Path, log: Path, progress: Progress) -> dict[str, str]:
    mod_dir = GO_DIR / KARPENTER_MODULE
    version, _ = _module_version(go, mod_dir, "sigs.k8s.io/karpenter")
    what = f"karpenter {version} (kwok provider, our main)"
    started = time.monotonic()
    progress(f"building {what} (go/{KARPENTER_MODULE}); a cold Go cache takes a few minutes")
    (tmp / "bin").mkdir(parents=True)
    with _heartbeat(progress, what):
        _go_build(go, KARPENTER_MODULE, tmp / "bin" / "karpenter", ["."], "-s -w", log)
    progress(f"  built {what} in {time.monotonic() - started:.0f}s")
    info = _go_json(go, ["mod", "download", "-json", "sigs.k8s.io/karpenter"], mod_dir)
    (tmp / "crds").mkdir()
    for rel in KARPENTER_CRDS:
        src = Path(str(info["Dir"])) / rel
        if not src.is_file():
            raise BuildError(f"sigs.k8s.io/karpenter {version} has no {rel}")
        shutil.copyfile(src, tmp / "crds" / src.name)
    return {"karpenter": version}


def ensure_karpenter_built(progress: Progress = _stderr) -> KarpenterArtifacts:
    """Return the cached Karpenter build for the current pins, building it first if needed."""
    key = karpenter_cache_key()
    return _build_cached(
        key, cache_root() / key, "Karpenter", find_karpenter, _build_karpenter_into, progress
    )


# --- Helm ---------------------------------------------------------------------------------

HELM_MODULE = "helm"
HELM_PACKAGE = "helm.sh/helm/v3/cmd/helm"
HELM_RECIPE = "1"


@dataclass(frozen=True)
class HelmArtifacts:
    """Where a finished Helm build lives."""

    root: Path
    version: str

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "helm"


def helm_cache_key() -> str:
    """Hash of go/helm's pins."""
    pins = [
        part for name in ("go.mod", "go.sum") for part in (f"{name}\n", GO_DIR / HELM_MODULE / name)
    ]
    key = input_key(f"helm-recipe={HELM_RECIPE}\n", *pins)
    return f"helm-{key}"


def find_helm(root: Path | None = None) -> HelmArtifacts | None:
    """The cached Helm build for the current pins, or None (never builds)."""
    root = root or cache_root() / helm_cache_key()
    try:
        manifest = json.loads(_manifest_path(root).read_text())
    except (OSError, ValueError):
        return None
    art = HelmArtifacts(root=root, version=str(manifest.get("versions", {}).get("helm")))
    return art if art.binary.is_file() else None


def helm_ldflags(version: str, client_go_version: str) -> str:
    """The stamps Helm's own release build sets: its version, and the Kubernetes version
    `helm template` and `helm lint` assume (client-go v0.X.Y is Kubernetes 1.X); without them
    `helm version` says v3.22 and templates see Kubernetes 1.20."""
    match = re.match(r"v0\.(\d+)\.\d+", client_go_version)
    if match is None:
        raise BuildError(f"k8s.io/client-go version {client_go_version!r} is not v0.MINOR.PATCH")
    flags = ["-s", "-w", f"-X helm.sh/helm/v3/internal/version.version={version}"]
    for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags += [f"-X {pkg}.k8sVersionMajor=1", f"-X {pkg}.k8sVersionMinor={match.group(1)}"]
    return " ".join(flags)


def _build_helm_into(go: str, tmp: Path, log: Path, progress: Progress) -> dict[str, str]:
    mod_dir = GO_DIR / HELM_MODULE
    version, _ = _module_version(go, mod_dir, "helm.sh/helm/v3")
    client_go, _ = _module_version(go, mod_dir, "k8s.io/client-go")
    what = f"helm {version}"
    started = time.monotonic()
    progress(f"building {what} (go/{HELM_MODULE})")
    (tmp / "bin").mkdir(parents=True)
    with _heartbeat(progress, what):
        _go_build(
            go,
            HELM_MODULE,
            tmp / "bin" / "helm",
            [HELM_PACKAGE],
            helm_ldflags(version, client_go),
            log,
        )
    progress(f"  built {what} in {time.monotonic() - started:.0f}s")
    return {"helm": version}


def ensure_helm_built(progress: Progress = _stderr) -> HelmArtifacts:
    """Return the cached Helm build for the current pins, building it first if needed."""
    key = helm_cache_key()
    return _build_cached(key, cache_root() / key, "Helm", find_helm, _build_helm_into, progress)


# --- kubectl ------------------------------------------------------------------------------

# kubectl comes from the control plane's own module (go/k8s: the same k8s.io/kubernetes and
# staging pins, so client and server versions agree), but its packages need modules the
# control plane does not (kustomize, cli-runtime, ...). Their checksums live in kubectl.sum
# beside go.mod, and the build reads go.mod with go.sum plus kubectl.sum through -modfile:
# adding them to go.sum itself would change the control plane's cache key and rebuild it.
KUBECTL_MODULE = "k8s"
KUBECTL_PACKAGE = "k8s.io/kubernetes/cmd/kubectl"
KUBECTL_SUM = "kubectl.sum"
KUBECTL_RECIPE = "1"


@dataclass(frozen=True)
class KubectlArtifacts:
    """Where a finished kubectl build lives."""

    root: Path
    version: str

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "kubectl"


def kubectl_cache_key() -> str:
    """Hash of go/k8s's pins and the checksums only kubectl needs."""
    mod_dir = GO_DIR / KUBECTL_MODULE
    pins = [
        part for name in ("go.mod", "go.sum", KUBECTL_SUM) for part in (f"{name}\n", mod_dir / name)
    ]
    key = input_key(f"kubectl-recipe={KUBECTL_RECIPE}\n", *pins)
    return f"kubectl-{key}"


def find_kubectl(root: Path | None = None) -> KubectlArtifacts | None:
    """The cached kubectl build for the current pins, or None (never builds)."""
    root = root or cache_root() / kubectl_cache_key()
    try:
        manifest = json.loads(_manifest_path(root).read_text())
    except (OSError, ValueError):
        return None
    art = KubectlArtifacts(root=root, version=str(manifest.get("versions", {}).get("kubectl")))
    return art if art.binary.is_file() else None


def _kubectl_modfile(staging: Path) -> Path:
    """go.mod as is, with go.sum + kubectl.sum as its sums (-modfile reads X.sum beside X.mod)."""
    mod_dir = GO_DIR / KUBECTL_MODULE
    modfile = staging / "kubectl.mod"
    shutil.copyfile(mod_dir / "go.mod", modfile)
    sums = (mod_dir / "go.sum").read_text() + (mod_dir / KUBECTL_SUM).read_text()
    modfile.with_suffix(".sum").write_text(sums)
    return modfile


def _build_kubectl_into(go: str, tmp: Path, log: Path, progress: Progress) -> dict[str, str]:
    mod_dir = GO_DIR / KUBECTL_MODULE
    version, released = _module_version(go, mod_dir, "k8s.io/kubernetes")
    what = f"kubectl {version}"
    started = time.monotonic()
    progress(f"building {what} (go/{KUBECTL_MODULE} with {KUBECTL_SUM})")
    (tmp / "bin").mkdir(parents=True)
    # Beside bin/, kept: the go.mod and sums this binary was built from.
    modfile = _kubectl_modfile(tmp)
    with _heartbeat(progress, what):
        _go_build(
            go,
            KUBECTL_MODULE,
            tmp / "bin" / "kubectl",
            [KUBECTL_PACKAGE],
            k8s_ldflags(version, released),
            log,
            modfile=modfile,
        )
    progress(f"  built {what} in {time.monotonic() - started:.0f}s")
    return {"kubectl": version}


def ensure_kubectl_built(progress: Progress = _stderr) -> KubectlArtifacts:
    """Return the cached kubectl build for the current pins, building it first if needed."""
    key = kubectl_cache_key()
    return _build_cached(
        key, cache_root() / key, "kubectl", find_kubectl, _build_kubectl_into, progress
    )
