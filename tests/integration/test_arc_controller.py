"""This listener as a drop-in for ARC's, under ARC's real gha-runner-scale-set controller:
opt-in (``make test-arc``, ARC_SRC naming an actions-runner-controller source tree; see
tests/support/arc_controller.py), skipped with one line without it.

Each test gets ARC's controller (built from the tree, run as a process with the tree's CRDs)
on a control plane of this module's own (the CRDs are replaced by the tree's, which no other
test should see), the companion chart (charts/capacity-listener) and the tree's
gha-runner-scale-set chart with the documented values overlay
(see tests/support/arc_scene.py), installed with the pinned Helm. The Actions service is
FakeActions with the controller's own calls mounted (tools/fake_arc_admin.py). ARC's listener
pods sit on kwok's fake nodes; ``ListenerPods`` runs this listener for each of them as a local
process with the pod's config.json, settings, environment and ServiceAccount token.

Test-only changes to the overlay, each because the local control plane lacks something:
``githubConfigUrl``/``githubConfigSecret`` point at the fake; ``controllerServiceAccount`` is
named (no controller Deployment for ARC's chart to look up); the runner pods' ``work`` volume
is an emptyDir (no storage provisioner for kubernetes mode's ephemeral claim).

Timings (ARC build, each phase) are printed as JSON lines (run with -s).
"""

from __future__ import annotations

import asyncio
import copy
import json
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from tests.support import arc_controller as arc
from tests.support.arc_runners import ArcRunners
from tests.support.arc_scene import NAME, ROLE, WORKFLOW_REQUESTS, Scene, report
from tools.fake_actions import JobState
from tools.localcluster import BuildError, ClusterError, LocalCluster, ensure_built
from tools.localcluster.build import ensure_helm_built

# A preemptor can wait for kube-scheduler's 5-minute flush of unschedulable pods: with async
# preemption (on by default since Kubernetes 1.32), a victim that is gone at once (the
# placeholders' grace period is 0) can leave the preemptor parked although its room is free
# (kubernetes/kubernetes#141694, seen here in about 1 run of 3 with two runner pods at once).
# The waits for a preemptor allow for it; the time it took is printed.
SCHEDULER_FLUSH = 330.0

_SKIP = arc.skip_reason()
if _SKIP is not None:  # one line for the whole tier, as `make test` shows it
    pytest.skip(_SKIP, allow_module_level=True)

pytestmark = [pytest.mark.timeout(900), pytest.mark.cluster]


@pytest.fixture(scope="module")
def arc_build() -> arc.Build:
    started = time.monotonic()
    build = arc.ensure_built()
    report(
        "arc-build",
        version=build.version,
        commit=build.commit,
        build_s=build.seconds if build.seconds is not None else "cached",
        lookup_s=time.monotonic() - started,
    )
    return build


@pytest.fixture(scope="module")
def helm_bin() -> Path:
    try:
        return ensure_helm_built().binary
    except BuildError as exc:
        pytest.fail(f"Helm build failed: {exc}", pytrace=False)


@pytest.fixture(scope="module")
def arc_cluster(
    tmp_path_factory: pytest.TempPathFactory, arc_build: arc.Build
) -> Iterator[LocalCluster]:
    try:
        artifacts = ensure_built()
    except BuildError as exc:
        pytest.fail(f"local control plane build failed: {exc}", pytrace=False)
    workdir = tmp_path_factory.mktemp("arc-cluster")
    cluster = LocalCluster(artifacts, workdir)
    try:
        cluster.start()
    except ClusterError as exc:
        pytest.fail(f"local control plane did not start: {exc}", pytrace=False)
    src = arc.source_dir()
    assert src is not None
    arc.install_crds(cluster, src)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(workdir / "etcd", ignore_errors=True)


@pytest.fixture
def local_cluster(arc_cluster: LocalCluster) -> LocalCluster:
    """This module's control plane, for the conftest's namespace fixtures."""
    return arc_cluster


@pytest.fixture
async def scene(
    local_cluster: LocalCluster,
    namespace: str,
    controller_namespace: str,
    helm_bin: Path,
    arc_build: arc.Build,
    tmp_path: Path,
) -> AsyncIterator[Scene]:
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(local_cluster.kubeconfig), client_configuration=configuration
    )
    async with client.ApiClient(configuration) as api:
        s = Scene(
            api, local_cluster, namespace, controller_namespace, helm_bin, arc_build, tmp_path
        )
        try:
            yield s
        finally:
            await s.stop()


def forbidden(text: str) -> list[str]:
    return [line for line in text.splitlines() if "forbidden" in line.lower()]


# --- the tests ----------------------------------------------------------------------------


async def test_arc_creates_our_listener_pod_and_its_calls_are_allowed(scene: Scene) -> None:
    started = time.monotonic()
    scene.add_node()
    await scene.start()
    await scene.install()

    async def listener_running() -> Any:
        return scene.pods.running() or None

    (ran,) = await scene.wait(listener_running, "ARC's listener pod, played by our listener")
    pod_created = time.monotonic() - started
    spec = ran.pod["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == "listener"]
    (overlay,) = scene.base_overlay["listenerTemplate"]["spec"]["containers"]
    assert container["image"] == overlay["image"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["listener-config"] == "/etc/gha-listener"
    assert mounts["capacity-config"] == "/etc/capacity-listener"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["capacity-config"]["configMap"]["name"] == f"capacity-listener-{NAME}"
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
    assert ports.get("metrics") == 8080, ports  # ARC's, from --listener-metrics-addr
    assert ports.get("probes") == 8081, ports  # the overlay's
    assert spec["terminationGracePeriodSeconds"] == 60
    config_json = ran.process.config
    assert config_json["configure_url"] == scene.url
    (runner_set,) = await scene.arc_objects("ephemeralrunnersets")
    assert config_json["ephemeral_runner_set_name"] == runner_set["metadata"]["name"]
    assert config_json["runner_scale_set_id"] == scene.scale_set_id()

    # The placeholders (create/list/delete pods in the runner namespace) are made with the
    # pod's own token.
    async def pairs() -> bool:
        return len(await scene.placeholders()) == 4

    await scene.wait(pairs, "two placeholder pairs")
    await scene.wait(lambda: 2 in scene.headers(), "the header at 2")

    # One job: the listener patches ARC's EphemeralRunnerSet (its generated name) to 1.
    scene.fake.add_jobs(1, labels=(NAME,))

    async def patched() -> bool:
        (current,) = await scene.arc_objects("ephemeralrunnersets")
        return bool(current["spec"].get("replicas") == 1)

    await scene.wait(patched, "the EphemeralRunnerSet patched to 1 replica")
    log = ran.process.log_text()
    assert forbidden(log) == [], forbidden(log)
    report("arc-listener-pod", listener_pod_after_install_s=pod_created,
           test_s=time.monotonic() - started)  # fmt: skip


async def test_a_burst_flows_to_runner_pods_that_preempt_placeholders(scene: Scene) -> None:
    started = time.monotonic()
    scene.add_node()
    await scene.start()
    await scene.install()
    await scene.wait(lambda: 2 in scene.headers(), "the header at 2", within=120)
    runner_placeholders = {
        p.metadata.name for p in await scene.placeholders()
        if p.metadata.labels[ROLE] == "placeholder-runner"
    }  # fmt: skip
    assert len(runner_placeholders) == 2
    ready = time.monotonic()

    # Three jobs for a header of 2: two are assigned, the third stays queued.
    scene.fake.add_jobs(3, labels=(NAME,))
    sid = scene.scale_set_id()

    async def assigned() -> bool:
        return len(scene.fake.jobs_of(sid, JobState.ASSIGNED)) == 2

    await scene.wait(assigned, "two jobs assigned")

    async def runners_running() -> list[Any] | None:
        pods = [p for p in await scene.runner_pods() if p.status.phase == "Running"]
        return pods if len(pods) == 2 else None

    pods = await scene.wait(runners_running, "two runner pods Running", within=SCHEDULER_FLUSH)
    assert {p.spec.node_name for p in pods} <= set(scene.nodes)
    flowed = time.monotonic()
    left = {p.metadata.name for p in await scene.placeholders()}
    assert not (runner_placeholders & left), "the runner pods did not take the placeholders' room"
    runners = await scene.arc_objects("ephemeralrunners")
    assert len(runners) == 2
    assert len(scene.admin.jit_configs) == 2
    # The header never went above what the placeholders confirmed; the third job waits.
    assert max(h for h in scene.headers() if h is not None) == 2
    assert len(scene.fake.queued()) == 1
    report("arc-burst", header_ready_s=ready - started, runner_pods_running_s=flowed - ready,
           test_s=time.monotonic() - started)  # fmt: skip


async def test_jobs_run_to_completion_through_arc_and_the_queue_drains(scene: Scene) -> None:
    started = time.monotonic()
    scene.add_node()
    await scene.start()
    await scene.install()
    await scene.wait(lambda: 2 in scene.headers(), "the header at 2", within=120)
    sid = scene.scale_set_id()
    runners = ArcRunners(scene.api, scene.fake, scene.runners, sid, WORKFLOW_REQUESTS)
    runners.start()
    try:
        jobs = scene.fake.add_jobs(3, labels=(NAME,))

        def done() -> bool:
            # The runner exits (its pod Succeeded) just after it completes its job.
            completed = all(
                scene.fake.job(j.runner_request_id).state is JobState.COMPLETED for j in jobs
            )
            return completed and len(runners.finished) == 3

        await scene.wait(done, "three jobs run to completion", within=2 * SCHEDULER_FLUSH)
        ran = time.monotonic()
        # Every job ran: its workflow pod got to Running (took a workflow placeholder's room).
        assert scene.fake.stranded(sid) == []
        assert all(scene.fake.job(j.runner_request_id).result == "succeeded" for j in jobs)

        async def back_to_start() -> bool:
            return (
                not await scene.arc_objects("ephemeralrunners")
                and len(await scene.placeholders()) == 4
                and scene.headers()[-1] == 2
            )

        await scene.wait(back_to_start, "no runner left, two pairs again", within=120)
    finally:
        await runners.stop()
    # GitHub never had more than two of these jobs in flight with this scale set.
    assert max(h for h in scene.headers() if h is not None) == 2
    report("arc-jobs", three_jobs_s=ran - started, test_s=time.monotonic() - started)


async def test_recreate_and_delete_leave_no_placeholder_or_session(scene: Scene) -> None:
    started = time.monotonic()
    scene.add_node()
    await scene.start()
    await scene.install()
    await scene.wait(lambda: 2 in scene.headers(), "the header at 2", within=120)
    (first,) = scene.pods.running()
    sid = scene.scale_set_id()
    first_session = scene.fake.session(sid)
    assert first_session is not None
    first_pairs = {p.metadata.name for p in await scene.placeholders()}
    assert len(first_pairs) == 4

    # A values change ARC applies by recreating the listener.
    upgraded = time.monotonic()
    await scene.install(upgrade=True, maxRunners=10)

    async def replaced() -> Any:
        return [r for r in scene.pods.running() if r is not first] or None

    (second,) = await scene.wait(replaced, "ARC's new listener pod", within=120)
    new_pod = time.monotonic()
    await scene.wait(lambda: first.exit_code is not None, "the first listener's exit", 70)
    assert first.exit_code == 0, first.process.log_tail()
    assert first_session.deleted  # the first listener ended its session on the way out
    old_exit = time.monotonic()

    async def old_pairs_gone() -> bool:
        return not (first_pairs & {p.metadata.name for p in await scene.placeholders()})

    await scene.wait(old_pairs_gone, "the first listener's placeholders gone")

    def one_new_session() -> bool:
        live = [s for s in scene.fake.session_log if not s.deleted]
        return len(live) == 1 and live[0] is not first_session

    await scene.wait(one_new_session, "the new listener's session, and only it")
    await scene.wait(lambda: scene.headers()[-1] == 2, "the new listener's header at 2")
    recreated = time.monotonic()
    report(
        "arc-recreate",
        new_pod_after_upgrade_s=new_pod - upgraded,
        old_listener_exit_s=old_exit - new_pod,
        new_session_and_header_s=recreated - old_exit,
    )

    # Uninstall: ARC removes the listener, the runner set and the scale set.
    result = await asyncio.to_thread(
        arc.uninstall, scene.helm_bin, scene.cluster, NAME, scene.runners
    )
    assert result.returncode == 0, result.stderr

    async def all_gone() -> bool:
        return (
            not scene.pods.running()
            and not await scene.placeholders()
            and not await scene.arc_objects("autoscalingrunnersets")
        )

    await scene.wait(all_gone, "listener, placeholders and scale set gone", within=120)
    await scene.wait(lambda: second.exit_code is not None, "the second listener's exit", 70)
    assert second.exit_code == 0, second.process.log_tail()
    assert scene.fake.session(sid) is None
    assert all(s.deleted for s in scene.fake.session_log)
    await scene.wait(lambda: sid in scene.admin.deleted, "the scale set deleted on the service")
    report("arc-delete", delete_s=time.monotonic() - recreated, test_s=time.monotonic() - started)


async def test_scale_set_labels_reach_the_service_and_route_jobs(scene: Scene) -> None:
    # ARC 0.14 registers `scaleSetLabels` beside the scale set's name (one label before).
    started = time.monotonic()
    scene.add_node()
    await scene.start()
    await scene.install(scaleSetLabels=["linux-x64", "self-hosted"])
    await scene.wait(lambda: 2 in scene.headers(), "the header at 2", within=120)
    sid = scene.scale_set_id()
    assert scene.fake.scale_sets[sid].labels == (NAME, "linux-x64", "self-hosted")
    (create,) = scene.fake.requests_for("arc_create_scale_set")
    assert json.loads(create.body)["labels"] == [
        {"type": "System", "name": label} for label in (NAME, "linux-x64", "self-hosted")
    ]
    (job,) = scene.fake.add_jobs(1, labels=("self-hosted", "linux-x64"))

    async def patched() -> bool:
        (current,) = await scene.arc_objects("ephemeralrunnersets")
        return bool(current["spec"].get("replicas") == 1)

    await scene.wait(patched, "the EphemeralRunnerSet patched to 1 replica")
    assert scene.fake.job(job.runner_request_id).scale_set_id == sid
    report("arc-labels", test_s=time.monotonic() - started)


async def test_a_runner_template_change_keeps_the_listener_on_the_current_runner_set(
    scene: Scene,
) -> None:
    # ARC 0.14 answers a runner template change with a new EphemeralRunnerSet (a new generated
    # name, so a new listener with a new config.json and Role); ARC after #4516 updates the
    # one runner set, named as the scale set, in place. Either way the listener must patch
    # the runner set ARC reconciles, with the rights ARC gave it.
    started = time.monotonic()
    scene.add_node()
    await scene.start()
    await scene.install()
    await scene.wait(lambda: 2 in scene.headers(), "the header at 2", within=120)
    (old_set,) = await scene.arc_objects("ephemeralrunnersets")
    template = copy.deepcopy(scene.overlay()["template"])
    template["metadata"].setdefault("annotations", {})["tests.capacity-listener.dev/rev"] = "2"
    await scene.install(upgrade=True, template=template)

    async def settled() -> Any:
        sets = [
            s
            for s in await scene.arc_objects("ephemeralrunnersets")
            if not s["metadata"].get("deletionTimestamp")
        ]
        if len(sets) != 1:
            return None
        annotations = sets[0]["spec"]["ephemeralRunnerSpec"]["metadata"].get("annotations") or {}
        running = [
            r
            for r in scene.pods.running()
            if r.process.config["ephemeral_runner_set_name"] == sets[0]["metadata"]["name"]
        ]
        if "tests.capacity-listener.dev/rev" not in annotations or len(running) != 1:
            return None
        return sets[0], running[0]

    current, ran = await scene.wait(settled, "one updated runner set and its listener")
    changed = time.monotonic()
    scene.fake.add_jobs(1, labels=(NAME,))

    async def patched() -> bool:
        got = await scene.crd.get_namespaced_custom_object(
            "actions.github.com", "v1alpha1", scene.runners, "ephemeralrunnersets",
            current["metadata"]["name"],
        )  # fmt: skip
        return bool(got["spec"].get("replicas") == 1)

    await scene.wait(patched, "the current runner set patched to 1 replica")
    assert forbidden(ran.process.log_text()) == []
    report(
        "arc-template-change",
        runner_set_renamed=str(current["metadata"]["name"] != old_set["metadata"]["name"]),
        listeners=len(scene.pods.runs),
        settled_s=changed - started,
        test_s=time.monotonic() - started,
    )
