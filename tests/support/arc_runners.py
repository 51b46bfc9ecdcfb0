"""The runner inside the runner pods ARC's controller creates (test infrastructure for
tests/integration/test_arc_controller.py). tools/runner_standin.py plays ARC's controllers
too; here the real controller made the EphemeralRunners and their pods, and only what
happens *inside* a pod is played, as a real runner with the kubernetes-mode hooks does:

* once its pod is Running, the runner (named as its pod: ARC asks for its JIT config under
  the EphemeralRunner's name) takes an assigned job from FakeActions (JobStarted);
* the hooks create the job's workflow pod ``<runner pod>-workflow`` (label ``runner-pod``,
  PriorityClass ``arc-workflow``, sized as the workflow pod template), owned by the runner pod;
* when the workflow pod is Running the job has started; after ``duration`` seconds the job
  completes (JobCompleted), the workflow pod is deleted and the runner exits 0: its pod's
  status becomes Succeeded, as kwok writes it for a finished Job pod, which is what makes
  ARC's EphemeralRunner controller delete the runner.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tools.fake_actions import FakeActions, FakeJob

RUNNER_SELECTOR = "app.kubernetes.io/component=runner"
WORKFLOW_PRIORITY = "arc-workflow"
IMAGE = "registry.k8s.io/pause:3.10"


@dataclass
class _Runner:
    pod: str
    uid: str
    job: FakeJob | None = None
    started: float | None = None
    done: bool = False


@dataclass
class ArcRunners:
    api: client.ApiClient
    fake: FakeActions
    namespace: str
    scale_set_id: int
    workflow_requests: dict[str, str]
    duration: float = 3.0
    interval: float = 0.3
    runners: dict[str, _Runner] = field(default_factory=dict)
    finished: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def start(self) -> None:
        self._task = asyncio.create_task(self._forever(), name="arc-runners")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _forever(self) -> None:
        while True:
            try:
                await self._round()
            except ApiException as exc:  # a test's wait names what did not happen
                self.errors.append(f"{exc.status} {exc.reason}")
            await asyncio.sleep(self.interval)

    async def _round(self) -> None:
        pods = await self.core.list_namespaced_pod(self.namespace, label_selector=RUNNER_SELECTOR)
        for pod in pods.items:
            name = pod.metadata.name
            runner = self.runners.get(name)
            if runner is None or runner.uid != pod.metadata.uid:
                runner = self.runners[name] = _Runner(name, pod.metadata.uid)
            if not runner.done and pod.metadata.deletion_timestamp is None:
                await self._step(runner, pod.status.phase)

    async def _step(self, runner: _Runner, phase: str | None) -> None:
        if phase != "Running":
            return
        if runner.job is None:
            runner.job = self.fake.claim_job(self.scale_set_id, runner.pod)
            if runner.job is not None:
                await self.core.create_namespaced_pod(self.namespace, self._workflow_pod(runner))
            return
        workflow = await self._phase(f"{runner.pod}-workflow")
        if runner.started is None:
            if workflow == "Running":
                self.fake.mark_workflow_started(runner.job.job_id)
                runner.started = time.monotonic()
            return
        if time.monotonic() - runner.started < self.duration:
            return
        self.fake.complete_job(runner.job.job_id)
        with contextlib.suppress(ApiException):
            await self.core.delete_namespaced_pod(
                f"{runner.pod}-workflow", self.namespace, grace_period_seconds=0
            )
        await self._exit(runner.pod)
        runner.done = True
        self.finished.append(runner.pod)

    async def _phase(self, name: str) -> str | None:
        try:
            pod = await self.core.read_namespaced_pod(name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return str(pod.status.phase)

    async def _exit(self, name: str) -> None:
        """The runner container exits 0: the pod's status as kwok writes a finished pod's."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        pod = await self.core.read_namespaced_pod(name, self.namespace)
        statuses = [
            {
                "name": c.name,
                "image": c.image,
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": now,
                        "finishedAt": now,
                    }
                },
            }
            for c in pod.spec.containers
        ]
        await self.core.patch_namespaced_pod_status(
            name,
            self.namespace,
            {"status": {"phase": "Succeeded", "containerStatuses": statuses}},
        )

    def _workflow_pod(self, runner: _Runner) -> dict[str, Any]:
        name = f"{runner.pod}-workflow"
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": {"runner-pod": runner.pod},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": runner.pod, "uid": runner.uid}
                ],
            },
            "spec": {
                "containers": [
                    {
                        "name": "job",
                        "image": IMAGE,
                        "resources": {"requests": dict(self.workflow_requests)},
                    }
                ],
                "priorityClassName": WORKFLOW_PRIORITY,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
            },
        }
