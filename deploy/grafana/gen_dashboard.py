"""Writes deploy/grafana/capacity-listener.json, the Grafana dashboard for the listener.

Built with grafana-foundation-sdk, Grafana's typed dashboard builders (a development
dependency, never in the image). Edit this file, then run
``python deploy/grafana/gen_dashboard.py``. tests/unit/test_dashboard.py fails when the
committed JSON differs from this output, and checks every query against deploy/metrics.txt;
tests/e2e/test_prometheus.py runs every query on a real Prometheus scraping the listener.

Adding a panel is one call in one of the ``section`` lists below, e.g.
``timeseries("NodePool headroom", "…", by_name("gha_capacity_nodepool_headroom", "headroom"))``.
Widths within a row add up to 24 (the layout test checks it).

Scale-set filter: the gauges carry ``name`` (the EphemeralRunnerSet) and ``namespace``. ARC's
job counters and histograms carry neither, so they are filtered to the chosen scale sets by
the scrape target they come from: ``… and on (instance) gha_max_runners{<filter>}`` keeps the
series whose listener pod also exports a matching gauge. This needs no relabelling in
Prometheus.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import heatmap as heatmap_builders
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.builders import stat as stat_builders
from grafana_foundation_sdk.builders import timeseries as ts_builders
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as models
from grafana_foundation_sdk.models import heatmap as heatmap_models
from grafana_foundation_sdk.models import prometheus as prom_models

OUTPUT = Path(__file__).with_name("capacity-listener.json")

DATASOURCE = models.DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = 'namespace=~"$namespace", name=~"$scale_set"'
# Filter for series without name/namespace labels (job counters and histograms).
BY_TARGET = f"and on (instance) gha_max_runners{{{SEL}}}"
RATE = "$__rate_interval"
HEIGHT = 8

# Every panel builder of the SDK shares these methods; the alias keeps signatures readable.
PanelBuilder = Any


# --- queries ---------------------------------------------------------------------------------


class Query(NamedTuple):
    expr: str
    legend: str = "__auto"


def by_name(metric: str, legend: str, agg: str = "sum") -> Query:
    """One gauge per scale set: ``sum by (name) (metric{filter})``."""
    return Query(f"{agg} by (name) ({metric}{{{SEL}}})", f"{{{{name}}}} {legend}")


def increase_by(counter: str, label: str, matchers: str = "") -> Query:
    """Per-interval increase of a capacity counter, split by one label."""
    selector = f"{SEL}, {matchers}" if matchers else SEL
    return Query(
        f"sum by ({label}) (increase({counter}{{{selector}}}[{RATE}]))", f"{{{{{label}}}}}"
    )


def quantiles(histogram: str, by: str = "") -> list[Query]:
    group = f"le, {by}" if by else "le"
    legend = f"{{{{{by}}}}} " if by else ""
    return [
        Query(
            f"histogram_quantile({q}, sum by ({group}) "
            f"(rate({histogram}_bucket{{{SEL}}}[{RATE}])))",
            f"{legend}p{int(q * 100)}",
        )
        for q in (0.5, 0.95)
    ]


def targets(queries: Sequence[Query], fmt: prom_models.PromQueryFormat | None = None) -> list[Any]:
    out = []
    for index, query in enumerate(queries):
        target = (
            prom.Dataquery()
            .expr(query.expr)
            .legend_format(query.legend)
            .range()
            .ref_id(chr(ord("A") + index))
            .datasource(DATASOURCE)
        )
        if fmt is not None:
            target = target.format(fmt)
        out.append(target)
    return out


# --- panels ----------------------------------------------------------------------------------


def thresholds(*steps: tuple[float, str]) -> dash.ThresholdsConfig:
    return (
        dash.ThresholdsConfig()
        .mode(models.ThresholdsMode.ABSOLUTE)
        .steps(
            [
                models.Threshold(value=None, color="green"),
                *(models.Threshold(value=value, color=color) for value, color in steps),
            ]
        )
    )


def _common(panel: PanelBuilder, title: str, description: str, width: int) -> PanelBuilder:
    return (
        panel.title(title)
        .description(description)
        .datasource(DATASOURCE)
        .span(width)
        .height(HEIGHT)
    )


def timeseries(
    title: str,
    description: str,
    *queries: Query,
    unit: str = "short",
    stack: bool = False,
    limits: Sequence[tuple[float, str]] = (),
    width: int = 12,
) -> PanelBuilder:
    """A time series panel; ``limits`` draws dashed threshold lines (value, colour)."""
    panel = (
        _common(ts_builders.Panel(), title, description, width)
        .targets(targets(queries))
        .unit(unit)
        .min(0)
        .line_width(1)
        .fill_opacity(20 if stack else 0)
        .stacking(
            common_builders.StackingConfig()
            .mode(common.StackingMode.NORMAL if stack else common.StackingMode.NONE)
            .group("A")
        )
        .thresholds(thresholds(*limits))
        .thresholds_style(
            common_builders.GraphThresholdsStyleConfig().mode(
                common.GraphThresholdsStyleMode.DASHED
                if limits
                else common.GraphThresholdsStyleMode.OFF
            )
        )
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(
            common_builders.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )
    return panel


def stat(
    title: str, description: str, query: Query, *, unit: str, red_above: float, width: int = 6
) -> PanelBuilder:
    return (
        _common(stat_builders.Panel(), title, description, width)
        .targets(targets([query]))
        .unit(unit)
        .thresholds(thresholds((red_above, "red")))
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.AREA)
        .reduce_options(
            common_builders.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False)
        )
    )


def heatmap(title: str, description: str, histogram: str, width: int = 12) -> PanelBuilder:
    """Bucket increases of one of ARC's job histograms (filtered by scrape target)."""
    query = Query(f"sum by (le) (increase({histogram}_bucket[{RATE}]) {BY_TARGET})", "{{le}}")
    return (
        _common(heatmap_builders.Panel(), title, description, width)
        .targets(targets([query], prom_models.PromQueryFormat.HEATMAP))
        .calculate(False)
        .cell_gap(1)
        .color(
            heatmap_builders.HeatmapColorOptions()
            .mode(heatmap_models.HeatmapColorMode.SCHEME)
            .scheme("Oranges")
            .steps(64)
        )
        .y_axis(heatmap_builders.YAxisConfig().unit("s"))
        .mode(common.TooltipDisplayMode.SINGLE)
        .show_y_histogram()
        .show_legend()
    )


# --- the dashboard ---------------------------------------------------------------------------


def jobs() -> list[PanelBuilder]:
    return [
        timeseries(
            "Assigned vs running jobs",
            "Jobs GitHub assigned to the scale set, and jobs whose runner is running them. "
            "A lasting gap is the stranded-jobs signal.",
            by_name("gha_assigned_jobs", "assigned"),
            by_name("gha_running_jobs", "running"),
            width=9,
        ),
        timeseries(
            "Stranded gap (assigned − running)",
            "Assigned jobs that are not running. Jobs claimed by this cluster cannot move to "
            "another one; the StrandedJobs alert fires when this never reaches 0 for "
            "15 minutes (and stays so for 15 more).",
            Query(
                f"clamp_min(sum by (name) (gha_assigned_jobs{{{SEL}}}) "
                f"- sum by (name) (gha_running_jobs{{{SEL}}}), 0)",
                "{{name}}",
            ),
            limits=[(1, "orange")],
            width=9,
        ),
        stat(
            "% assigned not running",
            "Share of assigned jobs that are not running, over the selected scale sets.",
            Query(
                f"100 * clamp_min(sum(gha_assigned_jobs{{{SEL}}}) "
                f"- sum(gha_running_jobs{{{SEL}}}), 0) "
                f"/ clamp_min(sum(gha_assigned_jobs{{{SEL}}}), 1)",
                "",
            ),
            unit="percent",
            red_above=20,
        ),
        timeseries(
            "Runners",
            "ARC's runner statistics: registered, busy and idle runners, and the desired "
            "count the listener patches onto the EphemeralRunnerSet.",
            by_name("gha_registered_runners", "registered"),
            by_name("gha_busy_runners", "busy"),
            by_name("gha_idle_runners", "idle"),
            by_name("gha_desired_runners", "desired"),
        ),
        timeseries(
            "Available and acquired jobs",
            "Jobs offered to the scale set and not yet acquired, and acquired but not yet "
            "assigned (statistics ARC's own listener does not export).",
            by_name("gha_available_jobs", "available"),
            by_name("gha_acquired_jobs", "acquired"),
        ),
    ]


def capacity() -> list[PanelBuilder]:
    return [
        timeseries(
            "Advertised capacity vs max runners",
            "The X-ScaleSetMaxCapacity value sent to GitHub (capacity the scheduler has "
            "confirmed) against the configured maxRunners. Stock ARC always sends maxRunners.",
            by_name("gha_capacity_advertised", "advertised"),
            by_name("gha_max_runners", "max runners"),
            by_name("gha_assigned_jobs", "assigned"),
        ),
        timeseries(
            "Runner side vs workflow side",
            "Bound runner pods + Running runner placeholders, and bound workflow pods + "
            "Running workflow placeholders. The advertised capacity is the smaller side, "
            "capped at max runners.",
            by_name("gha_capacity_runner_side", "runner"),
            by_name("gha_capacity_workflow_side", "workflow"),
        ),
        timeseries(
            "Workflow pods without a node",
            "Workflow pods of running jobs that no node has taken yet. A few seconds while a "
            "node starts is normal; one that stays is a job stranded on this cluster (alert "
            "WorkflowPodsUnscheduled).",
            by_name("gha_capacity_workflow_pods_unscheduled", "unscheduled", agg="max"),
        ),
        timeseries(
            "Placeholder pairs by state",
            "Pairs whose halves are both Running, pairs with a half still Pending, and broken "
            "pairs (one half preempted or gone); the line is the desired number.",
            Query(f"sum by (state) (gha_capacity_pairs{{{SEL}}})", "{{state}}"),
            Query(f"sum(gha_capacity_desired_pairs{{{SEL}}})", "desired"),
            stack=True,
        ),
        timeseries(
            "Placeholder pods by role and phase",
            "Runner placeholders (-10) and workflow placeholders (10) by pod phase.",
            Query(
                f"sum by (role, phase) (gha_capacity_placeholder_pods{{{SEL}}})",
                "{{role}} {{phase}}",
            ),
            stack=True,
        ),
        timeseries(
            "Capacity signal changes",
            "How often the advertised capacity changed (each change re-issues the long poll "
            "so GitHub sees it at once), and rises held back: lowered when one read of the "
            "pods showed less than the watches counted, failed when that read failed.",
            Query(
                f"sum by (name) (increase(gha_capacity_signal_changes_total{{{SEL}}}[{RATE}]))",
                "{{name}}",
            ),
            Query(
                "sum by (name, result) (increase(gha_capacity_rise_checks_total"
                f'{{{SEL}, result!="confirmed"}}[{RATE}]))',
                "{{name}} rise {{result}}",
            ),
        ),
        timeseries(
            "Placeholder re-creations",
            "Pairs deleted to be created again, by reason: broken (a half was preempted by "
            "other workloads or lost with its node), timeout (Pending past "
            "placeholder_ready_timeout: the pool cannot provide it), stalled (one half "
            "Pending for two launch times while the other ran: the cloud is out of that "
            "type; new pairs back off) and expired (TTL renewal); against all successful "
            "creates. A steady broken stream means placeholders keep losing their room.",
            increase_by(
                "gha_capacity_pair_deletes_total",
                "reason",
                'reason=~"broken|timeout|stalled|expired"',
            ),
            Query(
                f'sum(increase(gha_capacity_pair_creates_total{{{SEL}, result="ok"}}[{RATE}]))',
                "created",
            ),
        ),
        timeseries(
            "Stall back-off and probes",
            "Seconds left before new pairs are tried again after a stalled pair (its other "
            "half could not get a node: one launch time once the pools said so, two "
            "without). While it is above 0 the queue is left to other clusters serving the "
            "same labels instead of holding nodes for halves that cannot become capacity; "
            "one placeholder of the stalled half alone (a probe, counted here by role) keeps "
            "asking for its node and ends the back-off as soon as it runs. Slow start: "
            "after the back-off, the new pairs allowed in flight (one, doubled per pair "
            "whose stalled half ran). Held: pairs not made during a confirmed shortage (a "
            "half its pools refused still Pending a minute on), before any pair has stalled.",
            by_name("gha_capacity_stall_backoff_seconds", "back-off", agg="max"),
            by_name("gha_capacity_slow_start_pairs", "slow start", agg="max"),
            by_name("gha_capacity_shortage_held_pairs", "held", agg="sum"),
            increase_by("gha_capacity_probes_total", "role"),
        ),
        timeseries(
            "Stalled pairs by cause",
            "Pairs released as stalled, by the rule that fired: cloud (the Pending half's "
            "NodePools sent Karpenter's insufficient-capacity Event, or its node groups are "
            "full or backing off: released after one launch time), time (no such word: after "
            "two). Only time while the cloud is short: is the Event reader watching (NodePool "
            "reader state)?",
            increase_by("gha_capacity_stalls_total", "cause"),
        ),
    ]


def demand() -> list[PanelBuilder]:
    return [
        timeseries(
            "Queued jobs and proactive capacity",
            "Jobs queued on GitHub for this scale set's labels that this cluster claims, as "
            "the demand source reports them, and the configured always-on capacity. Desired "
            "pairs = proactive + queued, within the max-runners headroom.",
            by_name("gha_capacity_queued_jobs", "queued"),
            by_name("gha_capacity_proactive_capacity", "proactive"),
        ),
        timeseries(
            "Demand source",
            "Where the queued-jobs number comes from: hud or github (fresh), stale (the source "
            "failing, holding the last good value), floor (failing too long) or disabled.",
            Query(
                f"max by (name, source) (gha_capacity_demand_source{{{SEL}}}) > 0",
                "{{name}} {{source}}",
            ),
        ),
        timeseries(
            "HUD requests by result",
            "HUD queued-jobs requests per second by outcome (ok, timeout, http_error, "
            "bad_response, too_large).",
            Query(
                f"sum by (result) (rate(gha_capacity_hud_requests_total{{{SEL}}}[{RATE}]))",
                "{{result}}",
            ),
            unit="reqps",
            stack=True,
        ),
        timeseries(
            "HUD latency",
            "HUD request duration, p50 and p95.",
            *quantiles("gha_capacity_hud_request_duration_seconds"),
            unit="s",
        ),
        timeseries(
            "Queue parts (demand sharding)",
            "Queued jobs by part: total, aged (claimed by every peer cluster), fresh (split "
            "between peers), share (this cluster's part of fresh), claimed (share + aged), "
            "started (the reading's jobs handed here since) and planned (what pairs are made "
            "for: claimed less started; total less started once this cluster has been handed "
            "more than its share, as when a peer cannot launch).",
            Query(
                f"sum by (name, part) (gha_capacity_demand_jobs{{{SEL}}})",
                "{{name}} {{part}}",
            ),
        ),
        timeseries(
            "GitHub REST calls (demand source)",
            "REST calls per second of the GitHub demand source by result; not_modified (304) "
            "answers do not count against the rate limit.",
            Query(
                f"sum by (result) (rate(gha_capacity_demand_github_calls_total{{{SEL}}}[{RATE}]))",
                "{{result}}",
            ),
            unit="reqps",
            stack=True,
        ),
        timeseries(
            "GitHub rate limit remaining",
            "The last X-RateLimit-Remaining seen by the GitHub demand source. It slows down as "
            "this nears its reserve.",
            by_name("gha_capacity_demand_github_rate_limit_remaining", "remaining", agg="min"),
        ),
    ]


def reconcile() -> list[PanelBuilder]:
    return [
        timeseries(
            "Time since last successful reconcile",
            "Seconds since the capacity monitor last completed a pass. The ReconcileStale "
            "alert fires above 300 s.",
            Query(
                f"time() - max by (name) "
                f"(gha_capacity_reconcile_last_success_timestamp_seconds{{{SEL}}})",
                "{{name}}",
            ),
            unit="s",
            limits=[(300, "red")],
        ),
        timeseries(
            "Reconcile duration",
            "Duration of one observe → plan → apply pass, p50 and p95.",
            *quantiles("gha_capacity_reconcile_duration_seconds", "name"),
            unit="s",
        ),
        timeseries(
            "Pair creates by result",
            "Placeholder pair creations per interval, by result (ok, exists, or the failure "
            "kind, e.g. quota).",
            increase_by("gha_capacity_pair_creates_total", "result"),
            stack=True,
        ),
        timeseries(
            "Pair deletes by reason",
            "Placeholders deleted per interval, by reason: timeout (Pending too long), excess, "
            "broken, expired (TTL renewal), finished, orphan, unusable.",
            increase_by("gha_capacity_pair_deletes_total", "reason"),
            stack=True,
        ),
        timeseries(
            "Kubernetes API errors",
            "Failed Kubernetes calls of the capacity monitor by operation and kind; a steady "
            "stream of forbidden errors means the RBAC in deploy/rbac is missing.",
            Query(
                f"sum by (operation, kind) "
                f"(increase(gha_capacity_kube_errors_total{{{SEL}}}[{RATE}]))",
                "{{operation}} {{kind}}",
            ),
            stack=True,
            width=24,
        ),
    ]


def critical_path() -> list[PanelBuilder]:
    """The steps of a job's wait the listener sees, in the order a job meets them."""
    return [
        timeseries(
            "Demand age when planned",
            "Seconds since the read behind the demand value a reconcile pass planned with "
            "began, p50 and p95 (a source's own lag behind GitHub, such as HUD's, comes on "
            "top). Long: a slow or failing source, or a long demand.interval.",
            *quantiles("gha_capacity_demand_age_seconds", "name"),
            unit="s",
            width=8,
        ),
        timeseries(
            "Pair launch",
            "Seconds from creating a placeholder pair to both halves Running, p50 and p95: "
            "the node launch when no node had room. Stock ARC pays it twice in a row (runner "
            "node, then workflow node); a pair pays it once, for both halves at once.",
            *quantiles("gha_capacity_pair_launch_seconds", "name"),
            unit="s",
            width=8,
        ),
        timeseries(
            "Header rise → job assigned",
            "Seconds from a poll that raised X-ScaleSetMaxCapacity to the next job GitHub "
            "assigned to this scale set, p50 and p95. Long while jobs are queued: GitHub "
            "gave them to another listener, or the rise came before any job.",
            *quantiles("gha_capacity_rise_to_assignment_seconds", "name"),
            unit="s",
            width=8,
        ),
    ]


def job_timings() -> list[PanelBuilder]:
    return [
        heatmap(
            "Job startup duration",
            "Seconds from GitHub assigning a job to the scale set until a runner started it "
            "(ARC's gha_job_startup_duration_seconds).",
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
            Query(f"60 * sum(rate(gha_started_jobs_total[{RATE}]) {BY_TARGET})", "started"),
            Query(
                f"60 * sum by (job_result) (rate(gha_completed_jobs_total[{RATE}]) {BY_TARGET})",
                "completed {{job_result}}",
            ),
            width=24,
        ),
    ]


def nodepools() -> list[PanelBuilder]:
    """NodePool limits (settings nodepools.enabled; empty without it)."""
    return [
        timeseries(
            "NodePool CPU: limit, used, headroom",
            "For each Karpenter NodePool the placeholders can land on: spec.limits.cpu, "
            "status.resources.cpu (capacity Karpenter launched) and the headroom between "
            "them, in cores. No pair is created that the headroom (and the room its own "
            "placeholders left on existing nodes) cannot hold.",
            Query(
                f'max by (nodepool) (gha_capacity_nodepool_limit{{{SEL}, resource="cpu"}})',
                "{{nodepool}} limit",
            ),
            Query(
                f'max by (nodepool) (gha_capacity_nodepool_used{{{SEL}, resource="cpu"}})',
                "{{nodepool}} used",
            ),
            Query(
                f'max by (nodepool) (gha_capacity_nodepool_headroom{{{SEL}, resource="cpu"}})',
                "{{nodepool}} headroom",
            ),
        ),
        timeseries(
            "Pairs held back by NodePool limits",
            "Pairs wanted but not created because the NodePools' limits (or full "
            "cluster-autoscaler node groups) cannot hold them (each "
            "would only have waited Pending until placeholder_ready_timeout), and the pairs "
            "the limits still admit. Raise the NodePool's limits, or accept the cap.",
            by_name("gha_capacity_nodepool_held_pairs", "held back"),
            by_name("gha_capacity_nodepool_pair_room", "room", agg="min"),
        ),
        timeseries(
            "NodePool headroom by resource",
            "Every limited resource of every NodePool the placeholders can land on (cpu in "
            "cores, memory in bytes).",
            Query(
                f"max by (nodepool, resource) (gha_capacity_nodepool_headroom{{{SEL}}})",
                "{{nodepool}} {{resource}}",
            ),
        ),
        timeseries(
            "NodePool reader state",
            "1 for the reader's state: watching (limits applied), starting (no pair created "
            "until the first list), forbidden (RBAC: deploy/rbac/clusterrole-nodepools.yaml) "
            "or absent (no Karpenter); the last two cost one log line and impose no cap. "
            "events: the reader of Karpenter's insufficient-capacity Events (forbidden: "
            "deploy/rbac/role-karpenter-events.yaml; stalls then on time alone). pod events: "
            "the reader of Karpenter's scheduling failures of placeholders (forbidden: the "
            "Role's events rule; a shortage then confirmed a minute later).",
            Query(f"max by (state) (gha_capacity_nodepool_state{{{SEL}}})", "{{state}}"),
            Query(
                f"max by (state) (gha_capacity_launch_failure_state{{{SEL}}})",
                "events {{state}}",
            ),
            Query(
                f"max by (state) (gha_capacity_pod_refusal_state{{{SEL}}})",
                "pod events {{state}}",
            ),
        ),
    ]


def warm_pool() -> list[PanelBuilder]:
    """The warm pool (settings warm_pool): target and mode, and the predictive pool's pairs
    against the children that came."""
    return [
        timeseries(
            "Warm pool: target vs queued",
            "Pairs held beyond the queued jobs (the warm pool's target: proactive_capacity or "
            "the schedule's floor, plus the predictive pool's pairs) next to the queued jobs "
            "they come on top of.",
            by_name("gha_capacity_warm_pool_target", "target"),
            by_name("gha_capacity_queued_jobs", "queued"),
            width=16,
        ),
        timeseries(
            "Warm pool mode",
            "1 for the configured warm_pool.mode: fixed (proactive_capacity) or scheduled "
            "(time windows).",
            Query(
                f"max by (name, mode) (gha_capacity_warm_pool_mode{{{SEL}}}) == 1",
                "{{name}} {{mode}}",
            ),
            width=8,
        ),
        timeseries(
            "Predictive: pairs for predicted children vs children arrived",
            "warm_pool.predictive only. Pairs held for the children the running parent jobs "
            "(builds) are expected to queue within the horizon, next to the children that "
            "then came for the parents it counted (per interval). Pairs held while few "
            "children arrive are predictions that did not come: each costs at most the hold.",
            by_name("gha_capacity_predictive_pairs", "pairs held"),
            Query(
                "sum by (name) (increase("
                f"gha_capacity_predictive_children_arrived_total{{{SEL}}}[{RATE}]))",
                "{{name}} children arrived",
            ),
            width=12,
        ),
        timeseries(
            "Predictive: children expected vs arrived, per workflow",
            "warm_pool.predictive only. Per parent workflow: the children expected within the "
            "horizon at each pass (a mean over its running parents) and those that came for "
            "the parents counted (per interval). A workflow whose expected line stays above "
            "its arrivals predicts children that do not come: its model is the one to look at.",
            Query(
                f"sum by (name, workflow) (gha_capacity_predictive_children_expected{{{SEL}}})",
                "{{name}} {{workflow}} expected",
            ),
            Query(
                "sum by (name, workflow) (increase("
                f"gha_capacity_predictive_children_arrived_total{{{SEL}}}[{RATE}]))",
                "{{name}} {{workflow}} arrived",
            ),
            width=12,
        ),
    ]


def cluster_autoscaler() -> list[PanelBuilder]:
    """cluster-autoscaler (node checks; node groups with cluster_autoscaler.enabled)."""
    return [
        timeseries(
            "Placeholders on CA deletion candidates",
            "Running placeholders on nodes cluster-autoscaler has marked unneeded "
            "(DeletionCandidateOfClusterAutoscaler, PreferNoSchedule). They still count: "
            "the node still runs them, and CA taints it ToBeDeletedByClusterAutoscaler "
            "(then no longer counted) before it removes it. Node checks on.",
            by_name("gha_capacity_placeholders_on_deletion_candidates", "placeholders"),
        ),
        timeseries(
            "Node group sizes",
            "For each cluster-autoscaler node group (settings cluster_autoscaler.enabled): its "
            "max size, the size CA asked the cloud for (target) and the ready nodes. A group "
            "whose target reached its max can add no node for new pairs.",
            Query(
                f'max by (node_group) (gha_capacity_node_group_size{{{SEL}, kind="max"}})',
                "{{node_group}} max",
            ),
            Query(
                f'max by (node_group) (gha_capacity_node_group_size{{{SEL}, kind="target"}})',
                "{{node_group}} target",
            ),
            Query(
                f'max by (node_group) (gha_capacity_node_group_size{{{SEL}, kind="ready"}})',
                "{{node_group}} ready",
            ),
        ),
        timeseries(
            "Node group headroom and pairs admitted",
            "Nodes each group may still add (0 while it backs off after a failed scale-up), "
            "and the new pairs full groups still admit (absent: no cap). Pairs held back "
            "are in the 'Pairs held back' panel of the NodePool row.",
            Query(
                f"max by (node_group) (gha_capacity_node_group_headroom{{{SEL}}})",
                "{{node_group}} headroom",
            ),
            by_name("gha_capacity_node_group_pair_room", "pairs admitted", agg="min"),
        ),
        timeseries(
            "Node group reader state",
            "1 for the reader's state: watching, starting (no pair created until the first "
            "list), forbidden (RBAC: deploy/rbac/role-cluster-autoscaler-status.yaml), absent "
            "(no status ConfigMap) or unreadable (CA older than 1.30); the last three cost "
            "one log line and impose no cap.",
            Query(f"max by (state) (gha_capacity_node_group_state{{{SEL}}})", "{{state}}"),
        ),
    ]


SECTIONS = (
    ("Jobs: assigned vs running", jobs),
    ("Capacity", capacity),
    ("Warm pool", warm_pool),
    ("NodePool limits (Karpenter)", nodepools),
    ("cluster-autoscaler", cluster_autoscaler),
    ("Demand (HUD or GitHub)", demand),
    ("Reconcile health", reconcile),
    ("Critical path: demand → pair → assignment", critical_path),
    ("Job timings", job_timings),
)


def variable(name: str, label: str, query: str) -> dash.QueryVariable:
    return (
        dash.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query({"query": query, "refId": f"{name}-variable"})
        .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(models.VariableOption(selected=True, text=["All"], value=["$__all"]))
        .sort(models.VariableSort.ALPHABETICAL_ASC)
    )


def build() -> dash.Dashboard:
    board = (
        dash.Dashboard("ARC capacity-aware listener")
        .uid("capacity-listener")
        .description(
            "Jobs, advertised capacity, placeholder pairs, demand and reconcile health of "
            "scale sets running the capacity-aware listener."
        )
        .tags(["actions-runner-controller", "github-actions", "capacity"])
        .editable()
        .tooltip(models.DashboardCursorSync.CROSSHAIR)
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .with_variable(
            dash.DatasourceVariable("datasource").label("Data source").type("prometheus")
        )
        .with_variable(
            variable("namespace", "Namespace", "label_values(gha_max_runners, namespace)")
        )
        .with_variable(
            variable(
                "scale_set",
                "Scale set",
                'label_values(gha_max_runners{namespace=~"$namespace"}, name)',
            )
        )
    )
    panel_id = 0
    for title, section in SECTIONS:
        panel_id += 1
        board = board.with_row(dash.Row(title).id(panel_id))
        for panel in section():
            panel_id += 1
            board = board.with_panel(panel.id(panel_id))
    return board


def render() -> str:
    return json.dumps(build().build(), cls=JSONEncoder, indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    OUTPUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
