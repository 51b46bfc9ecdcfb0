"""The live metrics page of the running program on a real cluster: the listener process,
capacity and HUD on, one job run through a warm pair. Its page has exactly the families of
deploy/metrics.txt, and every series the dashboard and the alert rules query (the static side
of the same check: tests/unit/test_metric_list.py, test_dashboard.py, test_alert_rules.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.deploy_files import (
    DASHBOARD,
    SCRAPE_SERIES,
    alert_rules,
    analyse,
    dashboard_queries,
    read_metric_list,
)
from tools.localcluster import LocalCluster
from tools.waits import eventually

pytestmark = pytest.mark.cluster


async def test_live_metrics_page_exports_the_listed_series_and_every_queried_one(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The listener process, capacity and HUD on, one job run through a warm pair: its page
    has exactly the families of deploy/metrics.txt with their labels, and every series a
    dashboard panel or an alert rule queries."""
    from prometheus_client.parser import text_string_to_metric_families

    from tests.unit.capacity.test_reconciler_metrics import FIRST_WRITTEN_WHEN_USED
    from tools.e2e_site import SiteSpec, Stage
    from tools.fake_actions import JobState

    listed = read_metric_list()
    async with Stage(local_cluster, tmp_path / "stage", prefix="metrics") as stage:
        site = await stage.add_site(SiteSpec(name="live", scale_set_id=71))
        listener = site.start_listener(
            capacity=site.capacity_settings(proactive=1, hud=True), max_runners=4
        )
        await site.wait_session()
        await site.wait_for(lambda: site.advertised() == 1, "one warm pair advertised", 60)
        jobs = stage.fake.add_jobs(1, labels=["linux"])
        await site.wait_for(
            lambda: all(j.state is JobState.COMPLETED for j in jobs), "the job to finish", 90
        )

        async def page_with_job_series() -> str | None:
            text = await listener.metrics_text()
            return text if "gha_job_execution_duration_seconds_bucket" in text else None

        text = await eventually(page_with_job_series, "the job's series on the page", 30)

    families = {f.name: f for f in text_string_to_metric_families(text)}
    exported: dict[str, tuple[str, set[str]]] = {}
    samples: set[str] = set()
    for family in families.values():
        if not family.name.startswith("gha_"):
            continue
        name = family.name + "_total" if family.type == "counter" else family.name
        labels = {k for s in family.samples for k in s.labels if k != "le"}
        exported[name] = (family.type, labels)
        samples |= {s.name for s in family.samples}

    # Exactly the listed families, each with its type and (where it has samples) labels. As
    # in Go, a vector with extra labels is written once it has a child: those this run does
    # not use (no GitHub demand, no Kubernetes error) may be missing, no other.
    missing = set(listed) - set(exported)
    assert set(exported) <= set(listed), sorted(set(exported) - set(listed))
    assert missing <= FIRST_WRITTEN_WHEN_USED, sorted(missing - FIRST_WRITTEN_WHEN_USED)
    for name, (kind, labels) in exported.items():
        assert kind == listed[name].type, name
        assert not labels or labels == set(listed[name].labels), (name, labels)
    assert not any(name.endswith("_created") for name in samples)

    # Every series the dashboard and the alerts read is a series on this page.
    queried: set[str] = set()
    for _, expr in dashboard_queries(json.loads(DASHBOARD.read_text(encoding="utf-8"))):
        queried |= analyse(expr, listed)[0].series
    for rule in alert_rules():
        queried |= analyse(rule["expr"], listed)[0].series
    page_series = samples | {
        name for name, (kind, _) in exported.items() if kind in ("gauge", "counter")
    }
    # (Those written once used are on the page whenever they have a value to query.)
    # `up` is Prometheus's own series for the scrape (ListenerDown), not the page's.
    unseen = queried - page_series - set(SCRAPE_SERIES)
    assert unseen <= FIRST_WRITTEN_WHEN_USED, sorted(unseen - FIRST_WRITTEN_WHEN_USED)
