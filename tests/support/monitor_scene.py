"""The one monitor scene: the capacity monitor built in this process as the listener builds
it, for the tests that drive it directly — on the in-memory cluster
(tests/unit/capacity/test_monitor_logic.py) and on a real one
(tests/integration/test_capacity_monitor.py on kwok nodes, tests/support/karpenter_kit.py on
Karpenter's, tests/integration/test_cluster_autoscaler.py).

* ``RecordedMonitor``: one CapacityMonitor recording every value it advertises (with when),
  its reconcile passes and its metrics. The unit tests drive its reconciler and view.
* ``MonitorRun``: a ``RecordedMonitor`` on a real cluster, running in a task.
* ``MonitorScene``: one test's namespace and scale set: starts runs and reads and creates the
  pods the tests look at (placeholders, real pods, events). The tests' scenes extend it
  with their nodes: fake kwok nodes, Karpenter NodePools, cluster-autoscaler's groups.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kubernetes_asyncio import client
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from base.kube import Kube
from capacity.cluster import Cluster
from capacity.contract import placeholder_selector
from capacity.demand import GitHubReaderFactory
from capacity.monitor import CapacityMonitor
from capacity.reconciler import Reconciler
from capacity.settings import CapacitySettings
from tools.capacity_kit import wait_running
from tools.waits import eventually

ROLE_LABEL = "capacity-listener.dev/role"

K = TypeVar("K", bound=Cluster)  # the cluster: Kube, or the unit tests' MemoryCluster


@dataclass(frozen=True)
class ScaleSet:
    """The scale set a test's monitor serves: its name, its EphemeralRunnerSet, its labels."""

    name: str
    runner_set: str
    labels: tuple[str, ...]


class RecordedMonitor(Generic[K]):
    """One CapacityMonitor recording every value it advertises, with the time from ``stamp``.

    ``clock`` is the monitor's own (epoch seconds; a ``FakeClock`` in the unit tests, which
    also stamps the values); without one the monitor reads ``time.time`` and the values are
    stamped with ``time.monotonic``. ``max_runners`` may be changed while it runs (the
    monitor reads it on every pass)."""

    def __init__(
        self,
        kube: K,
        namespace: str,
        cfg: CapacitySettings,
        max_runners: int,
        scale_set: ScaleSet,
        *,
        clock: Callable[[], float] | None = None,
        github_demand: GitHubReaderFactory | None = None,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.runner_set = scale_set.runner_set
        self.max_runners = max_runners
        self.stamp = clock or time.monotonic
        self.values: list[tuple[float, int]] = []
        self.registry = CollectorRegistry()
        self.reconciles = 0
        # As load_capacity_settings does with HUD_API_TOKEN.
        hud = cfg.hud.model_copy(update={"token": SecretStr("hud-fake-token")})
        self.monitor = CapacityMonitor(
            settings=cfg.model_copy(update={"hud": hud}),
            kube=kube,
            runner_namespace=namespace,
            runner_set_name=scale_set.runner_set,
            scale_set_name=scale_set.name,
            runner_labels=scale_set.labels,
            max_runners=lambda: self.max_runners,
            set_max_capacity=self._record,
            registry=self.registry,
            on_reconcile=self._reconciled,
            github_demand=github_demand,
            clock=clock or time.time,
        )

    def _record(self, value: int) -> None:
        self.values.append((self.stamp(), value))

    def _reconciled(self) -> None:
        self.reconciles += 1

    @property
    def reconciler(self) -> Reconciler:
        return self.monitor.reconciler

    @property
    def advertised_values(self) -> list[int]:
        """Every value advertised, in order."""
        return [v for _, v in self.values]

    @property
    def advertised(self) -> int | None:
        """The last value advertised; None before the first."""
        return self.values[-1][1] if self.values else None

    def values_since(self, moment: float) -> list[int]:
        return [v for t, v in self.values if t >= moment]

    def first_time(self, value: int, since: float) -> float | None:
        return next((t for t, v in self.values if t >= since and v == value), None)

    def metric(self, name: str, **labels: str) -> float:
        """The sample of this run's series ``name``; -1 when there is none, so that no
        assertion on a count or a gauge holds by accident."""
        value = self.registry.get_sample_value(
            name, {"name": self.runner_set, "namespace": self.namespace, **labels}
        )
        return -1.0 if value is None else value

    def count(self, name: str, **labels: str) -> float:
        """A counter of this run: 0 until its series is first written (a vector's child
        appears on first use, as in Go)."""
        return max(0.0, self.metric(name, **labels))

    def creates(self, result: str = "ok") -> float:
        return self.metric("gha_capacity_pair_creates_total", result=result)


class MonitorRun(RecordedMonitor[Kube]):
    """A ``RecordedMonitor`` on a real cluster, running in a task from the start."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        cfg: CapacitySettings,
        max_runners: int,
        scale_set: ScaleSet,
    ) -> None:
        super().__init__(Kube(api), namespace, cfg, max_runners, scale_set)
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(self.monitor.run(self.stop))

    async def advertises(self, value: int, within: float = 90) -> float:
        """Wait until the last advertised value is ``value``; return when it was set."""

        async def check() -> float | None:
            if self.task.done():
                self.task.result()  # surface a crash at once
            if self.values and self.advertised == value:
                return self.values[-1][0]
            return None

        return await eventually(
            check, f"advertised == {value} (last {self.values[-3:]})", within, interval=0.1
        )

    async def close(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 60)

    async def crash(self) -> None:
        """End the monitor the way SIGKILL would: no shutdown work at all."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


class MonitorScene:
    """One test's namespace, scale set and monitor runs."""

    def __init__(self, api: client.ApiClient, namespace: str, scale_set: ScaleSet) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.ns = namespace
        self.scale_set = scale_set
        self.runs: list[MonitorRun] = []

    @property
    def run(self) -> MonitorRun | None:
        """The run started last."""
        return self.runs[-1] if self.runs else None

    def start(
        self, cfg: CapacitySettings, max_runners: int = 10, api: client.ApiClient | None = None
    ) -> MonitorRun:
        run = MonitorRun(api or self.api, self.ns, cfg, max_runners, self.scale_set)
        self.runs.append(run)
        return run

    async def crash_runs(self) -> None:
        """Teardown: end every run still going, without shutdown work."""
        for run in self.runs:
            if not run.task.done():
                await run.crash()

    async def placeholders(self) -> list[client.V1Pod]:
        pods = await self.core.list_namespaced_pod(
            self.ns, label_selector=placeholder_selector(self.scale_set.name)
        )
        return list(pods.items)

    async def running_placeholders(self) -> dict[str, client.V1Pod]:
        """name → pod of every Running, non-terminating placeholder."""
        return {
            p.metadata.name: p
            for p in await self.placeholders()
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        }

    async def running_roles(self) -> dict[str, str]:
        """name → role of every Running, non-terminating placeholder."""
        return {
            name: pod.metadata.labels[ROLE_LABEL]
            for name, pod in (await self.running_placeholders()).items()
        }

    async def running(self, name: str, within: float = 60) -> client.V1Pod:
        return await wait_running(self.core, self.ns, name, within)

    async def create(self, manifest: dict[str, Any]) -> client.V1Pod:
        pod: client.V1Pod = await self.core.create_namespaced_pod(self.ns, manifest)
        return pod

    async def events(self, reason: str) -> list[client.CoreV1Event]:
        found = await self.core.list_namespaced_event(self.ns)
        return [e for e in found.items if e.reason == reason]
