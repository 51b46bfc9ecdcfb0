"""The runner stand-in on its own (no listener): it must behave like ARC's controllers and the
runner closely enough for the other scenarios to mean something.

The ERS is patched here exactly as the listener patches it, and jobs are assigned with the
fake's own assignment round (what a poll would do).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client

from tools.e2e_site import Pool, Site, SiteSpec, Stage
from tools.fake_actions import FakeJob, JobState
from tools.runner_standin import (
    ARC_GROUP,
    ARC_VERSION,
    ER_PLURAL,
    ERS_PLURAL,
    LABEL_RUNNER_POD,
    LABEL_SCALE_SET_NAME,
    MERGE_PATCH,
    RunnerStandIn,
)


async def patch_ers(site: Site, replicas: int, patch_id: int) -> None:
    body = {"spec": {"patchID": patch_id, "replicas": replicas or None}}
    await client.CustomObjectsApi(site.stage.api).patch_namespaced_custom_object(
        ARC_GROUP,
        ARC_VERSION,
        site.namespace,
        ERS_PLURAL,
        site.runner_set_name,
        body,
        _content_type=MERGE_PATCH,
    )


async def one_job_on_an_idle_runner(site: Site) -> tuple[RunnerStandIn, FakeJob]:
    """One runner made idle, then one job queued and assigned to this site."""
    standin = site.standin
    assert standin is not None
    await patch_ers(site, 1, 1)
    await site.wait_for(lambda: standin.stats().runners_idle == 1, "an idle runner", 60)
    (job,) = site.stage.fake.add_jobs(1, labels=["linux"])
    site.stage.fake.assign(site.scale_set_id, None)
    return standin, job


async def ephemeral_runners(site: Site) -> list[dict[str, Any]]:
    listed = await client.CustomObjectsApi(site.stage.api).list_namespaced_custom_object(
        ARC_GROUP, ARC_VERSION, site.namespace, ER_PLURAL
    )
    return [r for r in listed["items"] if not r["metadata"].get("deletionTimestamp")]


async def test_standin_follows_replicas_runs_jobs_and_strands_without_capacity(
    stage: Stage,
) -> None:
    site = await stage.add_site(
        SiteSpec(
            name="standin",
            scale_set_id=11,
            job_seconds=1.0,
            strand_after=2.0,
        )
    )
    standin = site.standin
    assert standin is not None
    core = client.CoreV1Api(stage.api)

    await patch_ers(site, 3, 1)
    await site.wait_for(lambda: standin.stats().runners_idle == 3, "3 idle runners", 60)
    pods = await core.list_namespaced_pod(site.namespace, label_selector=LABEL_SCALE_SET_NAME)
    assert len(pods.items) == 3
    for pod in pods.items:
        assert pod.spec.priority_class_name == "arc-runner"
        assert pod.spec.priority == 0
        assert pod.metadata.labels[LABEL_SCALE_SET_NAME] == "standin"
        assert pod.status.phase == "Running"
    runners = await ephemeral_runners(site)
    assert {r["metadata"]["annotations"]["actions.github.com/patch-id"] for r in runners} == {"1"}
    assert {r["status"]["phase"] for r in runners} == {"Running"}

    done = stage.fake.add_jobs(2, labels=["linux"])
    stage.fake.assign(site.scale_set_id, None)
    await site.wait_for(lambda: standin.stats().jobs_completed == 2, "two jobs done", 60)
    assert all(j.workflow_started_at is not None and j.result == "succeeded" for j in done)
    assert stage.fake.stranded() == []

    # The workflow pool is lost: the next job's workflow pod can never schedule.
    await site.remove_nodes("workflow")
    (doomed,) = stage.fake.add_jobs(1, labels=["linux"])
    stage.fake.assign(site.scale_set_id, None)
    await site.wait_for(lambda: standin.stats().stranded_reported == 1, "a stranded job", 60)
    assert doomed.state is JobState.RUNNING
    assert doomed.workflow_started_at is None
    assert stage.fake.stranded(site.scale_set_id) == [doomed]
    workflow = await core.list_namespaced_pod(site.namespace, label_selector=LABEL_RUNNER_POD)
    assert [(p.spec.priority_class_name, p.status.phase) for p in workflow.items] == [
        ("arc-workflow", "Pending")
    ]
    assert workflow.items[0].metadata.name == f"{doomed.runner_name}-workflow"
    # Finished runners are gone, pods and EphemeralRunners alike.
    await site.wait_for(lambda: standin.stats().runners == 1, "finished runners removed", 30)

    # patchID > 0: scale up only, never down.
    await patch_ers(site, 4, 2)
    await site.wait_for(lambda: standin.stats().runners_idle == 3, "3 new idle runners", 60)
    await patch_ers(site, 1, 3)
    await site.wait_for(lambda: standin.stats().patch_id == 3, "patch 3 seen", 10)
    await asyncio.sleep(1.0)  # give a (wrong) scale-down the chance to happen
    assert standin.stats().runners == 4

    # patchID 0: idle runners are deleted, the busy (stranded) one is kept.
    await patch_ers(site, 1, 0)
    await site.wait_for(lambda: standin.stats().runners == 1, "scale down to the busy runner", 30)
    assert standin.stats().runners_busy == 1
    await site.wait_for(
        lambda: len(stage.fake.scale_sets[site.scale_set_id].runners) == 1,
        "idle runners unregistered",
        10,
    )
    assert stage.fake.jobs_of(site.scale_set_id, JobState.RUNNING) == [doomed]
    assert standin.errors == []


async def test_a_workflow_pod_that_cannot_schedule_fails_its_job_after_the_prepare_timeout(
    stage: Stage,
) -> None:
    # No workflow node at all: the workflow pod stays Pending. The hooks wait for it for
    # ACTIONS_RUNNER_PREPARE_JOB_TIMEOUT_SECONDS (600 s by default; 3 s here), then fail the
    # job and remove the pod.
    site = await stage.add_site(
        SiteSpec(
            name="timeout",
            scale_set_id=12,
            workflow_pool=Pool(nodes=0),
            strand_after=1.0,
            prepare_timeout=3.0,
        )
    )
    standin, doomed = await one_job_on_an_idle_runner(site)
    core = client.CoreV1Api(stage.api)
    await site.wait_for(lambda: doomed.state is JobState.COMPLETED, "the job to end", 60)

    assert (doomed.result, doomed.failure) == ("failed", "prepare_timeout")
    assert doomed.workflow_started_at is None
    assert doomed.claimed_at is not None
    assert doomed.finished_at is not None
    assert doomed.finished_at - doomed.claimed_at >= 3.0
    stats = standin.stats()
    assert (stats.jobs_timed_out, stats.jobs_completed, stats.stranded_reported) == (1, 0, 1)
    await site.wait_for(
        lambda: doomed.runner_name not in standin.runners, "the failed runner removed", 30
    )
    workflow = await core.list_namespaced_pod(site.namespace, label_selector=LABEL_RUNNER_POD)
    assert [p for p in workflow.items if not p.metadata.deletion_timestamp] == []
    assert standin.errors == []


async def test_a_workflow_pod_evicted_mid_run_fails_its_job_and_says_why(stage: Stage) -> None:
    # The pods carry what the runner pod template sets (the shipped chart's do-not-disrupt);
    # an eviction mid-run (what consolidation does to a pod without it) fails the job, and the
    # job's failure names the pod and the reason the API server recorded on it.
    annotations = {"karpenter.sh/do-not-disrupt": "true"}
    site = await stage.add_site(
        SiteSpec(name="evict", scale_set_id=13, job_seconds=120.0, pod_annotations=annotations)
    )
    standin, job = await one_job_on_an_idle_runner(site)
    core = client.CoreV1Api(stage.api)
    await site.wait_for(lambda: job.workflow_started_at is not None, "the job running", 60)

    workflow = job.runner_name and standin.runners[job.runner_name].workflow_pod
    assert workflow
    for name in (job.runner_name, workflow):
        pod = await core.read_namespaced_pod(name, site.namespace)
        assert pod.metadata.annotations == annotations, name
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=workflow))
    await core.create_namespaced_pod_eviction(workflow, site.namespace, eviction)
    await site.wait_for(lambda: job.state is JobState.COMPLETED, "the job to end", 60)

    assert (job.result, job.failure) == ("failed", "workflow: EvictionByEvictionAPI")
    stats = standin.stats()
    assert (stats.jobs_lost, stats.jobs_completed) == (1, 0)
    assert dict(standin.loss_reasons) == {"workflow: EvictionByEvictionAPI": 1}
