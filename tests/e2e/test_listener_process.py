"""The listener process as ARC runs it, capacity-awareness off (stock ARC behaviour).

A real ``python -m listener`` reads config.json, goes through the auth chain, creates a
session, long-polls with ``X-ScaleSetMaxCapacity = max_runners``, acks every message, acquires
offered jobs (GHES JobAvailable mode), patches the EphemeralRunnerSet and the EphemeralRunner
status, and on SIGTERM deletes its session and exits 0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from tools.e2e_site import Site, SiteSpec, Stage
from tools.fake_actions import FakeActions, JobState
from tools.listener_process import PAT
from tools.localcluster import LocalCluster
from tools.runner_standin import ARC_GROUP, ARC_VERSION, ER_PLURAL
from tools.waits import eventually


async def runner_statuses(site: Site) -> dict[str, dict[str, Any]]:
    listed = await client.CustomObjectsApi(site.stage.api).list_namespaced_custom_object(
        ARC_GROUP, ARC_VERSION, site.namespace, ER_PLURAL
    )
    return {r["metadata"]["name"]: r.get("status") or {} for r in listed["items"]}


async def test_listener_runs_the_whole_protocol_and_shuts_down_cleanly(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    # The explicit-acquire service (GHES, ARC-era pipelines): JobAvailable → acquirejobs →
    # JobAssigned. The other end-to-end tests run on the broker, which assigns directly.
    fake = FakeActions(pats=[PAT], poll_hold=2.0, strand_grace=10.0, ghes_mode=True)
    async with Stage(local_cluster, tmp_path / "stage", fake=fake) as stage:
        await _whole_protocol(stage, fake)


async def _whole_protocol(stage: Stage, fake: FakeActions) -> None:
    # Jobs long enough that both are running at once and both EphemeralRunners are still
    # there to be marked busy, even when one runner comes up seconds after the other.
    site = await stage.add_site(SiteSpec(name="ghes", scale_set_id=21, job_seconds=20.0))
    standin = site.standin
    assert standin is not None
    listener = site.start_listener(capacity=None, max_runners=5)
    await site.wait_session()

    # Auth chain and session.
    assert fake.registration_scopes == ["orgs/acme"]
    assert len(fake.registrations) == 1
    assert fake.registrations[0]["runner_event"] == "register"
    assert fake.admin_tokens_issued == 1
    assert fake.sessions_created == 1
    # The start-up patch is a full-state sync (patchID 0).
    await site.wait_for(lambda: standin.ers is not None and "patchID" in standin.ers["spec"],
                        "the first ERS patch", 20)  # fmt: skip

    jobs = fake.add_jobs(2, labels=["linux"])
    await site.wait_for(
        lambda: all(j.state is JobState.RUNNING for j in jobs), "both jobs running", 60
    )
    assert fake.counters(site.scale_set_id)["offered"] == 2
    acquired = [i for r in fake.requests_for("acquire_jobs") for i in json.loads(r.body or b"[]")]
    assert sorted(acquired) == sorted(j.runner_request_id for j in jobs)
    assert standin.stats().replicas >= 1

    # JobStarted → the listener marks the EphemeralRunner busy (status.jobId).
    async def busy_marked() -> bool:
        statuses = await runner_statuses(site)
        return all(statuses.get(j.runner_name or "", {}).get("jobId") == j.job_id for j in jobs)

    await eventually(busy_marked, "status.jobId on both EphemeralRunners", within=10)
    statuses = await runner_statuses(site)
    for job in jobs:
        status = statuses[job.runner_name or ""]
        assert status["jobRequestId"] == job.runner_request_id
        assert status["jobRepositoryName"] == "acme/app"
        assert status["workflowRunId"] == job.workflow_run_id

    await site.wait_for(
        lambda: all(j.state is JobState.COMPLETED for j in jobs), "both jobs completed", 60
    )
    # Every message delivered was acknowledged; the header was always max_runners.
    scale_set = fake.scale_sets[site.scale_set_id]
    await site.wait_for(lambda: not scale_set.messages and not scale_set.outbox, "all acked", 10)
    delivered = {p.message_id for p in fake.polls if p.message_id is not None}
    assert delivered
    assert delivered <= {message_id for _, message_id in fake.acks}
    assert {p.capacity for p in fake.polls} == {5}
    # Nothing assigned, nothing left: the scaler brings the runner set back to 0.
    await site.wait_for(lambda: standin.stats().replicas == 0, "replicas back to 0", 20)

    session = fake.session(site.scale_set_id)
    assert session is not None
    assert await listener.stop() == 0
    assert session.deleted
    assert fake.session(site.scale_set_id) is None
    assert fake.expired_sessions == []
    deletes = fake.requests_for("session_delete")
    assert [r.status for r in deletes] == [204]
    assert "ghp_e2e_fake_token" not in listener.log_text()
    assert standin.errors == []
