"""One end-to-end scenario's world (test infrastructure for tests/e2e, the demo and the
benchmarks): a ``Stage`` owns the fake Actions service (one job queue), the fake HUD, the fake
GitHub REST endpoints (served by the Actions fake) and a Kubernetes client; each ``Site`` is
one "cluster" of a scale set — its own namespace, a runner node pool and a workflow node pool
(fake kwok nodes, reserved by label and taint), the EphemeralRunnerSet, the runner stand-in
and, when started, a listener process (tools/listener_process.py). The control plane
comes from tools/control_plane.py.

Everything async runs on one event loop, the one serving the fakes. Blocking control-plane
helpers (node create/delete wait with ``time.sleep``) are pushed to threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tools.control_plane import install_priority_classes, kube_client
from tools.fake_actions import FakeActions, JobState
from tools.fake_github_rest import FakeGitHubRest
from tools.fake_hud import FakeHUD
from tools.kube_calls import watch_objects
from tools.listener_process import (
    HUD_TOKEN,
    PAT,
    ListenerProcess,
    listener_config,
)
from tools.localcluster import LocalCluster
from tools.localcluster.ports import free_port
from tools.runner_standin import (
    ARC_GROUP,
    ARC_VERSION,
    ERS_PLURAL,
    PREPARE_JOB_TIMEOUT,
    RunnerStandIn,
    StandInSpec,
    ephemeral_runner_set_manifest,
)
from tools.waits import eventually, exited

# Placeholder labels (capacity/contract.py); repeated here so this module does not import the
# product to observe it.
PLACEHOLDER_ROLE_LABEL = "capacity-listener.dev/role"
PLACEHOLDER_SCALE_SET_LABEL = "capacity-listener.dev/scale-set"
PLACEHOLDER_SLOT_LABEL = "capacity-listener.dev/slot"
POOL_KEY = "e2e.capacity-listener.dev/pool"


@dataclass(frozen=True)
class Pool:
    """Fake nodes of one kind; ``cpu``/``memory``/``pods`` per node."""

    nodes: int
    cpu: str = "4"
    memory: str = "16Gi"
    pods: int = 110


@dataclass(frozen=True)
class SiteSpec:
    """One cluster of one scale set. Runner and workflow pods get separate pools, so a full
    workflow pool strands jobs while runner pods still start (the failure in
    docs/capacity-model.md §1)."""

    name: str
    scale_set_id: int
    labels: tuple[str, ...] = ("linux",)
    runner_pool: Pool = field(default_factory=lambda: Pool(nodes=1, cpu="8"))
    workflow_pool: Pool = field(default_factory=lambda: Pool(nodes=1, cpu="4"))
    runner_requests: Mapping[str, str] = field(
        default_factory=lambda: {"cpu": "500m", "memory": "512Mi"}
    )
    workflow_requests: Mapping[str, str] = field(
        default_factory=lambda: {"cpu": "1", "memory": "2Gi"}
    )
    job_seconds: float = 3.0
    strand_after: float = 10.0
    # The runner-container hooks' prepare-job timeout (ACTIONS_RUNNER_PREPARE_JOB_TIMEOUT_SECONDS).
    prepare_timeout: float = PREPARE_JOB_TIMEOUT
    # Annotations on runner and workflow pods (what the runner pod template would set).
    pod_annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SiteView:
    """What the demo prints and tests assert on, for one site at one moment."""

    advertised: int | None
    pairs_running: int  # both halves Running
    pairs_pending: int  # both halves exist, at least one not Running yet
    pairs_broken: int  # one half left (the other preempted, evicted or deleted)
    placeholders: int
    runners: int
    runners_busy: int
    workflow_running: int
    workflow_pending: int
    assigned: int
    running: int
    completed: int
    stranded: int


@dataclass(frozen=True)
class PodEvent:
    """A placeholder pod change as this process's watch saw it (wall clock)."""

    wall: float
    kind: str  # ADDED | MODIFIED | DELETED
    name: str
    role: str
    phase: str
    terminating: bool
    slot: str = ""  # the pair's slot id (both halves share it)


class Site:
    """A namespace, two node pools, an EphemeralRunnerSet, the runner stand-in and a listener."""

    def __init__(self, stage: Stage, spec: SiteSpec, namespace: str) -> None:
        self.stage = stage
        self.spec = spec
        self.namespace = namespace
        self.runner_set_name = f"{spec.name}-ers"
        self.nodes: dict[str, list[str]] = {"runner": [], "workflow": []}
        self.standin: RunnerStandIn | None = None
        self.listener: ListenerProcess | None = None
        self.listeners: list[ListenerProcess] = []
        self.placeholders: dict[str, dict[str, Any]] = {}
        self.placeholder_events: list[PodEvent] = []
        self.watch_errors: list[str] = []  # failures the placeholder watch restarted after
        self._watch_task: asyncio.Task[None] | None = None
        self._node_seq = 0

    @property
    def fake(self) -> FakeActions:
        return self.stage.fake

    @property
    def scale_set_id(self) -> int:
        return self.spec.scale_set_id

    @property
    def capacity_on(self) -> bool:
        """Whether the current listener runs with capacity-awareness."""
        return self.listener is not None and self.listener.capacity is not None

    # --- placement ------------------------------------------------------------------------

    def pool_value(self, pool: str) -> str:
        return f"{self.namespace}.{pool}"

    def node_selector(self, pool: str) -> dict[str, str]:
        return {POOL_KEY: self.pool_value(pool)}

    def tolerations(self, pool: str) -> list[dict[str, str]]:
        return [
            {
                "key": POOL_KEY,
                "operator": "Equal",
                "value": self.pool_value(pool),
                "effect": "NoSchedule",
            }
        ]

    def placement(self, pool: str) -> dict[str, Any]:
        return {"nodeSelector": self.node_selector(pool), "tolerations": self.tolerations(pool)}

    def filler_pod(self, name: str, pool: str = "workflow") -> dict[str, Any]:
        """A foreign pod the size of a workflow pod at workflow priority (20): another
        workload taking the pool's room. It preempts placeholders, never workflow pods."""
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "filler"}},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": dict(self.spec.workflow_requests)},
                    }
                ],
                "priorityClassName": "arc-workflow",
                "terminationGracePeriodSeconds": 0,
                **self.placement(pool),
            },
        }

    async def fill(self, count: int, pool: str = "workflow") -> list[str]:
        """Create ``count`` filler pods in ``pool`` and wait until they all run."""
        core = client.CoreV1Api(self.stage.api)
        names = [f"filler-{pool}-{self._node_seq}-{i}" for i in range(count)]
        self._node_seq += 1
        for name in names:
            await core.create_namespaced_pod(
                self.namespace, self.filler_pod(name, pool), _request_timeout=15
            )

        async def running() -> bool:
            pods = await core.list_namespaced_pod(
                self.namespace, label_selector="app=filler", _request_timeout=15
            )
            phases = {p.metadata.name: p.status.phase for p in pods.items}
            return all(phases.get(n) == "Running" for n in names)

        await eventually(running, f"filler pods {names} Running", 60)
        return names

    async def add_nodes(self, pool: str, count: int, shape: Pool | None = None) -> list[str]:
        """Create ``count`` fake nodes in ``pool`` ("runner" or "workflow") and wait for them."""
        shape = shape or (self.spec.runner_pool if pool == "runner" else self.spec.workflow_pool)
        value = self.pool_value(pool)
        names = []
        for _ in range(count):
            self._node_seq += 1
            names.append(f"kwok-{self.namespace}-{pool[0]}{self._node_seq}")
        cluster = self.stage.cluster

        def create() -> None:
            for name in names:
                cluster.add_node(
                    name,
                    cpu=shape.cpu,
                    memory=shape.memory,
                    pods=shape.pods,
                    labels={POOL_KEY: value},
                    taints=[{"key": POOL_KEY, "value": value, "effect": "NoSchedule"}],
                    wait=False,
                )
            for name in names:
                cluster.wait_node_ready(name)

        await asyncio.to_thread(create)
        self.nodes[pool].extend(names)
        return names

    async def remove_nodes(self, pool: str, count: int | None = None) -> list[str]:
        """Lose nodes as a cloud does (spot reclaim, InsufficientCapacity on replacement):
        cordon, delete every pod bound to them at once, delete the node. Nothing replaces it."""
        names = list(self.nodes[pool][: count if count is not None else len(self.nodes[pool])])
        core = client.CoreV1Api(self.stage.api)
        for name in names:
            await core.patch_node(name, {"spec": {"unschedulable": True}}, _request_timeout=15)
        for name in names:
            pods = await core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={name}", _request_timeout=15
            )
            for pod in pods.items:
                with contextlib.suppress(ApiException):
                    await core.delete_namespaced_pod(
                        pod.metadata.name,
                        pod.metadata.namespace,
                        grace_period_seconds=0,
                        _request_timeout=15,
                    )
        for name in names:
            await asyncio.to_thread(self.stage.cluster.remove_node, name)
            self.nodes[pool].remove(name)
        return names

    # --- lifecycle ------------------------------------------------------------------------

    async def setup(self) -> None:
        spec = self.spec
        await self.add_nodes("runner", spec.runner_pool.nodes)
        await self.add_nodes("workflow", spec.workflow_pool.nodes)
        self.fake.add_scale_set(spec.scale_set_id, spec.name, list(spec.labels))
        manifest = ephemeral_runner_set_manifest(
            name=self.runner_set_name,
            namespace=self.namespace,
            scale_set_id=spec.scale_set_id,
            scale_set_name=spec.name,
            configure_url=self.fake.configure_url("acme"),
        )
        # Runner pod template requests and placement, as a chart's template would carry them.
        manifest["spec"]["ephemeralRunnerSpec"]["spec"] = {
            "containers": [
                {
                    "name": "runner",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": dict(spec.runner_requests)},
                }
            ],
            **self.placement("runner"),
        }
        await client.CustomObjectsApi(self.stage.api).create_namespaced_custom_object(
            ARC_GROUP, ARC_VERSION, self.namespace, ERS_PLURAL, manifest, _request_timeout=15
        )
        self.standin = RunnerStandIn(
            self.stage.api,
            self.fake,
            StandInSpec(
                namespace=self.namespace,
                runner_set_name=self.runner_set_name,
                scale_set_name=spec.name,
                scale_set_id=spec.scale_set_id,
                runner_requests=spec.runner_requests,
                workflow_requests=spec.workflow_requests,
                runner_placement=self.placement("runner"),
                workflow_placement=self.placement("workflow"),
                default_job_seconds=spec.job_seconds,
                strand_after=spec.strand_after,
                prepare_timeout=spec.prepare_timeout,
                pod_annotations=spec.pod_annotations,
            ),
        )
        await self.standin.start()
        self._watch_task = asyncio.get_running_loop().create_task(
            self._watch_placeholders(), name=f"placeholders-{spec.name}"
        )

    async def close(self) -> None:
        for listener in self.listeners:
            if listener.returncode is None:
                await listener.stop(within=15.0)
        if self._watch_task is not None:
            self._watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watch_task
        if self.standin is not None:
            await self.standin.stop(delete=False)

    # --- the listener ---------------------------------------------------------------------

    def capacity_settings(
        self,
        *,
        proactive: int = 0,
        hud: bool = False,
        hud_floor: int = 2,
        github: bool = False,
        webhook: str = "",
        **overrides: Any,
    ) -> dict[str, Any]:
        """Capacity settings YAML for this site (capacity on), tuned for fast tests."""
        spec = self.spec
        settings: dict[str, Any] = {
            "enabled": True,
            "proactive_capacity": proactive,
            "recalculate_interval": "2s",
            "placeholder_ready_timeout": "10s",
            "workflow_resources": {"requests": dict(spec.workflow_requests)},
            "runner_resources": {"requests": dict(spec.runner_requests)},
            "node_selector": self.node_selector("runner"),
            "tolerations": self.tolerations("runner"),
            "workflow_node_selector": self.node_selector("workflow"),
            "workflow_tolerations": self.tolerations("workflow"),
            # kwok never pulls it; a short name keeps the manifests readable.
            "placeholder_image": "registry.k8s.io/pause:3.10",
            "max_pending_pairs": 50,
            "downscale_delay": "5s",
        }
        if hud and self.stage.hud is not None:
            settings["hud"] = {
                "enabled": True,
                "url": self.stage.hud.endpoint,
                "timeout": "2s",
                "stale_after": "5s",
                "failure_base_capacity": hud_floor,
                # the fake's own lag, so the as-of correction takes off what it should
                "lag": f"{self.stage.hud.lag:g}s",
            }
        if github:  # GitHub's REST API (the fake's) with the listener's PAT
            settings["demand"] = {"source": "github"}
            settings["github"] = {
                "timeout": "2s",
                "stale_after": "5s",
                "failure_base_capacity": hud_floor,
            }
        if webhook:  # the webhook receiver at this reads URL
            settings["demand"] = {"source": "webhook"}
            settings["webhook"] = {
                "url": webhook,
                "stale_after": "5s",
                "failure_base_capacity": hud_floor,
            }
        settings.update(overrides)
        return settings

    def start_listener(
        self,
        *,
        capacity: Mapping[str, Any] | None,
        max_runners: int = 10,
        min_runners: int = 0,
        metrics: bool = True,
        env: Mapping[str, str] | None = None,
        log_level: str = "debug",
        kubeconfig: Path | None = None,
        process: Callable[..., ListenerProcess] = ListenerProcess,
    ) -> ListenerProcess:
        """Start a listener process for this site (``capacity`` None: capacity-awareness off,
        the stock ARC behaviour). ``process`` makes the process object (a subclass runs the
        listener another way, e.g. from the built image)."""
        if self.listener is not None and self.listener.returncode is None:
            raise RuntimeError(f"{self.spec.name}: a listener is already running")
        generation = len(self.listeners) + 1
        cfg = listener_config(
            self.fake,
            namespace=self.namespace,
            runner_set_name=self.runner_set_name,
            scale_set_id=self.spec.scale_set_id,
            scale_set_name=self.spec.name,
            max_runners=max_runners,
            min_runners=min_runners,
            metrics_port=free_port() if metrics else None,
            log_level=log_level,
        )
        listener = process(
            f"listener-{self.spec.name}-{generation}",
            self.stage.workdir,
            cfg,
            kubeconfig=kubeconfig or self.stage.cluster.kubeconfig,
            capacity=capacity,
            env=env,
        )
        self.listener = listener.start()
        self.listeners.append(listener)
        return listener

    async def wait_session(self, within: float = 30.0) -> None:
        """Until the current listener holds a session and has polled at least once."""
        listener = self.listener
        assert listener is not None

        def polled() -> bool:
            session = self.fake.session(self.scale_set_id)
            return session is not None and any(
                p.session_id == session.session_id for p in self.fake.polls
            )

        await self.wait_for(polled, f"{self.spec.name}: a session and a poll", within)

    async def wait_for(self, predicate: Callable[[], bool], what: str, within: float) -> None:
        """Wait for ``predicate``; fail at once if the listener exits, and on timeout with
        the site's view and the listener's log tail."""

        def view() -> str:
            tail = self.listener.log_tail() if self.listener is not None else "(no listener)"
            return f"; {self.view()}\n{tail}"

        await eventually(
            predicate,
            what,
            within,
            interval=0.1,
            alive=lambda: exited(self.listener, what),
            detail=view,
        )

    # --- observation ----------------------------------------------------------------------

    async def _watch_placeholders(self) -> None:
        def record(kind: str, pod: dict[str, Any]) -> None:
            meta = pod["metadata"]
            labels = meta.get("labels") or {}
            self.placeholder_events.append(
                PodEvent(
                    wall=time.time(),
                    kind=kind,
                    name=meta["name"],
                    role=labels.get(PLACEHOLDER_ROLE_LABEL, ""),
                    phase=(pod.get("status") or {}).get("phase", ""),
                    terminating=bool(meta.get("deletionTimestamp")),
                    slot=labels.get(PLACEHOLDER_SLOT_LABEL, ""),
                )
            )

        def on_list(items: list[dict[str, Any]]) -> None:
            self.placeholders = {p["metadata"]["name"]: p for p in items}
            for pod in items:
                record("LISTED", pod)

        def on_event(kind: str, pod: dict[str, Any]) -> None:
            name = pod["metadata"]["name"]
            if kind == "DELETED":
                self.placeholders.pop(name, None)
            else:
                self.placeholders[name] = pod
            record(kind, pod)

        # Any failure (an apiserver restart drops the connection; a relist may time out)
        # restarts the list+watch: scenarios read `placeholders` for as long as they run.
        while True:
            try:
                await watch_objects(
                    self.stage.api,
                    client.CoreV1Api(self.stage.api).list_namespaced_pod,
                    (self.namespace,),
                    {"label_selector": f"{PLACEHOLDER_SCALE_SET_LABEL}={self.spec.name}"},
                    on_event,
                    on_list,
                )
            except Exception as exc:
                self.watch_errors.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(1.0)

    def placeholder_counts(self) -> dict[str, dict[str, int]]:
        """{role: {phase: count}}; a terminating pod counts as "Terminating"."""
        counts: dict[str, dict[str, int]] = {}
        for pod in self.placeholders.values():
            role = (pod["metadata"].get("labels") or {}).get(PLACEHOLDER_ROLE_LABEL, "?")
            phase = (pod.get("status") or {}).get("phase", "Pending")
            if pod["metadata"].get("deletionTimestamp"):
                phase = "Terminating"
            by_phase = counts.setdefault(role, {})
            by_phase[phase] = by_phase.get(phase, 0) + 1
        return counts

    def pair_states(self) -> dict[str, int]:
        """Pairs by slot: running (both halves Running, none terminating), pending, broken."""
        slots: dict[str, list[str]] = {}
        for pod in self.placeholders.values():
            slot = (pod["metadata"].get("labels") or {}).get(PLACEHOLDER_SLOT_LABEL, "")
            phase = (pod.get("status") or {}).get("phase", "Pending")
            if pod["metadata"].get("deletionTimestamp"):
                phase = "Terminating"
            slots.setdefault(slot, []).append(phase)
        states = {"running": 0, "pending": 0, "broken": 0}
        for phases in slots.values():
            if len(phases) < 2:
                states["broken"] += 1
            elif all(p == "Running" for p in phases):
                states["running"] += 1
            else:
                states["pending"] += 1
        return states

    def advertised(self) -> int | None:
        history = self.fake.capacity_history(self.scale_set_id)
        return history[-1].value if history else None

    def view(self) -> SiteView:
        pairs = self.pair_states()
        stats = self.standin.stats() if self.standin is not None else None
        jobs = self.fake.jobs_of(self.scale_set_id)
        return SiteView(
            advertised=self.advertised(),
            pairs_running=pairs["running"],
            pairs_pending=pairs["pending"],
            pairs_broken=pairs["broken"],
            placeholders=len(self.placeholders),
            runners=stats.runners if stats else 0,
            runners_busy=stats.runners_busy if stats else 0,
            workflow_running=stats.workflow_running if stats else 0,
            workflow_pending=stats.workflow_pending if stats else 0,
            assigned=sum(1 for j in jobs if j.state in (JobState.AVAILABLE, JobState.ASSIGNED)),
            running=sum(1 for j in jobs if j.state is JobState.RUNNING),
            completed=sum(1 for j in jobs if j.state is JobState.COMPLETED),
            stranded=len(self.fake.stranded(self.scale_set_id)),
        )


class Stage:
    """One scenario: the fakes, a Kubernetes client and the sites. ``async with Stage(...)``."""

    def __init__(
        self,
        cluster: LocalCluster,
        workdir: Path,
        *,
        fake: FakeActions | None = None,
        hud: bool = True,
        prefix: str = "e2e",
    ) -> None:
        self.cluster = cluster
        self.workdir = workdir
        # GitHub.com's service as it is today (direct assignment, no acquire); a scenario
        # that needs the explicit-acquire service passes its own fake.
        self.fake = fake or FakeActions(pats=[PAT], poll_hold=2.0, strand_grace=10.0, broker=True)
        self.hud: FakeHUD | None = FakeHUD(HUD_TOKEN) if hud else None
        # GitHub's REST endpoints for the GitHub demand source, served by the Actions fake
        # (where the listener's GitHub API URL points), over its job queue.
        self.github = FakeGitHubRest(tokens=[])
        self.github.link(self.fake)
        self.fake.mount(self.github.add_routes)
        self.prefix = prefix
        self.sites: list[Site] = []
        self._api_cm: contextlib.AbstractAsyncContextManager[client.ApiClient] | None = None
        self._api: client.ApiClient | None = None

    @property
    def api(self) -> client.ApiClient:
        assert self._api is not None, "stage not entered"
        return self._api

    async def __aenter__(self) -> Stage:
        self.workdir.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(install_priority_classes, self.cluster)
        self._api_cm = kube_client(self.cluster.kubeconfig)
        self._api = await self._api_cm.__aenter__()
        await self.fake.start()
        if self.hud is not None:
            await self.hud.start()
            self.hud.link(self.fake)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for site in self.sites:
            with contextlib.suppress(Exception):
                await site.close()
        await self.fake.stop()
        if self.hud is not None:
            await self.hud.stop()
        for site in self.sites:
            await asyncio.to_thread(self._delete_site, site)
        if self._api_cm is not None:
            await self._api_cm.__aexit__(None, None, None)

    def _delete_site(self, site: Site) -> None:
        with contextlib.suppress(Exception):
            self.cluster.delete_namespace(site.namespace)
        for name in site.nodes["runner"] + site.nodes["workflow"]:
            with contextlib.suppress(Exception):
                self.cluster.remove_node(name)

    async def add_site(self, spec: SiteSpec) -> Site:
        namespace = await asyncio.to_thread(self.cluster.create_namespace, self.prefix)
        site = Site(self, spec, namespace)
        self.sites.append(site)
        await site.setup()
        return site
