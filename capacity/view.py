"""The watch-driven, in-memory view of everything the capacity policy looks at.

Five list+watch streams, all label- or field-selected on the server so unrelated pods never
reach this process:

- placeholders of this scale set (``contract.placeholder_selector``) in the placeholder namespace;
- runner pods of this scale set (``actions.github.com/scale-set-name=<scale set>``) in the
  runner namespace, minus any pod that carries the workflow label;
- workflow pods (label ``runner-pod``, set by ARC's container hook to the runner pod's name)
  in the runner namespace; only those whose runner is ours are used. The hook puts the same
  label on container-action *step* pods (``<runner>-step-<id>``); only the pod named
  ``<runner>-workflow`` is the workflow half of a job, so step pods are left out (counting
  one would hide the loss of a workflow placeholder and over-advertise);
- EphemeralRunners of this scale set (running + pending = active real runners);
- the EphemeralRunnerSet itself (field-selected by name): the placeholders' owner uid and the
  runner pod template.

The projections from raw objects (and the labels and annotations they read) are in
``capacity.pods``, the placeholder contract (labels, annotations, selector) in
``capacity.contract``.

With node checks on, the nodes under Running placeholders are fetched one by one
(``refresh_nodes``), never through an all-nodes informer (ci-infra #965).

Every change that matters pokes two coalescing triggers (``capacity.trigger``): a fast one
for the capacity signal and a slower one for reconcile passes (a burst of events becomes one
pass).

The three pod streams are three watches: each delivers its own events in the apiserver's
order, but not in order with the others. A pod that takes a placeholder's room is bound only
after the placeholder is gone, yet its binding can reach this process first, and for a moment
both count. ``read_pods`` lists the three at one revision instead: the reconciler confirms
every rise of the advertised value with it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, NamedTuple, TypeVar

from base.kube import (
    Failed,
    KubeError,
    NodeState,
    Removed,
    Reset,
    Resource,
    Upserted,
    WatchEvent,
)
from capacity import contract
from capacity.cluster import Cluster
from capacity.model import Observed, Placeholder, PodPhase, RealPod, Role
from capacity.pods import (
    RUNNER_POD_LABEL,
    SCALE_SET_LABEL,
    PlaceholderPod,
    RunnerSet,
    Toleration,
    WorkflowPod,
    deletion_candidate,
    node_confirms,
    placeholder_from,
    real_pod_from,
    runner_active,
    runner_set_from,
    workflow_pod_from,
)
from capacity.trigger import Trigger

log = logging.getLogger("capacity.view")

T = TypeVar("T")
Json = dict[str, Any]


class Pods(NamedTuple):
    """The three pod collections the policy counts, by pod name."""

    placeholders: Mapping[str, PlaceholderPod]
    runner_pods: Mapping[str, RealPod]
    workflow_pods: Mapping[str, WorkflowPod]


class View:
    """The caches and their triggers. Run ``run()`` as a task; read ``snapshot()``."""

    def __init__(
        self,
        kube: Cluster,
        *,
        placeholder_namespace: str,
        runner_namespace: str,
        runner_set_name: str,
        scale_set_name: str,
        node_checks: bool = False,
        signal_trigger: Trigger | None = None,
        reconcile_trigger: Trigger | None = None,
        on_watch_error: Callable[[str, KubeError], None] | None = None,
        spec_hashes: Callable[[RunnerSet], Mapping[Role, str]] | None = None,
    ) -> None:
        self.kube = kube
        self.placeholder_namespace = placeholder_namespace
        self.runner_namespace = runner_namespace
        self.runner_set_name = runner_set_name
        self.scale_set_name = scale_set_name
        self.node_checks = node_checks
        self.signal = signal_trigger or Trigger(idle=0.05, max_delay=0.25)
        self.reconcile = reconcile_trigger or Trigger(idle=0.15, max_delay=1.0)
        self._on_watch_error = on_watch_error
        self._spec_hashes = spec_hashes
        self._expected: tuple[RunnerSet | None, Mapping[Role, str]] = (None, {})
        self.placeholders: dict[str, PlaceholderPod] = {}
        self.runner_pods: dict[str, RealPod] = {}
        self.workflow_pods: dict[str, WorkflowPod] = {}
        self.runners: dict[str, bool] = {}
        self.runner_set: RunnerSet | None = None
        self.nodes: dict[str, NodeState | None] = {}
        self._synced: set[str] = set()
        self._streams = ("placeholders", "runner pods", "workflow pods", "runners", "runner set")
        self.synced_event = asyncio.Event()
        self.runner_selector = f"{SCALE_SET_LABEL}={contract.label_value(scale_set_name)}"
        self.placeholder_selector = contract.placeholder_selector(scale_set_name)
        # Runner pods: this scale set's, not workflow pods, not our placeholders.
        self.runner_pod_selector = (
            f"{self.runner_selector},!{RUNNER_POD_LABEL},"
            f"{contract.LABEL_MANAGED_BY}!={contract.MANAGED_BY_VALUE}"
        )
        self.workflow_pod_selector = RUNNER_POD_LABEL

    # --- streams --------------------------------------------------------------------------

    async def run(self) -> None:
        """Run every list+watch until cancelled."""
        pods_here = Resource.pods(self.placeholder_namespace)
        pods_there = Resource.pods(self.runner_namespace)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(
                self._follow(
                    "placeholders",
                    self.kube.informer(
                        pods_here, placeholder_from, label_selector=self.placeholder_selector
                    ),
                    self.placeholders,
                )
            )
            tg.create_task(
                self._follow(
                    "runner pods",
                    self.kube.informer(
                        pods_there, real_pod_from, label_selector=self.runner_pod_selector
                    ),
                    self.runner_pods,
                )
            )
            tg.create_task(
                self._follow(
                    "workflow pods",
                    self.kube.informer(
                        pods_there, workflow_pod_from, label_selector=self.workflow_pod_selector
                    ),
                    self.workflow_pods,
                )
            )
            tg.create_task(
                self._follow(
                    "runners",
                    self.kube.informer(
                        Resource.arc("ephemeralrunners", self.runner_namespace),
                        runner_active,
                        label_selector=self.runner_selector,
                    ),
                    self.runners,
                )
            )
            tg.create_task(self._follow_runner_set())

    async def _follow(
        self, stream: str, events: AsyncIterator[WatchEvent[T]], cache: dict[str, T]
    ) -> None:
        async for event in events:
            changed = False
            if isinstance(event, Reset):
                changed = cache != event.items
                cache.clear()
                cache.update(event.items)
                self._mark_synced(stream)
            elif isinstance(event, Upserted):
                if cache.get(event.name) != event.item:
                    cache[event.name] = event.item
                    changed = True
            elif isinstance(event, Removed):
                changed = cache.pop(event.name, None) is not None
            elif isinstance(event, Failed):
                self._failed(stream, event)
            if changed:
                self.poke()

    async def _follow_runner_set(self) -> None:
        events = self.kube.informer(
            Resource.arc("ephemeralrunnersets", self.runner_namespace),
            runner_set_from,
            field_selector=f"metadata.name={self.runner_set_name}",
        )
        async for event in events:
            before = self.runner_set
            if isinstance(event, Reset):
                self.runner_set = event.items.get(self.runner_set_name)
                self._mark_synced("runner set")
            elif isinstance(event, Upserted):
                self.runner_set = event.item
            elif isinstance(event, Removed):
                self.runner_set = None
            elif isinstance(event, Failed):
                self._failed("runner set", event)
            # ARC patches the runner set on every scaling decision; only the owner's
            # identity and the template matter here.
            if before != self.runner_set:
                self.poke()

    def _failed(self, stream: str, event: Failed) -> None:
        log.warning(
            "watch failed, retrying",
            extra={"stream": stream, "error": str(event.error), "retry_in": event.retry_in},
        )
        if self._on_watch_error is not None:
            self._on_watch_error(stream, event.error)

    def _mark_synced(self, stream: str) -> None:
        if stream not in self._synced:
            self._synced.add(stream)
            if self.synced:
                log.info("view synced")
                self.synced_event.set()

    def poke(self) -> None:
        self.signal.poke()
        self.reconcile.poke()

    @property
    def synced(self) -> bool:
        return all(s in self._synced for s in self._streams)

    # --- nodes ----------------------------------------------------------------------------

    def placeholder_nodes(self) -> set[str]:
        return {
            p.placeholder.node_name
            for p in self.placeholders.values()
            if p.placeholder.node_name and p.placeholder.phase == PodPhase.RUNNING
        }

    async def refresh_nodes(self, *, only_new: bool = False, concurrency: int = 8) -> None:
        """GET each node under a Running placeholder (node checks), or with ``only_new``
        just those not checked yet. A failed GET keeps the last known state; a node that no
        longer exists is unusable."""
        current = self.placeholder_nodes()
        names = sorted(current - set(self.nodes) if only_new else current)
        gate = asyncio.Semaphore(concurrency)

        async def one(name: str) -> None:
            async with gate:
                try:
                    state = await self.kube.get_node(name)
                except KubeError as exc:
                    log.warning("node check failed", extra={"node": name, "error": str(exc)})
                    return
            if self.nodes.get(name, ...) != state:
                self.nodes[name] = state
                self.poke()

        async with asyncio.TaskGroup() as tg:
            for name in names:
                tg.create_task(one(name))
        for gone in set(self.nodes) - current:
            del self.nodes[gone]

    def node_usable(self, name: str | None, tolerations: Iterable[Toleration] = ()) -> bool:
        """Whether a Running placeholder with these tolerations on node ``name`` counts
        (``pods.node_confirms``): always with node checks off."""
        if not self.node_checks or name is None:
            return True
        if name not in self.nodes:
            return False  # not checked yet: not confirmed
        state = self.nodes[name]
        return state is not None and node_confirms(
            unschedulable=state.unschedulable, taints=state.taints, tolerations=tolerations
        )

    def on_deletion_candidates(self) -> int:
        """Running placeholders on nodes cluster-autoscaler has marked unneeded
        (``DeletionCandidateOfClusterAutoscaler``): still counted, exported as a gauge."""
        count = 0
        for p in self.placeholders.values():
            state = self.nodes.get(p.placeholder.node_name or "")
            if p.placeholder.phase == PodPhase.RUNNING and state is not None:
                count += deletion_candidate(state.taints)
        return count

    # --- snapshot -------------------------------------------------------------------------

    def expected_hashes(self) -> Mapping[Role, str]:
        """The spec hash each role's placeholders must carry for the current runner set
        (empty: not checked)."""
        owner = self.runner_set
        if owner is None or self._spec_hashes is None:
            return {}
        if self._expected[0] is not owner and self._expected[0] != owner:
            self._expected = (owner, dict(self._spec_hashes(owner)))
        return self._expected[1]

    async def read_pods(self) -> Pods:
        """The three pod collections read from the apiserver at one revision: the
        placeholders by a consistent list, the runner and workflow pods as they were at
        that list's revision. KubeError if a list fails."""
        placeholders, version = await self.kube.list_objects(
            Resource.pods(self.placeholder_namespace),
            placeholder_from,
            label_selector=self.placeholder_selector,
        )
        pods_there = Resource.pods(self.runner_namespace)
        runner_pods, _ = await self.kube.list_objects(
            pods_there,
            real_pod_from,
            label_selector=self.runner_pod_selector,
            resource_version=version,
        )
        workflow_pods, _ = await self.kube.list_objects(
            pods_there,
            workflow_pod_from,
            label_selector=self.workflow_pod_selector,
            resource_version=version,
        )
        return Pods(placeholders, runner_pods, workflow_pods)

    def snapshot(self, pods: Pods | None = None) -> Observed:
        """The current state as the policy's input: the watches' caches, or ``pods`` (a
        ``read_pods``) in place of their pods. A placeholder is ``owned`` only when it
        names the current EphemeralRunnerSet's uid (ownerReference or owner annotation) and
        carries the spec hash of the current template and settings. Before every stream
        has listed once, ``synced`` is False."""
        if pods is None:
            pods = Pods(self.placeholders, self.runner_pods, self.workflow_pods)
        owner = self.runner_set.uid if self.runner_set is not None else None
        hashes = self.expected_hashes()
        placeholders = tuple(
            _with_context(
                p, owner, hashes, self.node_usable(p.placeholder.node_name, p.tolerations)
            )
            for p in pods.placeholders.values()
        )
        runner_pods = tuple(pods.runner_pods.values())
        ours = pods.runner_pods.keys()
        workflow_pods = tuple(w.pod for w in pods.workflow_pods.values() if w.runner in ours)
        return Observed(
            placeholders=placeholders,
            runner_pods=runner_pods,
            workflow_pods=workflow_pods,
            active_runners=sum(1 for active in self.runners.values() if active),
            synced=self.synced,
        )

    def placeholder_uid(self, name: str) -> str | None:
        found = self.placeholders.get(name)
        return found.uid if found is not None else None

    def placeholder_names(self) -> Iterable[str]:
        return self.placeholders.keys()


def _with_context(
    p: PlaceholderPod, owner: str | None, hashes: Mapping[Role, str], node_usable: bool
) -> Placeholder:
    base = p.placeholder
    owned = (
        owner is not None
        and owner in p.owner_uids
        and (base.role not in hashes or hashes[base.role] == p.spec_hash)
    )
    if base.owned == owned and base.node_usable == node_usable:
        return base
    return replace(base, owned=owned, node_usable=node_usable)
