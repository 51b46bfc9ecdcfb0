"""Webhook demand end to end: the fake GitHub delivers signed `workflow_job` events (seeded
delay 0.3–3 s, seeded loss) to a real receiver process, which reconciles with the fake's REST
API; a listener with `demand.source: webhook` reads it. A lost delivery is healed within one
reconcile interval, and a receiver restart with jobs queued while it was down loses none."""

from __future__ import annotations

import httpx

from tools.e2e_site import SiteSpec, Stage
from tools.fake_actions import JobState
from tools.fake_webhooks import WebhookSender
from tools.listener_process import PAT, ReceiverProcess, metric_value
from tools.waits import eventually

SECRET = "e2e-webhook-secret"
RECONCILE = 5.0


async def reconciled(receiver: ReceiverProcess) -> bool:
    async with httpx.AsyncClient(timeout=2.0, trust_env=False) as http:
        try:
            answer = await http.get(f"{receiver.reads_url}/v1/demand", params={"labels": "x"})
        except httpx.HTTPError:
            return False
    return answer.status_code == 200


async def test_webhook_demand_heals_lost_deliveries_and_restarts(stage: Stage) -> None:
    stage.github.add_repositories("acme", ["app"])  # before the receiver's first listing
    receiver = ReceiverProcess(
        "receiver",
        stage.workdir,
        secret=SECRET,
        github_config_url=stage.fake.configure_url("acme"),
        token=PAT,
        reconcile_interval=RECONCILE,
    ).start()
    sender = WebhookSender(stage.fake, receiver.deliveries_url, SECRET, seed=5, loss=0.02)
    try:
        site = await stage.add_site(SiteSpec(name="hook", scale_set_id=93, job_seconds=3.0))
        await eventually(
            lambda: reconciled(receiver),
            "the receiver's first reconcile",
            30,
            detail=lambda: f":\n{receiver.log_tail()}",
        )
        capacity = site.capacity_settings(proactive=0, webhook=receiver.reads_url, hud_floor=0)
        listener = site.start_listener(capacity=capacity, max_runners=8)
        await site.wait_session()
        assert site.advertised() == 0

        # A lone job whose `queued` delivery is lost: only the reconcile can bring it in.
        sender.lose_next(1)
        (lone,) = stage.fake.add_jobs(1, labels=["linux"])
        await site.wait_for(lambda: lone.state is JobState.COMPLETED, "the lone job", 60)
        page = await receiver.metrics_text()
        added = metric_value(page, "gha_receiver_reconciled_jobs_total", {"change": "added"})
        assert (added or 0) >= 1, page
        assert [s.job_id for s in sender.results("lost")][:1] == [lone.runner_request_id]
        first = [lone, *stage.fake.add_jobs(3, labels=["linux"])]
        await site.wait_for(
            lambda: all(j.state is JobState.COMPLETED for j in first), "the next jobs", 120
        )
        listener_page = await listener.metrics_text()
        assert metric_value(listener_page, "gha_capacity_demand_source", {"source": "webhook"})

        # Down, with jobs queued meanwhile (their deliveries fail), then back with nothing.
        await receiver.stop()
        second = stage.fake.add_jobs(2, labels=["linux"])
        await sender.drain()
        failed = [s for s in sender.sent if s.job_id in {j.runner_request_id for j in second}]
        assert failed
        assert all(not s.result.isdigit() for s in failed)
        receiver.start()
        await site.wait_for(
            lambda: all(j.state is JobState.COMPLETED for j in second),
            "the jobs queued while down",
            120,
        )
        assert {j.scale_set_id for j in first + second} == {site.scale_set_id}
        assert stage.fake.stranded() == []
        assert not sender.results("401")  # every delivery was signed right
    finally:
        await sender.aclose()
        await receiver.stop()
