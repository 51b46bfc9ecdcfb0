"""``ghalistener overlay``: a team's own gha-runner-scale-set values with the capacity
listener's overlay merged in, as one static values file (what a GitOps repository holds).

Helm replaces lists, so installing ARC's chart with the team's values and the overlay side by
side would drop the team's runner image, env, volumes or sidecars. ``merge`` instead combines
the two by these rules:

- maps merge key by key; a key only one side has is kept;
- lists of named items (containers, env, volumes, volumeMounts, ports, ...) merge by
  ``name``: the team's items stay in their order, ours are appended; a team item with the name
  of one of ours is replaced by ours (listed in ``Merged.replaced``), except containers and
  initContainers of the same name, which are merged by these same rules (the container named
  ``runner`` keeps the team's image and gets our env and volumeMounts);
- a few fields of ours are only defaults (``TEAM_WINS``): ARC's stock runner image and
  command, the runner placeholders' default resources, the runner pods' node selector and
  tolerations, the work volume claim; the team's value wins where it has one (the
  placeholders copy whatever the runner set's template ends up with);
- any other field both sides set to different values (a different ``priorityClassName``,
  ``containerMode.type`` or listener image) is an ``OverlayError`` naming the field.

The overlay is the chart's ``<scale set>-arc-values`` ConfigMap text (or
deploy/helm/values-capacity-*.yaml): ``find_overlay`` takes it out of a stream of documents
(``kubectl get configmap -o yaml``, ``helm template --show-only templates/configmaps.yaml``)
or takes a plain values document as it is.

PURE: dicts in, dicts out; ``cli`` reads and writes the YAML.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_RUNNER = "template.spec.containers[runner]"
# Ours only where the team's values give none (see the module docstring).
TEAM_WINS = frozenset(
    {
        f"{_RUNNER}.image",
        f"{_RUNNER}.command",
        f"{_RUNNER}.args",
        f"{_RUNNER}.resources",
        "template.spec.nodeSelector",
        "template.spec.tolerations",
        "containerMode.kubernetesModeWorkVolumeClaim",
    }
)
# Same-name items of these lists are merged field by field, not replaced.
_MERGED_ITEMS = ("containers", "initContainers")
# Why a field is ours, for the error line.
_WHY = {
    "githubConfigUrl": "the listener account the chart binds is computed from it",
    "runnerGroup": "the listener account the chart binds is computed from it",
    "containerMode.type": "the capacity monitor reserves room for each job's workflow pod",
    "template.spec.priorityClassName": "runner pods sit at the bottom of the priority ladder",
}


class OverlayError(ValueError):
    """Values that cannot be merged, or an input that is no overlay: one line, naming the
    field."""


@dataclass(frozen=True)
class Merged:
    values: dict[str, Any]
    # Paths of the team's list items that ours replaced (same name, different content).
    replaced: tuple[str, ...]


def merge(team: Mapping[str, Any], ours: Mapping[str, Any]) -> Merged:
    """The team's values with ours merged in; raises OverlayError on a conflict."""
    group = team.get("runnerGroup")
    if group and "runnerGroup" not in ours:
        # The chart names the listener account it binds without a group: another account.
        raise OverlayError(
            f"runnerGroup: your values say {_show(group)}, the capacity listener's overlay has "
            f"none ({_WHY['runnerGroup']}); set runnerGroup for this scale set in the "
            "capacity-listener chart"
        )
    replaced: list[str] = []
    values = _merge_map(team, ours, "", replaced)
    return Merged(values=values, replaced=tuple(replaced))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _show(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    # A whole map in the error line says less than its start.
    return text if len(text) <= 80 else text[:77] + "..."


def _conflict(path: str, theirs: Any, mine: Any) -> OverlayError:
    why = f" ({_WHY[path]})" if path in _WHY else ""
    return OverlayError(
        f"{path}: your values say {_show(theirs)}, the capacity listener's overlay needs "
        f"{_show(mine)}{why}; remove it from your values or make it equal"
    )


def _merge_map(
    team: Mapping[str, Any], ours: Mapping[str, Any], path: str, replaced: list[str]
) -> dict[str, Any]:
    result = {str(k): copy.deepcopy(v) for k, v in team.items()}
    for key, mine in ours.items():
        theirs = team.get(key)
        here = _join(path, str(key))
        if theirs is None:  # absent, or written as an empty YAML value
            result[str(key)] = copy.deepcopy(mine)
        else:
            result[str(key)] = _merge_value(theirs, mine, here, replaced)
    return result


def _merge_value(theirs: Any, mine: Any, path: str, replaced: list[str]) -> Any:
    if path in TEAM_WINS:
        return copy.deepcopy(theirs)
    if isinstance(mine, Mapping):
        if not isinstance(theirs, Mapping):
            raise _conflict(path, theirs, mine)
        return _merge_map(theirs, mine, path, replaced)
    if _is_named_list(mine):
        if not isinstance(theirs, list):
            raise _conflict(path, theirs, mine)
        return _merge_named(theirs, mine, path, replaced)
    if _same(path, theirs, mine):
        return copy.deepcopy(theirs)
    raise _conflict(path, theirs, mine)


def _same(path: str, theirs: Any, mine: Any) -> bool:
    if path == "githubConfigUrl" and isinstance(theirs, str) and isinstance(mine, str):
        # ARC's chart removes one trailing "/" before the controller hashes it.
        return theirs.removesuffix("/") == mine.removesuffix("/")
    return bool(theirs == mine)


def _is_named_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(i, Mapping) and isinstance(i.get("name"), str) for i in value)
    )


def _names(items: Sequence[Any], path: str) -> list[str]:
    names: list[str] = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise OverlayError(f"{path}[{index}]: an item without a name (a string) in your values")
        if item["name"] in names:
            raise OverlayError(f"{path}: two items named {item['name']!r} in your values")
        names.append(item["name"])
    return names


def _merge_named(theirs: list[Any], mine: list[Any], path: str, replaced: list[str]) -> list[Any]:
    team_names = _names(theirs, path)
    by_name = {item["name"]: item for item in mine}
    field_by_field = path.rsplit(".", 1)[-1] in _MERGED_ITEMS
    result: list[Any] = []
    for item in theirs:
        here = f"{path}[{item['name']}]"
        ours = by_name.get(item["name"])
        if ours is None:
            result.append(copy.deepcopy(item))
        elif field_by_field:
            result.append(_merge_map(item, ours, here, replaced))
        else:
            if item != ours:
                replaced.append(here)
            result.append(copy.deepcopy(ours))
    result.extend(copy.deepcopy(i) for i in mine if i["name"] not in team_names)
    return result


def find_overlay(
    docs: Sequence[Any], scale_set: str, parse: Callable[[str], Any]
) -> dict[str, Any]:
    """The overlay for ``scale_set`` among parsed YAML documents: the data key values.yaml of
    ConfigMap ``<scale set>-arc-values`` (parsed with ``parse``), or a lone values document."""
    docs = _flatten(docs)
    manifests = [d for d in docs if isinstance(d, Mapping) and "kind" in d]
    if manifests:
        wanted = f"{scale_set}-arc-values"
        found = [
            d for d in manifests
            if d.get("kind") == "ConfigMap" and (d.get("metadata") or {}).get("name") == wanted
        ]  # fmt: skip
        if len(found) != 1:
            names = sorted(
                str((d.get("metadata") or {}).get("name"))
                for d in manifests
                if str((d.get("metadata") or {}).get("name", "")).endswith("-arc-values")
            )
            raise OverlayError(
                f"--overlay: no ConfigMap {wanted} among the documents "
                f"(overlays there: {', '.join(names) or 'none'})"
            )
        text = (found[0].get("data") or {}).get("values.yaml")
        if not isinstance(text, str):
            raise OverlayError(f"--overlay: ConfigMap {wanted} has no data key values.yaml")
        overlay = parse(text)
    elif len(docs) == 1:
        overlay = docs[0]
    else:
        raise OverlayError(f"--overlay: {len(docs)} documents, expected one values document")
    if not isinstance(overlay, dict) or "listenerTemplate" not in overlay:
        raise OverlayError(
            "--overlay: no listenerTemplate: expected the chart's <scale set>-arc-values "
            "overlay (values.yaml)"
        )
    check_scale_set(overlay, scale_set)
    return overlay


def _flatten(docs: Sequence[Any]) -> list[Any]:
    """The documents without empty ones, a List's items in its place (what `kubectl get
    -o yaml` prints for several objects)."""
    flat: list[Any] = []
    for doc in docs:
        if isinstance(doc, Mapping) and doc.get("kind") == "List":
            flat.extend(doc.get("items") or [])
        elif doc is not None:
            flat.append(doc)
    return flat


def check_scale_set(overlay: Mapping[str, Any], scale_set: str) -> None:
    """The overlay mounts the settings ConfigMap of ``scale_set`` (the chart's name for it)."""
    volumes = ((overlay.get("listenerTemplate") or {}).get("spec") or {}).get("volumes") or []
    names = [
        str((v.get("configMap") or {}).get("name", ""))
        for v in volumes
        if isinstance(v, Mapping) and v.get("name") == "capacity-config"
    ]
    if names != [f"capacity-listener-{scale_set}"]:
        written_for = names[0].removeprefix("capacity-listener-") if names else "none"
        raise OverlayError(
            f"--scale-set {scale_set}: the overlay is written for scale set {written_for}"
        )


def check_team(team: Mapping[str, Any], scale_set: str) -> None:
    """The team's values install the scale set the overlay is written for."""
    name = team.get("runnerScaleSetName")
    if name not in (None, "", scale_set):
        raise OverlayError(
            f"runnerScaleSetName: your values say {_show(name)}, but the overlay is written "
            f"for scale set {scale_set} (pass --scale-set {name} and its overlay)"
        )
