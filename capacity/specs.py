"""Placeholder pod manifests (docs/capacity-model.md §7), as plain dicts ready for the
Kubernetes API, with every label and annotation of the placeholder contract
(``capacity.contract``) written here and nowhere else.

PURE: no I/O, no clock. `now` is passed in.

Each slot is two pods: a placeholder-runner sized like a runner pod and a placeholder-workflow
sized like the largest workflow pod. Both sleep for the TTL (a safety net if the monitor
dies), die instantly when preempted (grace period 0), never preempt anything themselves
(the PriorityClass says preemptionPolicy Never) and have no affinity, so the scheduler and
the node autoscaler treat them as ordinary pods of the runner (or workflow) node pool.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from capacity.contract import (
    ANNOTATION_EXPIRES_AT,
    ANNOTATION_OWNER_UID,
    ANNOTATION_SAFE_TO_EVICT,
    ANNOTATION_SCALE_SET,
    ANNOTATION_SPEC_HASH,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    LABEL_SCALE_SET,
    LABEL_SLOT,
    MANAGED_BY_VALUE,
    NAME_HASH_LEN,
    SAFE_TO_EVICT_VALUE,
    fingerprint,
    format_expiry,
    label_value,
    short_hash,
)
from capacity.model import Role

if TYPE_CHECKING:  # settings reads files; this module only reads the values
    from capacity.settings import CapacitySettings

# The runner half's requests when neither the settings nor the runner pod template give any.
DEFAULT_RUNNER_REQUESTS: Mapping[str, str] = {"cpu": "750m", "memory": "512Mi"}
MAX_POD_NAME = 63  # pods become hostnames: keep names within one DNS label
NOBODY = 65534
RUNNER_CONTAINER = "runner"  # ARC's runner container name in the pod template
_ROLE_SUFFIX = {Role.RUNNER: "r", Role.WORKFLOW: "w"}
_SLOT = re.compile(r"^[a-z0-9]([-a-z0-9]{0,18}[a-z0-9])?$")
_NAME_CHARS = re.compile(r"[^a-z0-9-]")


@dataclass(frozen=True, kw_only=True)
class OwnerRef:
    """The owner written into each placeholder's ownerReferences. `namespace` is where the
    owner lives; it must be the placeholders' namespace (see `placeholder_pod`)."""

    api_version: str
    kind: str
    name: str
    uid: str
    namespace: str

    def to_k8s(self) -> dict[str, Any]:
        # No blockOwnerDeletion: setting it needs delete rights on the owner, and nothing
        # has to wait for placeholders to go.
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
        }


@dataclass(frozen=True, kw_only=True)
class HalfShape:
    """Where one half may run and what it requests."""

    requests: Mapping[str, str]
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, kw_only=True)
class PlaceholderTemplate:
    """Everything `placeholder_pod` needs besides role, slot and time. `owner_uid` is the
    EphemeralRunnerSet's uid, written as the owner annotation whatever `owner` (the
    ownerReference, which may name another object) is: adoption checks it."""

    scale_set: str
    namespace: str
    image: str
    ttl: float
    runner: HalfShape
    workflow: HalfShape
    owner_uid: str
    owner: OwnerRef | None = None

    def __post_init__(self) -> None:
        if not self.owner_uid:
            raise ValueError("placeholder owner_uid (the EphemeralRunnerSet's uid) is empty")
        if self.owner is not None and self.owner.namespace != self.namespace:
            raise ValueError(
                f"placeholder owner {self.owner.kind}/{self.owner.name} is in namespace "
                f"{self.owner.namespace!r}, placeholders in {self.namespace!r}: the garbage "
                "collector would delete them at once"
            )
        if self.ttl <= 0:
            raise ValueError(f"ttl must be > 0 seconds, got {self.ttl}")

    def shape(self, role: Role) -> HalfShape:
        return self.runner if role == Role.RUNNER else self.workflow


# --- names and times ----------------------------------------------------------------------


def pod_name(scale_set: str, slot: str, role: Role) -> str:
    """Deterministic, at most 63 characters, a valid DNS label: `<scale set>-ph-<slot>-<r|w>`.
    A scale-set name that is too long or has characters a label cannot hold is shortened
    and given a hash of the full name, so different scale sets never share pod names."""
    check_slot(slot)
    suffix = f"-ph-{slot}-{_ROLE_SUFFIX[role]}"
    room = MAX_POD_NAME - len(suffix)
    clean = _NAME_CHARS.sub("-", scale_set.lower()).strip("-")
    if clean != scale_set or len(clean) > room or not clean:
        head = clean[: room - NAME_HASH_LEN - 1].strip("-")
        digest = short_hash(scale_set, NAME_HASH_LEN)
        clean = f"{head}-{digest}" if head else digest
    return clean + suffix


def check_slot(slot: str) -> str:
    if not _SLOT.match(slot):
        raise ValueError(f"invalid slot id {slot!r} (lowercase letters, digits, '-'; ≤ 20)")
    return slot


# --- from settings and the runner pod template --------------------------------------------


def _runner_container(pod_spec: Mapping[str, Any]) -> Mapping[str, Any]:
    containers: Sequence[Mapping[str, Any]] = pod_spec.get("containers") or []
    for container in containers:
        if container.get("name") == RUNNER_CONTAINER:
            return container
    return containers[0] if containers else {}


def template_requests(runner_pod_template: Mapping[str, Any] | None) -> dict[str, str]:
    """The runner container's requests in a pod template (limits stand in for missing
    requests, as Kubernetes does); empty if there are none."""
    spec = (runner_pod_template or {}).get("spec") or {}
    resources = _runner_container(spec).get("resources") or {}
    limits = {str(k): str(v) for k, v in (resources.get("limits") or {}).items()}
    requests = {str(k): str(v) for k, v in (resources.get("requests") or {}).items()}
    return limits | requests


def build_template(
    settings: CapacitySettings,
    *,
    scale_set: str,
    runner_namespace: str,
    runner_pod_template: Mapping[str, Any] | None,
    owner_uid: str,
    owner: OwnerRef | None,
) -> PlaceholderTemplate:
    """Resolve the settings against the scale set's runner pod template (a PodTemplateSpec as
    a plain dict, e.g. the AutoscalingRunnerSet's `spec.template`): settings win, then the
    template, then the built-in runner default. The workflow half uses `workflow_*`
    scheduling settings when given, else the runner half's."""
    if settings.workflow_resources is None:
        raise ValueError("workflow_resources is required to build placeholders")
    spec = (runner_pod_template or {}).get("spec") or {}
    if settings.runner_resources is not None:
        runner_requests = dict(settings.runner_resources.requests)
    else:
        runner_requests = template_requests(runner_pod_template) or dict(DEFAULT_RUNNER_REQUESTS)
    node_selector = (
        dict(settings.node_selector)
        if settings.node_selector is not None
        else {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
    )
    tolerations = (
        tuple(t.to_k8s() for t in settings.tolerations)
        if settings.tolerations is not None
        else tuple(dict(t) for t in (spec.get("tolerations") or []))
    )
    runner = HalfShape(
        requests=runner_requests, node_selector=node_selector, tolerations=tolerations
    )
    workflow = HalfShape(
        requests=dict(settings.workflow_resources.requests),
        node_selector=(
            dict(settings.workflow_node_selector)
            if settings.workflow_node_selector is not None
            else node_selector
        ),
        tolerations=(
            tuple(t.to_k8s() for t in settings.workflow_tolerations)
            if settings.workflow_tolerations is not None
            else tolerations
        ),
    )
    return PlaceholderTemplate(
        scale_set=scale_set,
        namespace=settings.placeholder_namespace or runner_namespace,
        image=settings.placeholder_image,
        ttl=settings.placeholder_ttl,
        runner=runner,
        workflow=workflow,
        owner_uid=owner_uid,
        owner=owner,
    )


# --- the manifest -------------------------------------------------------------------------


def _needs_limits(resource: str) -> bool:
    # Kubernetes rejects extended resources and hugepages whose limit differs from the
    # request (and cannot overcommit them), so those get limits equal to requests.
    return "/" in resource or resource.startswith("hugepages-")


def _pod_spec(role: Role, template: PlaceholderTemplate) -> dict[str, Any]:
    """One half's pod spec: everything the spec hash covers (no slot, no time, no owner)."""
    shape = template.shape(role)
    resources: dict[str, Any] = {"requests": dict(shape.requests)}
    limits = {k: v for k, v in shape.requests.items() if _needs_limits(k)}
    if limits:
        resources["limits"] = limits
    spec: dict[str, Any] = {
        "priorityClassName": role.value,
        "terminationGracePeriodSeconds": 0,
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NOBODY,
            "runAsGroup": NOBODY,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "placeholder",
                "image": template.image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", str(math.ceil(template.ttl))],
                "resources": resources,
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "runAsNonRoot": True,
                    "runAsUser": NOBODY,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    }
    if shape.node_selector:
        spec["nodeSelector"] = dict(shape.node_selector)
    if shape.tolerations:
        spec["tolerations"] = [dict(t) for t in shape.tolerations]
    return spec


def spec_hash(role: Role, template: PlaceholderTemplate) -> str:
    """The spec-hash annotation every `role` placeholder built from `template` carries: the
    value a placeholder must have to be adopted."""
    return fingerprint(_pod_spec(role, template))


def placeholder_pod(
    role: Role, slot: str, *, template: PlaceholderTemplate, now: float
) -> dict[str, Any]:
    """The Pod manifest for one half of slot `slot`: every label and annotation of the
    placeholder contract, the spec hash computed over the spec below.

    Owner invariant: the owner reference must point at an object in the *same namespace* as
    the placeholder. Kubernetes' garbage collector treats an owner reference that resolves
    in another namespace as absent and deletes the dependent at once, so a cross-namespace
    owner makes every placeholder vanish right after it is created. `PlaceholderTemplate`
    refuses such an owner; with no owner, orphans are removed by the policy's ORPHAN rule
    and the start-up sweep instead.
    """
    spec = _pod_spec(role, template)
    metadata: dict[str, Any] = {
        "name": pod_name(template.scale_set, slot, role),
        "namespace": template.namespace,
        "labels": {
            LABEL_SCALE_SET: label_value(template.scale_set),
            LABEL_SLOT: slot,
            LABEL_ROLE: role.value,
            LABEL_MANAGED_BY: MANAGED_BY_VALUE,
        },
        "annotations": {
            ANNOTATION_SCALE_SET: template.scale_set,
            ANNOTATION_EXPIRES_AT: format_expiry(now + template.ttl),
            ANNOTATION_OWNER_UID: template.owner_uid,
            ANNOTATION_SPEC_HASH: fingerprint(spec),
            ANNOTATION_SAFE_TO_EVICT: SAFE_TO_EVICT_VALUE,
        },
    }
    if template.owner is not None:
        metadata["ownerReferences"] = [template.owner.to_k8s()]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
