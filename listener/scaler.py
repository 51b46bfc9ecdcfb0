"""ARC's scaler: desired runner count, patchID sequence and the two merge-patches.

The sequencing is pure (:class:`PatchSequencer`) so the controller-facing rules can be tested
as a table; :class:`Scaler` adds the Kubernetes calls through a small :class:`Patcher` seam.

How the EphemeralRunnerSet controller reads the patch (docs/wire-protocol.md §5): it only
acts when ``patchID == 0`` or ``patchID`` differs from the newest runner's ``patch-id``
annotation, and it scales *down* only on ``patchID == 0``. So the listener sends patchID 0 at
start-up and afterwards only when nothing happened since the last patch, the target did not
change and the target equals ``min_runners``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from capacity.kube import Kube, KubeError
from listener.wire import JobMessage

_MAX_INT32 = 2_147_483_647

log = logging.getLogger(__name__)


def runner_set_patch(replicas: int, patch_id: int) -> dict[str, Any]:
    """The EphemeralRunnerSet merge-patch body.

    ``replicas`` is ``omitempty`` in ARC's Go type, so a target of 0 is sent as ``null``,
    which removes the field; the controller then reads 0.
    """
    return {"spec": {"patchID": patch_id, "replicas": replicas if replicas else None}}


def runner_status_patch(job: JobMessage) -> dict[str, Any]:
    """The EphemeralRunner status merge-patch for a JobStarted message.

    Zero and empty values are dropped, as Go's ``omitempty`` does. ``status.jobId`` is what
    stops the controller from deleting a busy runner as idle.
    """
    fields: dict[str, Any] = {
        "jobDisplayName": job.job_display_name,
        "jobId": job.job_id,
        "jobRepositoryName": f"{job.owner_name}/{job.repository_name}",
        "jobRequestId": job.runner_request_id,
        "jobWorkflowRef": job.job_workflow_ref,
        "workflowRunId": job.workflow_run_id,
    }
    return {"status": {key: value for key, value in fields.items() if value}}


@dataclass
class PatchSequencer:
    """ARC's scaler state: the last target, the patch sequence and the dirty flag."""

    min_runners: int
    max_runners: int
    target: int = -1
    patch_seq: int = -1
    dirty: bool = False

    def next(self, assigned_jobs: int) -> tuple[int, int]:
        """Return ``(target, patch_id)`` for a statistics update of ``assigned_jobs``."""
        was_dirty, self.dirty = self.dirty, False
        if self.patch_seq == _MAX_INT32:
            self.patch_seq = 0
        self.patch_seq += 1
        # min_runners are idle runners on top of the assigned jobs (ARC's min-runners ADR).
        target = min(self.min_runners + assigned_jobs, self.max_runners)
        patch_id = self.patch_seq
        if not was_dirty and target == self.target and target == self.min_runners:
            patch_id = 0  # nothing happened: allow the controller to scale down to the floor
        self.target = target
        return target, patch_id


class Patcher(Protocol):
    """The Kubernetes calls the scaler needs (implemented over kubernetes-asyncio)."""

    async def patch_runner_set(self, body: dict[str, Any]) -> None: ...

    async def patch_runner_status(self, runner_name: str, body: dict[str, Any]) -> None:
        """Patch ``ephemeralrunners/<runner_name>/status``; a missing runner is not an error."""
        ...


class Scaler:
    """Turns listener events into EphemeralRunnerSet / EphemeralRunner patches."""

    def __init__(self, *, min_runners: int, max_runners: int, patcher: Patcher) -> None:
        self._sequencer = PatchSequencer(min_runners=min_runners, max_runners=max_runners)
        self._patcher = patcher

    async def handle_desired_runner_count(self, assigned_jobs: int) -> int:
        """Patch the runner set for ``assigned_jobs``; always sends, even when unchanged."""
        target, patch_id = self._sequencer.next(assigned_jobs)
        await self._patcher.patch_runner_set(runner_set_patch(target, patch_id))
        log.debug(
            "runner set patched",
            extra={"assigned": assigned_jobs, "target": target, "patch_id": patch_id},
        )
        return target

    async def handle_job_started(self, job: JobMessage) -> None:
        self._sequencer.dirty = True
        await self._patcher.patch_runner_status(job.runner_name, runner_status_patch(job))
        log.info("job started", extra={"runner": job.runner_name, "job_id": job.job_id})

    def handle_job_completed(self, job: JobMessage) -> None:
        # The runner pod exits and ARC's controller removes the EphemeralRunner; the listener
        # only notes that something happened so the next patch is not a scale-down.
        del job
        self._sequencer.dirty = True


_GROUP, _VERSION = "actions.github.com", "v1alpha1"


class KubePatcher:
    """:class:`Patcher` over the cluster: ARC's CRDs in the scale set's namespace."""

    def __init__(self, kube: Kube, *, namespace: str, runner_set_name: str) -> None:
        self._kube = kube
        self._namespace = namespace
        self._runner_set_name = runner_set_name

    async def patch_runner_set(self, body: dict[str, Any]) -> None:
        found = await self._kube.merge_patch(
            group=_GROUP,
            version=_VERSION,
            plural="ephemeralrunnersets",
            namespace=self._namespace,
            name=self._runner_set_name,
            body=body,
        )
        if not found:
            raise KubeError(
                f"patch ephemeralrunnersets {self._namespace}/{self._runner_set_name}",
                404,
                "not found",
            )

    async def patch_runner_status(self, runner_name: str, body: dict[str, Any]) -> None:
        # A 404 means the runner is already gone: ARC ignores it, and so do we.
        await self._kube.merge_patch(
            group=_GROUP,
            version=_VERSION,
            plural="ephemeralrunners",
            namespace=self._namespace,
            name=runner_name,
            body=body,
            subresource="status",
        )
