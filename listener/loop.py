"""The long-poll loop: ARC's ``listener.Run`` with a live ``X-ScaleSetMaxCapacity``.

Order of work per message is ARC's (docs/wire-protocol.md §4): statistics → ack (DELETE) →
acquire ``JobAvailable`` → ``JobStarted`` → ``JobCompleted`` → desired runner count. A 202
re-uses the last statistics.

What we do differently: the Actions service holds a poll for about 50 s and reads the header
once, so a capacity change would reach GitHub only with the next poll. Instead, when the
advertised value changes, the in-flight poll is abandoned and re-issued with the new value.
Abandoning is safe: a message the service answered but we never processed is not acked and
``lastMessageId`` has not moved, so the service delivers it again on the next poll. A poll
that completed before the cancel landed is processed normally, so nothing is handled twice.

The rate limit (``reissue_interval``) applies to *rises* only. A lower value is the safe
direction: capacity the scheduler no longer confirms must stop attracting jobs at once, or a
wave landing in that window is assigned to nodes that are gone. A flapping value therefore
costs at most one extra poll per drop. The header is computed when the request is actually
built (also on a transport retry or after a token refresh), not when the poll was started, so
a value that changed while the request was waiting goes out as it is now.

The 202 path (re-apply the last statistics; the patchID-0 patch that lets the controller scale
idle runners down comes from it) and the "last poll" readiness mark must not depend on a poll
completing: when the capacity changes faster than the service's ~50 s hold, every poll is
re-issued before it ends. So an abandoned poll marks readiness, and after ``quiet_interval``
seconds without a message the loop takes the 202 path anyway, as ARC would have at the end of
an undisturbed poll.

Kubernetes trouble: when the runner-set patch fails transiently (apiserver throttling or
restarting), the scaler keeps the desired state and retries it in the background; the loop
keeps polling (the session stays alive, the header stays current, 202s only update the kept
state) but holds a message *before acking it* until the patch goes through: a job acked and
acquired while no runner can be created would wait for nothing. While it holds one, it polls
again from the same ``lastMessageId`` every ``keepalive_interval`` so the session does not
expire, and at once when the value drops below the header last sent; the answer (the same
message) is dropped and comes again later.

Delivery is at-least-once: a message comes again (same ``messageId``) until its DELETE has
landed. One this process has already handled is acked again and otherwise ignored.

Shutdown: ``stop`` ends the loop between messages; a message being handled is finished first
(every call in it has its own deadline), like ARC's ``context.WithoutCancel``. A held poll
(or the wait for the patch) is cut short by it.

Every wait here that something else may cut short (``stop``, a capacity change, the patch
going through, the keep-alive interval) is one :func:`base.tasks.run_until`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

from base.tasks import CLOCK_RESOLUTION, INTERRUPTED, run_until
from listener.advertised import AdvertisedCapacity
from listener.wire import JobMessage, Message, Session, Statistics

log = logging.getLogger(__name__)


class ActionsSession(Protocol):
    """The message-queue calls the loop makes (``listener.actions.ActionsClient``)."""

    async def get_message(
        self, last_message_id: int, max_capacity: Callable[[], int]
    ) -> Message | None: ...

    async def delete_message(self, message_id: int) -> None: ...

    async def acquire_jobs(self, request_ids: Sequence[int]) -> list[int]: ...


class RunnerScaler(Protocol):
    """``listener.scaler.Scaler``."""

    async def handle_desired_runner_count(self, assigned_jobs: int) -> int: ...

    async def handle_job_started(self, job: JobMessage) -> None: ...

    @property
    def in_sync(self) -> bool: ...

    async def wait_in_sync(self) -> None: ...

    def handle_job_completed(self, job: JobMessage) -> None: ...


class Recorder(Protocol):
    """``listener.metrics.ListenerMetrics``, or :class:`NoMetrics` when metrics are off."""

    def record_statistics(self, stats: Statistics) -> None: ...

    def record_desired_runners(self, count: int) -> None: ...

    def record_job_started(self, job: JobMessage) -> None: ...

    def record_job_completed(self, job: JobMessage) -> None: ...


class NoMetrics:
    """The recorder used when ``metrics_addr`` is empty."""

    def record_statistics(self, stats: Statistics) -> None: ...

    def record_desired_runners(self, count: int) -> None: ...

    def record_job_started(self, job: JobMessage) -> None: ...

    def record_job_completed(self, job: JobMessage) -> None: ...


class _Stopping:
    """Marker: ``stop`` was set while the poll was held; it was cancelled unanswered."""


class _Quiet:
    """Marker: polls were re-issued for a whole hold period without a message (a 202)."""


_STOPPING = _Stopping()
_QUIET = _Quiet()
_HANDLED_IDS_KEPT = 256


class Listener:
    """Polls the message queue, handles messages, keeps the header value current."""

    def __init__(
        self,
        *,
        session: ActionsSession,
        scaler: RunnerScaler,
        capacity: AdvertisedCapacity,
        metrics: Recorder | None = None,
        on_poll: Callable[[], None] = lambda: None,
        on_header: Callable[[int], None] = lambda value: None,
        on_job_assigned: Callable[[float | None], None] = lambda queued_at: None,
        reissue_interval: float = 1.0,
        quiet_interval: float = 50.0,
        keepalive_interval: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._session = session
        self._scaler = scaler
        self._capacity = capacity
        self._metrics: Recorder = metrics or NoMetrics()
        self._on_poll = on_poll
        # The capacity monitor's view of the critical path: each header sent, each job
        # GitHub assigned (no-ops without a monitor).
        self._on_header = on_header
        self._on_job_assigned = on_job_assigned
        self._reissue_interval = reissue_interval
        self._quiet_interval = quiet_interval
        self._keepalive_interval = keepalive_interval
        self._clock = clock
        self._last_sync = clock()  # when the desired runner count was last applied
        self._last_message_id = 0
        # Ids of the messages handled most recently. The service's ids grow, so a redelivered
        # one is among the last few; the bound only keeps memory flat.
        self._handled: deque[int] = deque(maxlen=_HANDLED_IDS_KEPT)
        self._latest: Statistics | None = None
        self._sent = capacity.value  # the header value of the poll in flight
        self.reissued_polls = 0
        """How many in-flight polls were abandoned because the capacity changed."""

    async def run(self, initial: Session, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set; any protocol error propagates (the process exits)."""
        self._latest = initial.statistics
        self._metrics.record_statistics(initial.statistics)
        desired = await self._scaler.handle_desired_runner_count(
            initial.statistics.total_assigned_jobs
        )
        self._metrics.record_desired_runners(desired)
        self._last_sync = self._clock()
        # ``stop`` is looked at between messages only: a message being handled is finished.
        while not stop.is_set():
            outcome = await self._poll(stop)
            if outcome is _STOPPING:
                return
            self._on_poll()
            if outcome is None or outcome is _QUIET:
                # 202 (or as long without a message, polls re-issued): re-apply the last
                # statistics (not recorded, as ARC). With nothing else happening this is the
                # patchID-0 patch that lets the controller scale idle runners down.
                await self._scaler.handle_desired_runner_count(self._latest.total_assigned_jobs)
                self._last_sync = self._clock()
                continue
            assert isinstance(outcome, Message)
            if outcome.message_id in self._handled:
                await self._ack_again(outcome)
                continue
            if not self._scaler.in_sync and not await self._wait_in_sync(stop):
                return  # stopping: the message is not acked, the service delivers it again
            self._last_message_id = outcome.message_id
            await self._handle(outcome)
            self._handled.append(outcome.message_id)
            self._last_sync = self._clock()

    async def _ack_again(self, message: Message) -> None:
        """A message this process has handled, delivered again (delivery is at-least-once:
        the service keeps a message until its DELETE lands). Acked again so the service drops
        it, and nothing else: handling it twice would count its jobs twice in the metrics and
        send a patch for statistics older than the ones already applied."""
        log.info(
            "message delivered again; already handled, acking it only",
            extra={"message_id": message.message_id},
        )
        await self._session.delete_message(message.message_id)

    async def _wait_in_sync(self, stop: asyncio.Event) -> bool:
        """Hold a message, unacked, until the runner set can be patched again (the scaler
        gives up after its outage budget, which ends the process). False if stopping.

        Meanwhile the session is kept alive (the service expires a session it has not heard
        from for about a minute): every ``keepalive_interval`` the loop polls again from the
        same ``lastMessageId``, with the current header. The answer is the held message again
        (or nothing); it is dropped here, as it will be delivered again once acting is safe.
        """
        log.warning("holding a message until the runner set can be patched")
        while True:
            # A drop below the header last sent polls at once (with the lower value), as on
            # the normal path: between keep-alives no poll is open, and the last one's header
            # is what the service goes by.
            synced = await run_until(
                self._scaler.wait_in_sync(),
                stop.wait(),
                asyncio.sleep(self._keepalive_interval),
                self._drop_below_sent(),
            )
            if stop.is_set():
                return False
            if synced is not INTERRUPTED:
                return True
            # A keep-alive poll; it is not needed any more once the patch goes through.
            self._sent = self._capacity.value  # (read again as the request is built)
            answer = await run_until(
                self._session.get_message(self._last_message_id, self._header),
                stop.wait(),
                self._scaler.wait_in_sync(),
                self._drop_below_sent(),  # a held keep-alive is re-issued lower at once
            )
            if answer is not INTERRUPTED:
                self._on_poll()  # an error above is as fatal as on any poll

    async def _handle(self, message: Message) -> None:
        stats = message.statistics
        self._latest = stats
        self._metrics.record_statistics(stats)
        kinds: dict[str, int] = {}
        for job in message.jobs:
            kinds[job.message_type] = kinds.get(job.message_type, 0) + 1
        log.info(
            "processing message",
            extra={
                "message_id": message.message_id,
                "jobs": kinds,
                "assigned": stats.total_assigned_jobs,
                "running": stats.total_running_jobs,
                "available": stats.total_available_jobs,
                "registered_runners": stats.total_registered_runners,
                "capacity": self._capacity.value,
            },
        )
        # Ack first (ARC ≥ 0.14): a crash after this point loses the message's side effects,
        # but the next statistics carry the totals that matter for scaling.
        await self._session.delete_message(message.message_id)
        available = [j.runner_request_id for j in message.jobs if j.message_type == "JobAvailable"]
        if available:
            acquired = await self._session.acquire_jobs(available)
            log.info(
                "acquired jobs", extra={"requested": len(available), "acquired": len(acquired)}
            )
        for job in message.jobs:
            if job.message_type == "JobAssigned":
                # With when it was queued (epoch seconds): the monitor knows then which jobs
                # a reading of the queue counted that this scale set has since been given.
                queued = job.queue_time.timestamp() if job.queue_time is not None else None
                self._on_job_assigned(queued)
        for job in message.jobs:
            if job.message_type == "JobStarted":
                self._metrics.record_job_started(job)
                await self._scaler.handle_job_started(job)
        for job in message.jobs:
            if job.message_type == "JobCompleted":
                log.info(
                    "job completed",
                    extra={"runner": job.runner_name, "job_id": job.job_id, "result": job.result},
                )
                self._metrics.record_job_completed(job)
                self._scaler.handle_job_completed(job)
        desired = await self._scaler.handle_desired_runner_count(stats.total_assigned_jobs)
        self._metrics.record_desired_runners(desired)
        log.info("desired runners", extra={"desired": desired})

    def _header(self) -> int:
        """The ``X-ScaleSetMaxCapacity`` value, read as the poll request is built."""
        self._sent = self._capacity.value
        self._on_header(self._sent)
        return self._sent

    async def _poll(self, stop: asyncio.Event) -> Message | _Stopping | _Quiet | None:
        """One long poll, re-issued whenever the advertised value moves away from the header
        it carries: a message, None for a 202, :data:`_QUIET` or :data:`_STOPPING`."""
        while True:
            # 1. Issue the poll with the value of now. (The header is read again as each
            #    request is built, so a transport retry or a token refresh sends the newest.)
            self._sent = self._capacity.value
            issued_at = self._clock()
            # 2. Wait for its answer, unless SIGTERM comes or the poll must be re-issued.
            #    Cancelling it is safe: an answer that is never processed is not acked, so the
            #    service delivers it again; one that came first is processed (run_until).
            outcome = await run_until(
                self._session.get_message(self._last_message_id, self._header),
                stop.wait(),
                self._reissue_due(issued_at),
            )
            if outcome is not INTERRUPTED:
                return outcome  # a message or a 202 (an error has been raised)
            if stop.is_set():
                return _STOPPING
            # 3. Re-issue with the new value (the loop goes round).
            self.reissued_polls += 1
            log.debug(
                "capacity changed, re-issuing poll",
                extra={"old": self._sent, "new": self._capacity.value},
            )
            # The abandoned poll was held by the service without an error: the session works,
            # which is what readiness reports.
            self._on_poll()
            # 4. A capacity that changes faster than a poll completes must not starve the 202
            #    path (the scale-down patch): after a hold period without a message, take it.
            if self._clock() - self._last_sync >= self._quiet_interval:
                return _QUIET

    async def _drop_below_sent(self) -> None:
        """Return once the advertised value is below the header last sent."""
        while True:
            version = self._capacity.version
            if self._capacity.value < self._sent:
                return
            await self._capacity.wait_changed(version)

    async def _reissue_due(self, issued_at: float) -> None:
        """Return once the poll issued at ``issued_at`` should be re-issued: at once when the
        advertised value drops below the header in flight, and when it rises, once
        ``reissue_interval`` has passed since the poll was issued. A value that changes back
        to the one in flight keeps the poll."""
        while True:
            version, current = self._capacity.version, self._capacity.value
            if current < self._sent:
                # Capacity the scheduler no longer confirms must stop attracting jobs now.
                return
            if current == self._sent:
                await self._capacity.wait_changed(version)
                continue
            # A rise waits out the rate limit, so a flapping value cannot turn into a request
            # storm; a change meanwhile (a drop below the value in flight) is looked at at once.
            left = issued_at + self._reissue_interval - self._clock()
            if left <= CLOCK_RESOLUTION:
                return
            await run_until(self._capacity.wait_changed(version), asyncio.sleep(left))
