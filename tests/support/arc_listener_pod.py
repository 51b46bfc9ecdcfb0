"""The kubelet's part for the listener pods ARC's controller creates (test infrastructure for
tests/integration/test_arc_controller.py).

Pods on the local control plane run on kwok's fake nodes, where no container ever starts. So
``ListenerPods`` watches the controller namespace for ARC's listener pods and, for each one,
runs this listener as a local process the way the pod would run it:

* its ``config.json`` is the one in the Secret ARC mounts at ``/etc/gha-listener`` (only the
  metrics address moves to a free loopback port: two listeners may run on this machine);
* its capacity settings are the ``capacity.yaml`` of the ConfigMap the overlay mounts;
* its environment is the pod's literal ``env`` values (``valueFrom`` ones are left out: they
  name Secrets such as the HUD token, which these tests do not use), with file paths moved to
  local files;
* its Kubernetes credentials are a token of the pod's ServiceAccount (TokenRequest), so every
  call it makes is checked against the RBAC ARC and the companion chart created;
* ``CAPACITY_LISTENER_ROLE`` is the pod's name, which is what the listener reads from the
  pod's hostname (ARC names the listener's pod, ServiceAccount and Role alike).

A pod that gets a deletion timestamp (or disappears) gets SIGTERM, as the kubelet sends, and
its exit status is kept.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tools.listener_process import ListenerProcess
from tools.localcluster import LocalCluster
from tools.localcluster.ports import free_port

LISTENER_SELECTOR = "app.kubernetes.io/component=runner-scale-set-listener"
# Set by ListenerProcess itself (local paths and ports), never taken from the pod.
_LOCAL_ENV = {"LISTENER_CONFIG_PATH", "LISTENER_PROBE_ADDR", "CAPACITY_CONFIG_FILE"}


@dataclass
class Ran:
    """One listener pod and the process that played it."""

    pod: dict[str, Any]
    process: ListenerProcess
    exit_code: int | None = None
    stopping: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])


@dataclass
class ListenerPods:
    api: client.ApiClient
    cluster: LocalCluster
    namespace: str
    workdir: Path
    interval: float = 0.3
    runs: list[Ran] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def start(self) -> None:
        self._task = asyncio.create_task(self._forever(), name="arc-listener-pods")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for ran in self.runs:
            if ran.stopping is not None:
                await ran.stopping
            elif ran.process.returncode is None:
                ran.exit_code = await ran.process.stop()

    def running(self) -> list[Ran]:
        return [r for r in self.runs if r.process.returncode is None]

    async def _forever(self) -> None:
        while True:
            try:
                await self._round()
            except ApiException as exc:  # a test's wait names what did not happen
                self.errors.append(f"{exc.status} {exc.reason}")
            await asyncio.sleep(self.interval)

    async def _round(self) -> None:
        pods = await self.core.list_namespaced_pod(self.namespace, label_selector=LISTENER_SELECTOR)
        live = {p.metadata.uid: p for p in pods.items}
        known = {r.pod["metadata"]["uid"]: r for r in self.runs}
        for uid, pod in live.items():
            if uid not in known and pod.metadata.deletion_timestamp is None:
                self.runs.append(await self._run(self.api.sanitize_for_serialization(pod)))
        for uid, ran in known.items():
            pod = live.get(uid)
            gone = pod is None or pod.metadata.deletion_timestamp is not None
            if gone and ran.stopping is None:
                # Apart: a listener that takes its grace period to stop must not hold up the
                # next pod ARC creates.
                ran.stopping = asyncio.create_task(self._stop(ran), name=f"stop-{ran.name}")

    @staticmethod
    async def _stop(ran: Ran) -> None:
        grace = (ran.pod["spec"].get("terminationGracePeriodSeconds") or 30) + 5
        ran.exit_code = await ran.process.stop(within=float(grace))

    async def _run(self, pod: dict[str, Any]) -> Ran:
        name = pod["metadata"]["name"]
        spec = pod["spec"]
        (container,) = [c for c in spec["containers"] if c["name"] == "listener"]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        secret = await self.core.read_namespaced_secret(
            volumes["listener-config"]["secret"]["secretName"], self.namespace
        )
        config = json.loads(base64.b64decode(secret.data["config.json"]))
        if config.get("metrics_addr"):
            config["metrics_addr"] = f"127.0.0.1:{free_port()}"
        capacity = None
        for volume in volumes.values():
            if "configMap" in volume and volume["name"] == "capacity-config":
                cm = await self.core.read_namespaced_config_map(
                    volume["configMap"]["name"], self.namespace
                )
                capacity = yaml.safe_load(cm.data["capacity.yaml"])
        env = {
            e["name"]: e["value"]
            for e in container.get("env") or []
            if "value" in e and e["name"] not in _LOCAL_ENV
        }
        env["CAPACITY_LISTENER_ROLE"] = name
        # ARC gives a recreated listener pod the same name: keep each one's files apart.
        files = f"{name}-{pod['metadata']['uid'][:8]}"
        process = ListenerProcess(
            files,
            self.workdir,
            config,
            kubeconfig=await self._kubeconfig(spec["serviceAccountName"], files),
            capacity=capacity,
            env=env,
        )
        process.start()
        return Ran(pod, process)

    async def _kubeconfig(self, account: str, name: str) -> Path:
        token = await self.core.create_namespaced_service_account_token(
            account, self.namespace, {"spec": {"expirationSeconds": 3600}}
        )
        path = self.workdir / f"{name}-kubeconfig"
        server = self.cluster.server
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "c",
                            "cluster": {"server": server, "insecure-skip-tls-verify": True},
                        }
                    ],
                    "users": [{"name": account, "user": {"token": token.status.token}}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": account}}],
                    "current-context": "c",
                }
            )
        )
        path.chmod(0o600)
        return path
