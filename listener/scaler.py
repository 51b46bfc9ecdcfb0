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

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from base.arc import ARC_GROUP, ARC_VERSION
from base.backoff import exponential, half_jitter
from base.kube import Kube, KubeError, KubeErrorKind
from listener.config import MAX_INT32
from listener.wire import JobMessage

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
        if self.patch_seq == MAX_INT32:
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


@dataclass(frozen=True)
class PatchRetry:
    """How patches are retried while the apiserver throttles or is unreachable.

    client-go (ARC's client) retries a 429 or 5xx that carries ``Retry-After`` up to 10 times
    and otherwise fails, and ARC's listener then exits, deleting its session; an apiserver
    restart made every listener exit several times and then wait out a session conflict. Here
    any transient failure (no answer, 429, 5xx, and a 404 while the apiserver is still
    installing its API paths) is retried with backoff, honouring ``Retry-After``, for up to
    ``outage_budget`` seconds from the first failure; only then is the error fatal.
    """

    outage_budget: float = 300.0
    base: float = 0.5
    cap: float = 10.0
    retry_after_max: float = 60.0

    def wait(self, attempt: int, error: KubeError | None) -> float:
        if error is not None and error.retry_after is not None:
            return min(error.retry_after, self.retry_after_max)
        return half_jitter(exponential(attempt, base=self.base, cap=self.cap))


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, KubeError) and (
        exc.kind in {KubeErrorKind.TRANSPORT, KubeErrorKind.THROTTLED, KubeErrorKind.SERVER}
        or exc.status == 404  # a restarting apiserver serves 404 until CRD paths are back
    )


class PatchState(Protocol):
    """Where the scaler reports patch trouble (readiness and metrics)."""

    def patch_failed(self, error: KubeError) -> None: ...

    def patch_pending(self, pending: bool) -> None: ...


class _Quiet:
    def patch_failed(self, error: KubeError) -> None: ...

    def patch_pending(self, pending: bool) -> None: ...


class Scaler:
    """Turns listener events into EphemeralRunnerSet / EphemeralRunner patches.

    In the normal case every patch is made in line, in ARC's order. When the runner-set patch
    fails transiently, the desired state is kept and :meth:`run` (a task next to the loop)
    re-applies the newest one with backoff; meanwhile the loop keeps polling (202s only
    update the kept state) but holds any message before acking it until the patch succeeds
    (:meth:`wait_in_sync`): acking a job we cannot create a runner for would lose it.
    """

    def __init__(
        self,
        *,
        min_runners: int,
        max_runners: int,
        patcher: Patcher,
        retry: PatchRetry | None = None,
        state: PatchState | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._sequencer = PatchSequencer(min_runners=min_runners, max_runners=max_runners)
        self._sleep = sleep
        self._patcher = patcher
        self._retry = retry or PatchRetry()
        self._state: PatchState = state or _Quiet()
        self._clock = clock
        self._pending: dict[str, Any] | None = None  # runner-set body not applied yet
        self._failing_since: float | None = None
        self._first_error: KubeError | None = None
        self._wake = asyncio.Event()
        self._in_sync = asyncio.Event()
        self._in_sync.set()

    @property
    def in_sync(self) -> bool:
        """The last desired runner count has reached the runner set."""
        return self._pending is None

    async def handle_desired_runner_count(self, assigned_jobs: int) -> int:
        """Patch the runner set for ``assigned_jobs``; always sends, even when unchanged."""
        target, patch_id = self._sequencer.next(assigned_jobs)
        body = runner_set_patch(target, patch_id)
        if self._pending is not None:
            # Outage: the retry task applies the newest desired state (it is complete: the
            # controller needs no intermediate patch).
            self._pending = body
        else:
            try:
                await self._patcher.patch_runner_set(body)
            except KubeError as exc:
                if not _transient(exc):
                    raise
                self._defer(body, exc)
                return target
        log.debug(
            "runner set patch",
            extra={"assigned": assigned_jobs, "target": target, "patch_id": patch_id},
        )
        return target

    def _defer(self, body: dict[str, Any], error: KubeError) -> None:
        log.warning(
            "runner set patch failed; retrying in the background and holding new messages",
            extra={"error": str(error), "budget_seconds": self._retry.outage_budget},
        )
        self._state.patch_failed(error)
        self._state.patch_pending(True)
        self._pending = body
        self._in_sync.clear()
        self._failing_since = self._clock()
        self._first_error = error
        self._wake.set()

    async def wait_in_sync(self) -> None:
        """Return once the desired runner count has been applied (at once when it has)."""
        await self._in_sync.wait()

    async def run(self) -> None:
        """Re-apply a deferred runner-set patch until it succeeds; raise the last error when
        the apiserver stays unusable past the outage budget. Runs until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._retry_pending()

    def _retrying(self, started: float, *, first_attempt: int = 1) -> AsyncRetrying:
        """The one retry policy for Kubernetes patches (tenacity): transient failures only,
        waits from ``PatchRetry.wait`` (``Retry-After`` first), never past the outage budget
        counted from ``started``; the last error is re-raised when it runs out."""

        def left() -> float:
            return started + self._retry.outage_budget - self._clock()

        def wait(state: RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome is not None else None
            kube_error = error if isinstance(error, KubeError) else None
            attempt = state.attempt_number + first_attempt - 1
            return max(0.0, min(self._retry.wait(attempt, kube_error), left()))

        def failed(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            if isinstance(error, KubeError):
                self._state.patch_failed(error)

        return AsyncRetrying(
            stop=lambda _state: left() <= 0,
            wait=wait,
            retry=retry_if_exception(_transient),
            sleep=self._sleep,
            before_sleep=failed,
            reraise=True,
        )

    async def _retry_pending(self) -> None:
        started = self._failing_since if self._failing_since is not None else self._clock()
        attempts = 0

        async def apply_newest() -> None:
            nonlocal attempts
            # Whatever is newest when the attempt starts; a newer state arriving while it is
            # on the wire is sent right after, without waiting.
            while self._pending is not None:
                attempts += 1
                body = self._pending
                await self._patcher.patch_runner_set(body)
                if self._pending is body:
                    self._pending = None

        left = started + self._retry.outage_budget - self._clock()
        # The in-line attempt failed already: wait as it asked before the first retry.
        await self._sleep(max(0.0, min(self._retry.wait(1, self._first_error), left)))
        try:
            await self._retrying(started, first_attempt=2)(apply_newest)
        except KubeError as exc:
            log.error(
                "giving up on the runner set patch",
                extra={"error": str(exc), "waited_seconds": round(self._clock() - started)},
            )
            raise
        log.info(
            "runner set patched again",
            extra={"attempts": attempts, "outage_seconds": round(self._clock() - started, 1)},
        )
        self._failing_since = None
        self._state.patch_pending(False)
        self._in_sync.set()

    async def handle_job_started(self, job: JobMessage) -> None:
        self._sequencer.dirty = True
        body = runner_status_patch(job)
        # The message is acked: retry here (bounded) rather than lose the busy mark that keeps
        # the controller from deleting this runner as idle. (A missing runner is not an error.)
        await self._retrying(self._clock())(
            self._patcher.patch_runner_status, job.runner_name, body
        )
        log.info("job started", extra={"runner": job.runner_name, "job_id": job.job_id})

    def handle_job_completed(self, job: JobMessage) -> None:
        # The runner pod exits and ARC's controller removes the EphemeralRunner; the listener
        # only notes that something happened so the next patch is not a scale-down.
        del job
        self._sequencer.dirty = True


_GROUP, _VERSION = ARC_GROUP, ARC_VERSION


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
