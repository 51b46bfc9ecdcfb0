"""The capacity monitor: the one object the listener creates (docs/capacity-model.md).

It wires the watch-driven view, the reconciler, the demand poller (HUD or GitHub's REST API,
`capacity.demand`) and the metrics together and runs them until the listener's stop event is
set.

Start-up. The monitor advertises 0 the moment it is created: nothing is confirmed yet.
Placeholders already in the cluster for this scale set are *adopted* when they are verified:
an ownerReference (or owner annotation) naming the current EphemeralRunnerSet's uid and the
spec hash of the current template and settings; they count only once the watch shows them
Running, like any other. Everything else of this scale set (another runner set's, another
template's or settings', no owner) is swept by the first reconcile pass (reason ``orphan``).
Adopting keeps capacity across a crash or an OOM kill; the checks keep a stale or foreign pod
from ever being advertised.

Shutdown. When ``stop`` is set, the signal and reconcile loops end first (nothing new is
advertised, not even 0), then this listener's placeholders are deleted within a budget
(``SHUTDOWN_BUDGET``, or the share of the pod's grace the listener gives it): a graceful stop
usually means the scale set is being changed, removed or has capacity-awareness turned off,
and placeholders must not outlive it. If the
budget runs out (or the process is killed), the next listener adopts or sweeps what is left,
and the pods end by themselves at their TTL.

The owner the placeholders name (ARC's listener Role, so the garbage collector removes them
with the listener) is `capacity.pair_specs`. What each part does lives in its own module.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import random
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence

from base.exposition import Registry
from base.http.client import Client
from base.kube import KubeError
from capacity import kept, policy, warm_pool
from capacity.cluster import Cluster
from capacity.demand import DemandReader, GitHubReaderFactory, build_reader
from capacity.launch_failures import LaunchFailures
from capacity.metrics import CapacityMetrics
from capacity.model import Demand, DemandState, Observed, Params, Role
from capacity.node_group_watch import NodeGroupRoom
from capacity.nodepool_watch import NodePoolLimits
from capacity.pair_specs import PairSpecs
from capacity.pod_refusals import PodRefusals
from capacity.reconciler import Reconciler
from capacity.settings import CapacitySettings, to_params, to_warm_pool
from capacity.stage_feed import StageFeed, predictive_pool, window
from capacity.stage_pool import PredictivePool
from capacity.view import View

log = logging.getLogger("capacity.monitor")

SHUTDOWN_BUDGET = 10.0


class CapacityMonitor:
    """Placeholder pairs and the live capacity value for one scale set."""

    def __init__(
        self,
        *,
        settings: CapacitySettings,
        kube: Cluster,
        runner_namespace: str,
        runner_set_name: str,
        scale_set_name: str,
        runner_labels: tuple[str, ...],
        max_runners: Callable[[], int],
        set_max_capacity: Callable[[int], None],
        registry: Registry,
        on_reconcile: Callable[[], None],
        github_demand: GitHubReaderFactory | None = None,
        hud_client: Client | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        # One clock (epoch seconds) and one random source for every decision of this monitor,
        # so a test or a replay can drive it without patching modules.
        self.clock = clock
        self._rng = rng if rng is not None else random.Random()
        self.settings = settings
        self.kube = kube
        self.runner_namespace = runner_namespace
        self.placeholder_namespace = settings.placeholder_namespace or runner_namespace
        self.runner_set_name = runner_set_name
        self.scale_set_name = scale_set_name
        self.runner_labels = runner_labels
        self._max_runners = max_runners
        self._base_params = to_params(settings, 0)
        self._launch_times: Sequence[float] = ()  # the reconciler's, once it exists
        # (assigned at, queued at) of the jobs GitHub gave this scale set lately.
        self._assigned: deque[tuple[float, float]] = deque(maxlen=policy.ASSIGNMENTS_KEPT)
        self._registry = registry
        self.demand_state = DemandState()
        # Pairs held beyond demand (settings warm_pool), fed by what each pass sees.
        self.warm_pool = base = to_warm_pool(settings)
        self._arrivals = warm_pool.ArrivalCounter()
        # Pairs ahead of a fan-out (warm_pool.predictive): a stage model fed from the demand
        # readings' running and queued jobs, on top of the pool above as its base.
        self.stage_feed: StageFeed | None = None
        if settings.warm_pool.predictive.enabled:
            self.warm_pool, self.stage_feed = predictive_pool(
                settings.warm_pool.predictive, runner_labels, settings.demand_interval, base
            )
        # HUD, GitHub's REST API or nothing (settings.demand_source).
        self._demand: DemandReader | None = build_reader(
            settings, runner_labels, github=github_demand, hud_client=hud_client
        )
        self.pairs = PairSpecs(
            settings=settings,
            kube=kube,
            scale_set_name=scale_set_name,
            runner_namespace=runner_namespace,
            placeholder_namespace=self.placeholder_namespace,
            role_name=(
                socket.gethostname() if settings.listener_role is None else settings.listener_role
            ),
        )
        self.view = View(
            kube,
            placeholder_namespace=self.placeholder_namespace,
            runner_namespace=runner_namespace,
            runner_set_name=runner_set_name,
            scale_set_name=scale_set_name,
            node_checks=settings.node_checks,
            on_watch_error=self._watch_error,
            spec_hashes=self.pairs.spec_hashes,
        )
        self.metrics = CapacityMetrics(registry, name=runner_set_name, namespace=runner_namespace)
        # Karpenter NodePool limits (optional, off by default).
        self.nodepools = (
            NodePoolLimits(kube, settings.nodepools, metrics=self.metrics, on_change=self.view.poke)
            if settings.nodepools.enabled
            else None
        )
        # Karpenter's insufficient-capacity Events, with the NodePools (optional): the word
        # that shortens a stall.
        self.launch_failures = (
            LaunchFailures(
                kube,
                settings.nodepools.events_namespace,
                metrics=self.metrics,
                on_change=self.view.poke,
            )
            if self.nodepools is not None and settings.nodepools.events_namespace
            else None
        )
        # Karpenter's scheduling failures of our placeholders, with the NodePools (optional):
        # the word that confirms a shortage at once (policy._short_roles).
        self.pod_refusals = (
            PodRefusals(
                kube, self.placeholder_namespace, metrics=self.metrics, on_change=self.view.poke
            )
            if self.nodepools is not None
            else None
        )
        # cluster-autoscaler node groups (optional, off by default).
        self.node_groups = (
            NodeGroupRoom(
                kube, settings.cluster_autoscaler, metrics=self.metrics, on_change=self.view.poke
            )
            if settings.cluster_autoscaler.enabled
            else None
        )
        self.reconciler = Reconciler(
            view=self.view,
            kube=kube,
            namespace=self.placeholder_namespace,
            params=self.params,
            demand=self.demand,
            build_pair=self.pairs.build_pair,
            set_max_capacity=set_max_capacity,
            metrics=self.metrics,
            on_reconcile=on_reconcile,
            interval=settings.recalculate_interval,
            pool_room=(
                self._pool_room
                if self.nodepools is not None or self.node_groups is not None
                else None
            ),
            warm_pool=self._warm_target,
            clock=clock,
        )
        self._launch_times = self.reconciler.launch_times
        self.metrics.record_warm_pool_mode(settings.warm_pool.mode)
        if self.stage_feed is not None:
            self.metrics.record_predictive_pairs(0, {})
        # Nothing is confirmed yet: advertise 0 until the view has synced and a pass has
        # counted verified capacity (set here, before the listener's first poll can start).
        self.reconciler.publisher.publish(0)

    # --- what the listener's loop reports (plain callables: the listener calls them) ------

    def header_sent(self, value: int) -> None:
        """A poll request was built with this X-ScaleSetMaxCapacity."""
        self.metrics.record_header_sent(value, self.clock())

    def job_assigned(self, queued_at: float | None = None) -> None:
        """GitHub assigned a job to this scale set (a JobAssigned message was handled);
        ``queued_at``: when it was queued (epoch seconds), for the as-of correction."""
        now = self.clock()
        self.metrics.record_job_assigned(now)
        if queued_at is not None:
            self._assigned.append((now, queued_at))

    # --- inputs to the policy -------------------------------------------------------------

    def params(self) -> Params:
        """The knobs with the listener's current max_runners (it may change at any time) and,
        with `demand.hold` unset, the hold the observed launch times give, and the stall
        timeout they give."""
        base = self._base_params
        hold = base.demand_hold
        if self.settings.demand.hold is None:
            hold = policy.demand_hold(self._launch_times, base.downscale_delay)
        return dataclasses.replace(
            base,
            max_runners=max(0, self._max_runners()),
            demand_hold=hold,
            stall_timeout=policy.stall_timeout(self._launch_times, base.ready_timeout),
            signal_stall_timeout=policy.signal_stall_timeout(
                self._launch_times, base.ready_timeout
            ),
            cannot_launch_at=self._cannot_launch_at(),
            refused_at=self.pod_refusals.latest() if self.pod_refusals is not None else {},
        )

    def _cannot_launch_at(self) -> dict[Role, float]:
        """Per half, when its pools last said they cannot launch a node: the latest
        insufficient-capacity Event of a NodePool it lands on; now, while every node group it
        is named to land on is full or backed off. A half absent: no word (or no check)."""
        said: dict[Role, float] = {}
        owner = self.view.runner_set
        if self.launch_failures is not None and self.nodepools is not None and owner:
            template = self.pairs.template(owner)
            placement = self.nodepools.placement({role: template.shape(role) for role in Role})
            for role, pools in placement.items():
                at = self.launch_failures.latest(p.name for p in pools)
                if at is not None:
                    said[role] = at
        if self.node_groups is not None and self.node_groups.state == "watching":
            now = self.clock()
            for role, full in self.node_groups.full().items():
                if full:
                    said[role] = now
        return said

    def demand(self, now: float) -> Demand:
        """The demand to plan with: the source's value, and how many of the jobs it counted
        this scale set has been given since (the as-of correction, policy.net_of_starts)."""
        demand = policy.resolve_demand(self.demand_state, now, self.params())
        policy.forget_assigned(self._assigned, demand.as_of)
        return policy.with_starts(demand, self._assigned)

    def _warm_target(self, now: float, demand: Demand, observed: Observed, commit: bool) -> int:
        """Pairs to hold beyond demand. A committed pass (the reconcile loop) feeds the pool
        the arrivals it saw and records the target; the signal path only asks."""
        pool = self.warm_pool
        if isinstance(pool, PredictivePool):
            # Unset horizon and hold follow the launches this listener observes.
            knobs = self.settings.warm_pool.predictive
            pool.horizon, pool.hold = window(self._launch_times, knobs.horizon, knobs.hold)
        target = warm_pool.drive(
            pool,
            self._arrivals,
            now,
            queued=demand.queued,
            read_at=warm_pool.read_at(demand, now),
            runners=(p.name for p in observed.runner_pods),
            commit=commit,
        )
        if commit:
            self.metrics.record_warm_pool(target)
            if isinstance(pool, PredictivePool) and self.stage_feed is not None:
                found = pool.expected(now)
                self.stage_feed.count(found)
                pairs = math.ceil(sum(e.count for e in found) - 1e-9)
                by_workflow: dict[str, float] = {}
                for e in found:
                    by_workflow[e.workflow] = by_workflow.get(e.workflow, 0.0) + e.count
                self.metrics.record_predictive_pairs(pairs, by_workflow)
        return target

    def _pool_room(self, observed: Observed, commit: bool) -> int | None:
        """New pairs admitted by NodePool limits and full node groups (None: no cap)."""
        rooms = [
            self._nodepool_room(observed, commit),
            self.node_groups.room(observed, commit=commit) if self.node_groups else None,
        ]
        known = [r for r in rooms if r is not None]
        return min(known) if known else None

    def _nodepool_room(self, observed: Observed, commit: bool) -> int | None:
        if self.nodepools is None:
            return None
        owner = self.view.runner_set
        if owner is None:
            return self.nodepools.room(observed, None, commit=commit)
        template = self.pairs.template(owner)
        shapes = {role: template.shape(role) for role in Role}
        return self.nodepools.room(observed, shapes, commit=commit)

    # --- loops ----------------------------------------------------------------------------

    def _watch_error(self, stream: str, error: KubeError) -> None:
        self.metrics.record_kube_error(f"watch {stream}", error.kind.value)

    async def _hud_loop(self) -> None:
        """Read the demand source every `demand.interval` (±10%), after a random start delay
        so many listeners do not call it at the same moment."""
        if self._demand is None:
            return
        interval = self.settings.demand_interval
        await asyncio.sleep(self._rng.uniform(0, 0.2 * interval))
        while True:
            # The queue as the source saw it: when the read began, less the source's lag.
            as_of = self.clock() - self.settings.demand_lag
            reading = await self._demand.read()
            outcome = reading.outcome
            now = self.clock()
            before = policy.resolve_demand(self.demand_state, now, self.params())
            self.demand_state = policy.record_demand(self.demand_state, outcome, now, as_of=as_of)
            self.metrics.record_reading(reading)
            if self.stage_feed is not None:
                arrived = self.stage_feed.read(
                    ok=outcome.queued is not None,
                    running=reading.running,
                    queued=reading.queued_jobs,
                    read_at=as_of,
                    now=now,
                    truncated=reading.running_truncated,
                    partial=reading.running_partial,
                )
                self.metrics.record_predicted_arrivals(arrived)
            if outcome.queued is None:
                log.warning(
                    "demand read failed",
                    extra={
                        "source": reading.source,
                        "result": outcome.result.value,
                        "detail": outcome.detail,
                    },
                )
            after = policy.resolve_demand(self.demand_state, self.clock(), self.params())
            if (after.queued, after.source) != (before.queued, before.source):
                self.view.poke()
            await asyncio.sleep(interval * self._rng.uniform(0.9, 1.1))

    async def run(
        self, stop: asyncio.Event, *, cleanup_budget: Callable[[], float] | None = None
    ) -> None:
        """Run until ``stop`` is set; then stop advertising, delete this listener's
        placeholders within ``cleanup_budget()`` seconds (default ``SHUTDOWN_BUDGET``: the
        pod's grace is shared with the session DELETE) and return."""
        await self.pairs.resolve_owner()
        log.info(
            "capacity monitor starting",
            extra={
                "runner_set": self.runner_set_name,
                "namespace": self.runner_namespace,
                "placeholder_namespace": self.placeholder_namespace,
            },
        )
        try:
            async with asyncio.TaskGroup() as tg:
                view = tg.create_task(self.view.run(), name="capacity-view")
                loops = [
                    tg.create_task(self.reconciler.signal_loop(), name="capacity-signal"),
                    tg.create_task(self.reconciler.reconcile_loop(), name="capacity-reconcile"),
                    tg.create_task(self._hud_loop(), name="capacity-hud"),
                    tg.create_task(
                        kept.keep_stage_model(
                            self.kube,
                            self.metrics,
                            self.stage_feed,
                            namespace=self.placeholder_namespace,
                            scale_set_name=self.scale_set_name,
                        ),
                        name="capacity-stage-model",
                    ),
                ]
                if self.nodepools is not None:
                    loops.append(tg.create_task(self.nodepools.run(), name="capacity-nodepools"))
                if self.launch_failures is not None:
                    loops.append(
                        tg.create_task(self.launch_failures.run(), name="capacity-launch-failures")
                    )
                if self.pod_refusals is not None:
                    loops.append(
                        tg.create_task(self.pod_refusals.run(), name="capacity-pod-refusals")
                    )
                if self.node_groups is not None:
                    loops.append(
                        tg.create_task(self.node_groups.run(), name="capacity-node-groups")
                    )
                await stop.wait()
                for task in loops:
                    task.cancel()
                await asyncio.gather(*loops, return_exceptions=True)
                budget = cleanup_budget() if cleanup_budget is not None else SHUTDOWN_BUDGET
                await self.reconciler.shutdown(budget)
                view.cancel()
        finally:
            if self._demand is not None:
                with contextlib.suppress(Exception):
                    await self._demand.aclose()
            self.metrics.unregister()
            log.info("capacity monitor stopped")
