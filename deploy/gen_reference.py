"""Writes deploy/config/REFERENCE.md from the settings model (capacity/settings.py), and
through deploy/gen_chart_schema.py the chart's values.schema.json from the same model and
descriptions.

Names, environment variables, types, defaults and limits come from the model itself; only the
one-line descriptions live here, keyed by setting. Generation fails when a setting has no
description or a description names no setting, and tests/unit/test_settings_reference.py fails when
the committed file differs from this output. Regenerate with
``python deploy/gen_reference.py``.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from capacity import settings as capacity_settings  # noqa: E402
from capacity import settings_demand, settings_values  # noqa: E402
from listener.startup import Options  # noqa: E402

OUTPUT = ROOT / "deploy" / "config" / "REFERENCE.md"

DESCRIPTIONS: dict[str, str] = {
    "enabled": "Turns the capacity monitor on. Off: the listener behaves exactly like ARC's "
    "and advertises `maxRunners`.",
    "proactive_capacity": "Placeholder pairs kept ready on top of the queued jobs, so jobs "
    "start without waiting for a node. Costs idle nodes. The warm pool of `warm_pool.mode: "
    "fixed`; with `scheduled`, the floor outside the schedule's windows.",
    "recalculate_interval": "Period of the fallback reconcile pass (watch events trigger "
    "passes in between), and of the demand reads from GitHub's REST API unless "
    "`demand.interval` is set.",
    "placeholder_ready_timeout": "A pair with a half still Pending after this long is "
    "deleted (never advertised) and retried on a later pass.",
    "workflow_resources": "Requests of each workflow placeholder: the LARGEST request any "
    "workflow pod of this scale set makes. Required when enabled.",
    "runner_resources": "Requests of each runner placeholder. Unset: the runner pod "
    "template's requests, else cpu 750m / memory 512Mi.",
    "node_selector": "nodeSelector of the runner placeholders. Unset: the runner pod template's.",
    "tolerations": "Tolerations of the runner placeholders. Unset: the runner pod template's.",
    "workflow_node_selector": "nodeSelector of the workflow placeholders: the nodes workflow "
    "pods run on (the hook template's). Unset: the runner placeholders'.",
    "workflow_tolerations": "Tolerations of the workflow placeholders. Unset: the runner "
    "placeholders'.",
    "placeholder_namespace": "Namespace of the placeholder pods. Unset: the runner namespace. "
    "Must be the EphemeralRunnerSet's namespace for the garbage collector to keep them.",
    "listener_role": "ARC's Role for this listener in the runner namespace, made the "
    "placeholders' owner: when ARC removes the listener (uninstall, rollback, a scale-set "
    "change) it deletes that Role and the garbage collector deletes the placeholders. Unset: "
    "the listener pod's name (ARC names pod and Role alike); empty: own them by the "
    "EphemeralRunnerSet instead. Reading it needs `get` on roles (deploy/rbac).",
    "placeholder_image": "Image of the placeholder pods (runs `sleep` for the TTL).",
    "placeholder_ttl": "Lifetime of a placeholder pod (its `sleep`); a safety net if the "
    "listener disappears.",
    "renew_before": "Replace a Running pair this long before its TTL ends, make-before-break, "
    "so capacity does not dip. Must be shorter than `placeholder_ttl`.",
    "max_pending_pairs": "At most this many pairs Pending at once (a creation-rate limit, "
    "not a cap on pairs in existence).",
    "downscale_delay": "Scale-down waits until the desired pair count has stayed lower for "
    "this long; scale-up is immediate.",
    "node_checks": "Count a Running placeholder only on a usable node: not cordoned, no "
    "NoSchedule/NoExecute taint the placeholder does not tolerate, none of the removal taints "
    "(`ToBeDeletedByClusterAutoscaler`, `karpenter.sh/disrupted`, …). Nodes are read one by "
    "one (GET; needs `deploy/rbac/clusterrole-node-checks.yaml`).",
    "hud": "The HUD queued-jobs source (below).",
    "hud.enabled": "Query HUD for jobs queued for this scale set's labels. Off: desired "
    "pairs = `proactive_capacity`.",
    "hud.url": "The queued-jobs endpoint.",
    "hud.parameters": "The `parameters` JSON sent to HUD (below).",
    "hud.timeout": "Deadline of one HUD request.",
    "hud.max_response_bytes": "Responses larger than this are rejected (result `too_large`).",
    "hud.stale_after": "While HUD fails, keep using the last good value for this long, then "
    "fall back to the floor.",
    "hud.lag": "How far behind the queue HUD's rows are. Runner pods created after a read's "
    "start less this are jobs the rows may still count: they are not counted again.",
    "hud.failure_base_capacity": "The floor while HUD is failing: desired pairs = "
    "`proactive_capacity` + this.",
    "hud.parameters.queued_threshold_minutes": "Count only jobs queued at least this long.",
    "hud.parameters.max_age_days": "Ignore jobs queued longer ago than this.",
    "hud.parameters.orgs": "Organisations to count; empty: HUD's default.",
    "hud.parameters.repo": "Repository to count (`owner/name`); empty: all.",
    "demand": "Where queued jobs are read from, and demand sharding between clusters (below).",
    "demand.source": "`hud`, `github` (GitHub's REST API with the listener's credentials), "
    "`webhook` (the cluster's webhook receiver, fed by GitHub's `workflow_job` deliveries) "
    "or `none`. Unset: `hud` when `hud.enabled`, else `none`.",
    "demand.cluster_index": "This cluster's index among the clusters serving the same labels "
    "(0 … `cluster_count` − 1). Lower indexes take the remainder of an uneven split.",
    "demand.cluster_count": "Clusters serving the same labels. Each plans for its share of "
    "the fresh queued jobs plus every aged one. 1: the whole queue.",
    "demand.aged_after": "Jobs queued longer than this are claimed by every cluster, so a "
    "down or full cluster's share is picked up. Whole minutes with HUD.",
    "demand.interval": "How often the demand source is read. Unset: 10 s for HUD (at most "
    "`recalculate_interval`), 1 s for the webhook receiver, `recalculate_interval` for "
    "GitHub's REST API (its rate limit).",
    "demand.hold": "How long pairs made for queued jobs are held once the queue stops asking "
    "for them. Unset (auto): the p90 of this listener's recent pair launch times (create → "
    "both halves Running), within [30 s, `downscale_delay`]; `downscale_delay` until 8 "
    "launches are seen. The warm pool's part is always held for `downscale_delay`.",
    "github": "The GitHub REST demand source (below); used when `demand.source` is `github`.",
    "github.repositories": "Repositories to read (`name` under the scale set's owner, or "
    "`owner/name`). Empty: the scale set's repository, or all of its organization's. "
    "Required for an enterprise scale set.",
    "github.max_calls_per_interval": "REST calls per read of the source, 304s included; one "
    "read every `demand.interval` (for this source `recalculate_interval` unless set). "
    "Repositories not reached keep their last counts and go first next time.",
    "github.in_progress_runs": "Also read the jobs of runs already in progress (they can "
    "still hold queued jobs, e.g. the rest of a matrix). Off: half the run-list calls.",
    "github.rate_limit_reserve": "Calls of the token's hourly allowance left untouched (it is "
    "shared with the listener); below it the source waits for the reset.",
    "github.repositories_refresh": "How often the organization's repository list is re-read.",
    "github.timeout": "Deadline of one REST call.",
    "github.stale_after": "While the source fails or is rate-limited, keep the last good "
    "value this long, then fall back to the floor.",
    "github.failure_base_capacity": "The floor while the source is failing: desired pairs = "
    "`proactive_capacity` + this.",
    "webhook": "The webhook receiver as the demand source (below); used when "
    "`demand.source` is `webhook`.",
    "webhook.url": "The receiver's reads port, e.g. `http://capacity-webhook.arc-systems"
    ".svc:8081` (the companion chart sets it). Required with `demand.source: webhook`.",
    "webhook.timeout": "Deadline of one read.",
    "webhook.stale_after": "While the receiver fails, or answers that it has not reconciled "
    "with GitHub, keep the last good value this long, then fall back to the floor.",
    "webhook.failure_base_capacity": "The floor while the receiver is failing: desired pairs "
    "= `proactive_capacity` + this.",
    "nodepools": "Karpenter NodePool limits (below): create no pair the pools' remaining "
    "`limits` cannot hold.",
    "nodepools.enabled": "Read the NodePools the placeholders can land on (a watch; needs "
    "`deploy/rbac/clusterrole-nodepools.yaml`) and create no pair their remaining `limits` "
    "cannot hold. Without the RBAC or without Karpenter: one log line, no cap.",
    "nodepools.runner": "NodePools the runner placeholders land on. Unset: every NodePool "
    "whose template (labels, requirements, taints) admits their node selector and "
    "tolerations.",
    "nodepools.workflow": "NodePools the workflow placeholders land on. Unset: resolved like "
    "`nodepools.runner`, from the workflow placeholders' node selector and tolerations.",
    "nodepools.events_namespace": "Where Karpenter's Events on NodeClaims land (`default`: "
    "NodeClaims are cluster-scoped). Its `InsufficientCapacityError` Events for a NodePool a "
    "half lands on release a stalled pair after one launch time instead of two (a watch; "
    "needs `deploy/rbac/role-karpenter-events.yaml`; without it: one log line, stalls on "
    "time alone). Empty: not read.",
    "warm_pool": "Pairs held beyond the queued jobs (below; docs/capacity-model.md §10).",
    "warm_pool.mode": "`fixed`: `proactive_capacity` pairs. `scheduled`: the largest floor of "
    "the `schedule` windows active now, `proactive_capacity` outside them.",
    "warm_pool.schedule": 'Windows with their own floor, e.g. `[{window: "Mon-Fri 08:00-18:00 '
    'Europe/Berlin", floor: 6}]`: days Mon..Sun (ranges, commas), wall-clock times '
    "00:00..24:00 (an end before the start runs past midnight), an IANA time zone "
    "(daylight saving time followed). Overlapping windows: the largest floor.",
    "warm_pool.predictive": "Pairs ahead of a fan-out (below; off by default): on top of "
    "the pool `mode` describes, pairs for the children the jobs running now will queue on "
    "this scale set soon, from a stage model learned online. Needs `demand.source: github`; "
    'docs/operations.md "Predictive warm pool".',
    "warm_pool.predictive.enabled": "Learn which jobs fan out into this scale set's jobs "
    "(how many, how long after the parent's start) and hold pairs for the children due "
    "within `horizon`. The model is kept in ConfigMap `capacity-stage-model-<scale set>`.",
    "warm_pool.predictive.horizon": "Children expected within this long get pairs now: at "
    "least one node launch, plus a margin for builds that end early. Unset: 1.25 × the "
    "longest of the recent pair launches this listener observed (at least 60 s), 5 minutes "
    "until it has seen 8.",
    "warm_pool.predictive.hold": "A running parent this long past the 0.9 quantile of its "
    "past runs that fanned out counts no more (the break-even hold: its children are not "
    "coming on any time the model knows). Unset: the longest recent pair launch (at least "
    "60 s), 4 minutes until 8 are seen.",
    "warm_pool.predictive.count_quantile": "Cover this quantile of a fan-out's size instead "
    "of its mean (0 < q ≤ 1; higher holds more pairs for the larger fan-outs). Unset: the "
    "mean.",
    "cluster_autoscaler": "cluster-autoscaler node groups (below): export their sizes and "
    "create no pair a full group cannot back.",
    "cluster_autoscaler.enabled": "Read cluster-autoscaler's status ConfigMap (a watch of that "
    "one object; needs `deploy/rbac/role-cluster-autoscaler-status.yaml`), export each node "
    "group's size and headroom, and, for the halves whose groups are named, create no pair a "
    "full group (at max size, or backing off) cannot back. Without the RBAC, without CA or "
    "with CA < 1.30: one log line, no cap.",
    "cluster_autoscaler.runner": "Node groups (CA's names) the runner placeholders land on. "
    "Unset: the runner half is not capped.",
    "cluster_autoscaler.workflow": "Node groups the workflow placeholders land on. Unset: the "
    "workflow half is not capped.",
    "cluster_autoscaler.status_namespace": "Namespace of CA's status ConfigMap (CA's "
    "namespace, where CA writes it by default).",
    "cluster_autoscaler.status_configmap": "Name of CA's status ConfigMap "
    "(`--status-config-map-name`).",
}

LISTENER_ENV: dict[str, tuple[str, str]] = {
    # Options field -> (environment variable, description)
    "probe_addr": (
        "LISTENER_PROBE_ADDR",
        "Address of the /healthz and /readyz endpoints.",
    ),
    "session_conflict_timeout": (
        "LISTENER_SESSION_CONFLICT_TIMEOUT",
        "Seconds to keep retrying a 409 (the previous pod's session still exists) before exiting.",
    ),
    "session_lease": (
        "LISTENER_SESSION_LEASE",
        "Seconds the Actions service keeps a dead listener's session: after a 409 the retries "
        "close in on this moment (every 2 s from 15 s before it to 10 s after it).",
    ),
    "scale_set_gone_timeout": (
        "LISTENER_SCALE_SET_GONE_TIMEOUT",
        "Seconds to keep re-checking a scale set the service answers 404 for (one error line, "
        "re-checks from 5 s up to 60 s apart) before exiting.",
    ),
    "reissue_interval": (
        "LISTENER_REISSUE_INTERVAL",
        "Minimum seconds between two re-issued long polls when the advertised capacity rises "
        "(a drop is sent at once).",
    ),
    "shutdown_grace": (
        "LISTENER_SHUTDOWN_GRACE",
        "The pod's terminationGracePeriodSeconds: after SIGTERM the placeholder clean-up (at "
        "most half, at most 10 s) and then the session DELETE share it, less 2 s to exit.",
    ),
    "settings_check_interval": (
        "LISTENER_SETTINGS_CHECK_INTERVAL",
        "Seconds between two looks at the settings file (`CAPACITY_CONFIG_FILE`): when it "
        "holds other valid settings the listener exits cleanly and ARC's controller recreates "
        "it with them; settings that do not load are logged and ignored. 0: never.",
    ),
    "kube_outage_timeout": (
        "LISTENER_KUBE_OUTAGE_TIMEOUT",
        "Seconds to keep retrying a runner-set patch while the apiserver throttles or is "
        "unreachable (messages are held unacked meanwhile) before exiting.",
    ),
}


def _is_duration(info: FieldInfo) -> bool:
    validators = (settings_values.parse_duration, settings_values.positive_duration)
    return any(getattr(meta, "func", None) in validators for meta in info.metadata)


def _constraints(info: FieldInfo) -> str:
    parts = []
    for meta in info.metadata:
        for attr, symbol in (("ge", "≥"), ("gt", ">")):
            value = getattr(meta, attr, None)
            if value is not None:
                parts.append(f"{symbol} {value}")
    if any(getattr(m, "func", None) is settings_values.positive_duration for m in info.metadata):
        parts.append("> 0")
    return ", ".join(parts)


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return " / ".join(f"`{a}`" for a in args)
    if origin is dict:
        return f"map of {_type_name(args[1])}"
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if annotation is settings_values.Resources:
        return "resources (`{requests: {cpu, memory, …}}`)"
    if annotation is settings_values.Toleration:
        return "toleration"
    names = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if annotation in names:
        return names[annotation]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    return getattr(annotation, "__name__", str(annotation))


def _seconds(value: float) -> str:
    if value >= 60 and value % 60 == 0:
        return f"{int(value // 60)}m"
    return f"{value:g}s"


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "see below"
    if value is None:
        return "unset"
    if _is_duration(info):
        return f"`{_seconds(float(value))}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, list | dict) and not value:
        return "empty"
    if isinstance(value, str) and not value:
        return "empty"
    return f"`{value}`"


def _rows(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, FieldInfo]]:
    for name, info in model.model_fields.items():
        if info.exclude:  # the HUD token: environment only, documented separately
            continue
        yield prefix + name, info


def _table(model: type[BaseModel], prefix: str, used: set[str]) -> list[str]:
    lines = [
        "| Setting | Environment variable | Type | Default | Description |",
        "|---|---|---|---|---|",
    ]
    nested: list[tuple[str, type[BaseModel]]] = []
    for path, info in _rows(model, prefix):
        if path not in DESCRIPTIONS:
            raise SystemExit(f"gen_reference: no description for setting {path!r}")
        used.add(path)
        kind = "duration" if _is_duration(info) else _type_name(info.annotation)
        limits = _constraints(info)
        if limits:
            kind += f" ({limits})"
        env = capacity_settings.ENV_PREFIX + path.upper().replace(".", "__")
        lines.append(f"| `{path}` | `{env}` | {kind} | {_default(info)} | {DESCRIPTIONS[path]} |")
        annotation = info.annotation
        leaf_models = (settings_values.Resources, settings_values.Toleration)
        if (
            isinstance(annotation, type)
            and issubclass(annotation, BaseModel)
            and annotation not in leaf_models
        ):
            nested.append((path, annotation))
    out = lines
    for path, sub in nested:
        out += ["", f"## `{path}`", "", *_table(sub, path + ".", used)]
    return out


def render() -> str:
    used: set[str] = set()
    tables = _table(capacity_settings.CapacitySettings, "", used)
    unused = set(DESCRIPTIONS) - used
    if unused:
        raise SystemExit(f"gen_reference: descriptions for unknown settings {sorted(unused)}")
    env_file = capacity_settings.CONFIG_FILE_ENV
    token_env = settings_demand.HUD_TOKEN_ENV
    listener_rows = []
    for option in dataclasses.fields(Options):
        if option.name not in LISTENER_ENV:
            raise SystemExit(f"gen_reference: no description for listener option {option.name}")
        variable, text = LISTENER_ENV[option.name]
        default = option.default
        shown = f"{default:g}" if isinstance(default, float) else str(default)
        listener_rows.append(f"| `{variable}` | `{shown}` | {text} |")
    lines = [
        "# Capacity settings reference",
        "",
        "<!-- Generated by deploy/gen_reference.py from capacity/settings.py: do not edit. -->",
        "",
        "Per scale set. Settings come from a YAML file named by "
        f"`{env_file}` (examples: `capacity-cpu.yaml`, `capacity-gpu.yaml` in this "
        f"directory) and from environment variables `{capacity_settings.ENV_PREFIX}<SETTING>` "
        "on the listener container; the environment wins over the file. Nested settings join "
        "their names with `__` (`CAPACITY_HUD__TIMEOUT=5s`); maps and lists are given as "
        'JSON in the environment (`CAPACITY_NODE_SELECTOR=\'{"pool":"ci"}\'`).',
        "",
        "Durations accept `500ms`, `30s`, `5m`, `1h`, `1h30m` or a plain number of seconds. "
        'Resource quantities are Kubernetes quantities (`"2"`, `750m`, `16Gi`); extended '
        "resources such as `nvidia.com/gpu` take whole numbers. Unknown settings and bad "
        "values stop the listener at start-up with one line naming the setting.",
        "",
        f"The HUD token is read only from `{token_env}` (a Secret, see deploy/README.md), "
        "never from the file.",
        "",
        "## Settings",
        "",
        *tables,
        "",
        "## Listener environment",
        "",
        "Not capacity settings: options of the listener process itself.",
        "",
        "| Environment variable | Default | Description |",
        "|---|---|---|",
        "| `LISTENER_CONFIG_PATH` | set by ARC | ARC's config.json for this scale set. |",
        "| `LISTENER_ARC_VERSION` | unset (`unknown`) | The ARC release the listener runs "
        "under, sent in the User-Agent where ARC's listener sends its own; the overlays set it "
        "(chart value `arcVersion`). |",
        f"| `{env_file}` | unset | The capacity settings file (YAML). |",
        f"| `{token_env}` | unset | The HUD API token (`x-hud-internal-bot` header). |",
        *listener_rows,
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    OUTPUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUTPUT}")
    # The chart's schema comes from the same model and DESCRIPTIONS (run as a script, this
    # directory is on sys.path).
    import gen_chart_schema

    return int(gen_chart_schema.main())


if __name__ == "__main__":
    sys.exit(main())
