"""``ghalistener rbac``: the Role and RoleBinding for exactly one listener's ServiceAccount.

ARC gives every listener a ServiceAccount of its own in the controller namespace, named
deterministically after the AutoscalingRunnerSet: ``<name>-<hash>-listener``, where ``<hash>``
is the first 8 characters of Kubernetes' ``rand.SafeEncodeString`` of the decimal FNV-1a
(32 bit) hash of ``"<namespace>@<runner group>@<githubConfigUrl>"`` (ARC 0.14). The same name
is used for the listener pod and for ARC's own Role and RoleBinding in the runner namespace.
ARC's chart writes ``githubConfigUrl`` with one trailing ``/`` removed (``trimSuffix "/"``)
before the controller hashes it, so ``listener_name`` removes it too.

The EphemeralRunnerSet is not named like the scale set: ARC 0.14 creates it with
``generateName: <scale set>-`` and replaces it (new name) when the runner spec changes. RBAC
``resourceNames`` match whole names only, so the runner-set rule cannot be narrowed to one
set; it grants read-only ``list``/``watch`` on every runner set of the runner namespace. That
adds little: the same account already lists every pod there, whose specs the runner sets'
templates are copies of. Writing a runner set (ARC's ``patch``) stays in ARC's own Role, which
ARC keeps on the current name.
Binding that one account is least privilege; the group binding in deploy/rbac/rolebinding.yaml
(every ServiceAccount of the controller namespace) stays as the fallback for setups that
cannot compute or maintain the name.

PURE: names and manifests only; ``cli`` prints them.
"""

from __future__ import annotations

from typing import Any

from base.arc import ARC_GROUP

# k8s.io/apimachinery/pkg/util/rand: the alphabet without vowels and look-alike characters.
_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"
_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193
_RBAC_GROUP = "rbac.authorization.k8s.io"
_LABELS = {
    "app.kubernetes.io/name": "capacity-listener",
    "app.kubernetes.io/part-of": "gha-runner-scale-set",
}


def fnv1a_32(data: bytes) -> int:
    """FNV-1a, 32 bit (Go's ``hash/fnv.New32a``); five lines are not worth a dependency."""
    value = _FNV_OFFSET
    for byte in data:
        value = ((value ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return value


def safe_encode(text: str) -> str:
    """``rand.SafeEncodeString``: each character mapped into the safe alphabet."""
    return "".join(_ALPHANUMS[ord(char) % len(_ALPHANUMS)] for char in text)


def chart_config_url(github_config_url: str) -> str:
    """``githubConfigUrl`` as ARC's chart writes it into the AutoscalingRunnerSet: one
    trailing ``/`` removed (sprig's ``trimSuffix``, Go's ``strings.TrimSuffix``)."""
    return github_config_url.removesuffix("/")


def listener_name(scale_set: str, namespace: str, runner_group: str, github_config_url: str) -> str:
    """ARC's name for the listener (pod, ServiceAccount, Role, RoleBinding) of a scale set;
    ``github_config_url`` as given to ARC's chart (a trailing ``/`` is removed first)."""
    hashed = f"{namespace}@{runner_group}@{chart_config_url(github_config_url)}"
    digest = fnv1a_32(hashed.encode())
    return f"{scale_set}-{safe_encode(str(digest))[:8]}-listener"


def _rule(group: str, resource: str, *verbs: str) -> dict[str, Any]:
    return {"apiGroups": [group], "resources": [resource], "verbs": list(verbs)}


def manifests(
    *,
    scale_set: str,
    namespace: str,
    runner_group: str,
    github_config_url: str,
    controller_namespace: str,
) -> list[dict[str, Any]]:
    """The Role (this scale set's objects only) and the RoleBinding to its listener's
    ServiceAccount, both for the runner namespace."""
    listener = listener_name(scale_set, namespace, runner_group, github_config_url)
    name = f"capacity-listener-{scale_set}"
    meta = {"name": name, "namespace": namespace, "labels": dict(_LABELS)}
    role = {
        "apiVersion": f"{_RBAC_GROUP}/v1",
        "kind": "Role",
        "metadata": meta,
        "rules": [
            # Placeholders and the view of runner and workflow pods. RBAC cannot narrow
            # create/delete to labelled pods; the program deletes only pods it found through
            # its placeholder label selector.
            _rule("", "pods", "list", "watch", "create", "delete"),
            _rule(ARC_GROUP, "ephemeralrunners", "list", "watch"),
            # The runner set: the view reads it with a list and a watch on fieldSelector
            # metadata.name=<name>. Its name is generated (and changes), so no resourceNames:
            # read-only on the namespace's runner sets (module docstring).
            _rule(ARC_GROUP, "ephemeralrunnersets", "list", "watch"),
            # ARC's Role for this listener: the placeholders' owner.
            {
                "apiGroups": [_RBAC_GROUP],
                "resources": ["roles"],
                "resourceNames": [listener],
                "verbs": ["get"],
            },
            # The predictive pool's stage model (capacity.kept's stage_model_config_map):
            # read at start, written every few minutes. Creating it cannot be narrowed to a name.
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [f"capacity-stage-model-{scale_set}"],
                "verbs": ["get", "patch"],
            },
            _rule("", "configmaps", "create"),
            # Karpenter's scheduling failures of the placeholders (capacity.pod_refusals):
            # Events cannot be narrowed to a name either; read-only.
            _rule("", "events", "list", "watch"),
        ],
    }
    binding = {
        "apiVersion": f"{_RBAC_GROUP}/v1",
        "kind": "RoleBinding",
        "metadata": dict(meta),
        "roleRef": {"apiGroup": _RBAC_GROUP, "kind": "Role", "name": name},
        "subjects": [
            {"kind": "ServiceAccount", "name": listener, "namespace": controller_namespace}
        ],
    }
    return [role, binding]
