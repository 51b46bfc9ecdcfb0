"""What the capacity monitor reads from the objects it watches, and ARC's pod contract.

PURE: raw Kubernetes objects (JSON dicts, as the watch delivers them) → the few fields the
policy needs (``capacity.model``), plus the labels and names ARC and runner-container-hooks
put on the pods of a job: the scale-set label on runner pods, ``runner-pod`` and the
``<runner>-workflow`` name on the job pod. The placeholders' own labels and annotations
(written by ``capacity.specs``, read here) are in ``capacity.contract``. ``capacity.view``
applies these projections to its watch streams; tests and benchmarks use them directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from capacity import contract
from capacity.model import Placeholder, PodPhase, RealPod, Role

Json = dict[str, Any]

SCALE_SET_LABEL = "actions.github.com/scale-set-name"
RUNNER_POD_LABEL = "runner-pod"  # on workflow pods: the name of the runner pod that made it
# The hook's job pod name: the runner pod's name cut so that "-workflow" fits in 63 chars.
_MAX_POD_NAME = 63
_WORKFLOW_SUFFIX = "-workflow"
CA_TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"  # NoSchedule: CA is removing it
CA_DELETION_CANDIDATE_TAINT = "DeletionCandidateOfClusterAutoscaler"  # PreferNoSchedule
# A placeholder on a node with one of these taints is not confirmed capacity whatever its
# tolerations say (a pod template that tolerates every taint must not make a node that is
# being removed, or is not working, count): the node is being removed (Karpenter,
# cluster-autoscaler) or is not working.
UNUSABLE_TAINTS = frozenset(
    {
        "karpenter.sh/disrupted",
        "karpenter.sh/disruption",
        CA_TO_BE_DELETED_TAINT,
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }
)
# Taints that keep or drive pods off a node. PreferNoSchedule is a preference: the pod stays,
# and so does the capacity (docs/capacity-model.md, "On cluster-autoscaler").
_HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_ACTIVE_RUNNER_PHASES = frozenset({"", "Pending", "Running"})


# --- projections: raw object → the few fields kept ---------------------------------------


def _phase(obj: Json) -> PodPhase:
    raw = (obj.get("status") or {}).get("phase") or "Pending"
    try:
        return PodPhase(raw)
    except ValueError:
        return PodPhase.UNKNOWN


@dataclass(frozen=True, slots=True)
class Toleration:
    """One of a pod's tolerations (``spec.tolerations[]``)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    seconds: int | None = None  # tolerationSeconds: a NoExecute taint evicts after this


def toleration_from(obj: Mapping[str, Any]) -> Toleration:
    seconds = obj.get("tolerationSeconds")
    return Toleration(
        key=str(obj.get("key") or ""),
        operator=str(obj.get("operator") or "Equal"),
        value=str(obj.get("value") or ""),
        effect=str(obj.get("effect") or ""),
        seconds=int(seconds)
        if isinstance(seconds, int) and not isinstance(seconds, bool)
        else None,
    )


def tolerates(toleration: Toleration, key: str, value: str, effect: str) -> bool:
    """Kubernetes' toleration match: the effect (empty tolerates every effect), then the
    key (empty with Exists tolerates every key), then the value for Equal."""
    if toleration.effect and toleration.effect != effect:
        return False
    if not toleration.key:
        return toleration.operator == "Exists"
    if toleration.key != key:
        return False
    return toleration.operator == "Exists" or toleration.value == value


class NodeTaintView(Protocol):
    """A node's taint as the node check reads it (``base.kube.NodeTaint``; this module
    stays free of the I/O layer)."""

    @property
    def key(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def effect(self) -> str: ...


def node_confirms(
    *,
    unschedulable: bool,
    taints: Iterable[NodeTaintView],
    tolerations: Iterable[Toleration],
) -> bool:
    """Whether a Running placeholder on this node is confirmed capacity.

    Not when the node is cordoned, carries one of ``UNUSABLE_TAINTS`` (whatever the pod
    tolerates), or carries a NoSchedule/NoExecute taint the pod does not tolerate: a taint
    added after the pod was scheduled leaves it running, but a real pod with the same
    tolerations could not be placed there, and such taints mark nodes being removed
    (cluster-autoscaler, Karpenter, any drain tool) or kept for something else. A NoExecute
    toleration with ``tolerationSeconds`` only delays the eviction, so it does not count.
    PreferNoSchedule taints (cluster-autoscaler's deletion candidates) leave it confirmed.
    """
    if unschedulable:
        return False
    given = tuple(tolerations)
    for taint in taints:
        if taint.key in UNUSABLE_TAINTS:
            return False
        if taint.effect not in _HARD_EFFECTS:
            continue
        if not any(
            tolerates(t, taint.key, taint.value, taint.effect)
            and not (taint.effect == "NoExecute" and t.seconds is not None)
            for t in given
        ):
            return False
    return True


def deletion_candidate(taints: Iterable[NodeTaintView]) -> bool:
    """Whether cluster-autoscaler has marked the node unneeded (it may remove it later; a
    placeholder there still counts)."""
    return any(t.key == CA_DELETION_CANDIDATE_TAINT for t in taints)


@dataclass(frozen=True, slots=True)
class PlaceholderPod:
    """A placeholder as watched, plus what decides whether it is ours: the owner uids (from
    ownerReferences and the owner annotation) and the spec hash; and its tolerations, which
    node checks hold a node's taints against."""

    placeholder: Placeholder
    uid: str
    owner_uids: tuple[str, ...]
    spec_hash: str = ""
    tolerations: tuple[Toleration, ...] = ()


def placeholder_from(obj: Json) -> PlaceholderPod | None:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    try:
        role = Role(labels.get(contract.LABEL_ROLE, ""))
    except ValueError:
        return None  # not a placeholder this code knows how to count
    annotations = meta.get("annotations") or {}
    spec = obj.get("spec") or {}
    return PlaceholderPod(
        placeholder=Placeholder(
            name=str(meta.get("name") or ""),
            slot=str(labels.get(contract.LABEL_SLOT, "")),
            role=role,
            phase=_phase(obj),
            terminating=bool(meta.get("deletionTimestamp")),
            node_name=spec.get("nodeName") or None,
            # the API's own timestamps are RFC 3339 like the expiry annotation
            created_at=contract.parse_expiry(meta.get("creationTimestamp")),
            expires_at=contract.parse_expiry(annotations.get(contract.ANNOTATION_EXPIRES_AT)),
        ),
        uid=str(meta.get("uid") or ""),
        owner_uids=tuple(
            uid
            for uid in (
                *(str(o.get("uid") or "") for o in meta.get("ownerReferences") or ()),
                str(annotations.get(contract.ANNOTATION_OWNER_UID) or ""),
            )
            if uid
        ),
        spec_hash=str(annotations.get(contract.ANNOTATION_SPEC_HASH) or ""),
        tolerations=tuple(
            toleration_from(t) for t in spec.get("tolerations") or () if isinstance(t, Mapping)
        ),
    )


def real_pod_from(obj: Json) -> RealPod | None:
    meta = obj.get("metadata") or {}
    if RUNNER_POD_LABEL in (meta.get("labels") or {}):
        return None  # a workflow pod that carries the scale-set label too
    return RealPod(
        name=str(meta.get("name") or ""),
        phase=_phase(obj),
        bound=bool((obj.get("spec") or {}).get("nodeName")),
        terminating=bool(meta.get("deletionTimestamp")),
    )


@dataclass(frozen=True, slots=True)
class WorkflowPod:
    pod: RealPod
    runner: str  # the runner pod's name (label runner-pod)


def job_pod_name(runner: str) -> str:
    """The name runner-container-hooks gives the job (workflow) pod of runner pod ``runner``."""
    return runner[: _MAX_POD_NAME - len(_WORKFLOW_SUFFIX)] + _WORKFLOW_SUFFIX


def workflow_pod_from(obj: Json) -> WorkflowPod | None:
    """The job pod of a runner; None for anything else, including the step pods of
    container actions, which carry the same ``runner-pod`` label."""
    meta = obj.get("metadata") or {}
    runner = str((meta.get("labels") or {}).get(RUNNER_POD_LABEL) or "")
    name = str(meta.get("name") or "")
    if not runner or name != job_pod_name(runner):
        return None
    return WorkflowPod(
        pod=RealPod(
            name=name,
            phase=_phase(obj),
            bound=bool((obj.get("spec") or {}).get("nodeName")),
            terminating=bool(meta.get("deletionTimestamp")),
        ),
        runner=runner,
    )


def runner_active(obj: Json) -> bool | None:
    """Whether an EphemeralRunner is a running or pending real runner. A new runner without
    a status yet counts as pending; finished, failed and deleting ones do not."""
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return False
    phase = str((obj.get("status") or {}).get("phase") or "")
    return phase in _ACTIVE_RUNNER_PHASES


# --- the runner set (ARC's EphemeralRunnerSet) ---------------------------------------------


@dataclass(frozen=True, slots=True)
class RunnerSet:
    """What the monitor needs from an EphemeralRunnerSet: its uid (the placeholders' owner)
    and the runner pod template's spec (``spec.ephemeralRunnerSpec.spec``)."""

    name: str
    uid: str
    pod_spec: Json


def runner_set_from(obj: Json) -> RunnerSet:
    """The parts of an EphemeralRunnerSet object the monitor uses."""
    meta = obj.get("metadata") or {}
    template = ((obj.get("spec") or {}).get("ephemeralRunnerSpec") or {}).get("spec") or {}
    return RunnerSet(
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        pod_spec=template,
    )
