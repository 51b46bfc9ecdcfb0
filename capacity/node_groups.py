"""cluster-autoscaler node groups as the capacity monitor sees them (docs/capacity-model.md,
"On cluster-autoscaler").

PURE: the ``cluster-autoscaler-status`` ConfigMap's ``status`` document (already parsed from
YAML: cluster-autoscaler 1.30 and later write ``ClusterAutoscalerStatus`` as YAML there) →
one ``NodeGroup`` per node group: its size bounds, the size CA asked the cloud for, and
whether a scale-up is possible.

A node group is the counterpart of a Karpenter NodePool limit, but CA's status says nothing
about the nodes' shape, so the room a full group leaves is counted in pairs from the halves
themselves (``policy.node_group_room``), not in resources.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DATA_KEY = "status"  # the ConfigMap's data key that holds the YAML document
# A scale-up of this group failed and CA waits before trying it again: no new node for now.
BACKOFF = "Backoff"


@dataclass(frozen=True, slots=True)
class NodeGroup:
    name: str
    health: str  # Healthy / Unhealthy
    ready: int  # registered and ready nodes
    registered: int
    target: int  # cloudProviderTarget: the size CA asked for (nodes launching included)
    min_size: int
    max_size: int
    scale_up: str  # InProgress / NoActivity / Backoff

    @property
    def headroom(self) -> int:
        """Nodes the group may still add."""
        return max(0, self.max_size - self.target)

    @property
    def full(self) -> bool:
        """No new node can come from this group now: at its max size, or backing off."""
        return self.headroom == 0 or self.scale_up == BACKOFF


def _int(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{field}: not a number ({value!r})")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{field}: not a number ({value!r})") from None


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def node_groups_from(doc: object) -> dict[str, NodeGroup]:
    """Every node group of a parsed status document, by name. ValueError naming the field
    when the document is not CA's structured status (an older CA writes plain text)."""
    if not isinstance(doc, Mapping):
        raise ValueError("status: not a structured document (cluster-autoscaler < 1.30?)")
    groups = doc.get("nodeGroups") or []
    if not isinstance(groups, list):
        raise ValueError("status.nodeGroups: not a list")
    found: dict[str, NodeGroup] = {}
    for i, raw in enumerate(groups):
        entry = _map(raw)
        name = str(entry.get("name") or "")
        if not name:
            raise ValueError(f"status.nodeGroups[{i}].name: missing")
        health = _map(entry.get("health"))
        registered = _map(_map(health.get("nodeCounts")).get("registered"))
        at = f"status.nodeGroups[{i}].health"
        found[name] = NodeGroup(
            name=name,
            health=str(health.get("status") or ""),
            ready=_int(registered.get("ready", 0), f"{at}.nodeCounts.registered.ready"),
            registered=_int(registered.get("total", 0), f"{at}.nodeCounts.registered.total"),
            target=_int(health.get("cloudProviderTarget", 0), f"{at}.cloudProviderTarget"),
            min_size=_int(health.get("minSize", 0), f"{at}.minSize"),
            max_size=_int(health.get("maxSize", 0), f"{at}.maxSize"),
            scale_up=str(_map(entry.get("scaleUp")).get("status") or ""),
        )
    return found
