"""observe → policy.plan → apply → record, forever.

Two loops share one view and one set of expectations:

- the *signal* loop recomputes the advertised value on every (coalesced) view change and
  passes it to ``set_max_capacity`` at once. This is the
  capacity-signal path; it plans (pure, cheap) but never touches the cluster.
- the *reconcile* loop runs a full pass on a coalesced view change or every
  ``recalculate_interval``: plan, publish the advertised value, delete, create, record metrics.

Expectations. After a create or delete is sent, the watch may take a moment to show it. Until
it does (or ``expectation_ttl`` passes), the pass plans on the view *plus* what it expects:
a pod it created counts as a Pending placeholder, a pod it deleted as terminating. So the next
pass neither repeats the create nor counts capacity that is going away.

Rises are confirmed. The view's three pod watches are not in order with each other, so for a
moment it can count a real pod and the placeholder that pod pushed out. A drop is published at
once; a rise only as far as the same plan on the pods read at one revision
(``View.read_pods``) confirms it, at most once per ``confirm_interval`` (a rise that must
wait for that, or whose read failed, is tried again when the interval is over).

Failures never end the loops: a failed call is logged and counted; a failed create stops the
pass's remaining creates and holds new creates back with exponential backoff (a quota or RBAC
problem must not become a create storm); the next pass retries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from base.backoff import Backoff
from base.kube import KubeError, KubeErrorKind
from capacity import policy
from capacity.cluster import Cluster
from capacity.metrics import CREATE_EXISTS, CREATE_OK, CapacityMetrics
from capacity.model import (
    Deletion,
    Demand,
    Memory,
    Observed,
    Params,
    Placeholder,
    Plan,
    PodPhase,
    Role,
)
from capacity.pods import RunnerSet
from capacity.view import Pods, View

log = logging.getLogger("capacity.reconciler")

Manifest = Mapping[str, Any]
# (slot id, owner, now) → the two pod manifests of a pair (runner half, workflow half).
PairBuilder = Callable[[str, RunnerSet, float], tuple[Manifest, Manifest]]
# (now, demand, snapshot, commit) → pairs to hold beyond demand; a committed pass is also
# what the warm pool learns from (the signal path only asks).
WarmTarget = Callable[[float, Demand, Observed, bool], int]


# --- expectations -------------------------------------------------------------------------


@dataclass
class Expectations:
    """Creates and deletes sent but not yet seen through the watch."""

    ttl: float = 60.0
    creates: dict[str, Placeholder] = field(default_factory=dict)
    deletes: dict[str, float] = field(default_factory=dict)

    def expect_create(self, name: str, slot: str, role: Role, now: float, expires: float) -> None:
        self.creates[name] = Placeholder(
            name=name,
            slot=slot,
            role=role,
            phase=PodPhase.PENDING,
            created_at=now,
            expires_at=expires,
        )

    def expect_delete(self, name: str, now: float) -> None:
        self.creates.pop(name, None)
        self.deletes[name] = now

    def forget(self, name: str) -> None:
        self.creates.pop(name, None)
        self.deletes.pop(name, None)

    def settle(self, seen: Mapping[str, Placeholder], now: float) -> None:
        """Drop what the watch now shows, and whatever has waited longer than the TTL (then
        the watch is trusted again)."""
        for name, expected in list(self.creates.items()):
            if name in seen or now - expected.created_at > self.ttl:
                del self.creates[name]
        for name, sent in list(self.deletes.items()):
            pod = seen.get(name)
            if pod is None or pod.terminating or now - sent > self.ttl:
                del self.deletes[name]

    def overlay(self, observed: Observed) -> Observed:
        """The snapshot as it will be once the watch catches up."""
        if not self.creates and not self.deletes:
            return observed
        names = {p.name for p in observed.placeholders}
        placeholders = [
            replace(p, terminating=True) if p.name in self.deletes and not p.terminating else p
            for p in observed.placeholders
        ]
        placeholders.extend(p for n, p in self.creates.items() if n not in names)
        return replace(observed, placeholders=tuple(placeholders))

    def names(self) -> set[str]:
        return set(self.creates) | set(self.deletes)


# --- the reconciler -----------------------------------------------------------------------


@dataclass
class _CreateGate:
    """Exponential backoff for creates after a failure; reset by a success."""

    backoff: Backoff = field(default_factory=lambda: Backoff(base=1.0, cap=60.0))
    until: float = 0.0

    def open(self, now: float) -> bool:
        return now >= self.until

    def failed(self, now: float) -> float:
        if now < self.until:  # several failures of one pass count once
            return self.until - now
        delay = self.backoff.next()
        self.until = now + delay
        return delay

    def succeeded(self) -> None:
        self.backoff.reset()
        self.until = 0.0


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
        self._set_max_capacity = set_max_capacity
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
        self.published: int | None = None
        self.passes = 0
        self._short: tuple[Role, ...] = ()  # the halves last seen short (logged on change)
        self._slow_start = 0  # the last slow start's allowance (logged on change)
        # Rises: at most one read per confirm_interval (loop time), each within
        # confirm_timeout; a rise not published yet is retried at _rise_retry_at.
        self.confirm_interval = confirm_interval
        self.confirm_timeout = confirm_timeout
        self._confirmed_at = float("-inf")
        self._rise_retry_at: float | None = None
        self._confirming = asyncio.Lock()
        self._gate = _CreateGate()
        self._limit = asyncio.Semaphore(concurrency)
        self._nodes_checked_at = float("-inf")
        # Slot -> when this process created the pair, until it is seen whole Running (its
        # launch time is recorded then) or is too old to be waited for.
        self._launching: dict[str, float] = {}
        # The recent launch times, for the auto hold of pairs made for queued jobs.
        self.launch_times: deque[float] = deque(maxlen=policy.LAUNCHES_KEPT)

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

    def publish(self, value: int) -> None:
        """Pass the advertised value on (every pass; the receiver ignores repeats)."""
        changed = value != self.published
        if changed:
            log.info("advertised capacity changed", extra={"from": self.published, "to": value})
        self.published = value
        self._set_max_capacity(value)
        self.metrics.record_advertised(value, changed=changed)

    async def offer(self, value: int) -> None:
        """Publish ``value`` planned on the view: a drop or a repeat at once, a rise only as
        far as the pods read at one revision confirm it."""
        current = self.published if self.published is not None else 0
        if value <= current:
            self._rise_retry_at = None
            self.publish(value)
            return
        async with self._confirming:
            loop = asyncio.get_running_loop()
            wait = self._confirmed_at + self.confirm_interval - loop.time()
            if wait > 0:
                self._rise_retry_at = loop.time() + wait
                return
            self._confirmed_at = loop.time()
            try:
                async with asyncio.timeout(self.confirm_timeout):
                    pods = await self.view.read_pods()
            except (KubeError, TimeoutError) as exc:
                kind = (exc.kind if isinstance(exc, KubeError) else KubeErrorKind.TRANSPORT).value
                log.warning("rise not confirmed: pods not read", extra={"error": str(exc)})
                self.metrics.record_kube_error("list pods", kind)
                self.metrics.record_rise_check("failed")
                self._rise_retry_at = loop.time() + self.confirm_interval
                return
            now = self.clock()
            fresh = self.evaluate(now, pods=pods)[0].advertised
            # The view as it is now: a drop seen while the pods were read still counts, and
            # a rise seen meanwhile waits for the next read.
            seen = self.evaluate(now)[0].advertised
            # Lowered: the read, taken after the watches gave `value`, has less.
            self.metrics.record_rise_check("confirmed" if fresh >= value else "lowered")
            if fresh < value:
                log.info(
                    "rise lowered by a read at one revision",
                    extra={"watches": value, "read": fresh, "published": self.published},
                )
            self._rise_retry_at = loop.time() + self.confirm_interval if fresh < seen else None
            confirmed = min(fresh, seen)
            if confirmed != self.published:
                self.publish(confirmed)

    def _rise_wait(self) -> float | None:
        """Seconds until a rise waiting to be confirmed is tried again; None if none waits."""
        if self._rise_retry_at is None:
            return None
        return max(0.0, self._rise_retry_at - asyncio.get_running_loop().time())

    # --- the signal path ------------------------------------------------------------------

    async def signal_loop(self) -> None:
        """Republish on every coalesced view change (and when a waiting rise is due)."""
        while True:
            await self.view.signal.wait(within=self._rise_wait())
            if not self.view.synced:
                continue  # nothing is verified yet; the monitor advertised 0 at start
            try:
                now = self.clock()
                plan, _, observed, _, params = self.evaluate(now)
                self._observe_launches(observed, now, params, expire=False)
            except Exception:
                log.exception("capacity signal computation failed")
                continue
            if plan.advertised != self.published:
                await self.offer(plan.advertised)
            else:
                self._rise_retry_at = None  # nothing waits any more

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
        self._observe_launches(observed, now, params)
        self.memory = memory
        self.passes += 1
        # First the signal: the value must not wait for the cluster calls below.
        await self.offer(plan.advertised)
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

    def _observe_launches(
        self, observed: Observed, now: float, params: Params, *, expire: bool = True
    ) -> None:
        """Record the launch (create → both halves Running) of each pair this process
        created, the first time a pass or a signal sees it whole; the signal path sees every
        coalesced view change, so the time is that close. A pair still not whole after its
        ready timeout (and the expectation TTL) is no longer waited for: the policy deletes it.

        Every launch goes to the histogram; ``launch_times``, the sample the hold and the
        stall timeouts are taken from, leaves out a launch that waited out a shortage: one
        during which (or recently enough before which, as the policy applies the word) the
        pools said they cannot launch a node, and that took longer than every launch in the
        sample. Counted, it would stretch the stall timeouts to the ready timeout for the next
        shortage, and the stall would never fire (seen in the outcome benchmark, where pairs
        made in one shortage became whole after it). One no longer than the sample's longest
        is counted: pools that refuse one instance type and launch another at once (spot)
        still launch."""
        if not self._launching:
            return
        halves: dict[str, list[Placeholder]] = {}
        for p in observed.placeholders:
            if p.slot in self._launching:
                halves.setdefault(p.slot, []).append(p)
        for slot, pods in halves.items():
            whole = {p.role for p in pods if p.phase == PodPhase.RUNNING and not p.terminating}
            if whole == set(Role):
                created = self._launching.pop(slot)
                took = now - created
                self.metrics.record_pair_launch(took)
                if not policy.refused_during(params, created) or took <= max(
                    self.launch_times, default=0.0
                ):
                    self.launch_times.append(took)
        if expire:
            limit = params.ready_timeout + self.expectations.ttl
            for slot, created in list(self._launching.items()):
                if now - created > limit:
                    del self._launching[slot]

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
                self._launching[slot] = self.clock()

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
