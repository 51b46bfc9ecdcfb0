"""Karpenter NodePools as the capacity monitor sees them (docs/capacity-model.md §9).

PURE: raw ``karpenter.sh/v1`` NodePool objects (JSON dicts, as the watch delivers them) → the
few fields the limit check needs, Kubernetes quantities as exact fractions, and which
NodePools a placeholder half can land on.

Placement follows what Karpenter itself checks before it launches a node for a pod: every
``nodeSelector`` entry must be allowed by the pool's template (its labels, or its
requirements), and every ``NoSchedule``/``NoExecute`` taint of the template must be tolerated.
A selector on a well-known label the pool does not constrain (zone, architecture, …) is
allowed; one on any other label the pool does not define is not (Karpenter cannot make a node
carry a label it does not know). Placeholders carry no affinity (``capacity.specs``), so node
selectors and tolerations are all there is to match.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from capacity.pods import tolerates, toleration_from
from capacity.quantity import parse_quantity

Json = dict[str, Any]

GROUP = "karpenter.sh"
VERSION = "v1"
PLURAL = "nodepools"
NODEPOOL_LABEL = "karpenter.sh/nodepool"

# Labels Karpenter can satisfy without the pool naming them (a subset of its well-known
# labels: the ones a CI pod realistically selects on).
WELL_KNOWN_LABELS = frozenset(
    {
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "karpenter.sh/capacity-type",
        NODEPOOL_LABEL,
    }
)

# --- quantities ---------------------------------------------------------------------------


def _quantities(raw: object) -> dict[str, Fraction]:
    """A ResourceList (Kubernetes quantities as exact fractions); entries that do not parse
    are left out (never guessed)."""
    out: dict[str, Fraction] = {}
    if isinstance(raw, Mapping):
        for name, amount in raw.items():
            try:
                out[str(name)] = parse_quantity(amount)
            except ValueError:
                continue
    return out


# --- the NodePool -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()

    def allows(self, value: str) -> bool:
        if self.operator == "In":
            return value in self.values
        if self.operator == "NotIn":
            return value not in self.values
        if self.operator == "Exists":
            return True
        if self.operator == "DoesNotExist":
            return False
        if self.operator in ("Gt", "Lt") and self.values:
            try:
                number, bound = int(value), int(self.values[0])
            except ValueError:
                return False
            return number > bound if self.operator == "Gt" else number < bound
        return False


@dataclass(frozen=True, kw_only=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, kw_only=True)
class NodePool:
    """One NodePool: where its nodes may go (template) and how much more it may launch."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    requirements: tuple[Requirement, ...] = ()
    taints: tuple[Taint, ...] = ()
    limits: Mapping[str, Fraction] = field(default_factory=dict)  # spec.limits
    used: Mapping[str, Fraction] = field(default_factory=dict)  # status.resources

    def remaining(self, resource: str) -> Fraction | None:
        """limit − used (never below 0) for a limited resource; None when unlimited."""
        if resource not in self.limits:
            return None
        return max(Fraction(0), self.limits[resource] - self.used.get(resource, Fraction(0)))


def nodepool_from(obj: Json) -> NodePool:
    """The parts of a NodePool object the limit check uses."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    template_spec = template.get("spec") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    requirements = tuple(
        Requirement(
            key=str(r.get("key") or ""),
            operator=str(r.get("operator") or ""),
            values=tuple(str(v) for v in r.get("values") or ()),
        )
        for r in template_spec.get("requirements") or ()
        if isinstance(r, Mapping)
    )
    taints = tuple(
        Taint(
            key=str(t.get("key") or ""),
            value=str(t.get("value") or ""),
            effect=str(t.get("effect") or ""),
        )
        for t in template_spec.get("taints") or ()
        if isinstance(t, Mapping)
    )
    return NodePool(
        name=str(meta.get("name") or ""),
        labels={str(k): str(v) for k, v in labels.items()},
        requirements=requirements,
        taints=taints,
        limits=_quantities(spec.get("limits")),
        used=_quantities((obj.get("status") or {}).get("resources")),
    )


# --- placement ----------------------------------------------------------------------------


def _selector_allowed(pool: NodePool, key: str, value: str) -> bool:
    if key == NODEPOOL_LABEL:
        return value == pool.name
    if key in pool.labels:
        return pool.labels[key] == value
    constraints = [r for r in pool.requirements if r.key == key]
    if constraints:
        return all(r.allows(value) for r in constraints)
    return key in WELL_KNOWN_LABELS


def _tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    return tolerates(toleration_from(toleration), taint.key, taint.value, taint.effect)


def can_land(
    pool: NodePool,
    node_selector: Mapping[str, str],
    tolerations: Iterable[Mapping[str, Any]],
) -> bool:
    """Whether Karpenter could launch a node of ``pool`` for a pod with this node selector
    and these tolerations."""
    if not all(_selector_allowed(pool, k, v) for k, v in node_selector.items()):
        return False
    given = list(tolerations)
    return all(
        any(_tolerates(t, taint) for t in given)
        for taint in pool.taints
        if taint.effect in ("NoSchedule", "NoExecute")
    )


def resolve(
    pools: Iterable[NodePool],
    node_selector: Mapping[str, str],
    tolerations: Iterable[Mapping[str, Any]],
    named: Iterable[str] | None = None,
) -> tuple[NodePool, ...]:
    """The NodePools a half can land on: the ``named`` ones when the settings name them
    (those that exist), else every pool whose template admits it. Sorted by name."""
    every = sorted(pools, key=lambda p: p.name)
    if named is not None:
        wanted = set(named)
        return tuple(p for p in every if p.name in wanted)
    given = list(tolerations)
    return tuple(p for p in every if can_land(p, node_selector, given))


def requests_of(requests: Mapping[str, str]) -> dict[str, Fraction]:
    """A half's requests as fractions (the settings validated them already)."""
    return _quantities(requests)


# --- what the limit check remembers between passes ----------------------------------------


@dataclass(frozen=True, kw_only=True)
class PoolMemory:
    """Carried by the caller from one pass to the next (``policy.nodepool_room`` returns
    it). ``used`` is the pools' usage when ``peak`` was last reset; ``peak`` is, per role,
    the most halves seen holding room on the pools' current nodes (placeholders with a node,
    and bound real pods of that half)."""

    used: tuple[tuple[str, str, Fraction], ...] = ()
    peak: tuple[tuple[str, int], ...] = ()
