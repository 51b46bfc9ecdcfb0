"""A bare install takes jobs: the companion chart rendered with only its required values and
`capacity.enabled: true` gives settings (GitHub's REST API as demand, with the listener's own
credentials) under which a listener makes a pair for a queued job, runs it, and advertises no
more than that pair and the job's own pods.

The chart's settings are used as rendered except for where this cluster's pools are: every
pool of the e2e site is tainted, so the placement a user's nodes would dictate is added."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.helm_chart import CONTROLLER_NAMESPACE, by_kind, helm_binary, template
from tools.e2e_site import SiteSpec, Stage
from tools.fake_actions import JobState
from tools.listener_process import metric_value


async def test_the_chart_with_only_its_required_values_takes_a_job(
    stage: Stage, tmp_path: Path
) -> None:
    site = await stage.add_site(SiteSpec(name="bare", scale_set_id=95, job_seconds=2.0))
    stage.github.add_repositories("acme", ["app"])
    required = {
        "namespace": site.namespace,
        "githubConfigUrl": "https://github.com/acme",
        "workflowPod": {"resources": {"requests": dict(site.spec.workflow_requests)}},
        "capacity": {"enabled": True},
    }
    docs = template(helm_binary(), {"scaleSets": {"bare": required}}, tmp_path)
    config = by_kind(docs, "ConfigMap")[f"{CONTROLLER_NAMESPACE}/capacity-listener-bare"]
    capacity = yaml.safe_load(config["data"]["capacity.yaml"])
    assert capacity["demand"] == {"source": "github"}
    capacity.update(
        node_selector=site.node_selector("runner"),
        tolerations=site.tolerations("runner"),
        workflow_node_selector=site.node_selector("workflow"),
        workflow_tolerations=site.tolerations("workflow"),
    )

    listener = site.start_listener(capacity=capacity, max_runners=10)
    await site.wait_session()
    await site.wait_for(lambda: bool(stage.github.calls), "a read of GitHub", 60)

    (job,) = stage.fake.add_jobs(1, labels=["linux"])
    await site.wait_for(lambda: job.state is JobState.COMPLETED, "the job to run", 150)
    assert job.scale_set_id == site.scale_set_id
    assert job.result == "succeeded"
    assert stage.fake.stranded() == []
    # No warm pool: the one pair, and the job's pods beside it while both hold room on a node
    # (a bound pod needs no preemption where the node has room) until the pair is released.
    advertised = [c.value or 0 for c in stage.fake.capacity_history(site.scale_set_id)]
    assert max(advertised) <= 2
    await site.wait_for(lambda: (site.advertised() or 0) <= 1, "back to one pair at most", 60)
    page = await listener.metrics_text()
    assert metric_value(page, "gha_capacity_demand_source", {"source": "github"}) == 1
