"""The shipped alert rules and dashboard queries on a real Prometheus scraping a live listener.

Prometheus (tests/support/prometheus.py) scrapes the listener every second and evaluates the
rules of deploy/prometheus/alerts.yaml every second, every duration divided by 60.

The stranding here is the one the StrandedJobs alert is written for: the scale set's runner
node pool is gone, so jobs GitHub assigned to it wait for a runner pod that cannot be
scheduled (assigned, not running). Stock ARC advertises maxRunners and takes the jobs; with
the capacity monitor the runner placeholders go with the pool, the listener advertises 0 and
the jobs stay on GitHub's queue.

When the *workflow* pod is what has no node, the runner has claimed the job, so GitHub (and
the fake) count it as running: the assigned − running gap stays 0 and StrandedJobs cannot see
it. WorkflowPodsUnscheduled is written for that one, from the monitor's own count of
``<runner>-workflow`` pods without a node. With the monitor on it is a stranding the monitor
itself let through: it counted workflow capacity the workflow pod cannot use. A pod once bound
never becomes unbound again (a lost node takes its pods with it), so the window for workflow
capacity to vanish is between the claim and the workflow pod's creation, which the runner
stand-in makes immediate; the scenario here uses the cause the alert's runbook names first
instead, deterministically: ``workflow_resources`` smaller than the real workflow pods, so the
workflow placeholder fits a node the workflow pod does not.

A listener that dies takes every series above with it, so those rules go quiet exactly when
nothing serves the scale set. ListenerDown reads Prometheus' own ``up`` of the listener's
target instead; the target carries ``scale_set`` and ``namespace`` as the chart's PodMonitor
sets them from the pod's labels, and the alert names the scale set by them.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.deploy_files import (
    DASHBOARD,
    alert_rules,
    analyse,
    dashboard_panels,
    read_metric_list,
    series_family,
)
from tests.support.prometheus import TIME_SCALE, Prometheus, seconds, shortened_rules
from tools.e2e_site import Pool, Site, SiteSpec, Stage
from tools.fake_actions import FakeJob, JobState
from tools.localcluster.ports import free_port
from tools.waits import eventually, exited

pytestmark = pytest.mark.skipif(
    Prometheus.binary() is None and not os.environ.get("CI"),
    reason="prometheus not on PATH (Debian: apt-get install prometheus)",
)

ALERT = "StrandedJobs"
UNSCHEDULED = "WorkflowPodsUnscheduled"
DOWN = "ListenerDown"
EVALUATION_SECONDS = 1.0
# Panels whose series appear only under conditions this scenario does not create.
NO_DATA_EXPECTED = {
    "Kubernetes API errors": "gha_capacity_kube_errors_total counts failed Kubernetes calls; "
    "none fails here, and a counter with labels has no series before its first increment",
    "GitHub REST calls (demand source)": "only the GitHub demand source makes REST calls; "
    "this scenario reads demand from HUD",
    "GitHub rate limit remaining": "set from the GitHub demand source's answers; this "
    "scenario reads demand from HUD",
    # NodePool limits are off here (no Karpenter); tests/integration/
    # test_karpenter_nodepool_limits.py checks these series against a real NodePool.
    "NodePool CPU: limit, used, headroom": "NodePool limits are off in this scenario",
    "Pairs held back by NodePool limits": "NodePool limits are off in this scenario",
    "NodePool headroom by resource": "NodePool limits are off in this scenario",
    "NodePool reader state": "NodePool limits are off in this scenario",
    # The predictive warm pool needs the GitHub demand source (this scenario reads HUD);
    # tests/unit/capacity/test_monitor_predictive.py reads these series.
    "Predictive: pairs for predicted children vs children arrived": "the predictive warm "
    "pool is off in this scenario",
    "Predictive: children expected vs arrived, per workflow": "the predictive warm pool is "
    "off in this scenario",
    # cluster-autoscaler is not running here (node checks and node groups off);
    # tests/integration/test_node_groups.py checks these series against CA's status.
    "Placeholders on CA deletion candidates": "node checks are off in this scenario",
    "Node group sizes": "cluster_autoscaler.enabled is off in this scenario",
    "Node group headroom and pairs admitted": "cluster_autoscaler.enabled is off here",
    "Node group reader state": "cluster_autoscaler.enabled is off in this scenario",
}


def spec(name: str, scale_set_id: int) -> SiteSpec:
    return SiteSpec(
        name=name,
        scale_set_id=scale_set_id,
        runner_pool=Pool(nodes=1, cpu="8"),
        job_seconds=3.0,
    )


def shortened_rule(name: str) -> dict[str, Any]:
    rules: list[dict[str, Any]] = [
        r for g in shortened_rules()["groups"] for r in g["rules"] if r["alert"] == name
    ]
    (rule,) = rules
    return rule


def alert_window() -> float:
    """Seconds the shortened StrandedJobs rule needs at least: its window plus its ``for``."""
    rule = shortened_rule(ALERT)
    match = re.search(r"\[(\w+):\w+\]", rule["expr"])
    assert match, rule["expr"]
    return seconds(match.group(1)) + seconds(rule["for"])


async def start_prometheus(site: Site, workdir: Path) -> Prometheus:
    assert site.listener is not None
    url = site.listener.metrics_url
    assert url is not None
    target = url.removeprefix("http://").split("/", 1)[0]
    labels = {"scale_set": site.spec.name, "namespace": site.namespace}
    prometheus = Prometheus(workdir, [target], free_port(), labels).start()
    await prometheus.ready()
    assert await prometheus.rule_names() == {r["alert"] for r in alert_rules()}
    return prometheus


def report(**numbers: Any) -> None:
    print(json.dumps({"prometheus": numbers}), file=sys.stderr, flush=True)


def waiting(jobs: list[FakeJob]) -> int:
    return sum(j.state is JobState.ASSIGNED for j in jobs)


async def until_alert(
    prometheus: Prometheus, site: Site, name: str, want: Callable[[list[str]], bool], within: float
) -> float:
    """Poll alert ``name``'s states until ``want`` holds for them; the seconds it took."""
    since = time.monotonic()
    states: list[str] = []

    async def reached() -> bool:
        states[:] = await prometheus.alert_states(name)
        return want(states)

    assert site.listener is not None
    await eventually(
        reached,
        f"alert {name}",
        within,
        interval=EVALUATION_SECONDS,
        alive=lambda: exited(site.listener, f"alert {name}"),
        detail=lambda: f": still {states}\n{prometheus.log_tail()}",
    )
    return time.monotonic() - since


def firing(states: list[str]) -> bool:
    return "firing" in states


async def test_stranded_jobs_alert_fires_with_the_stock_static_header(
    stage: Stage, tmp_path: Path
) -> None:
    started = time.monotonic()
    site = await stage.add_site(spec("prom-stock", 91))
    site.start_listener(capacity=None, max_runners=8)
    await site.wait_session()
    prometheus = await start_prometheus(site, tmp_path / "prometheus")
    try:
        await site.remove_nodes("runner")
        jobs = stage.fake.add_jobs(6, labels=["linux"])
        await site.wait_for(lambda: waiting(jobs) > 0, "a job assigned without a runner", 30)
        to_firing = await until_alert(prometheus, site, ALERT, firing, alert_window() + 60)
        # The jobs are still stuck: assigned to this scale set, no runner started them.
        assert waiting(jobs) == 6
        assert not any(j.state is JobState.RUNNING for j in jobs)
        report(
            scenario="stock",
            first_strand_to_firing_s=round(to_firing, 1),
            rule_window_plus_for_s=alert_window(),
            test_seconds=round(time.monotonic() - started, 1),
        )
    finally:
        await prometheus.stop()


async def test_workflow_pods_unscheduled_fires_while_a_claimed_jobs_workflow_pod_has_no_node(
    stage: Stage, tmp_path: Path
) -> None:
    started = time.monotonic()
    # The workflow pods request 3 CPU; the monitor is told 1 CPU. Its workflow placeholder
    # fits the one 2-CPU workflow node, so the pair is Running and advertised; the workflow
    # pod of the job it lets in fits no node, and preempting the placeholder does not help.
    site = await stage.add_site(
        SiteSpec(
            name="prom-unscheduled",
            scale_set_id=93,
            runner_pool=Pool(nodes=1, cpu="8"),
            workflow_pool=Pool(nodes=1, cpu="2"),
            workflow_requests={"cpu": "3", "memory": "2Gi"},
            job_seconds=3.0,
        )
    )
    settings = site.capacity_settings(
        proactive=1, hud=True, workflow_resources={"requests": {"cpu": "1", "memory": "2Gi"}}
    )
    site.start_listener(capacity=settings, max_runners=4)
    await site.wait_for(
        lambda: site.advertised() == 1 and site.view().pairs_running == 1, "a warm pair", 60
    )
    prometheus = await start_prometheus(site, tmp_path / "prometheus")
    try:
        (job,) = stage.fake.add_jobs(1, labels=["linux"])
        await site.wait_for(
            lambda: job.state is JobState.RUNNING and site.view().workflow_pending == 1,
            "the job claimed by a runner, its workflow pod Pending",
            60,
        )
        hold = seconds(shortened_rule(UNSCHEDULED)["for"])
        to_firing = await until_alert(prometheus, site, UNSCHEDULED, firing, hold + 30)
        # Still the same stranding: claimed (running on GitHub's side), its workflow never
        # started; the assigned − running gap StrandedJobs reads is 0, so it stays quiet.
        assert job.state is JobState.RUNNING
        assert job.workflow_started_at is None
        assert site.view().workflow_pending == 1
        assert await prometheus.alert_states(ALERT) == []

        # A workflow node the pod fits: it schedules, the job runs, the alert resolves.
        await site.add_nodes("workflow", 1, Pool(nodes=1, cpu="4"))
        await site.wait_for(
            lambda: job.workflow_started_at is not None, "the workflow pod Running", 60
        )
        to_resolved = await until_alert(prometheus, site, UNSCHEDULED, lambda s: s == [], 30)
        await site.wait_for(lambda: job.state is JobState.COMPLETED, "the job to finish", 60)
        assert job.result == "succeeded"
        report(
            scenario="workflow pod unscheduled",
            claim_to_firing_s=round(to_firing, 1),
            rule_for_s=hold,
            scheduled_to_resolved_s=round(to_resolved, 1),
            test_seconds=round(time.monotonic() - started, 1),
        )
    finally:
        await prometheus.stop()


async def test_listener_down_fires_when_the_listener_dies(stage: Stage, tmp_path: Path) -> None:
    """A crashed listener stops every series the other rules read, so they go quiet with it;
    ListenerDown reads Prometheus' own `up` for the scale set's target and fires, naming the
    scale set (not ARC's generated runner set name)."""
    started = time.monotonic()
    site = await stage.add_site(spec("prom-down", 94))
    site.start_listener(capacity=site.capacity_settings(proactive=1, hud=True), max_runners=4)
    await site.wait_for(lambda: site.advertised() == 1, "a warm pair", 60)
    prometheus = await start_prometheus(site, tmp_path / "prometheus")
    try:
        hold = seconds(shortened_rule(DOWN)["for"])
        # Healthy for longer than the rule's `for`: quiet.
        quiet_until = time.monotonic() + hold + 3
        while time.monotonic() < quiet_until:
            assert await prometheus.alert_states(DOWN) == []
            await asyncio.sleep(EVALUATION_SECONDS)
        assert site.listener is not None
        site.listener.kill()  # SIGKILL: a crash, no clean shutdown
        killed = time.monotonic()
        alerts: list[dict[str, Any]] = []

        async def down_firing() -> bool:
            alerts[:] = [
                a
                for a in await prometheus.alerts()
                if a["labels"].get("alertname") == DOWN and a["state"] == "firing"
            ]
            return bool(alerts)

        await eventually(
            down_firing,
            f"alert {DOWN}",
            hold + 30,
            interval=EVALUATION_SECONDS,
            detail=lambda: f":\n{prometheus.log_tail()}",
        )
        to_firing = time.monotonic() - killed
        (alert,) = alerts
        assert alert["labels"]["scale_set"] == "prom-down"
        assert alert["labels"]["namespace"] == site.namespace
        # The series every other rule reads are gone with the listener.
        assert await prometheus.query('gha_assigned_jobs{scale_set="prom-down"}') == []
        report(
            scenario="listener killed",
            killed_to_firing_s=round(to_firing, 1),
            rule_for_s=hold,
            test_seconds=round(time.monotonic() - started, 1),
        )
    finally:
        await prometheus.stop()


def substitute(expr: str, site: Site) -> str:
    values = {
        "namespace": site.namespace,
        "scale_set": site.runner_set_name,
        # Grafana's $__rate_interval is at least 4 scrape intervals; 20 s holds 20 samples.
        "__rate_interval": "20s",
    }
    return re.sub(r"\$\{?(__rate_interval|namespace|scale_set)\}?", lambda m: values[m[1]], expr)


async def test_stranded_jobs_alert_stays_quiet_with_the_monitor_and_every_query_has_data(
    stage: Stage, tmp_path: Path
) -> None:
    started = time.monotonic()
    site = await stage.add_site(spec("prom-guarded", 92))
    site.start_listener(capacity=site.capacity_settings(proactive=2, hud=True), max_runners=8)
    await site.wait_for(
        lambda: site.advertised() == 2 and site.view().pairs_running == 2, "2 warm pairs", 60
    )
    prometheus = await start_prometheus(site, tmp_path / "prometheus")
    try:
        # A few jobs run first, so ARC's job counters and histograms have series.
        done = stage.fake.add_jobs(2, labels=["linux"])
        await site.wait_for(
            lambda: all(j.state is JobState.COMPLETED for j in done), "2 jobs to finish", 60
        )

        await site.remove_nodes("runner")
        await site.wait_for(lambda: site.advertised() == 0, "advertising 0 after the loss", 60)
        jobs = stage.fake.add_jobs(6, labels=["linux"])
        # As long as the stock scenario's alert needs to fire, and then some.
        hold_until = time.monotonic() + alert_window() + 15
        while time.monotonic() < hold_until:
            assert await prometheus.alert_states(ALERT) == []
            assert await prometheus.alert_states(UNSCHEDULED) == []
            assert await prometheus.alert_states(DOWN) == []
            assert all(j.state is JobState.QUEUED for j in jobs)
            await asyncio.sleep(EVALUATION_SECONDS)

        # Every dashboard query returns data from the TSDB.
        dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
        empty: list[str] = []
        checked = 0
        for panel in dashboard_panels(dashboard):
            if panel["type"] == "row" or panel["title"] in NO_DATA_EXPECTED:
                continue
            for target in panel["targets"]:
                checked += 1
                if not await prometheus.query(substitute(target["expr"], site)):
                    empty.append(f"{panel['title']}: {target['expr']}")
        for variable in dashboard["templating"]["list"]:
            query = variable.get("query")
            if isinstance(query, dict):
                selector = re.fullmatch(r"label_values\((.+),\s*\w+\)", query["query"])
                assert selector, query
                checked += 1
                if not await prometheus.query(substitute(selector[1], site)):
                    empty.append(f"variable {variable['name']}: {query['query']}")
        # Every series an alert rule reads is in the TSDB for this scale set.
        families = read_metric_list()
        for rule in alert_rules():
            use, _ = analyse(rule["expr"], families)
            for series in sorted(use.series):
                series_family(series, families)
                checked += 1
                if not await prometheus.query(f'{series}{{namespace="{site.namespace}"}}'):
                    empty.append(f"alert {rule['alert']}: {series}")
        assert empty == [], "queries without data:\n" + "\n".join(empty)
        # The workflow pods of the jobs that ran were Pending only while they preempted their
        # placeholders: WorkflowPodsUnscheduled never fired at any point of the run.
        assert (
            await prometheus.query(
                f'max_over_time(ALERTS{{alertname="{UNSCHEDULED}", alertstate="firing"}}[1h])'
            )
            == []
        )
        report(
            scenario="monitor",
            queries_with_data=checked,
            skipped_panels=sorted(NO_DATA_EXPECTED),
            time_scale=TIME_SCALE,
            test_seconds=round(time.monotonic() - started, 1),
        )
    finally:
        await prometheus.stop()
