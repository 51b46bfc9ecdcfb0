"""Run a real control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok (fake nodes whose pods become Running), from cached binaries.

Every process gets its own process group and is stopped by PID (SIGTERM, then SIGKILL) on
``stop()``, at interpreter exit, on SIGTERM, and (Linux parent-death signal) when the Python
process dies without cleaning up, so none outlives the test run. A detached cluster (``up``
in the CLI) records its PIDs in a state file and is stopped by ``down``.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import json
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tools.waits import WaitFailed

from .build import Artifacts
from .ports import free_ports
from .rest import KubeError, KubeREST, wait_for

FAKE_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
STOP_GRACE_SECONDS = 10.0
START_TIMEOUT = 90.0
START_ATTEMPTS = 3
NODE_READY_TIMEOUT = 60.0
UNCACHED_RESOURCE = "podtemplates"
STATE_FILE = "state.json"
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_PR_SET_PDEATHSIG = 1


class ClusterError(RuntimeError):
    """The control plane did not come up; the message names the component and its log."""


def _die_with_parent() -> None:
    """Runs in the child before exec: get SIGKILL if the test process dies without cleanup."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _stop_group(pid: int, alive: Callable[[], bool], grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM the process group led by ``pid``, SIGKILL it if it lingers."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not alive():
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and alive():
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """For processes that are not our children (a detached cluster): running, not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _running(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is None


def stop_pid(pid: int) -> None:
    """Stop a recorded process group that this Python process did not start."""
    _stop_group(pid, lambda: _alive(pid))


def pid_runs(pid: int, binary: str) -> bool:
    """True if ``pid`` is alive and runs ``binary`` (guards against recycled PIDs)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return exe.removesuffix(" (deleted)") == binary and _alive(pid)


@dataclass
class Component:
    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@dataclass
class NodeSpec:
    name: str
    cpu: str = "4"
    memory: str = "8Gi"
    pods: int = 110
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Mapping[str, str]] = ()

    def manifest(self) -> dict[str, Any]:
        resources = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods)}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                    **self.labels,
                },
                "annotations": {FAKE_NODE_ANNOTATION[0]: FAKE_NODE_ANNOTATION[1]},
            },
            "spec": {"providerID": f"kwok://{self.name}", "taints": [dict(t) for t in self.taints]},
            # The API server keeps status on create; without it kwok would fill in 1k CPUs
            # and nothing would ever be full enough to preempt.
            "status": {"capacity": resources, "allocatable": dict(resources)},
        }


class LocalCluster:
    """One control plane. Use ``start()``/``stop()`` or ``LocalCluster.attach(kubeconfig)``."""

    def __init__(
        self, artifacts: Artifacts | None, workdir: Path, *, taint_eviction: bool = False
    ) -> None:
        self.artifacts = artifacts
        self.workdir = workdir
        # Off by default (see the controller-manager's flags); on only to measure the race.
        self.taint_eviction = taint_eviction
        self.log_dir: Path | None = workdir / "logs" if artifacts else None
        self.kubeconfig = workdir / "kubeconfig"
        self.components: list[Component] = []
        self.ports: dict[str, int] = {}
        self.start_seconds: float | None = None
        self.timings: dict[str, float] = {}
        self._t0 = time.monotonic()
        self._rest: KubeREST | None = None
        self._stopped = False
        self._detach = False
        self._lock = threading.Lock()

    # --- lifecycle ------------------------------------------------------------------------

    @classmethod
    def attach(cls, kubeconfig: Path) -> LocalCluster:
        """Use an existing disposable cluster (it must run kwok for ``add_node``).

        A cluster started by the CLI's ``up`` leaves ``state.json`` beside its kubeconfig;
        with it, ports (etcd for ``compact_storage``) and log paths are known too.
        """
        cluster = cls(None, kubeconfig.parent)
        cluster.kubeconfig = kubeconfig
        state_file = kubeconfig.parent / STATE_FILE
        if state_file.is_file():
            state = json.loads(state_file.read_text())
            cluster.ports = {str(k): int(v) for k, v in state.get("ports", {}).items()}
            cluster.log_dir = Path(state["logs"]["etcd"]).parent if state.get("logs") else None
        cluster._rest = KubeREST(kubeconfig)
        wait_for(lambda: cluster.rest.get("/readyz") == "ok", 30, f"{kubeconfig} /readyz")
        return cluster

    @property
    def rest(self) -> KubeREST:
        if self._rest is None:
            raise ClusterError("cluster is not started")
        return self._rest

    @property
    def server(self) -> str:
        return self.rest.server

    def start(self, *, detach: bool = False) -> None:
        """Start every component and wait until the cluster can run pods on fake nodes.

        ``detach=True`` leaves the processes running after this Python process exits.
        """
        if self.artifacts is None:
            raise ClusterError("an attached cluster cannot be started")
        started = self._t0 = time.monotonic()
        self._detach = detach
        if not detach:
            atexit.register(self.stop)
            _install_sigterm_handler()
        try:
            for attempt in range(START_ATTEMPTS):
                try:
                    self._start(self.artifacts)
                    break
                except ClusterError as exc:
                    # Ports are picked free but bound later by the children; another
                    # cluster on the machine may take one in between. Retry on new ports.
                    if "address already in use" not in str(exc) or attempt + 1 == START_ATTEMPTS:
                        raise
                    self._stop_components()
                    shutil.rmtree(self.workdir / "etcd", ignore_errors=True)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started

    def _start(self, art: Artifacts) -> None:
        assert self.log_dir is not None
        pki = self.workdir / "pki"
        for d in (self.log_dir, pki, self.workdir / "etcd"):
            d.mkdir(parents=True, exist_ok=True)
        names = ("etcd_client", "etcd_peer", "apiserver", "kcm", "scheduler")
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        token = self._write_credentials(pki)
        p = self.ports
        server = f"https://127.0.0.1:{p['apiserver']}"
        self._write_kubeconfig(server, token)

        etcd_url = f"http://127.0.0.1:{p['etcd_client']}"
        peer_url = f"http://127.0.0.1:{p['etcd_peer']}"
        self._spawn(
            "etcd",
            [
                str(art.binary("etcd")),
                "--name=n0",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=n0={peer_url}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._wait_http("etcd", f"{etcd_url}/health", lambda r: '"health":"true"' in r.text)
        self._mark("etcd")

        self._spawn(
            "kube-apiserver",
            [
                str(art.binary("kube-apiserver")),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                f"--secure-port={p['apiserver']}",
                "--advertise-address=127.0.0.1",
                # A loopback advertise address makes the endpoint reconciler complain (and is
                # fatal from 1.37); nothing here uses the `kubernetes` Service endpoints.
                "--endpoint-reconciler-type=none",
                f"--cert-dir={pki}",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.key'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                # Priority admission stays on (it is in the default set): it fills in
                # spec.priority from priorityClassName, which preemption needs.
                "--enable-priority-and-fairness=false",
                # Watches are served from the watch cache, which answers a stale
                # resourceVersion with a replay of current state rather than 410 while it
                # has never dropped an event. PodTemplates (unused by anything here) skip
                # the cache, so a watch on them after compact_storage() gets a real 410.
                f"--watch-cache-sizes={UNCACHED_RESOURCE}#0",
                # On SIGTERM, close open watches (within 2 s) instead of letting the HTTP
                # server wait for them: by default it waits until its 60 s shutdown timeout,
                # since every controller and informer holds a watch open. A restart
                # (tools.capacity_kit.restart_apiserver) then takes seconds, not 30+.
                "--shutdown-watch-termination-grace-period=2s",
            ],
        )
        self._rest = KubeREST(self.kubeconfig)
        self._wait_ready("kube-apiserver", lambda: self.rest.get("/readyz") == "ok")
        self._mark("kube-apiserver")

        secure = ["--bind-address=127.0.0.1", f"--kubeconfig={self.kubeconfig}"]
        always_allow = "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"
        self._spawn(
            "kube-controller-manager",
            [
                str(art.binary("kube-controller-manager")),
                *secure,
                f"--secure-port={p['kcm']}",
                "--leader-elect=false",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'apiserver.crt'}",
                "--use-service-account-credentials=false",
                # No taint-based eviction: a node Karpenter creates carries the
                # karpenter.sh/unregistered:NoExecute taint until it registers, and this
                # controller's cache can still see the taint after the scheduler bound a pod
                # to the (by then untainted) node, and delete the pod (kubernetes#119862).
                # Nothing here relies on NoExecute eviction: kwok nodes do not fail.
                "--controllers=*"
                if self.taint_eviction
                else "--controllers=*,-taint-eviction-controller",
                always_allow,
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(art.binary("kube-scheduler")),
                *secure,
                f"--secure-port={p['scheduler']}",
                "--leader-elect=false",
                always_allow,
            ],
        )
        self._spawn(
            "kwok",
            [
                str(art.binary("kwok")),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={art.kwok_config}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=" + "=".join(FAKE_NODE_ANNOTATION),
                "--manage-nodes-with-label-selector=",
                "--manage-single-node=",
                "--cidr=10.244.0.0/16",
                "--node-ip=10.240.0.1",
                "--node-lease-duration-seconds=40",
            ],
            # kwok reads ~/.kwok/kwok.yaml first if it exists; keep a developer's out.
            env={**os.environ, "HOME": str(self.workdir)},
        )
        for name, port in (
            ("kube-controller-manager", p["kcm"]),
            ("kube-scheduler", p["scheduler"]),
        ):
            self._wait_http(name, f"https://127.0.0.1:{port}/healthz", lambda r: r.text == "ok")
        # The serviceaccount controller (KCM) must work before any pod can be admitted.
        self._wait_ready(
            "kube-controller-manager",
            lambda: self.rest.exists("/api/v1/namespaces/default/serviceaccounts/default"),
        )
        self._mark("controllers")
        self.install_crds(art.crd_dir)
        self._mark("crds")

    def _mark(self, phase: str) -> None:
        """Record when a start-up phase finished (seconds since start), for reports."""
        self.timings[phase] = round(time.monotonic() - self._t0, 2)

    def _write_credentials(self, pki: Path) -> str:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (pki / "sa.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )
        token = secrets.token_urlsafe(32)
        tokens = pki / "tokens.csv"
        tokens.write_text(f'{token},admin,admin,"system:masters"\n')
        tokens.chmod(0o600)
        return token

    def _write_kubeconfig(self, server: str, token: str) -> None:
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "local", "cluster": {"server": server, "insecure-skip-tls-verify": True}}
            ],
            "users": [{"name": "admin", "user": {"token": token}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
            "current-context": "local",
        }
        self.kubeconfig.write_text(yaml.safe_dump(cfg))
        self.kubeconfig.chmod(0o600)

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> None:
        assert self.log_dir is not None
        comp = Component(name, argv, self.log_dir / f"{name}.log")
        with comp.log.open("ab") as log:
            comp.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=dict(env) if env is not None else None,
                start_new_session=True,
                preexec_fn=None if self._detach else _die_with_parent,
            )
        self.components.append(comp)

    def add_component(
        self, name: str, argv: list[str], env: Mapping[str, str], ready_url: str
    ) -> Component:
        """Start one more process with the cluster (stopped with it, recorded for ``down``)
        and wait until ``ready_url`` answers 200."""
        self._spawn(name, argv, env)
        self._wait_http(name, ready_url, lambda r: True)
        self._mark(name)
        return self._component(name)

    def _component(self, name: str) -> Component:
        return next(c for c in self.components if c.name == name)

    def check_alive(self, name: str) -> None:
        """Raise ClusterError (with the log's tail) if component ``name`` has exited."""
        comp = self._component(name)
        if comp.proc is not None and comp.proc.poll() is not None:
            raise ClusterError(
                f"{name} exited with {comp.proc.returncode}; log {comp.log}:\n{comp.log_tail()}"
            )

    def _wait_ready(self, name: str, check: Any, timeout: float = START_TIMEOUT) -> None:
        def probe() -> bool:
            for comp in self.components:
                self.check_alive(comp.name)
            return bool(check())

        try:
            wait_for(probe, timeout, f"{name} to become ready")
        except WaitFailed as exc:
            comp = self._component(name)
            raise ClusterError(f"{exc}; log {comp.log}:\n{comp.log_tail()}") from None

    def _wait_http(self, name: str, url: str, ok: Any) -> None:
        def check() -> bool:
            try:
                resp = httpx.get(url, verify=False, timeout=2)
            except httpx.HTTPError:
                return False
            return resp.status_code == 200 and bool(ok(resp))

        self._wait_ready(name, check)

    def stop(self) -> None:
        """Stop every process this object started, newest first. Safe to call twice."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._stop_components()
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)

    def _stop_components(self) -> None:
        for comp in reversed(self.components):
            proc = comp.proc
            if proc is not None and proc.poll() is None:
                _stop_group(proc.pid, functools.partial(_running, proc))
        self.components.clear()
        if self._rest is not None:
            self._rest.close()
            self._rest = None

    def compact_storage(self) -> int | None:
        """Compact etcd to its current revision, as the API server does every few minutes.

        Afterwards a watch from an older resourceVersion gets 410 Gone whether the API server
        serves it from its watch cache or from etcd. Returns the revision, or None for an
        attached cluster whose etcd is out of reach.
        """
        port = self.ports.get("etcd_client")
        if port is None:
            return None
        base = f"http://127.0.0.1:{port}/v3/kv"
        # etcd's JSON gateway: any range read returns the store's current revision.
        head = httpx.post(f"{base}/range", json={"key": "AA=="}, timeout=5).json()
        revision = int(head["header"]["revision"])
        resp = httpx.post(
            f"{base}/compaction", json={"revision": str(revision), "physical": True}, timeout=10
        )
        resp.raise_for_status()
        return revision

    def pids(self) -> dict[str, int]:
        return {c.name: c.proc.pid for c in self.components if c.proc is not None}

    def log_paths(self) -> dict[str, Path]:
        if self.components:
            return {c.name: c.log for c in self.components}
        if self.log_dir is None:  # an attached cluster that is not ours
            return {}
        return {p.stem: p for p in sorted(self.log_dir.glob("*.log"))}

    def describe_logs(self) -> str:
        return "\n".join(f"  {name}: {path}" for name, path in self.log_paths().items())

    # --- cluster objects ------------------------------------------------------------------

    def install_crds(self, crd_dir: Path, timeout: float = 30.0) -> list[str]:
        """Create (or keep) every CRD in ``crd_dir`` and wait until each is Established."""
        names = []
        for path in sorted(crd_dir.glob("*.yaml")):
            # The CRDs are large (the pod template schema); libyaml parses them 10x faster.
            crd = yaml.load(path.read_text(), Loader=_YAML_LOADER)
            crd["metadata"].pop("creationTimestamp", None)
            name = crd["metadata"]["name"]
            try:
                self.rest.request(
                    "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd
                )
            except KubeError as exc:
                if exc.status != 409:
                    raise ClusterError(f"creating CRD {name}: {exc}") from None
            names.append(name)

        def established(name: str) -> bool:
            obj = self.rest.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conds = obj.get("status", {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

        for name in names:
            wait_for(functools.partial(established, name), timeout, f"CRD {name} Established")
        return names

    def add_node(
        self,
        name: str,
        cpu: str = "4",
        memory: str = "8Gi",
        pods: int = 110,
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] = (),
        *,
        wait: bool = True,
    ) -> dict[str, Any]:
        """Create a fake node with explicit capacity; by default wait until it takes pods."""
        spec = NodeSpec(name, cpu, memory, pods, dict(labels or {}), taints)
        self.rest.request("POST", "/api/v1/nodes", spec.manifest())
        if wait:
            return self.wait_node_ready(name)
        result: dict[str, Any] = self.rest.get(f"/api/v1/nodes/{name}")
        return result

    def wait_node_ready(self, name: str, timeout: float = NODE_READY_TIMEOUT) -> dict[str, Any]:
        """Ready=True and no not-ready/unreachable taint (removed by KCM's node lifecycle)."""

        def ready() -> dict[str, Any] | None:
            node: dict[str, Any] = self.rest.get(f"/api/v1/nodes/{name}")
            conds = node.get("status", {}).get("conditions") or []
            is_ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conds)
            taints = {t["key"] for t in node.get("spec", {}).get("taints") or []}
            blocked = taints & {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
            return node if is_ready and not blocked else None

        return wait_for(ready, timeout, f"node {name} Ready without not-ready taint")

    def remove_node(self, name: str, timeout: float = 30.0, *, delete_pods: bool = True) -> None:
        """Delete a node and wait until it is gone.

        By default its pods are deleted first, immediately (grace 0): once the node is gone
        kwok no longer finishes their deletion, and the pod GC would leave them (and their
        namespace) terminating for its 40 s quarantine. ``delete_pods=False`` keeps them, to
        model a node that vanishes under its pods.
        """
        if delete_pods:
            pods = self.rest.request(
                "GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={name}"}
            )
            for pod in pods.get("items", []):
                meta = pod["metadata"]
                try:
                    self.rest.request(
                        "DELETE",
                        f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                        params={"gracePeriodSeconds": "0"},
                    )
                except KubeError as exc:
                    if exc.status != 404:
                        raise
        try:
            self.rest.request("DELETE", f"/api/v1/nodes/{name}")
        except KubeError as exc:
            if exc.status != 404:
                raise
        wait_for(
            lambda: not self.rest.exists(f"/api/v1/nodes/{name}"), timeout, f"node {name} gone"
        )

    def create_namespace(self, prefix: str = "t", timeout: float = 30.0) -> str:
        """A fresh namespace, returned once its `default` ServiceAccount exists."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.rest.request(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
        # Until the serviceaccount controller creates it, admission rejects every pod.
        wait_for(
            lambda: self.rest.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
            timeout,
            f"ServiceAccount default in namespace {name}",
        )
        return name

    def delete_namespace(self, name: str, *, wait: bool = False, timeout: float = 60.0) -> None:
        try:
            self.rest.request("DELETE", f"/api/v1/namespaces/{name}")
        except KubeError as exc:
            if exc.status != 404:
                raise
        if wait:
            wait_for(
                lambda: not self.rest.exists(f"/api/v1/namespaces/{name}"),
                timeout,
                f"namespace {name} deleted",
            )

    def state(self) -> dict[str, Any]:
        """What ``down``/``status`` need to find this cluster again."""
        return {
            "workdir": str(self.workdir),
            "kubeconfig": str(self.kubeconfig),
            "server": self.server,
            "ports": self.ports,
            "pids": self.pids(),
            "binaries": {c.name: c.argv[0] for c in self.components},
            "logs": {k: str(v) for k, v in self.log_paths().items()},
        }


_sigterm_installed = False


def _install_sigterm_handler() -> None:
    """Turn SIGTERM into SystemExit so fixtures tear down and atexit runs.

    Only when nobody else handles SIGTERM and only from the main thread (a Python rule).
    """
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    _sigterm_installed = True


def save_state(path: Path, cluster: LocalCluster, extra: Mapping[str, Any] | None = None) -> None:
    path.write_text(json.dumps({**cluster.state(), **(extra or {})}, indent=2) + "\n")
