"""Writes charts/capacity-listener/values.schema.json from the settings model
(capacity/settings.py) and the descriptions of deploy/gen_reference.py: one source for the
reference doc and the chart's schema, so a setting added to the model is in both after
``python deploy/gen_reference.py`` (which writes both files) and a typo in chart values fails
``helm install`` naming the field. tests/unit/test_chart_schema.py fails when the committed
schema differs from this output.

Types, limits, enums and nesting come from the model; the patterns of string settings that
field validators check are listed here (JSON Schema cannot call a validator). Rules between
settings (``renew_before`` < ``placeholder_ttl`` …) stay with the listener, which checks them
at start-up with one line naming the setting.
"""

from __future__ import annotations

import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "deploy"):  # run as a script from anywhere
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import gen_reference  # noqa: E402

from capacity import quantity, settings_demand, settings_values  # noqa: E402
from capacity import settings as capacity_settings  # noqa: E402

OUTPUT = ROOT / "charts" / "capacity-listener" / "values.schema.json"

# Settings the chart derives from the scale set's workflow pod template, so the two cannot
# disagree: setting them under `capacity` is an error, which the chart's preflight template
# reports naming the key to set instead (the schema's "not allowed" would not).
DERIVED = {
    "workflow_resources": "workflowPod.resources.requests",
    "workflow_node_selector": "workflowPod.nodeSelector",
    "workflow_tolerations": "workflowPod.tolerations",
}

# Go's regexp (Helm's schema validator) has no look-ahead: lengths are separate keywords.
_DNS_LABEL = {"pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
_DNS_SUBDOMAIN = {"pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": 253}
# What the field validators of capacity/settings.py accept, per setting.
STRING_RULES: dict[str, dict[str, Any]] = {
    "placeholder_namespace": _DNS_LABEL,
    "listener_role": _DNS_SUBDOMAIN,
    "placeholder_image": {"pattern": r"^\S+$"},
    "hud.url": {"pattern": r"^https?://[^/\s]+\S*$"},
    "webhook.url": {"pattern": r"^(https?://[^/\s]+\S*)?$"},
    "github.repositories[]": {"pattern": settings_demand.REPOSITORY.pattern},
    "nodepools.runner[]": _DNS_SUBDOMAIN,
    "nodepools.workflow[]": _DNS_SUBDOMAIN,
}
NON_EMPTY_LISTS = {"nodepools.runner", "nodepools.workflow"}

_DURATION = {
    "type": ["number", "string"],
    "minimum": 0,
    "pattern": r"^(\d+(\.\d+)?|(\d+(\.\d+)?(ms|s|m|h))+)$",
}
_QUANTITY = {
    "type": ["string", "integer", "number"],
    # Requests are never negative; the settings refuse 0 with a one-line error.
    "pattern": quantity.UNSIGNED_PATTERN,
}
RESOURCE_MAP = {
    "type": "object",
    "minProperties": 1,
    "propertyNames": {
        "pattern": "^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*)$"
    },
    "additionalProperties": _QUANTITY,
}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    kinds = schema.get("type")
    if kinds is None:
        return {"anyOf": [schema, {"type": "null"}]}
    kinds = kinds if isinstance(kinds, list) else [kinds]
    return {**schema, "type": [*kinds, "null"]}


def _limits(info: FieldInfo) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for meta in info.metadata:
        for attr, keyword in (("ge", "minimum"), ("gt", "exclusiveMinimum")):
            value = getattr(meta, attr, None)
            if value is not None:
                out[keyword] = value
    if any(getattr(m, "func", None) is settings_values.positive_duration for m in info.metadata):
        out = {"exclusiveMinimum": 0}
    return out


def _of_type(annotation: Any, path: str) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in args if a is not type(None)]
        return _nullable(_of_type(inner, path))
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _of_type(args[1], path + "{}")}
    if origin is list:
        schema: dict[str, Any] = {"type": "array", "items": _of_type(args[0], path + "[]")}
        if path in NON_EMPTY_LISTS:
            schema["minItems"] = 1
        return schema
    if annotation is settings_values.Resources:
        return {
            "type": "object",
            "additionalProperties": False,
            "required": ["requests"],
            "properties": {"requests": RESOURCE_MAP},
        }
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model(annotation, path + ".")
    kinds = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if annotation in kinds:
        return {"type": kinds[annotation], **STRING_RULES.get(path, {})}
    raise SystemExit(f"gen_chart_schema: no JSON Schema for {path!r} ({annotation!r})")


def _field(info: FieldInfo, path: str) -> dict[str, Any]:
    if gen_reference._is_duration(info):
        schema = {**_DURATION, **_limits(info)}
        if info.default is None:
            schema = _nullable(schema)
    else:
        schema = {**_of_type(info.annotation, path), **_limits(info)}
    description = gen_reference.DESCRIPTIONS.get(path.removeprefix("."))
    return {"description": description, **schema} if description else schema


def _model(model: type[BaseModel], prefix: str) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if info.exclude:  # the HUD token: environment only
            continue
        path = f"{prefix}{name}".removeprefix(".")
        if path in DERIVED:
            continue
        properties[info.alias or name] = _field(info, path)
    return {"type": "object", "additionalProperties": False, "properties": properties}


_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}


def _flag(description: str) -> dict[str, Any]:
    return {"type": "boolean", "description": description}


def _section(description: str, **properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "additionalProperties": False,
        "properties": properties,
    }


def render() -> str:
    capacity = _model(capacity_settings.CapacitySettings, "")
    capacity["description"] = (
        "Capacity settings (deploy/config/REFERENCE.md), without "
        + ", ".join(f"{k} (from {v})" for k, v in DERIVED.items())
    )
    # Let the derived keys through to templates/preflight.yaml, whose error names the key
    # to set instead; they are no settings of the chart, so not among `properties`.
    capacity["patternProperties"] = {
        f"^{key}$": {"description": f"Not here: set {source} (the chart copies it)."}
        for key, source in DERIVED.items()
    }
    toleration = _model(settings_values.Toleration, "toleration.")
    workflow_pod = _section(
        "The workflow pod template of the runner-container hooks; its requests are what "
        "each workflow placeholder reserves.",
        resources={
            "type": "object",
            "additionalProperties": False,
            "required": ["requests"],
            "properties": {"requests": RESOURCE_MAP, "limits": RESOURCE_MAP},
        },
        annotations={"type": "object", "additionalProperties": {"type": "string"}},
        nodeSelector={"type": "object", "additionalProperties": {"type": "string"}},
        tolerations={"type": "array", "items": toleration},
    )
    workflow_pod["required"] = ["resources"]
    runner_pod = _section(
        "The runner container of the overlay (optional): its requests are what each runner "
        "placeholder reserves unless capacity.runner_resources says otherwise.",
        resources={
            "type": "object",
            "additionalProperties": False,
            "properties": {"requests": RESOURCE_MAP, "limits": RESOURCE_MAP},
        },
        nodeSelector={"type": "object", "additionalProperties": {"type": "string"}},
        tolerations={"type": "array", "items": toleration},
    )
    work_volume = _section(
        "ARC's containerMode.kubernetesModeWorkVolumeClaim (default ReadWriteOnce, 10Gi, the "
        "cluster's default StorageClass).",
        storageClassName={"type": "string", "minLength": 1},
        accessModes={"type": "array", "minItems": 1, "items": {"type": "string"}},
        resources={
            "type": "object",
            "additionalProperties": False,
            "required": ["requests"],
            "properties": {"requests": RESOURCE_MAP},
        },
    )
    work_volume["required"] = ["accessModes", "resources"]
    runners = {"type": "integer", "minimum": 0}
    scale_set = _section(
        "One AutoscalingRunnerSet, keyed by its name.",
        namespace={**_DNS_LABEL, "type": "string", "description": "The runner namespace."},
        githubConfigUrl={
            "type": "string",
            "pattern": r"^https?://[^/\s]+\S*$",
            "description": "githubConfigUrl exactly as given to ARC's chart.",
        },
        runnerGroup={"type": "string", "description": "ARC's runnerGroup value, if set."},
        minRunners={**runners, "description": "ARC's minRunners, written into the overlay."},
        maxRunners={**runners, "description": "ARC's maxRunners, written into the overlay."},
        runnerPod=runner_pod,
        workVolumeClaim=work_volume,
        workflowPod=workflow_pod,
        capacity=capacity,
    )
    scale_set["required"] = ["namespace", "githubConfigUrl", "workflowPod"]
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$comment": "Generated by deploy/gen_chart_schema.py from capacity/settings.py: "
        "do not edit.",
        "title": "capacity-listener chart values",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "global": {"type": "object"},
            "image": _section(
                "The listener image (<registry>/<repository>:<tag>), written into the ARC "
                "values overlay.",
                registry={"type": "string", "pattern": r"^[^/\s:]*(:[0-9]+)?(/[^\s:]+)?$"},
                repository={"type": "string", "pattern": r"^[a-z0-9][a-z0-9._/-]*$"},
                tag={"type": "string", "pattern": r"^([\w][\w.-]{0,127})?$"},
            ),
            "imagePullSecrets": {
                "type": "array",
                "description": "Pull secrets of the listener image (controller namespace).",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name"],
                    "properties": {"name": {**_DNS_SUBDOMAIN, "type": "string"}},
                },
            },
            "arcVersion": {
                "type": "string",
                "pattern": r"^[0-9]+\.[0-9]+\.[0-9]+\S*$",
                "description": "The gha-runner-scale-set chart version (LISTENER_ARC_VERSION).",
            },
            "monitoring": _section(
                "prometheus-operator and Grafana objects (all off by default).",
                podMonitor=_section(
                    "A PodMonitor for the scale sets' listener pods.",
                    enabled=_flag("Create it."),
                    labels=_LABELS,
                ),
                prometheusRule=_section(
                    "The alert rules as a PrometheusRule.",
                    enabled=_flag("Create it."),
                    labels=_LABELS,
                ),
                dashboard=_section(
                    "The Grafana dashboard as a ConfigMap for Grafana's sidecar.",
                    enabled=_flag("Create it."),
                    labels=_LABELS,
                ),
            ),
            "priorityClasses": _section(
                "The ladder's PriorityClasses.", create=_flag("Create them.")
            ),
            "runnerPDB": _section(
                "The runner PodDisruptionBudget.", create=_flag("One per runner namespace.")
            ),
            "rbac": _section(
                "Extra RBAC.",
                bindControllerNamespaceGroup=_flag(
                    "Also bind every ServiceAccount of the controller namespace (fallback)."
                ),
                nodeChecks=_flag(
                    "Force the node ClusterRole, bound to every scale set's listener. false "
                    "does not turn it off: scale sets with capacity.node_checks get it anyway."
                ),
                nodePools=_flag(
                    "Force the NodePool ClusterRole, bound to every scale set's listener. false "
                    "does not turn it off: scale sets with capacity.nodepools.enabled (on "
                    "unless set false) get it anyway."
                ),
            ),
            "hud": _section(
                "The HUD token Secret in the controller namespace (created by you).",
                secretName={**_DNS_SUBDOMAIN, "type": "string"},
                secretKey={"type": "string", "pattern": r"^[-._a-zA-Z0-9]+$"},
            ),
            "webhook": _section(
                "The webhook receiver (one per cluster) that scale sets naming no demand "
                "source read.",
                enabled=_flag("Run it."),
                secretName={**_DNS_SUBDOMAIN, "type": "string"},
                secretKey={"type": "string", "pattern": r"^[-._a-zA-Z0-9]+$"},
                secret={"type": "string", "description": "Written into the Secret if set."},
                githubConfigUrl={"type": "string", "pattern": r"^(https?://[^/\s]+\S*)?$"},
                githubConfigSecret={
                    "type": "string",
                    "pattern": r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$",
                    "maxLength": 253,
                },
                repositories={
                    "type": "array",
                    "items": {"type": "string", "pattern": settings_demand.REPOSITORY.pattern},
                },
                reconcileInterval={"type": "number", "exclusiveMinimum": 0},
                resources={"type": "object"},
                ingress=_section(
                    "An Ingress for the deliveries port's /webhook.",
                    enabled=_flag("Create it."),
                    className={"type": "string"},
                    host={"type": "string"},
                    annotations={"type": "object", "additionalProperties": {"type": "string"}},
                    tls={"type": "array"},
                ),
            ),
            "test": _section(
                "The helm test pods.",
                image={"type": "string", "pattern": r"^\S+$"},
                accountTimeout={
                    "type": "integer",
                    "minimum": 1,
                    "description": "Seconds to wait for ARC to create each listener "
                    "ServiceAccount before the test fails naming it.",
                },
            ),
            "scaleSets": {
                "type": "object",
                "description": "Scale sets by AutoscalingRunnerSet name (at most 45 characters).",
                "propertyNames": {**_DNS_LABEL, "maxLength": 45},
                "additionalProperties": scale_set,
            },
        },
    }
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    OUTPUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
