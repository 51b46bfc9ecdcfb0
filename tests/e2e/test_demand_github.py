"""The GitHub REST demand source end to end, with no HUD: jobs queued on (the fake of) GitHub
are read through its REST API with the listener's own PAT, pairs are created for them, the
header rises, and the jobs run."""

from __future__ import annotations

from tools.e2e_site import SiteSpec, Stage
from tools.fake_actions import JobState
from tools.listener_process import metric_value


async def test_jobs_queued_on_github_get_pairs_and_run(stage: Stage) -> None:
    site = await stage.add_site(SiteSpec(name="rest", scale_set_id=91, job_seconds=3.0))
    stage.github.add_repositories("acme", ["app", "docs", "infra"])  # the org's repositories
    capacity = site.capacity_settings(proactive=0, github=True, hud_floor=0)
    listener = site.start_listener(capacity=capacity, max_runners=8)
    await site.wait_session()
    await site.wait_for(
        lambda: any(c.status == 304 for c in stage.github.calls), "a 304 from GitHub", 30
    )
    assert site.advertised() == 0
    assert not site.placeholders

    jobs = stage.fake.add_jobs(3, labels=["linux"])
    await site.wait_for(lambda: (site.advertised() or 0) >= 1, "the header to rise", 60)
    await site.wait_for(
        lambda: all(j.state is JobState.COMPLETED for j in jobs), "the jobs to run", 90
    )
    assert {j.scale_set_id for j in jobs} == {site.scale_set_id}
    assert stage.fake.stranded() == []
    added = [e for e in site.placeholder_events if e.kind == "ADDED"]
    assert added, "no placeholder was created"

    # No HUD anywhere; GitHub was read with the listener's credentials.
    assert stage.hud is None or stage.hud.requests == []
    assert {c.token for c in stage.github.calls} == {"ghp_e2e_fake_token"}
    paths = {c.path for c in stage.github.calls}
    assert "/api/v3/orgs/acme/repos" in paths
    assert "/api/v3/repos/acme/app/actions/runs" in paths
    page = await listener.metrics_text()
    calls = "gha_capacity_demand_github_calls_total"
    assert (metric_value(page, calls, {"result": "ok"}) or 0) > 0
    assert (metric_value(page, calls, {"result": "not_modified"}) or 0) > 0
    assert metric_value(page, "gha_capacity_demand_source", {"source": "github"}) == 1
