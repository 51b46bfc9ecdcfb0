"""observe → policy.plan → apply → record, forever.

Two loops share one view and one set of expectations:

- the *signal* loop recomputes the advertised value on every (coalesced) view change and
  passes it to ``set_max_capacity`` at once. This is the
  capacity-signal path; it plans (pure, cheap) but never touches the cluster.
- the *reconcile* loop runs a full pass on a coalesced view change or every
  ``recalculate_interval``: plan, publish the advertised value, delete, create, record metrics.

What is sent but not seen yet is ``capacity.expectations``; how the advertised value is
published (a rise once confirmed) is ``capacity.publisher``; the launch times it observes are
``capacity.launches``.

Failures never end the loops: a failed call is logged and counted; a failed create stops the
pass's remaining creates and holds new creates back with exponential backoff (a quota or RBAC
problem must not become a create storm); the next pass retries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace
from typing import Any

from base.backoff import Backoff, BackoffGate
from base.kube import KubeError
from capacity import policy
from capacity.cluster import Cluster
from capacity.expectations import Expectations
from capacity.launches import Launches
from capacity.metrics import CREATE_EXISTS, CREATE_OK, CapacityMetrics
from capacity.model import (
    Deletion,
    Demand,
    Memory,
    Observed,
    Params,
    Plan,
    Role,
)
from capacity.pods import RunnerSet
from capacity.publisher import Publisher
from capacity.view import Pods, View

log = logging.getLogger("capacity.reconciler")

Manifest = Mapping[str, Any]
# (slot id, owner, now) → the two pod manifests of a pair (runner half, workflow half).
PairBuilder = Callable[[str, RunnerSet, float], tuple[Manifest, Manifest]]
# (now, demand, snapshot, commit) → pairs to hold beyond demand; a committed pass is also
# what the warm pool learns from (the signal path only asks).
WarmTarget = Callable[[float, Demand, Observed, bool], int]


class Reconciler:
    """Plans and acts for one scale set. ``signal_loop`` and ``reconcile_loop`` run as tasks;
    ``shutdown`` removes the placeholders (the monitor calls it after stopping the loops)."""

    def __init__(
        self,
        *,
        view: View,
        kube: Cluster,
        namespace: str,
        params: Callable[[], Params],
        demand: Callable[[float], Demand],
        build_pair: PairBuilder,
        set_max_capacity: Callable[[int], None],
        metrics: CapacityMetrics,
        on_reconcile: Callable[[], None],
        interval: float,
        expectation_ttl: float = 60.0,
        concurrency: int = 16,
        clock: Callable[[], float] = time.time,
        pool_room: Callable[[Observed, bool], int | None] | None = None,
        warm_pool: WarmTarget | None = None,
        confirm_interval: float = 0.5,
        confirm_timeout: float = 5.0,
    ) -> None:
        self.view = view
        self.kube = kube
        self.namespace = namespace
        self.params = params
        self.demand = demand
        self.build_pair = build_pair
        self.metrics = metrics
        self.on_reconcile = on_reconcile
        self.interval = interval
        self.expectations = Expectations(ttl=expectation_ttl)
        self.memory = Memory()
        self.clock = clock
        # NodePool limits (optional): (snapshot, commit) → new pairs admitted, None: no cap.
        self.pool_room = pool_room
        # The warm pool (optional): pairs to hold beyond demand, in place of proactive_capacity.
        self.warm_pool = warm_pool
        self.publisher = Publisher(
            view=view,
            advertised=lambda now, pods: self.evaluate(now, pods=pods)[0].advertised,
            set_max_capacity=set_max_capacity,
            metrics=metrics,
            clock=clock,
            confirm_interval=confirm_interval,
            confirm_timeout=confirm_timeout,
        )
        self.passes = 0
        self._short: tuple[Role, ...] = ()  # the halves last seen short (logged on change)
        self._slow_start = 0  # the last slow start's allowance (logged on change)
        # Creates are held back with exponential backoff after a failure.
        self._gate = BackoffGate(Backoff(base=1.0, cap=60.0))
        self._limit = asyncio.Semaphore(concurrency)
        self._nodes_checked_at = float("-inf")
        self.launches = Launches(metrics.record_pair_launch)
        self.launch_times = self.launches.times  # the monitor's hold and stall timeouts

    # --- planning -------------------------------------------------------------------------

    def evaluate(
        self, now: float, *, commit: bool = False, pods: Pods | None = None
    ) -> tuple[Plan, Memory, Observed, Demand, Params]:
        """Plan on the view plus expectations (pure apart from settling expectations); with
        ``pods``, on those pods in place of the watches' (expectations are settled by the
        view only: one the read already shows is still wanted until the watch shows it, or
        the next pass would create again what the view does not have yet)."""
        seen = self.view.snapshot(pods)
        if pods is None:
            self.expectations.settle({p.name: p for p in seen.placeholders}, now)
        observed = self.expectations.overlay(seen)
        params = self.params()
        demand = self.demand(now)
        if self.warm_pool is not None:
            held = self.warm_pool(now, demand, observed, commit)
            params = replace(params, proactive_capacity=max(0, held))
        room = self.pool_room(observed, commit) if self.pool_room is not None else None
        plan, memory = policy.plan(observed, demand, params, self.memory, now, pool_room=room)
        return plan, memory, observed, demand, params

    # --- the signal path ------------------------------------------------------------------

    async def signal_loop(self) -> None:
        """Republish on every coalesced view change (and when a waiting rise is due)."""
        while True:
            await self.view.signal.wait(within=self.publisher.rise_wait())
            if not self.view.synced:
                continue  # nothing is verified yet; the monitor advertised 0 at start
            try:
                now = self.clock()
                plan, _, observed, _, params = self.evaluate(now)
                self.launches.observe(observed, now, params, wait=None)
            except Exception:
                log.exception("capacity signal computation failed")
                continue
            if plan.advertised != self.publisher.published:
                await self.publisher.offer(plan.advertised)
            else:
                self.publisher.settled()

    # --- the reconcile path ---------------------------------------------------------------

    async def reconcile_loop(self) -> None:
        """Full passes on change or every ``interval``; a failed pass is logged, counted and
        retried after a short backoff."""
        await self.view.synced_event.wait()
        backoff = Backoff(base=1.0, cap=30.0)
        while True:
            started = time.perf_counter()
            ok = False
            try:
                await self.reconcile_once()
                ok = True
            except Exception as exc:
                log.exception("reconcile pass failed", extra={"error": str(exc)})
            self.metrics.record_reconcile(
                time.perf_counter() - started, success_at=self.clock() if ok else None
            )
            if ok:
                backoff.reset()
                self.on_reconcile()
            else:
                await asyncio.sleep(backoff.next())
            await self.view.reconcile.wait(within=self.interval)

    async def reconcile_once(self) -> Plan:
        now = self.clock()
        if self.view.node_checks:
            await self._check_nodes(now)
        plan, memory, observed, demand, params = self.evaluate(now, commit=True)
        self.launches.observe(observed, now, params, wait=self.expectations.ttl)
        self.memory = memory
        self.passes += 1
        # First the signal: the value must not wait for the cluster calls below.
        await self.publisher.offer(plan.advertised)
        # The configured value; the warm pool's target has a series of its own.
        self.metrics.record_pass(plan, observed, demand, proactive=self.params().proactive_capacity)
        if self.pool_room is not None:
            self.metrics.record_held(plan.held_by_nodepools)
        if self.view.node_checks:
            self.metrics.record_deletion_candidates(self.view.on_deletion_candidates())
        short = ",".join(role.value for role in plan.short_roles)
        if plan.short_roles != self._short:
            # Once per change: the hold itself is in every pass while it lasts.
            log.info(
                "shortage confirmed, new pairs held" if plan.short_roles else "shortage over",
                extra={"short": short, "held": plan.held_by_shortage},
            )
            self._short = plan.short_roles
        if plan.slow_start != self._slow_start:
            log.info(
                "slow start" if plan.slow_start else "slow start over",
                extra={"in_flight": plan.slow_start},
            )
            self._slow_start = plan.slow_start
        for cause in plan.stalls:
            # cloud: the Pending half's pools said they cannot launch a node; time: no word
            self.metrics.record_stall(cause)
            log.info(
                "pair released as stalled",
                extra={"cause": cause.value, "stall_backoff": round(plan.stall_backoff, 1)},
            )
        if plan.deletes or plan.creates or plan.repairs or plan.probes:
            log.info(
                "reconcile",
                extra={
                    "creates": len(plan.creates),
                    "repairs": len(plan.repairs),
                    "probes": len(plan.probes),
                    "deletes": len(plan.deletes),
                    "advertised": plan.advertised,
                    "desired": plan.desired_pairs,
                    "target": plan.target_pairs,
                    "held_by_nodepools": plan.held_by_nodepools,
                    "held_by_shortage": plan.held_by_shortage,
                    "short": short,
                    "stall_backoff": round(plan.stall_backoff, 1),
                },
            )
        await self._delete(plan.deletes, observed, now)
        if plan.repairs:
            log.info(
                "placeholders repaired",
                extra={"slots": ",".join(r.slot for r in plan.repairs)},
            )
        for probe in plan.probes:
            self.metrics.record_probe(probe.role.value)
            log.info(
                "placeholder probe created",
                extra={"slot": probe.slot, "role": probe.role.value},
            )
        await self._create(
            [(slot, tuple(Role)) for slot in plan.creates]
            + [(r.slot, (r.role,)) for r in plan.repairs + plan.probes],
            now,
            params,
            untimed={r.slot for r in plan.probes},
        )
        return plan

    async def _check_nodes(self, now: float) -> None:
        """Node checks: every node under a Running placeholder at most once per interval,
        and in between only nodes not checked yet (a placeholder that just landed)."""
        if now - self._nodes_checked_at >= self.interval:
            self._nodes_checked_at = now
            await self.view.refresh_nodes()
        elif self.view.placeholder_nodes() - set(self.view.nodes):
            await self.view.refresh_nodes(only_new=True)

    # --- deletes --------------------------------------------------------------------------

    async def _delete(self, deletions: Iterable[Deletion], observed: Observed, now: float) -> None:
        slots = {p.name: p.slot for p in observed.placeholders}
        todo = list(deletions)
        if not todo:
            return
        for d in todo:
            self.expectations.expect_delete(d.name, now)
        results = await asyncio.gather(*(self._delete_one(d.name) for d in todo))
        per_reason: dict[str, set[str]] = {}
        for d, done in zip(todo, results, strict=True):
            if done:
                per_reason.setdefault(d.reason.value, set()).add(slots.get(d.name, d.name))
        for reason, slot_ids in per_reason.items():
            self.metrics.record_delete(reason, len(slot_ids))
            # Which slots went and why: a pair's whole life (created, Running, deleted) can
            # be read back from the log, e.g. to see how many pairs went before they ran.
            log.info(
                "placeholders deleted",
                extra={"reason": reason, "slots": ",".join(sorted(slot_ids, key=_slot_key))},
            )

    async def _delete_one(self, name: str) -> bool:
        async with self._limit:
            try:
                await self.kube.delete_pod(
                    self.view.placeholder_namespace, name, uid=self.view.placeholder_uid(name)
                )
            except KubeError as exc:
                self.expectations.forget(name)  # not deleted: let the next pass try again
                self.metrics.record_kube_error("delete", exc.kind.value)
                log.warning("placeholder delete failed", extra={"pod": name, "error": str(exc)})
                return False
        return True

    # --- creates --------------------------------------------------------------------------

    async def _create(
        self,
        slots: Iterable[tuple[str, tuple[Role, ...]]],
        now: float,
        params: Params,
        *,
        untimed: Collection[str] = (),
    ) -> None:
        """Create the given halves of each slot: both for a new pair, one for a repair or a
        probe. ``untimed`` slots (probes) are not launch samples: a probe waits out a
        shortage, and its slot is timed from its repair."""
        todo = list(slots)
        if not todo:
            return
        owner = self.view.runner_set
        if owner is None or not owner.uid:
            log.warning(
                "not creating placeholders: EphemeralRunnerSet not found",
                extra={"runner_set": self.view.runner_set_name},
            )
            return
        if not self._gate.open(now):
            return  # backing off after a failure
        halted = asyncio.Event()
        await asyncio.gather(
            *(
                self._create_pair(s, roles, owner, now, params, halted, timed=s not in untimed)
                for s, roles in todo
            )
        )

    async def _create_pair(
        self,
        slot: str,
        roles: tuple[Role, ...],
        owner: RunnerSet,
        now: float,
        params: Params,
        halted: asyncio.Event,
        *,
        timed: bool,
    ) -> None:
        try:
            runner, workflow = self.build_pair(slot, owner, now)
        except Exception as exc:  # a template the specs cannot use: say so, do not crash
            halted.set()
            self.metrics.record_create("invalid")
            log.error("cannot build placeholder pods", extra={"slot": slot, "error": str(exc)})
            return
        results: list[str] = []
        for role, manifest in ((Role.RUNNER, runner), (Role.WORKFLOW, workflow)):
            if role not in roles:
                continue  # a repair: the slot's other half is there
            async with self._limit:
                if halted.is_set():
                    break
                name = str(manifest["metadata"]["name"])
                self.expectations.expect_create(name, slot, role, now, now + params.ttl)
                try:
                    created = await self.kube.create_pod(self.view.placeholder_namespace, manifest)
                except KubeError as exc:
                    self.expectations.forget(name)
                    halted.set()
                    delay = self._gate.failed(self.clock())
                    self.metrics.record_kube_error("create", exc.kind.value)
                    results.append(exc.kind.value)
                    log.warning(
                        "placeholder create failed; holding creates back",
                        extra={"pod": name, "error": str(exc), "retry_in": round(delay, 1)},
                    )
                    break
                results.append(CREATE_OK if created else CREATE_EXISTS)
        if not results:
            return
        failed = [r for r in results if r not in (CREATE_OK, CREATE_EXISTS)]
        if failed:
            self.metrics.record_create(failed[0])
        else:
            self._gate.succeeded()
            self.metrics.record_create(CREATE_OK if CREATE_OK in results else CREATE_EXISTS)
            if timed and len(results) == len(roles) and CREATE_OK in results:
                # A repaired slot is timed from the repair: one launch, the half it waited for.
                self.launches.created(slot, self.clock())

    # --- shutdown -------------------------------------------------------------------------

    async def shutdown(self, budget: float) -> int:
        """Delete every placeholder of this scale set (the ones seen and the ones being
        created), within ``budget`` seconds. Returns how many deletes were sent."""
        names = set(self.view.placeholder_names()) | set(self.expectations.creates)
        if not names:
            return 0
        log.info("deleting placeholders before exit", extra={"count": len(names)})
        try:
            async with asyncio.timeout(budget):
                await asyncio.gather(*(self._delete_one(n) for n in sorted(names)))
        except TimeoutError:
            log.warning(
                "placeholders left at exit (delete budget used up); the next listener "
                "adopts or sweeps them",
                extra={"budget": budget},
            )
        return len(names)


def _slot_key(slot: str) -> tuple[int, str]:
    """Numeric slots in number order, any other name after them."""
    return (int(slot), "") if slot.isascii() and slot.isdigit() else (1 << 62, slot)
