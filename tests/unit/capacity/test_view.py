"""The view's projections, ownership rules and coalescing trigger (no cluster needed: the
caches are filled directly; list/watch itself is tested on the local control plane)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from base.kube import Kube, NodeState, NodeTaint
from capacity import contract
from capacity.contract import ANNOTATION_OWNER_UID, ANNOTATION_SPEC_HASH
from capacity.model import PodPhase, RealPod, Role
from capacity.pods import (
    RUNNER_POD_LABEL,
    RunnerSet,
    WorkflowPod,
    placeholder_from,
    real_pod_from,
    runner_active,
    workflow_pod_from,
)
from capacity.trigger import Trigger
from capacity.view import View

OWNER_UID = "11111111-2222-3333-4444-555555555555"


def pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    phase: str | None = "Running",
    node: str | None = "node-a",
    deleting: bool = False,
    owners: tuple[str, ...] = (),
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{name}",
        "labels": labels or {},
        "annotations": annotations or {},
        "creationTimestamp": "2026-11-22T02:00:00Z",
        "ownerReferences": [{"uid": u, "kind": "EphemeralRunnerSet"} for u in owners],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-22T02:05:00Z"
    spec: dict[str, Any] = {"containers": []}
    if node:
        spec["nodeName"] = node
    status = {"phase": phase} if phase else {}
    return {"metadata": meta, "spec": spec, "status": status}


def placeholder_pod(name: str, slot: str, role: Role, **kw: Any) -> dict[str, Any]:
    labels = {contract.LABEL_SLOT: slot, contract.LABEL_ROLE: role.value}
    annotations = {contract.ANNOTATION_EXPIRES_AT: "2026-11-22T02:15:00Z", **kw.pop("ann", {})}
    return pod(name, labels=labels, annotations=annotations, **kw)


# --- projections --------------------------------------------------------------------------


def test_placeholder_projection_keeps_what_the_policy_needs() -> None:
    got = placeholder_from(
        placeholder_pod(
            "s-ph-3-w",
            "3",
            Role.WORKFLOW,
            owners=(OWNER_UID,),
            ann={ANNOTATION_SPEC_HASH: "abc"},
            deleting=True,
        )
    )
    assert got is not None
    p = got.placeholder
    assert (p.name, p.slot, p.role, p.phase) == ("s-ph-3-w", "3", Role.WORKFLOW, PodPhase.RUNNING)
    assert p.terminating is True
    assert p.node_name == "node-a"
    assert p.expires_at - p.created_at == 900
    assert got.owner_uids == (OWNER_UID,)
    assert got.spec_hash == "abc"
    assert got.uid == "uid-s-ph-3-w"


def test_placeholder_projection_reads_the_owner_annotation_and_odd_values() -> None:
    got = placeholder_from(
        placeholder_pod("x", "1", Role.RUNNER, phase="Weird", ann={ANNOTATION_OWNER_UID: OWNER_UID})
    )
    assert got is not None
    assert got.owner_uids == (OWNER_UID,)
    assert got.placeholder.phase == PodPhase.UNKNOWN
    no_phase = placeholder_from(placeholder_pod("y", "1", Role.RUNNER, phase=None, node=None))
    assert no_phase is not None
    assert no_phase.placeholder.phase == PodPhase.PENDING
    assert no_phase.placeholder.node_name is None
    # A pod without a known role is not counted at all.
    assert placeholder_from(pod("z", labels={contract.LABEL_ROLE: "other"})) is None


def test_missing_expiry_reads_as_already_expired() -> None:
    raw = placeholder_pod("x", "1", Role.RUNNER)
    del raw["metadata"]["annotations"][contract.ANNOTATION_EXPIRES_AT]
    got = placeholder_from(raw)
    assert got is not None
    assert got.placeholder.expires_at == 0.0


def test_runner_and_workflow_pod_projections() -> None:
    runner = real_pod_from(pod("r1", node=None, phase="Pending"))
    assert runner == RealPod(name="r1", phase=PodPhase.PENDING, bound=False)
    # A workflow pod that also carries the scale-set label is not a runner.
    assert real_pod_from(pod("r1-workflow", labels={RUNNER_POD_LABEL: "r1"})) is None
    wf = workflow_pod_from(pod("r1-workflow", labels={RUNNER_POD_LABEL: "r1"}, deleting=True))
    assert wf == WorkflowPod(
        pod=RealPod(
            name="r1-workflow",
            phase=PodPhase.RUNNING,
            bound=True,
            terminating=True,
        ),
        runner="r1",
    )
    assert workflow_pod_from(pod("lonely")) is None


def test_step_pods_are_not_workflow_pods() -> None:
    """runner-container-hooks labels container-action step pods with the same runner-pod
    label as the job pod; only ``<runner>-workflow`` is the workflow half."""
    label = {RUNNER_POD_LABEL: "r1"}
    assert workflow_pod_from(pod("r1-step-a1b2c3", labels=label)) is None
    assert workflow_pod_from(pod("r2-workflow", labels=label)) is None  # another runner's name
    assert real_pod_from(pod("r1-step-a1b2c3", labels=label)) is None  # not a runner either
    # The hook cuts a long runner name so that "-workflow" fits in 63 characters.
    runner = "arc-linux-2xlarge-" + "x" * 40 + "-runner-abcde"
    cut = runner[:54] + "-workflow"
    assert len(cut) == 63
    found = workflow_pod_from(pod(cut, labels={RUNNER_POD_LABEL: runner}))
    assert found is not None
    assert found.runner == runner
    assert workflow_pod_from(pod(runner + "-workflow", labels={RUNNER_POD_LABEL: runner})) is None


@pytest.mark.parametrize(
    ("status", "deleting", "active"),
    [
        ({}, False, True),  # just created, no status yet: pending
        ({"phase": "Pending"}, False, True),
        ({"phase": "Running"}, False, True),
        ({"phase": "Succeeded"}, False, False),
        ({"phase": "Failed"}, False, False),
        ({"phase": "Running"}, True, False),
    ],
)
def test_runner_active(status: dict[str, str], deleting: bool, active: bool) -> None:
    meta: dict[str, Any] = {"name": "er"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-22T02:05:00Z"
    assert runner_active({"metadata": meta, "status": status}) is active


# --- snapshot -----------------------------------------------------------------------------


def make_view(**kw: Any) -> View:
    # The snapshot logic reads only the caches; no API call is made in these tests.
    return View(
        cast(Kube, None),
        placeholder_namespace="ns",
        runner_namespace="ns",
        runner_set_name="set-abc",
        scale_set_name="set",
        **kw,
    )


def sync(view: View) -> None:
    for stream in ("placeholders", "runner pods", "workflow pods", "runners", "runner set"):
        view._mark_synced(stream)


def add(view: View, raw: dict[str, Any]) -> None:
    got = placeholder_from(raw)
    assert got is not None
    view.placeholders[got.placeholder.name] = got


def test_snapshot_owns_only_the_current_runner_set_with_the_current_spec() -> None:
    view = make_view(spec_hashes=lambda owner: {Role.RUNNER: "h-r", Role.WORKFLOW: "h-w"})
    view.runner_set = RunnerSet(name="set-abc", uid=OWNER_UID, pod_spec={})
    good = {ANNOTATION_SPEC_HASH: "h-r"}
    add(view, placeholder_pod("ours", "1", Role.RUNNER, owners=(OWNER_UID,), ann=good))
    add(
        view,
        placeholder_pod(
            "by-annotation",
            "2",
            Role.RUNNER,
            ann={ANNOTATION_OWNER_UID: OWNER_UID, ANNOTATION_SPEC_HASH: "h-r"},
        ),
    )
    add(view, placeholder_pod("old-owner", "3", Role.RUNNER, owners=("other",), ann=good))
    add(
        view,
        placeholder_pod(
            "old-spec", "4", Role.RUNNER, owners=(OWNER_UID,), ann={ANNOTATION_SPEC_HASH: "h-old"}
        ),
    )
    add(view, placeholder_pod("wrong-role-hash", "5", Role.WORKFLOW, owners=(OWNER_UID,), ann=good))
    owned = {p.name: p.owned for p in view.snapshot().placeholders}
    assert owned == {
        "ours": True,
        "by-annotation": True,
        "old-owner": False,
        "old-spec": False,
        "wrong-role-hash": False,
    }
    # Without a runner set nothing is owned (the policy then sweeps them all).
    view.runner_set = None
    assert not any(p.owned for p in view.snapshot().placeholders)


def test_snapshot_keeps_only_our_runners_workflow_pods_and_counts_active_runners() -> None:
    view = make_view()
    assert view.snapshot().synced is False
    sync(view)
    view.runner_pods["r1"] = RealPod(name="r1", phase=PodPhase.RUNNING, bound=True)
    for runner in ("r1", "someone-elses"):
        view.workflow_pods[f"{runner}-workflow"] = WorkflowPod(
            pod=RealPod(name=f"{runner}-workflow", phase=PodPhase.RUNNING, bound=True),
            runner=runner,
        )
    view.runners.update({"er1": True, "er2": True, "er3": False})
    snap = view.snapshot()
    assert snap.synced is True
    assert [p.name for p in snap.workflow_pods] == ["r1-workflow"]
    assert snap.active_runners == 2


def test_node_checks_confirm_only_usable_checked_nodes() -> None:
    view = make_view(node_checks=True)
    view.runner_set = RunnerSet(name="set-abc", uid=OWNER_UID, pod_spec={})
    for i, node in enumerate(("fine", "cordoned", "disrupted", "gone", "unchecked")):
        add(view, placeholder_pod(f"p-{node}", str(i), Role.RUNNER, owners=(OWNER_UID,), node=node))
    view.nodes.update(
        {
            "fine": NodeState(
                name="fine",
                unschedulable=False,
                taints=(NodeTaint("x", effect="PreferNoSchedule"),),
            ),
            "cordoned": NodeState(name="cordoned", unschedulable=True),
            "disrupted": NodeState(
                name="disrupted",
                unschedulable=False,
                taints=(NodeTaint("karpenter.sh/disrupted", effect="NoSchedule"),),
            ),
            "gone": None,
        }
    )
    usable = {p.name: p.node_usable for p in view.snapshot().placeholders}
    assert usable == {
        "p-fine": True,
        "p-cordoned": False,
        "p-disrupted": False,
        "p-gone": False,
        "p-unchecked": False,
    }
    assert view.placeholder_nodes() == {"fine", "cordoned", "disrupted", "gone", "unchecked"}


# --- trigger ------------------------------------------------------------------------------


async def test_trigger_coalesces_a_burst_into_one_wakeup() -> None:
    trigger = Trigger(idle=0.05, max_delay=1.0)
    loop = asyncio.get_running_loop()

    async def burst() -> None:
        for _ in range(20):
            trigger.poke()
            await asyncio.sleep(0.01)

    started = loop.time()
    task = asyncio.create_task(burst())
    assert await trigger.wait(within=2) is True
    elapsed = loop.time() - started
    await task
    # It waited for the burst to go quiet (≈0.2 s of pokes + 0.05 s idle) ...
    assert elapsed >= 0.2
    # ... and the burst was consumed by that one wakeup.
    assert await trigger.wait(within=0.1) is False


async def test_trigger_max_delay_bounds_a_steady_stream() -> None:
    trigger = Trigger(idle=0.2, max_delay=0.3)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    async def steady() -> None:
        while not stop.is_set():
            trigger.poke()
            await asyncio.sleep(0.05)

    task = asyncio.create_task(steady())
    started = loop.time()
    try:
        assert await trigger.wait(within=5) is True
        assert loop.time() - started < 1.0  # never quiet, but max_delay forced a pass
    finally:
        stop.set()
        await task


async def test_trigger_times_out_without_pokes() -> None:
    trigger = Trigger(idle=0.01, max_delay=0.1)
    assert await trigger.wait(within=0.05) is False
    trigger.poke()
    assert trigger.pending
    assert await trigger.wait(within=0.05) is True
    assert not trigger.pending
