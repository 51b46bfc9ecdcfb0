"""Writes deploy/grafana/capacity-listener.json, the Grafana dashboard for the listener.

The dashboard is generated so that every panel shares one layout, one datasource variable and
one scale-set filter; edit this file, then run ``python deploy/grafana/gen_dashboard.py``.
tests/unit/test_deploy_static.py fails when the committed JSON differs from this output, and
checks every query against deploy/metrics.txt.

Scale-set filter: the gauges carry ``name`` (the EphemeralRunnerSet) and ``namespace``. ARC's
job counters and histograms carry neither, so they are filtered to the chosen scale sets by
the scrape target they come from: ``… and on (instance) gha_max_runners{<filter>}`` keeps the
series whose listener pod also exports a matching gauge. This needs no relabelling in
Prometheus.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).with_name("capacity-listener.json")

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'namespace=~"$namespace", name=~"$scale_set"'
# Filter for series without name/namespace labels (job counters and histograms).
BY_TARGET = f"and on (instance) gha_max_runners{{{SEL}}}"
RATE = "$__rate_interval"

Panel = dict[str, Any]


def target(expr: str, legend: str = "", *, ref: str = "A", fmt: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {
        "datasource": DATASOURCE,
        "expr": expr,
        "legendFormat": legend or "__auto",
        "range": True,
        "refId": ref,
    }
    if fmt:
        out["format"] = fmt
    return out


def targets(*pairs: tuple[str, str]) -> list[dict[str, Any]]:
    return [target(expr, legend, ref=chr(ord("A") + i)) for i, (expr, legend) in enumerate(pairs)]


def timeseries(
    title: str,
    description: str,
    queries: list[dict[str, Any]],
    *,
    unit: str = "short",
    stack: bool = False,
    thresholds: list[tuple[float, str]] | None = None,
    width: int = 12,
) -> Panel:
    steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
    steps += [{"color": color, "value": value} for value, color in thresholds or []]
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": queries,
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "min": 0,
                "custom": {
                    "drawStyle": "line",
                    "lineWidth": 1,
                    "fillOpacity": 20 if stack else 0,
                    "stacking": {"mode": "normal" if stack else "none", "group": "A"},
                    "thresholdsStyle": {"mode": "dashed" if thresholds else "off"},
                },
                "thresholds": {"mode": "absolute", "steps": steps},
            },
            "overrides": [],
        },
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "_width": width,
    }


def stat(title: str, description: str, expr: str, *, unit: str, red_above: float) -> Panel:
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": [target(expr, "")],
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "thresholds": {
                    "mode": "absolute",
                    "steps": [
                        {"color": "green", "value": None},
                        {"color": "red", "value": red_above},
                    ],
                },
            },
            "overrides": [],
        },
        "options": {
            "colorMode": "background",
            "graphMode": "area",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        },
        "_width": 6,
    }


def heatmap(title: str, description: str, histogram: str) -> Panel:
    expr = f"sum by (le) (increase({histogram}_bucket[{RATE}]) {BY_TARGET})"
    return {
        "type": "heatmap",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": [target(expr, "{{le}}", fmt="heatmap")],
        "options": {
            "calculate": False,
            "cellGap": 1,
            "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
            "yAxis": {"unit": "s"},
            "tooltip": {"mode": "single", "yHistogram": True},
            "legend": {"show": True},
        },
        "fieldConfig": {"defaults": {}, "overrides": []},
        "_width": 12,
    }


def quantiles(histogram: str, by: str) -> list[dict[str, Any]]:
    group = f"le, {by}" if by else "le"
    legend = f"{{{{{by}}}}} " if by else ""
    return targets(
        *(
            (
                f"histogram_quantile({q}, sum by ({group}) "
                f"(rate({histogram}_bucket{{{SEL}}}[{RATE}])))",
                f"{legend}p{int(q * 100)}",
            )
            for q in (0.5, 0.95)
        )
    )


def sections() -> Iterator[tuple[str, list[Panel]]]:
    yield (
        "Jobs: assigned vs running",
        [
            timeseries(
                "Assigned vs running jobs",
                "Jobs GitHub assigned to the scale set, and jobs whose runner is running them. "
                "A lasting gap is the stranded-jobs signal.",
                targets(
                    (f"sum by (name) (gha_assigned_jobs{{{SEL}}})", "{{name}} assigned"),
                    (f"sum by (name) (gha_running_jobs{{{SEL}}})", "{{name}} running"),
                ),
                width=9,
            ),
            timeseries(
                "Stranded gap (assigned − running)",
                "Assigned jobs that are not running. Jobs claimed by this cluster cannot move "
                "to another one; the StrandedJobs alert fires when this never reaches 0 "
                "for 15 minutes.",
                targets(
                    (
                        f"clamp_min(sum by (name) (gha_assigned_jobs{{{SEL}}}) "
                        f"- sum by (name) (gha_running_jobs{{{SEL}}}), 0)",
                        "{{name}}",
                    )
                ),
                thresholds=[(1, "orange")],
                width=9,
            ),
            stat(
                "% assigned not running",
                "Share of assigned jobs that are not running, over the selected scale sets.",
                f"100 * clamp_min(sum(gha_assigned_jobs{{{SEL}}}) "
                f"- sum(gha_running_jobs{{{SEL}}}), 0) "
                f"/ clamp_min(sum(gha_assigned_jobs{{{SEL}}}), 1)",
                unit="percent",
                red_above=20,
            ),
            timeseries(
                "Runners",
                "ARC's runner statistics: registered, busy and idle runners, and the desired "
                "count the listener patches onto the EphemeralRunnerSet.",
                targets(
                    (f"sum by (name) (gha_registered_runners{{{SEL}}})", "{{name}} registered"),
                    (f"sum by (name) (gha_busy_runners{{{SEL}}})", "{{name}} busy"),
                    (f"sum by (name) (gha_idle_runners{{{SEL}}})", "{{name}} idle"),
                    (f"sum by (name) (gha_desired_runners{{{SEL}}})", "{{name}} desired"),
                ),
            ),
            timeseries(
                "Available and acquired jobs",
                "Jobs offered to the scale set and not yet acquired, and acquired but not "
                "yet assigned (statistics ARC's own listener does not export).",
                targets(
                    (f"sum by (name) (gha_available_jobs{{{SEL}}})", "{{name}} available"),
                    (f"sum by (name) (gha_acquired_jobs{{{SEL}}})", "{{name}} acquired"),
                ),
            ),
        ],
    )
    yield (
        "Capacity",
        [
            timeseries(
                "Advertised capacity vs max runners",
                "The X-ScaleSetMaxCapacity value sent to GitHub (capacity the scheduler has "
                "confirmed) against the configured maxRunners. Stock ARC always sends "
                "maxRunners.",
                targets(
                    (f"sum by (name) (gha_capacity_advertised{{{SEL}}})", "{{name}} advertised"),
                    (f"sum by (name) (gha_max_runners{{{SEL}}})", "{{name}} max runners"),
                    (f"sum by (name) (gha_assigned_jobs{{{SEL}}})", "{{name}} assigned"),
                ),
            ),
            timeseries(
                "Runner side vs workflow side",
                "Bound runner pods + Running runner placeholders, and bound workflow pods + "
                "Running workflow placeholders. The advertised capacity is the smaller side, "
                "capped at max runners.",
                targets(
                    (f"sum by (name) (gha_capacity_runner_side{{{SEL}}})", "{{name}} runner"),
                    (f"sum by (name) (gha_capacity_workflow_side{{{SEL}}})", "{{name}} workflow"),
                ),
            ),
            timeseries(
                "Placeholder pairs by state",
                "Pairs whose halves are both Running, pairs with a half still Pending, and "
                "broken pairs (one half preempted or gone); the line is the desired number.",
                targets(
                    (f"sum by (state) (gha_capacity_pairs{{{SEL}}})", "{{state}}"),
                    (f"sum(gha_capacity_desired_pairs{{{SEL}}})", "desired"),
                ),
                stack=True,
            ),
            timeseries(
                "Placeholder pods by role and phase",
                "Runner placeholders (-10) and workflow placeholders (10) by pod phase.",
                targets(
                    (
                        f"sum by (role, phase) (gha_capacity_placeholder_pods{{{SEL}}})",
                        "{{role}} {{phase}}",
                    )
                ),
                stack=True,
            ),
            timeseries(
                "Capacity signal changes",
                "How often the advertised capacity changed (each change re-issues the "
                "long poll so GitHub sees it at once).",
                targets(
                    (
                        f"sum by (name) (increase(gha_capacity_signal_changes_total"
                        f"{{{SEL}}}[{RATE}]))",
                        "{{name}}",
                    )
                ),
            ),
        ],
    )
    yield (
        "Demand (HUD or GitHub)",
        [
            timeseries(
                "Queued jobs and proactive capacity",
                "Jobs queued on GitHub for this scale set's labels that this cluster claims, "
                "as the demand source reports them, and the configured always-on capacity. "
                "Desired pairs = proactive + queued, within the max-runners headroom.",
                targets(
                    (f"sum by (name) (gha_capacity_queued_jobs{{{SEL}}})", "{{name}} queued"),
                    (
                        f"sum by (name) (gha_capacity_proactive_capacity{{{SEL}}})",
                        "{{name}} proactive",
                    ),
                ),
            ),
            timeseries(
                "Demand source",
                "Where the queued-jobs number comes from: hud or github (fresh), stale (the "
                "source failing, holding the last good value), floor (failing too long) or "
                "disabled.",
                targets(
                    (
                        f"max by (name, source) (gha_capacity_demand_source{{{SEL}}}) > 0",
                        "{{name}} {{source}}",
                    )
                ),
            ),
            timeseries(
                "HUD requests by result",
                "HUD queued-jobs requests per second by outcome (ok, timeout, http_error, "
                "bad_response, too_large).",
                targets(
                    (
                        f"sum by (result) (rate(gha_capacity_hud_requests_total{{{SEL}}}[{RATE}]))",
                        "{{result}}",
                    )
                ),
                unit="reqps",
                stack=True,
            ),
            timeseries(
                "HUD latency",
                "HUD request duration, p50 and p95.",
                quantiles("gha_capacity_hud_request_duration_seconds", ""),
                unit="s",
            ),
            timeseries(
                "Queue parts (demand sharding)",
                "Queued jobs by part: total, aged (claimed by every peer cluster), fresh "
                "(split between peers), share (this cluster's part of fresh), claimed "
                "(share + aged, what this cluster plans for).",
                targets(
                    (
                        f"sum by (name, part) (gha_capacity_demand_jobs{{{SEL}}})",
                        "{{name}} {{part}}",
                    )
                ),
            ),
            timeseries(
                "GitHub REST calls (demand source)",
                "REST calls per second of the GitHub demand source by result; not_modified "
                "(304) answers do not count against the rate limit.",
                targets(
                    (
                        f"sum by (result) (rate(gha_capacity_demand_github_calls_total"
                        f"{{{SEL}}}[{RATE}]))",
                        "{{result}}",
                    )
                ),
                unit="reqps",
                stack=True,
            ),
            timeseries(
                "GitHub rate limit remaining",
                "The last X-RateLimit-Remaining seen by the GitHub demand source. It slows "
                "down as this nears its reserve.",
                targets(
                    (
                        f"min by (name) (gha_capacity_demand_github_rate_limit_remaining{{{SEL}}})",
                        "{{name}}",
                    )
                ),
            ),
        ],
    )
    yield (
        "Reconcile health",
        [
            timeseries(
                "Time since last successful reconcile",
                "Seconds since the capacity monitor last completed a pass. The ReconcileStale "
                "alert fires above 300 s.",
                targets(
                    (
                        f"time() - max by (name) "
                        f"(gha_capacity_reconcile_last_success_timestamp_seconds{{{SEL}}})",
                        "{{name}}",
                    )
                ),
                unit="s",
                thresholds=[(300, "red")],
            ),
            timeseries(
                "Reconcile duration",
                "Duration of one observe → plan → apply pass, p50 and p95.",
                quantiles("gha_capacity_reconcile_duration_seconds", "name"),
                unit="s",
            ),
            timeseries(
                "Pair creates by result",
                "Placeholder pairs created per interval, by result.",
                targets(
                    (
                        f"sum by (result) (increase(gha_capacity_pair_creates_total"
                        f"{{{SEL}}}[{RATE}]))",
                        "{{result}}",
                    )
                ),
                stack=True,
            ),
            timeseries(
                "Pair deletes by reason",
                "Placeholders deleted per interval, by reason: timeout (Pending too long), "
                "excess, broken, expired (TTL renewal), finished, orphan, unusable.",
                targets(
                    (
                        f"sum by (reason) (increase(gha_capacity_pair_deletes_total"
                        f"{{{SEL}}}[{RATE}]))",
                        "{{reason}}",
                    )
                ),
                stack=True,
            ),
            timeseries(
                "Kubernetes API errors",
                "Failed Kubernetes calls of the capacity monitor by operation and kind; "
                "a steady stream of forbidden errors means the RBAC in deploy/rbac is missing.",
                targets(
                    (
                        f"sum by (operation, kind) (increase(gha_capacity_kube_errors_total"
                        f"{{{SEL}}}[{RATE}]))",
                        "{{operation}} {{kind}}",
                    )
                ),
                stack=True,
                width=24,
            ),
        ],
    )
    yield (
        "Job timings",
        [
            heatmap(
                "Job startup duration",
                "Seconds from GitHub assigning a job to the scale set until a runner started "
                "it (ARC's gha_job_startup_duration_seconds).",
                "gha_job_startup_duration_seconds",
            ),
            heatmap(
                "Job execution duration",
                "Seconds from a runner starting a job until it finished "
                "(ARC's gha_job_execution_duration_seconds).",
                "gha_job_execution_duration_seconds",
            ),
            timeseries(
                "Jobs started and completed",
                "Jobs started, and completed by result, per minute.",
                targets(
                    (
                        f"60 * sum(rate(gha_started_jobs_total[{RATE}]) {BY_TARGET})",
                        "started",
                    ),
                    (
                        f"60 * sum by (job_result) "
                        f"(rate(gha_completed_jobs_total[{RATE}]) {BY_TARGET})",
                        "completed {{job_result}}",
                    ),
                ),
                width=24,
            ),
        ],
    )


def layout(groups: Iterator[tuple[str, list[Panel]]]) -> list[Panel]:
    """Rows of panels, left to right, wrapping at Grafana's 24 columns; ids in order."""
    panels: list[Panel] = []
    y = 0
    for title, members in groups:
        panels.append(
            {
                "type": "row",
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        x = 0
        for panel in members:
            width = panel.pop("_width")
            if x + width > 24:
                x, y = 0, y + 8
            panel["gridPos"] = {"h": 8, "w": width, "x": x, "y": y}
            panels.append(panel)
            x += width
        y += 8
    for number, panel in enumerate(panels, start=1):
        panel["id"] = number
    return panels


def variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-variable"},
        "refresh": 2,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def build() -> dict[str, Any]:
    return {
        "title": "ARC capacity-aware listener",
        "uid": "capacity-listener",
        "description": "Jobs, advertised capacity, placeholder pairs, HUD demand and reconcile "
        "health of scale sets running the capacity-aware listener.",
        "tags": ["actions-runner-controller", "github-actions", "capacity"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "",
        "annotations": {"list": []},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                variable("namespace", "Namespace", "label_values(gha_max_runners, namespace)"),
                variable(
                    "scale_set",
                    "Scale set",
                    'label_values(gha_max_runners{namespace=~"$namespace"}, name)',
                ),
            ]
        },
        "panels": layout(sections()),
        "version": 1,
    }


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    OUTPUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
