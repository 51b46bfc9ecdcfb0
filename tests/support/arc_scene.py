"""One scale set under ARC's real controller, for tests/integration/test_arc_controller.py
(test infrastructure): ``Scene`` holds the fake Actions service with the controller's calls
mounted (tools/fake_arc_admin.py), the controller process (arc_controller.py), the companion
chart (charts/capacity-listener) and the tree's gha-runner-scale-set chart installed with the
pinned Helm, and the listener pods played by local processes (arc_listener_pod.py).

The overlay is the one the docs give: the companion chart's ``<scale set>-arc-values``
ConfigMap where the chart writes one, else deploy/helm/values-capacity-cpu.yaml, with the
test-only changes the test module's docstring lists. The scale set is the one the overlay is
written for (its settings ConfigMap is ``capacity-listener-<scale set>``).
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client

from tests.support import arc_controller as arc
from tests.support.arc_listener_pod import ListenerPods
from tests.support.helm_chart import CHART, helm, scale_set, write_values
from tools.fake_actions import FakeActions
from tools.fake_arc_admin import ArcAdmin
from tools.listener_process import PAT
from tools.localcluster import LocalCluster
from tools.waits import eventually

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "deploy" / "helm" / "values-capacity-cpu.yaml"


def _overlay_scale_set() -> str:
    """The scale set the documented overlay is written for: its settings ConfigMap is
    ``capacity-listener-<scale set>``, as the companion chart names it."""
    values = yaml.safe_load(OVERLAY.read_text())
    (volume,) = [
        v for v in values["listenerTemplate"]["spec"]["volumes"] if v["name"] == "capacity-config"
    ]
    return str(volume["configMap"]["name"]).removeprefix("capacity-listener-")


NAME = _overlay_scale_set()
ROLE = "capacity-listener.dev/role"
ARC_GROUP = ("actions.github.com", "v1alpha1")
WORKFLOW_REQUESTS = {"cpu": "2", "memory": "8Gi"}  # helm_chart.scale_set's workflow pod


def report(what: str, **numbers: float | str) -> None:
    print(json.dumps({"measure": what, **{k: round(v, 2) if isinstance(v, float) else v
                                          for k, v in numbers.items()}}))  # fmt: skip


class Scene:
    """One scale set under ARC: the fake, the controller, the charts, the listener pods."""

    def __init__(
        self,
        api: client.ApiClient,
        cluster: LocalCluster,
        runners: str,
        controller: str,
        helm_bin: Path,
        build: arc.Build,
        workdir: Path,
    ) -> None:
        self.api = api
        self.cluster = cluster
        self.runners = runners
        self.controller_ns = controller
        self.helm_bin = helm_bin
        self.build = build
        self.workdir = workdir
        self.fake = FakeActions(pats=(PAT,), session_expiry=600.0)
        self.admin = ArcAdmin(self.fake)
        self.arc = arc.ArcController(cluster, controller)
        self.pods = ListenerPods(api, cluster, controller, workdir)
        self.core = client.CoreV1Api(api)
        self.crd = client.CustomObjectsApi(api)
        self.nodes: list[str] = []
        self.base_overlay: dict[str, Any] = {}
        self.relisted = 0
        self._orphaned_since: float | None = None
        self.overlay_source = ""

    @property
    def src(self) -> Path:
        src = arc.source_dir()
        assert src is not None
        return src

    @property
    def url(self) -> str:
        return self.fake.configure_url("acme")

    def capacity(self, **overrides: Any) -> dict[str, Any]:
        values: dict[str, Any] = {
            "proactive_capacity": 2,
            "recalculate_interval": 1.0,
            "downscale_delay": 0.0,
            "placeholder_ready_timeout": 60.0,
        }
        values.update(overrides)
        return values

    def overlay(self, **changes: Any) -> dict[str, Any]:
        """The documented overlay, plus the test-only changes this module's docstring lists."""
        values: dict[str, Any] = copy.deepcopy(self.base_overlay)
        values["githubConfigUrl"] = self.url
        values["githubConfigSecret"] = {"github_token": PAT}
        values["controllerServiceAccount"] = {"namespace": self.controller_ns, "name": "arc"}
        values["template"]["spec"]["volumes"].append({"name": "work", "emptyDir": {}})
        values.update(changes)
        return values

    async def start(self, *, capacity: dict[str, Any] | None = None) -> None:
        await self.fake.start()
        # The ladder is cluster-wide and outlives a release: create it once.
        existing = await client.SchedulingV1Api(self.api).list_priority_class()
        companion = {
            "priorityClasses": {
                "create": "arc-workflow" not in {pc.metadata.name for pc in existing.items}
            },
            "scaleSets": {NAME: scale_set(self.runners, self.url, **(capacity or self.capacity()))},
        }
        result = await asyncio.to_thread(
            helm, self.helm_bin, "install", self.companion, str(CHART),
            "--namespace", self.controller_ns,
            "--values", str(write_values(companion, self.workdir, "companion.json")),
            kubeconfig=self.cluster.kubeconfig,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        await self._read_overlay()
        self.arc.start(self.build.binary, self.runners)
        self.pods.start()

    async def _read_overlay(self) -> None:
        """The overlay as the docs give it: the chart's ``<scale set>-arc-values`` ConfigMap
        where the chart writes one, else deploy/helm/values-capacity-cpu.yaml."""
        try:
            cm = await self.core.read_namespaced_config_map(
                f"{NAME}-arc-values", self.controller_ns
            )
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            self.base_overlay = yaml.safe_load(OVERLAY.read_text())
            self.overlay_source = str(OVERLAY.relative_to(ROOT))
        else:
            self.base_overlay = yaml.safe_load(cm.data["values.yaml"])
            self.overlay_source = f"ConfigMap {NAME}-arc-values"
        report("arc-overlay", source=self.overlay_source)

    async def install(self, *, upgrade: bool = False, **changes: Any) -> None:
        result = await asyncio.to_thread(
            arc.install_scale_set, self.helm_bin, self.cluster, self.src, NAME, self.runners,
            self.overlay(**changes), self.workdir, upgrade=upgrade,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        await self.wait(self._listener_on_a_live_runner_set, "ARC's listener on a live runner set")

    async def _listener_on_a_live_runner_set(self) -> bool:
        """Whether ARC's AutoscalingListener names a runner set that exists. ARC 0.14 can
        create two EphemeralRunnerSets for a new scale set (its second reconcile does not see
        the first yet), delete the first as old and leave the listener it made for the first
        naming it, for good: a listener, ours or ARC's, then has no runner set to scale. An
        operator deletes the AutoscalingListener (ARC makes it again, for the live set); so
        does this, after 3 s, counting it in ``relisted`` (ARC after #4516 has one runner
        set per scale set and never does this)."""
        listeners = await self.arc_objects("autoscalinglisteners", self.controller_ns)
        if len(listeners) != 1:
            return False
        (listener,) = listeners
        live = {
            s["metadata"]["name"]
            for s in await self.arc_objects("ephemeralrunnersets")
            if not s["metadata"].get("deletionTimestamp")
        }
        if listener["spec"].get("ephemeralRunnerSetName") in live:
            self._orphaned_since = None
            return True
        now = asyncio.get_running_loop().time()
        if self._orphaned_since is None:
            self._orphaned_since = now
        elif now - self._orphaned_since > 3.0 and live:
            await self.crd.delete_namespaced_custom_object(
                *ARC_GROUP, self.controller_ns, "autoscalinglisteners",
                listener["metadata"]["name"],
            )  # fmt: skip
            self.relisted += 1
            self._orphaned_since = None
        return False

    def add_node(self) -> None:
        """One node with room for exactly two pairs and the listener pod: a runner pod
        (750m / 512Mi, the overlay's) fits only in a runner placeholder's room, a workflow pod
        (2 CPU / 8 GiB) only in a workflow placeholder's, wherever the scheduler put them."""
        name = f"arc-{self.runners}"
        # 2 x (750m + 2) + 50m CPU; 2 x (512Mi + 8Gi) + 128Mi.
        self.cluster.add_node(name, cpu="5550m", memory="17536Mi", pods=30)
        self.nodes.append(name)

    @property
    def companion(self) -> str:
        return f"cl-{self.controller_ns}"[:40]

    async def stop(self) -> None:
        if self.relisted:
            report("arc-listener-relisted", times=self.relisted)
        try:
            # ARC's finalizers need the controller: uninstall the scale set while it runs.
            if await self.arc_objects("autoscalingrunnersets"):
                await asyncio.to_thread(
                    arc.uninstall, self.helm_bin, self.cluster, NAME, self.runners
                )
            await asyncio.to_thread(
                helm, self.helm_bin, "uninstall", self.companion, "--namespace",
                self.controller_ns, kubeconfig=self.cluster.kubeconfig,
            )  # fmt: skip
        finally:
            try:
                await self.pods.stop()
            finally:
                self.arc.stop()
                await self.fake.stop()
                for name in self.nodes:
                    self.cluster.remove_node(name)

    def detail(self) -> str:
        runs = "\n".join(f"--- {r.name}:\n{r.process.log_tail(15)}" for r in self.pods.runs)
        return f":\n--- controller:\n{self.arc.log_tail(25)}\n{runs}\n--- pods:\n{self._pods()}"

    def _pods(self) -> str:
        """The pods of both namespaces (sync: a wait's detail is read outside the loop)."""
        found: dict[str, list[Any]] = {"items": []}
        for ns in (self.runners, self.controller_ns):
            found["items"] += self.cluster.rest.get(f"/api/v1/namespaces/{ns}/pods")["items"]
        lines = []
        for pod in found.get("items") or []:
            requests = [
                (c.get("resources") or {}).get("requests") for c in pod["spec"]["containers"]
            ]
            conditions = [
                f"{c['type']}={c['status']}:{c.get('message', '')}"
                for c in pod["status"].get("conditions") or []
            ]
            lines.append(
                f"{pod['metadata']['name']} {pod['status'].get('phase')} "
                f"{pod['spec'].get('nodeName')} nominated={pod['status'].get('nominatedNodeName')} "
                f"deleting={pod['metadata'].get('deletionTimestamp')} {requests} {conditions}"
            )
        return "\n".join(lines)

    async def wait(self, check: Any, what: str, within: float = 90) -> Any:
        def alive() -> None:
            if self.arc.proc is not None and self.arc.proc.poll() is not None:
                raise AssertionError(f"ARC's controller exited:\n{self.arc.log_tail()}")

        return await eventually(check, what, within, interval=0.3, alive=alive, detail=self.detail)

    async def arc_objects(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        for _ in range(30):
            try:
                found = await self.crd.list_namespaced_custom_object(
                    *ARC_GROUP, namespace or self.runners, plural
                )
                return list(found["items"])
            except client.ApiException as exc:
                # A replaced CRD's storage answers 429 for a moment after it is Established.
                if exc.status != 429:
                    raise
                await asyncio.sleep(1.0)
        raise AssertionError(f"{plural}: still 429 after 30 s")

    async def placeholders(self) -> list[Any]:
        pods = await self.core.list_namespaced_pod(self.runners, label_selector=ROLE)
        return [p for p in pods.items if p.metadata.deletion_timestamp is None]

    async def runner_pods(self) -> list[Any]:
        pods = await self.core.list_namespaced_pod(
            self.runners, label_selector="app.kubernetes.io/component=runner"
        )
        return list(pods.items)

    def scale_set_id(self) -> int:
        (scale_set_id,) = self.admin.live_ids()
        return scale_set_id

    def headers(self) -> list[int | None]:
        return [c.value for c in self.fake.capacity_history()]
