"""TEST INFRASTRUCTURE — a stand-in for ARC's runner controllers and for the runners themselves.

Nothing here ships. On the local control plane there is no ARC controller and no GitHub runner
binary, so this module plays both, just enough for end-to-end tests and the demo:

* the EphemeralRunnerSet controller: it watches one EphemeralRunnerSet and, following the
  replicas/patchID rules of docs/wire-protocol.md §5 (loosely), creates EphemeralRunner
  objects or deletes idle ones;
* the EphemeralRunner controller: one runner pod per EphemeralRunner (same name, ARC's labels,
  priority class ``arc-runner``, runner-sized requests), re-created if it disappears while idle;
* the runner inside the pod: once its pod is Running it takes an assigned job from the
  FakeActions service (``claim_job``), creates ``<runner-pod>-workflow`` (priority
  ``arc-workflow``, workflow-sized requests, label ``runner-pod``) as the kubernetes container
  mode hooks do, reports the workflow start when that pod is Running, finishes the job after
  its duration and removes both pods and the EphemeralRunner.

A runner whose workflow pod stays Pending keeps its job: that job is *stranded*, which is the
failure the listener exists to prevent. FakeActions counts it (``stranded()``); after
``strand_after`` seconds the stand-in also reports it explicitly. As the runner-container
hooks do in ``kubernetes`` container mode, the runner waits for its workflow pod at most
``prepare_timeout`` seconds (the hooks' ``ACTIONS_RUNNER_PREPARE_JOB_TIMEOUT_SECONDS``, 600 by
default) and then fails the job (``complete_job(..., "failed", failure="prepare_timeout")``):
the red job a user re-runs by hand.

Everything runs on the caller's event loop, which must be the loop that serves the
``FakeActions`` instance (its Python API is not thread-safe).

The stand-in survives what the tests simulate, as ARC's controllers do: every API call is
retried while the apiserver is unreachable or answers 429/5xx (it restarts, it is overloaded),
and a runner that fails for any other reason fails its job (``complete_job(..., "failed")``)
and is cleaned up, so no job is left "running" with nobody running it.

The API-call machinery they stand on (retries, list+watch) is in tools/kube_calls.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import string
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tools.fake_actions import FakeActions, FakeJob, JobState
from tools.kube_calls import API_TIMEOUT, retrying, watch_objects
from tools.waits import WaitFailed, eventually

log = logging.getLogger("tools.runner_standin")

ARC_GROUP = "actions.github.com"
ARC_VERSION = "v1alpha1"
ERS_PLURAL = "ephemeralrunnersets"
ER_PLURAL = "ephemeralrunners"
MERGE_PATCH = "application/merge-patch+json"

# ARC's labels and annotation (resourcebuilder.go).
LABEL_SCALE_SET_NAME = "actions.github.com/scale-set-name"
LABEL_SCALE_SET_NAMESPACE = "actions.github.com/scale-set-namespace"
LABEL_EPHEMERAL_RUNNER = "actions-ephemeral-runner"
ANNOTATION_PATCH_ID = "actions.github.com/patch-id"
# The runner-container-hooks label a workflow pod with the name of its runner pod.
LABEL_RUNNER_POD = "runner-pod"
WORKFLOW_SUFFIX = "-workflow"
# Marks every object the stand-in creates (value: the EphemeralRunnerSet name), so it can
# watch and clean up exactly its own pods without matching anything the listener creates.
STANDIN_LABEL = "tests.capacity-listener.dev/runner-standin"

PRIORITY_RUNNER = "arc-runner"
PRIORITY_WORKFLOW = "arc-workflow"
# kwok fakes the container runtime; the API server only wants an image name.
IMAGE = "registry.k8s.io/pause:3.10"

# The runner-container hooks' default for ACTIONS_RUNNER_PREPARE_JOB_TIMEOUT_SECONDS (large
# fleets raise it, e.g. to 1,500 s, to ride out demand surges).
PREPARE_JOB_TIMEOUT = 600.0

# EphemeralRunners created at once when the set is short (see `_reconcile`).
RUNNER_CREATES_AT_ONCE = 8
_POLL = 0.1  # fallback re-check interval; FakeActions state changes are not pushed to us
_LOST = frozenset({"Gone", "Terminating", "Failed", "Succeeded"})

T = TypeVar("T")


@dataclass(frozen=True)
class StandInSpec:
    """What one scale set looks like to the stand-in.

    ``runner_placement``/``workflow_placement`` are pod-spec fields (``nodeSelector``,
    ``tolerations``) so runner and workflow pods can live in different node pools.
    """

    namespace: str
    runner_set_name: str  # the EphemeralRunnerSet (config.json ephemeral_runner_set_name)
    scale_set_name: str  # the ARS name (config.json runner_scale_set_name), a pod label
    scale_set_id: int
    runner_requests: Mapping[str, str] = field(
        default_factory=lambda: {"cpu": "500m", "memory": "512Mi"}
    )
    workflow_requests: Mapping[str, str] = field(
        default_factory=lambda: {"cpu": "1", "memory": "2Gi"}
    )
    runner_placement: Mapping[str, Any] = field(default_factory=dict)
    workflow_placement: Mapping[str, Any] | None = None  # None: same as the runner's
    default_job_seconds: float = 5.0
    strand_after: float = 15.0
    # The hooks' ACTIONS_RUNNER_PREPARE_JOB_TIMEOUT_SECONDS: how long the runner waits for its
    # workflow pod to be Running before it fails the job.
    prepare_timeout: float = PREPARE_JOB_TIMEOUT
    # On runner and workflow pods, as a runner pod template would set them (the shipped chart
    # puts karpenter.sh/do-not-disrupt on both, so consolidation leaves a running job alone).
    pod_annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Runner:
    """One EphemeralRunner and the runner process in its pod."""

    name: str  # EphemeralRunner name = runner pod name = the runner's name at GitHub
    patch_id: int
    runner_id: int
    created: float
    ready_at: float | None = None  # pod Running and the runner idle, waiting for a job
    pod_uid: str = ""
    job: FakeJob | None = None
    removing: bool = False
    task: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        return self.job is not None

    @property
    def workflow_pod(self) -> str:
        return self.name + WORKFLOW_SUFFIX


@dataclass(frozen=True)
class StandInStats:
    """A snapshot for live views and assertions."""

    runners: int
    runners_pending: int
    runners_idle: int
    runners_busy: int
    workflow_running: int
    workflow_pending: int
    jobs_completed: int
    jobs_lost: int  # runner or workflow pod vanished while the job was running
    stranded_reported: int
    jobs_timed_out: int  # workflow pod not Running within the prepare-job timeout: failed
    replicas: int
    patch_id: int


def ephemeral_runner_set_manifest(
    *,
    name: str,
    namespace: str,
    scale_set_id: int,
    scale_set_name: str,
    configure_url: str,
) -> dict[str, Any]:
    """The EphemeralRunnerSet that ARC's AutoscalingRunnerSet controller would create."""
    return {
        "apiVersion": f"{ARC_GROUP}/{ARC_VERSION}",
        "kind": "EphemeralRunnerSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                LABEL_SCALE_SET_NAME: scale_set_name,
                LABEL_SCALE_SET_NAMESPACE: namespace,
                "app.kubernetes.io/part-of": "gha-runner-scale-set",
                "app.kubernetes.io/component": "runner-set",
            },
        },
        "spec": {
            "replicas": 0,
            "patchID": 0,
            "ephemeralRunnerSpec": {
                "githubConfigUrl": configure_url,
                "githubConfigSecret": "unused-by-the-stand-in",
                "runnerScaleSetId": scale_set_id,
                "spec": {"containers": [{"name": "runner", "image": IMAGE}]},
            },
        },
    }


def _random_suffix(n: int = 5) -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(n))


def _removal(pod: Mapping[str, Any]) -> str:
    """Why a pod went away, as far as the pod says: the reason of its DisruptionTarget
    condition (PreemptionByScheduler, EvictionByEvictionAPI, DeletionByPodGC, ...), else its
    end phase, else "deleted"."""
    for condition in pod.get("status", {}).get("conditions") or ():
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return str(condition.get("reason") or "DisruptionTarget")
    phase = pod.get("status", {}).get("phase")
    if phase in ("Failed", "Succeeded"):
        return f"phase {phase}"
    return "deleted"


def _phase(pod: Mapping[str, Any] | None) -> str | None:
    if pod is None:
        return None
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return "Terminating"
    phase: str | None = pod.get("status", {}).get("phase")
    return phase


class RunnerStandIn:
    """``await start()``; ``stats()`` any time; ``await stop()`` cancels and cleans up."""

    def __init__(self, api: client.ApiClient, fake: FakeActions, spec: StandInSpec) -> None:
        self.api = api
        self.fake = fake
        self.spec = spec
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.runners: dict[str, Runner] = {}
        self.pods: dict[str, dict[str, Any]] = {}  # watch cache, by name
        self.deleted_uids: set[str] = set()  # pods seen deleted (names are reused)
        self.removals: dict[str, str] = {}  # uid of a deleted pod -> why it went (_removal)
        self.loss_reasons: Counter[str] = Counter()  # "runner: <why>" / "workflow: <why>"
        self.ers: dict[str, Any] | None = None
        self.jobs_completed = 0
        self.jobs_lost = 0
        self.stranded_reported = 0
        self.jobs_timed_out = 0
        # Runner name -> when its pod was Running and the runner idle (monotonic), kept after
        # the runner is gone: the outcome benchmark reads each job's runner start from it.
        self.ready_times: dict[str, float] = {}
        self.errors: list[str] = []
        self._synced = asyncio.Event()
        self._changed = asyncio.Event()
        self._reconcile_wanted = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        spawn = asyncio.get_running_loop().create_task
        self._tasks = [
            spawn(self._guard("pods", self._watch_pods), name="standin-pods"),
            spawn(self._guard("ers", self._watch_ers), name="standin-ers"),
            spawn(self._guard("reconcile", self._reconcile_forever), name="standin-reconcile"),
            spawn(self._guard("dispatch", self._dispatch_forever), name="standin-dispatch"),
        ]
        async with asyncio.timeout(30):
            await self._synced.wait()

    async def stop(self, *, delete: bool = True) -> None:
        """Stop every task; with ``delete``, remove the stand-in's pods and runners."""
        self._stopping = True
        tasks = self._tasks + [r.task for r in self.runners.values() if r.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if delete:
            await self.delete_all()

    async def delete_all(self) -> None:
        selector = f"{STANDIN_LABEL}={self.spec.runner_set_name}"
        with contextlib.suppress(ApiException):
            await self.core.delete_collection_namespaced_pod(
                self.spec.namespace,
                label_selector=selector,
                grace_period_seconds=0,
                _request_timeout=API_TIMEOUT,
            )
        with contextlib.suppress(ApiException):
            await self.custom.delete_collection_namespaced_custom_object(
                ARC_GROUP,
                ARC_VERSION,
                self.spec.namespace,
                ER_PLURAL,
                label_selector=selector,
                _request_timeout=API_TIMEOUT,
            )

    async def _guard(self, name: str, body: Callable[[], Awaitable[None]]) -> None:
        """Keep a background loop alive across API errors (the apiserver may restart)."""
        while True:
            try:
                await body()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                message = f"{name}: {type(exc).__name__}: {exc}"
                log.warning("stand-in loop failed, restarting: %s", message)
                self.errors.append(message)
                await asyncio.sleep(1.0)

    # ------------------------------------------------------------------ observation

    def stats(self) -> StandInStats:
        runners = list(self.runners.values())
        wf_phases = [_phase(self.pods.get(r.workflow_pod)) for r in runners if r.busy]
        spec = (self.ers or {}).get("spec", {})
        return StandInStats(
            runners=len(runners),
            runners_pending=sum(1 for r in runners if r.ready_at is None),
            runners_idle=sum(1 for r in runners if r.ready_at is not None and not r.busy),
            runners_busy=sum(1 for r in runners if r.busy),
            workflow_running=sum(1 for p in wf_phases if p == "Running"),
            workflow_pending=sum(1 for p in wf_phases if p == "Pending"),
            jobs_completed=self.jobs_completed,
            jobs_lost=self.jobs_lost,
            stranded_reported=self.stranded_reported,
            jobs_timed_out=self.jobs_timed_out,
            replicas=int(spec.get("replicas") or 0),
            patch_id=int(spec.get("patchID") or 0),
        )

    def _notify(self) -> None:
        self._changed.set()

    async def _until(self, predicate: Callable[[], bool], within: float | None = None) -> bool:
        """Wait until ``predicate()`` holds (re-checked on every event and every 100 ms);
        False if ``within`` seconds passed first."""
        with contextlib.suppress(WaitFailed):
            return await eventually(
                predicate, "the stand-in", within, interval=_POLL, wake=self._changed
            )
        return False

    async def _watch_pods(self) -> None:
        def on_list(items: list[dict[str, Any]]) -> None:
            fresh = {p["metadata"]["name"]: p for p in items}
            live = {p["metadata"]["uid"] for p in items}
            # Anything that vanished while the watch was down was deleted.
            for pod in self.pods.values():
                if pod["metadata"]["uid"] not in live:
                    self.deleted_uids.add(pod["metadata"]["uid"])
                    self.removals[pod["metadata"]["uid"]] = _removal(pod)
            self.pods = fresh
            self._synced.set()
            self._notify()

        def on_event(kind: str, pod: dict[str, Any]) -> None:
            name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
            if kind == "DELETED":
                self.deleted_uids.add(uid)
                self.removals[uid] = _removal(pod)
                current = self.pods.get(name)
                if current is not None and current["metadata"]["uid"] == uid:
                    del self.pods[name]
            else:
                self.pods[name] = pod
            self._notify()

        await watch_objects(
            self.api,
            self.core.list_namespaced_pod,
            (self.spec.namespace,),
            {"label_selector": f"{STANDIN_LABEL}={self.spec.runner_set_name}"},
            on_event,
            on_list,
        )

    def pod_phase(self, name: str, uid: str) -> str | None:
        """The phase of the pod ``name`` with ``uid``: "Gone" once deleted, "Terminating" while
        being deleted, None while the watch has not shown it yet."""
        if uid in self.deleted_uids:
            return "Gone"
        pod = self.pods.get(name)
        if pod is None or pod["metadata"]["uid"] != uid:
            return None
        return _phase(pod)

    def _lost(self, name: str, uid: str) -> bool:
        return self.pod_phase(name, uid) in _LOST

    def _removal_of(self, name: str, uid: str) -> str:
        pod = self.pods.get(name)
        if pod is not None and pod["metadata"]["uid"] == uid:
            return _removal(pod)
        return self.removals.get(uid, "unknown")

    async def _watch_ers(self) -> None:
        def on_list(items: list[dict[str, Any]]) -> None:
            self.ers = items[0] if items else None
            self._reconcile_wanted.set()

        def on_event(kind: str, obj: dict[str, Any]) -> None:
            self.ers = None if kind == "DELETED" else obj
            self._reconcile_wanted.set()
            self._notify()

        await watch_objects(
            self.api,
            self.custom.list_namespaced_custom_object,
            (ARC_GROUP, ARC_VERSION, self.spec.namespace, ERS_PLURAL),
            {"field_selector": f"metadata.name={self.spec.runner_set_name}"},
            on_event,
            on_list,
        )

    # ------------------------------------------------------------------ ERS controller

    async def _reconcile_forever(self) -> None:
        while True:
            await self._reconcile_wanted.wait()
            self._reconcile_wanted.clear()
            await self._reconcile()

    async def _reconcile(self) -> None:
        """ARC's EphemeralRunnerSet rules (docs/wire-protocol.md §5): act only on patchID 0 or
        a patchID newer than the newest runner's; scale up when short; scale down idle runners
        only on 0."""
        if self.ers is None:
            return
        spec = self.ers.get("spec", {})
        replicas = int(spec.get("replicas") or 0)  # a null/absent replicas means 0
        patch_id = int(spec.get("patchID") or 0)
        current = [r for r in self.runners.values() if not r.removing]
        latest = max((r.patch_id for r in current), default=0)
        if patch_id != 0 and patch_id == latest:
            return
        total = len(current)
        if total < replicas:
            # ARC's controller creates them one after another, a few milliseconds each on a
            # healthy API server. The benchmark's API server shares two cores with five
            # other control planes and takes about a second a call: one after another, a
            # burst of 30 jobs waited half a minute for runners that ARC would have made at
            # once. A bounded batch gives the burst ARC's pace without flooding the server.
            gate = asyncio.Semaphore(RUNNER_CREATES_AT_ONCE)

            async def create() -> None:
                async with gate:
                    await self._create_runner(patch_id)

            async with asyncio.TaskGroup() as group:
                for _ in range(replicas - total):
                    group.create_task(create())
        elif patch_id == 0 and total > replicas:
            # Pending (not yet Running) runners go first, then idle Running ones, oldest first.
            idle = sorted(
                (r for r in current if not r.busy),
                key=lambda r: (r.ready_at is not None, r.created),
            )
            for runner in idle[: total - replicas]:
                self._remove(runner)

    async def _create_runner(self, patch_id: int) -> None:
        spec = self.spec
        name = f"{spec.runner_set_name}-runner-{_random_suffix()}"
        labels = self._labels()
        body = {
            "apiVersion": f"{ARC_GROUP}/{ARC_VERSION}",
            "kind": "EphemeralRunner",
            "metadata": {
                "name": name,
                "namespace": spec.namespace,
                "labels": labels,
                "annotations": {ANNOTATION_PATCH_ID: str(patch_id)},
                "ownerReferences": self._owner_refs(),
            },
            "spec": {
                "githubConfigUrl": (self.ers or {})
                .get("spec", {})
                .get("ephemeralRunnerSpec", {})
                .get("githubConfigUrl", "http://unused"),
                "githubConfigSecret": "unused-by-the-stand-in",
                "runnerScaleSetId": spec.scale_set_id,
                "spec": {"containers": [{"name": "runner", "image": IMAGE}]},
            },
        }
        created = await self.custom.create_namespaced_custom_object(
            ARC_GROUP, ARC_VERSION, spec.namespace, ER_PLURAL, body, _request_timeout=API_TIMEOUT
        )
        # ARC registers the runner (JIT config) before its pod starts, so a Pending runner
        # already has a runnerId and may be scaled down.
        runner_id = self.fake.register_runner(spec.scale_set_id, name)
        runner = Runner(name=name, patch_id=patch_id, runner_id=runner_id, created=time.monotonic())
        self.runners[name] = runner
        runner.task = asyncio.get_running_loop().create_task(
            self._run(runner, created["metadata"]["uid"]), name=f"standin-{name}"
        )

    def _remove(self, runner: Runner) -> None:
        """Scale an idle runner down. Synchronous up to the cancel, so the dispatcher can never
        hand it a job in between (both run on this event loop)."""
        if runner.busy or runner.removing:
            return
        runner.removing = True
        self.fake.unregister_runner(self.spec.scale_set_id, runner.name)
        self._notify()

    # ------------------------------------------------------------------ runner

    async def _run(self, runner: Runner, er_uid: str) -> None:
        try:
            await self._lifecycle(runner, er_uid)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            message = f"runner {runner.name}: {type(exc).__name__}: {exc}"
            log.warning("%s", message)
            self.errors.append(message)
            # A runner that dies fails its job, as GitHub sees it when the runner goes away.
            job = runner.job
            if job is not None and job.state is not JobState.COMPLETED:
                self.fake.complete_job(job.job_id, "failed")
                self.jobs_lost += 1
        finally:
            if not self._stopping:
                await self._clean_up(runner)

    async def _lifecycle(self, runner: Runner, er_uid: str) -> None:
        name = runner.name
        # ARC's EphemeralRunner controller records the registration, not the set's: in the
        # runner's own task, so the set's creates do not wait for it.
        await self._patch_runner_status(
            name, {"phase": "Pending", "runnerId": runner.runner_id, "runnerName": name}
        )
        while not await self._start_runner_pod(runner, er_uid):
            if runner.removing:
                return
        uid = runner.pod_uid
        runner.ready_at = self.ready_times[name] = time.monotonic()
        await self._patch_runner_status(name, {"phase": "Running", "ready": True})
        self._notify()
        await self._until(
            lambda: runner.busy or runner.removing or self.pod_phase(name, uid) != "Running"
        )
        job = runner.job
        if job is None:
            if not runner.removing:
                # The pod went away while idle: the runner is gone; the next reconcile makes a
                # new one if the set is still short.
                runner.removing = True
                self.fake.unregister_runner(self.spec.scale_set_id, name)
            return
        await self._run_job(runner, job)

    async def _start_runner_pod(self, runner: Runner, er_uid: str) -> bool:
        """Create the runner pod; True once it is Running, False if it was removed first."""
        name = runner.name
        uid = runner.pod_uid = await self._create_pod(self._runner_pod(runner, er_uid))
        await self._until(
            lambda: runner.removing or self.pod_phase(name, uid) not in (None, "Pending")
        )
        if runner.removing:
            return False
        if self.pod_phase(name, uid) == "Running":
            return True
        # Preempted or evicted before it ran a job: ARC's controller makes a new pod.
        await self._delete_pod(name)
        await self._until(lambda: runner.removing or self.pod_phase(name, uid) == "Gone")
        return False

    async def _run_job(self, runner: Runner, job: FakeJob) -> None:
        name, wf, uid = runner.name, runner.workflow_pod, runner.pod_uid
        wf_uid = await self._create_pod(self._workflow_pod(runner))
        claimed = time.monotonic()
        reported = False

        def lost() -> bool:
            return self._lost(name, uid) or self._lost(wf, wf_uid)

        def settled() -> bool:
            return self.pod_phase(wf, wf_uid) == "Running" or lost()

        while not await self._until(settled, within=1.0):
            waited = time.monotonic() - claimed
            if not reported and waited >= self.spec.strand_after:
                # No capacity for the workflow pod yet: the job is stuck on this cluster.
                self.fake.report_stranded(job.job_id)
                self.stranded_reported += 1
                reported = True
            if waited >= self.spec.prepare_timeout:
                # The hooks give up on the workflow pod and fail the job (the clean-up deletes
                # the pod); GitHub shows it red, and only a re-run brings it back.
                log.info("job %s: workflow pod not Running after %.0fs", job.job_id, waited)
                self.fake.complete_job(job.job_id, "failed", failure="prepare_timeout")
                self.jobs_timed_out += 1
                return
        if not lost():
            self.fake.mark_workflow_started(job.job_id)
            duration = job.duration if job.duration is not None else self.spec.default_job_seconds
            await self._until(lost, within=duration)
        failed = lost()
        failure = None
        if failed:
            which, pod, pod_uid = (
                ("runner", name, uid) if self._lost(name, uid) else ("workflow", wf, wf_uid)
            )
            failure = f"{which}: {self._removal_of(pod, pod_uid)}"
            self.loss_reasons[failure] += 1
            log.info("job %s lost mid-run (%s)", job.job_id, failure)
        if job.state is not JobState.COMPLETED:
            self.fake.complete_job(job.job_id, "failed" if failed else "succeeded", failure=failure)
        if failed:
            self.jobs_lost += 1
        else:
            self.jobs_completed += 1

    async def _clean_up(self, runner: Runner) -> None:
        """Remove the runner's pods and EphemeralRunner. Whatever fails here is logged: the
        runner is forgotten either way (the garbage collector follows the owner references)."""
        runner.removing = True
        self.fake.unregister_runner(self.spec.scale_set_id, runner.name)
        try:
            for pod in (runner.workflow_pod, runner.name):
                await self._delete_pod(pod)
            await self._delete(
                lambda: self.custom.delete_namespaced_custom_object(
                    ARC_GROUP,
                    ARC_VERSION,
                    self.spec.namespace,
                    ER_PLURAL,
                    runner.name,
                    _request_timeout=API_TIMEOUT,
                )
            )
        except Exception as exc:
            message = f"clean-up of {runner.name}: {type(exc).__name__}: {exc}"
            log.warning("%s", message)
            self.errors.append(message)
        finally:
            self.runners.pop(runner.name, None)
            self._reconcile_wanted.set()
            self._notify()

    # ------------------------------------------------------------------ dispatcher

    async def _dispatch_forever(self) -> None:
        """Idle runners take assigned jobs, oldest runner first (GitHub's side of it)."""
        scale_set_id = self.spec.scale_set_id
        while True:
            await self._until(
                lambda: (
                    bool(self._idle()) and bool(self.fake.jobs_of(scale_set_id, JobState.ASSIGNED))
                )
            )
            for runner in self._idle():
                job = self.fake.claim_job(scale_set_id, runner.name)
                if job is None:
                    break
                runner.job = job
            self._notify()

    def _idle(self) -> list[Runner]:
        idle = [
            r
            for r in self.runners.values()
            if r.ready_at is not None
            and not r.busy
            and not r.removing
            and _phase(self.pods.get(r.name)) == "Running"
        ]
        return sorted(idle, key=lambda r: r.ready_at or 0.0)

    # ------------------------------------------------------------------ manifests and calls

    def _labels(self) -> dict[str, str]:
        return {
            LABEL_SCALE_SET_NAME: self.spec.scale_set_name,
            LABEL_SCALE_SET_NAMESPACE: self.spec.namespace,
            "app.kubernetes.io/part-of": "gha-runner-scale-set",
            STANDIN_LABEL: self.spec.runner_set_name,
        }

    def _owner_refs(self) -> list[dict[str, Any]]:
        if self.ers is None:
            return []
        meta = self.ers["metadata"]
        return [
            {
                "apiVersion": f"{ARC_GROUP}/{ARC_VERSION}",
                "kind": "EphemeralRunnerSet",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]

    def _pod(
        self,
        name: str,
        labels: Mapping[str, str],
        requests: Mapping[str, str],
        priority: str,
        placement: Mapping[str, Any],
        owner: Mapping[str, Any],
        container: str,
    ) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": dict(labels),
                "annotations": dict(self.spec.pod_annotations),
                "ownerReferences": [dict(owner)],
            },
            "spec": {
                "containers": [
                    {"name": container, "image": IMAGE, "resources": {"requests": dict(requests)}}
                ],
                "priorityClassName": priority,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                **{k: v for k, v in placement.items()},
            },
        }

    def _runner_pod(self, runner: Runner, er_uid: str) -> dict[str, Any]:
        owner = {
            "apiVersion": f"{ARC_GROUP}/{ARC_VERSION}",
            "kind": "EphemeralRunner",
            "name": runner.name,
            "uid": er_uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
        labels = {**self._labels(), LABEL_EPHEMERAL_RUNNER: "True"}
        return self._pod(
            runner.name,
            labels,
            self.spec.runner_requests,
            PRIORITY_RUNNER,
            self.spec.runner_placement,
            owner,
            "runner",
        )

    def _workflow_pod(self, runner: Runner) -> dict[str, Any]:
        # Owned by the runner pod so the garbage collector removes it if the stand-in cannot.
        owner = {"apiVersion": "v1", "kind": "Pod", "name": runner.name, "uid": runner.pod_uid}
        placement = self.spec.workflow_placement
        labels = {LABEL_RUNNER_POD: runner.name, STANDIN_LABEL: self.spec.runner_set_name}
        return self._pod(
            runner.workflow_pod,
            labels,
            self.spec.workflow_requests,
            PRIORITY_WORKFLOW,
            self.spec.runner_placement if placement is None else placement,
            owner,
            "job",
        )

    async def _api(self, call: Callable[[], Awaitable[T]]) -> T:
        """One API call, retried while the apiserver is unreachable or overloaded."""

        def note(exc: BaseException) -> None:
            log.info("stand-in API call failed, retrying: %s: %s", type(exc).__name__, exc)

        return await retrying(call, on_retry=note)

    async def _delete(self, call: Callable[[], Awaitable[object]]) -> None:
        """A delete that is done when the object is gone, whoever removed it."""
        try:
            await self._api(call)
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def _create_pod(self, manifest: dict[str, Any]) -> str:
        """Create a pod and return its uid (the existing pod's on a name conflict, which is
        also what a create retried after a lost answer meets)."""
        name = manifest["metadata"]["name"]
        try:
            created = await self._api(
                lambda: self.core.create_namespaced_pod(
                    self.spec.namespace, manifest, _request_timeout=API_TIMEOUT
                )
            )
        except ApiException as exc:
            if exc.status != 409:
                raise
            created = await self._api(
                lambda: self.core.read_namespaced_pod(
                    name, self.spec.namespace, _request_timeout=API_TIMEOUT
                )
            )
        uid: str = created.metadata.uid
        return uid

    async def _delete_pod(self, name: str) -> None:
        await self._delete(
            lambda: self.core.delete_namespaced_pod(
                name, self.spec.namespace, grace_period_seconds=0, _request_timeout=API_TIMEOUT
            )
        )

    async def _patch_runner_status(self, name: str, status: Mapping[str, Any]) -> None:
        with contextlib.suppress(ApiException):  # the runner may be gone: nothing to record
            await self._api(lambda: self._send_runner_status(name, status))

    async def _send_runner_status(self, name: str, status: Mapping[str, Any]) -> None:
        await self.custom.patch_namespaced_custom_object_status(
            ARC_GROUP,
            ARC_VERSION,
            self.spec.namespace,
            ER_PLURAL,
            name,
            {"status": dict(status)},
            _content_type=MERGE_PATCH,
            _request_timeout=API_TIMEOUT,
        )
