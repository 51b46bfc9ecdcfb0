"""What the capacity monitor reads from the objects it watches, and ARC's pod contract.

PURE: raw Kubernetes objects (JSON dicts, as the watch delivers them) → the few fields the
policy needs (``capacity.model``), plus the labels and names ARC and runner-container-hooks
put on the pods of a job: the scale-set label on runner pods, ``runner-pod`` and the
``<runner>-workflow`` name on the job pod. The placeholders' own labels and annotations
(written by ``capacity.specs``, read here) are in ``capacity.contract``. ``capacity.view``
applies these projections to its watch streams; tests and benchmarks use them directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capacity import contract
from capacity.model import Placeholder, PodPhase, RealPod, Role

Json = dict[str, Any]

SCALE_SET_LABEL = "actions.github.com/scale-set-name"
RUNNER_POD_LABEL = "runner-pod"  # on workflow pods: the name of the runner pod that made it
# The hook's job pod name: the runner pod's name cut so that "-workflow" fits in 63 chars.
_MAX_POD_NAME = 63
_WORKFLOW_SUFFIX = "-workflow"
# A placeholder on a node with one of these taints is not confirmed capacity: the node is
# being removed (Karpenter, cluster-autoscaler) or is not working.
UNUSABLE_TAINTS = frozenset(
    {
        "karpenter.sh/disrupted",
        "karpenter.sh/disruption",
        "ToBeDeletedByClusterAutoscaler",
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }
)
_ACTIVE_RUNNER_PHASES = frozenset({"", "Pending", "Running"})


# --- projections: raw object → the few fields kept ---------------------------------------


def _phase(obj: Json) -> PodPhase:
    raw = (obj.get("status") or {}).get("phase") or "Pending"
    try:
        return PodPhase(raw)
    except ValueError:
        return PodPhase.UNKNOWN


@dataclass(frozen=True, slots=True)
class PlaceholderPod:
    """A placeholder as watched, plus what decides whether it is ours: the owner uids (from
    ownerReferences and the owner annotation) and the spec hash."""

    placeholder: Placeholder
    uid: str
    owner_uids: tuple[str, ...]
    spec_hash: str = ""


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
