"""A stateful fake of the GitHub API and the Actions service, served over real HTTP on loopback.

One `FakeActions` plays a GHES-style GitHub (API under `/api/v3`) plus the Actions service the
listener talks to after runner-registration. Several scale sets (several listeners, "clusters")
share ONE job queue, so tests can make them compete for jobs.

Wire behaviour follows the protocol notes (auth chain, sessions, long poll, ack, acquirejobs,
message envelope). Where the real service is undocumented the fake makes a choice and says so:

* Message queues are per scale set and survive sessions, so job events that happen while no
  listener is connected are delivered to the next session (a restarted listener asks for
  `lastMessageId` 0 and gets the first unacked message).
* Job messages are batched: pending job events are packed (at most 50) into one envelope when
  a poll finds no unacked message newer than its `lastMessageId`. The statistics in an
  envelope are a snapshot taken when the envelope is built.
* A session expires after `session_expiry` seconds with no message-queue traffic and no poll in
  progress; until then a new session for the same scale set gets 409. The 409 says nothing
  about when (no `Retry-After`), as the real service's does not.
* A session the service no longer knows answers 404 on refresh (the real broker's
  `RunnerAdminException`, "session ID that doesn't exist") and 400 on DELETE
  (`RunnerScaleSetSessionExpiredException`, seen on the real service). `evict_session` drops a
  session the way the broker evicts one: its queue token is then refused (401), so a client
  refreshes and meets the 404; `expire_session` drops it quietly: its queue answers 404.
* Any new poll on a session ends the session's older held polls with 202 (their client gave
  them up); the brief's case is the one where the capacity header changed.
* A missing `X-ScaleSetMaxCapacity` header means "no limit".
* Two generations of the service (``broker``). By default the fake is the ``pipelines``
  service of ARC-era sources: runner-registration hands out ``{url}/{tenant}/``, the session's
  queue URL is ``…/_apis/runtime/messagequeues/{queue}/messages?sessionId=…``, and with
  ``ghes_mode`` jobs are offered (``JobAvailable``) and must be acquired. With ``broker=True``
  it is the service GitHub.com runs today, as a public live probe (2026-07) described it:
  the service URL is ``{url}/rest``, the queue URL ``{that}/scalesets/message`` with no
  query string (the queue token alone names the session), jobs are assigned directly
  (``JobAssigned`` with no ``JobAvailable`` before it, up to the header), ``acquirejobs``
  answers a router-level ``404 page not found``, and job messages carry ``runnerRequestId``
  0 (the probe saw it on ``JobAssigned``; the fake sends 0 on every job message, the
  strictest reading, so nothing may rely on it). Unacknowledged messages are delivered again
  with the same ``messageId`` in both modes (at-least-once, the cursor is ``lastMessageId``).
* Which scale set gets a job several could take: by default the first to poll with room
  (woken in the order the scale sets were added). With ``assign_seed``, each job gets a seeded
  random order of the scale sets when queued and goes to the first one in it that matches and
  had room at its last poll — GitHub picks whichever eligible listener, never always the same.

The Python API below (add_jobs, claim_job, complete_job, ...) must be called from the event
loop that runs the fake. For another process there is a small JSON control API under `/_fake/`.

The GitHub REST endpoints a demand source reads are apart, in fake_github_rest.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import json
import random
import secrets
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
from aiohttp import web

from base.tasks import CLOCK_RESOLUTION
from tools.fake_http import (
    Fault,
    LoopbackFake,
    LoopbackServer,
    RecordedRequest,
    RecordingFaultMiddleware,
    Reject,
    json_response,
)
from tools.waits import eventually

API_VERSION = "6.0-preview"
MESSAGE_TYPE = "RunnerScaleSetJobMessages"
MAX_JOB_MESSAGES_PER_ENVELOPE = 50
ZERO_TIME = "0001-01-01T00:00:00Z"
_EXC_NS = "GitHub.Actions.Runtime.WebApi"

ROUTES = frozenset(
    {
        "access_tokens",
        "registration_token",
        "runner_registration",
        "session_create",
        "session_refresh",
        "session_delete",
        "get_message",
        "delete_message",
        "acquire_jobs",
        "get_scale_set",
        "runner_group",
    }
)


class JobState(enum.StrEnum):
    QUEUED = "queued"
    AVAILABLE = "available"  # offered to a scale set with JobAvailable, not yet acquired (GHES)
    ASSIGNED = "assigned"  # assigned to a scale set, no runner yet
    RUNNING = "running"  # claimed by a runner
    COMPLETED = "completed"


_IN_FLIGHT = (JobState.AVAILABLE, JobState.ASSIGNED, JobState.RUNNING)


@dataclass
class FakeJob:
    """A workflow job. Read its fields; change it only through FakeActions."""

    runner_request_id: int
    job_id: str
    owner_name: str
    repository_name: str
    workflow_ref: str
    display_name: str
    event_name: str
    labels: tuple[str, ...]
    workflow_run_id: int
    duration: float | None
    queue_time: datetime
    state: JobState = JobState.QUEUED
    run_attempt: int = 1  # GitHub's run_attempt: a re-run keeps the run id, adds one
    scale_set_id: int | None = None
    scale_set_assign_time: datetime | None = None
    runner_assign_time: datetime | None = None
    finish_time: datetime | None = None
    runner_name: str | None = None
    runner_id: int | None = None
    result: str | None = None
    requeues: int = 0
    assigned_at: float | None = None  # monotonic, when offered/assigned to the current set
    claimed_at: float | None = None
    workflow_started_at: float | None = None
    finished_at: float | None = None
    stranded_reported: bool = False
    # Why a failed job failed, when the fake knows: "prepare_timeout" (its workflow pod was
    # not Running within the hooks' prepare-job timeout).
    failure: str | None = None
    # (monotonic time, state) transitions, so a lagging observer (the fake HUD) can ask
    # "what was this job's state L seconds ago".
    history: list[tuple[float, JobState]] = field(default_factory=list)

    def state_at(self, monotonic: float) -> JobState | None:
        """The job's state at a past monotonic time; None if it did not exist yet."""
        current: JobState | None = None
        for when, state in self.history:
            if when > monotonic:
                break
            current = state
        return current

    def as_dict(self) -> dict[str, Any]:
        return {
            "runnerRequestId": self.runner_request_id,
            "jobId": self.job_id,
            "ownerName": self.owner_name,
            "repositoryName": self.repository_name,
            "jobWorkflowRef": self.workflow_ref,
            "jobDisplayName": self.display_name,
            "eventName": self.event_name,
            "labels": list(self.labels),
            "workflowRunId": self.workflow_run_id,
            "duration": self.duration,
            "state": str(self.state),
            "scaleSetId": self.scale_set_id,
            "runnerName": self.runner_name,
            "runnerId": self.runner_id,
            "result": self.result,
            "failure": self.failure,
            "requeues": self.requeues,
        }


@dataclass
class PollRecord:
    """One GET message as seen by the fake. `capacity` None = header absent (no limit)."""

    monotonic: float
    wall: float
    scale_set_id: int
    session_id: str
    capacity: int | None
    last_message_id: int
    outcome: str = "holding"  # message | empty | superseded | disconnected | closed
    ended: float | None = None
    message_id: int | None = None


@dataclass(frozen=True)
class ScriptedPoll:
    """One scripted answer to a GET message, bypassing the job machinery.

    ``message`` is the 200 body (an envelope, or raw bytes sent as they are), or None for a
    202. ``delay`` holds the poll that long before answering. ``drop`` instead ends the
    session: ``"evict"`` as the broker evicts one (this poll and later ones with its token
    get 401, its refresh 404), ``"expire"`` quietly (this poll gets 404).
    """

    message: dict[str, Any] | bytes | None = None
    delay: float = 0.0
    drop: str | None = None


@dataclass(frozen=True)
class CapacityRecord:
    monotonic: float
    wall: float
    scale_set_id: int
    value: int | None


@dataclass
class _HeldPoll:
    record: PollRecord
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    superseded: bool = False


@dataclass
class FakeSession:
    session_id: str
    scale_set_id: int
    owner_name: str
    queue_id: str
    token: str
    created: float
    last_seen: float
    held: list[_HeldPoll] = field(default_factory=list)
    deleted: bool = False
    refreshes: int = 0


@dataclass
class FakeScaleSet:
    id: int
    name: str
    labels: tuple[str, ...]
    runner_group_id: int = 1
    runner_group_name: str = "Default"
    next_message_id: int = 1
    outbox: list[dict[str, Any]] = field(default_factory=list)
    messages: dict[int, dict[str, Any]] = field(default_factory=dict)  # unacked, by id
    session: FakeSession | None = None
    runners: dict[str, int] = field(default_factory=dict)  # registered runner name -> id
    counters: Counter[str] = field(default_factory=Counter)
    script: deque[ScriptedPoll] = field(default_factory=deque)

    def matches(self, job: FakeJob) -> bool:
        """A job with no labels fits any scale set; otherwise all its labels must be ours."""
        mine = {label.lower() for label in self.labels}
        return all(label.lower() in mine for label in job.labels)


def make_rsa_keypair() -> tuple[str, str]:
    """(private PEM, public PEM) for a fake GitHub App."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


def format_time(value: datetime | None) -> str:
    """RFC 3339 with 7 fractional digits, as the .NET service writes; zero time for None."""
    if value is None:
        return ZERO_TIME
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "0Z"


def actions_exception(type_key: str, message: str) -> dict[str, Any]:
    """An Actions-service error body (only typeName and message matter to clients)."""
    return {
        "$id": "1",
        "innerException": None,
        "message": message,
        "typeName": f"{_EXC_NS}.{type_key}, {_EXC_NS}",
        "typeKey": type_key,
        "errorCode": 0,
        "eventId": 3000,
    }


def _reject(status: int, type_key: str, message: str) -> Reject:
    return Reject(json_response(actions_exception(type_key, message), status=status))


def _github_reject(status: int, message: str) -> Reject:
    return Reject(
        json_response(
            {"message": message, "documentation_url": "https://docs.github.com/rest"}, status
        )
    )


class FakeActions(LoopbackFake):
    """GitHub API + Actions service. `await start()`, use `.url`, `await stop()`."""

    def __init__(
        self,
        *,
        pats: Iterable[str] = ("ghp_fake_pat",),
        app_id: str | None = None,
        app_public_key: str | None = None,
        app_installation_id: int | None = None,
        tenant: str = "tenant-acme",
        admin_token_ttl: float = 3600.0,
        session_expiry: float = 60.0,
        poll_hold: float = 2.0,
        ghes_mode: bool = False,
        broker: bool = False,
        requeue_after: float | None = None,
        max_requeues: int = 3,
        strand_grace: float = 30.0,
        assign_seed: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Every hold, expiry and age is read from `clock`: the unit tests pass the event
        # loop's (virtual) time, so a held poll or an expired session costs no real time.
        self.clock = clock
        self.pats = set(pats)
        self.app_id = app_id
        self.app_public_key = app_public_key
        self.app_installation_id = app_installation_id
        self.tenant = tenant.strip("/")
        self.admin_token_ttl = admin_token_ttl
        self.session_expiry = session_expiry
        self.poll_hold = poll_hold
        if broker and ghes_mode:
            raise ValueError("broker and ghes_mode exclude each other: the broker assigns jobs")
        self.ghes_mode = ghes_mode
        self.broker = broker
        self.requeue_after = requeue_after
        self.max_requeues = max_requeues
        self.strand_grace = strand_grace
        self._assign_rng = None if assign_seed is None else random.Random(assign_seed)
        self._preference: dict[int, list[int]] = {}  # job -> scale set ids, in seeded order
        self._last_capacity: dict[int, int | None] = {}  # scale set -> header of its last poll

        self.scale_sets: dict[int, FakeScaleSet] = {}
        self.jobs: dict[int, FakeJob] = {}  # by runner_request_id, in queue order
        self.polls: list[PollRecord] = []
        self.acks: list[tuple[int, int]] = []  # (scale set id, message id)
        self.registrations: list[dict[str, Any]] = []  # runner-registration bodies
        self.registration_scopes: list[str] = []
        self.admin_tokens_issued = 0
        self.installation_tokens_issued = 0
        self.sessions_created = 0
        self.session_log: list[FakeSession] = []  # every session created, in order
        self.claims: list[tuple[int, str]] = []  # (runner request id, runner) per claim
        self.expired_sessions: list[FakeSession] = []
        # GitHub's runner-group settings of every scale set's group (GET runner-groups/{id}).
        self.runner_group_public = True
        self._evicted_queues: set[str] = set()
        # Broker mode: the queue token names the session, so a dropped session is known by
        # its token (the status its queue calls get from then on).
        self._ended_tokens: dict[str, int] = {}

        self._installation_tokens: dict[str, float] = {}
        self._registration_tokens: dict[str, float] = {}
        self._admin_key = secrets.token_bytes(32)
        self._request_ids = itertools.count(1001)
        self._run_ids = itertools.count(5001)
        self._runner_ids = itertools.count(1)
        self._closing = False
        self._changed = asyncio.Event()  # set on every state change, for wait_until
        # Called with each job and its new state (queued included): GitHub's webhooks.
        self.observers: list[Callable[[FakeJob, JobState], None]] = []
        self._sweeper: asyncio.Task[None] | None = None

        self._recorder = RecordingFaultMiddleware(ROUTES)
        self._app = self._build_app()
        self._server = LoopbackServer(self._app, host=host, port=port)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await super().start()
        if self.requeue_after is not None:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="fake-actions-sweep")

    async def stop(self) -> None:
        self._closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for scale_set in self.scale_sets.values():
            self._wake(scale_set.id)
        await super().stop()

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/v3"

    @property
    def service_url(self) -> str:
        """The Actions-service base URL runner-registration hands out: ``{url}/{tenant}/``,
        or in broker mode ``{url}/rest`` (no trailing slash, as the live service)."""
        if self.broker:
            return f"{self.url}/rest"
        return f"{self.url}/{self.tenant}/"

    @property
    def _service_path(self) -> str:
        return "/rest" if self.broker else f"/{self.tenant}"

    def configure_url(self, scope: str = "acme") -> str:
        """A GHES-style configure_url for this fake: org `acme`, `owner/repo` or `enterprises/e`."""
        return f"{self.url}/{scope.strip('/')}"

    # ------------------------------------------------------------------ test API: setup

    def add_scale_set(
        self, scale_set_id: int, name: str, labels: Sequence[str] | None = None
    ) -> FakeScaleSet:
        """Register a scale set; its labels default to its name, as ARC creates them."""
        scale_set = FakeScaleSet(scale_set_id, name, tuple(labels) if labels else (name,))
        self.scale_sets[scale_set_id] = scale_set
        return scale_set

    def add_jobs(
        self,
        n: int = 1,
        *,
        labels: Sequence[str] = (),
        duration: float | None = None,
        owner: str = "acme",
        repo: str = "app",
        workflow_file: str = "ci.yml",
        ref: str = "refs/heads/main",
        display_name: str | None = None,
        event_name: str = "push",
        queued_ago: float = 0.0,
        run_id: int | None = None,
        run_attempt: int = 1,
    ) -> list[FakeJob]:
        """Queue `n` jobs. Empty `labels` fit any scale set. `duration` is for the runner
        stand-in; the fake never completes a job on its own. Each job is a run of its own,
        unless `run_id` puts them all in that run (attempt `run_attempt`), as a workflow's
        later stages are."""
        now = self.clock()
        queue_time = datetime.now(UTC) - timedelta(seconds=queued_ago)
        created = []
        for _ in range(n):
            request_id = next(self._request_ids)
            job = FakeJob(
                runner_request_id=request_id,
                job_id=str(uuid.uuid4()),
                owner_name=owner,
                repository_name=repo,
                workflow_ref=f"{owner}/{repo}/.github/workflows/{workflow_file}@{ref}",
                display_name=display_name or f"job-{request_id}",
                event_name=event_name,
                labels=tuple(labels),
                workflow_run_id=run_id if run_id is not None else next(self._run_ids),
                duration=duration,
                queue_time=queue_time,
                run_attempt=run_attempt,
            )
            job.history.append((now - queued_ago, JobState.QUEUED))
            self.jobs[request_id] = job
            for observe in self.observers:
                observe(job, JobState.QUEUED)
            if self._assign_rng is not None:
                order = sorted(self.scale_sets)
                self._assign_rng.shuffle(order)
                self._preference[request_id] = order
            created.append(job)
        self._wake_all()
        return created

    def inject(self, route: str, fault: Fault, times: int = 1) -> None:
        """Apply `fault` to the next `times` requests of `route` (a name in ROUTES)."""
        self._recorder.inject(route, fault, times)

    def inject_session_conflict(self, times: int = 1, owner: str = "other-listener") -> None:
        """The next `times` session creates answer 409, as if another owner held the session."""
        body = actions_exception(
            "RunnerScaleSetSessionConflictException",
            f"The actions runner scaleset already has an active session for owner {owner}.",
        )
        self.inject("session_create", Fault.status_code(409, json.dumps(body).encode()), times)

    def expire_message_queue_token(self, scale_set_id: int) -> None:
        """Invalidate the live session's queue token: the next queue call gets 401."""
        session = self._live_session(scale_set_id)
        if session is not None:
            session.token = "expired-" + secrets.token_hex(8)

    def expire_session(self, scale_set_id: int) -> None:
        """Drop the session server-side, as the service does after its owner went silent."""
        scale_set = self.scale_sets[scale_set_id]
        if scale_set.session is not None:
            self._end_session(scale_set, expired=True)

    def evict_session(self, scale_set_id: int) -> None:
        """Drop the session as the broker evicts one: its queue calls get 401 from now on (the
        token is no longer honoured), and a refresh of it gets 404."""
        scale_set = self.scale_sets[scale_set_id]
        if scale_set.session is not None:
            self._evicted_queues.add(scale_set.session.queue_id)
            self._end_session(scale_set, expired=True)

    def script_polls(self, scale_set_id: int, polls: Iterable[ScriptedPoll]) -> None:
        """Answer the scale set's next polls from ``polls``, in order, before anything else.

        Scripted answers ignore ``lastMessageId`` and acks: they are exactly what a test wants
        a client to see. Once the script is used up, polls behave normally again.
        """
        self.scale_sets[scale_set_id].script.extend(polls)

    def script_left(self, scale_set_id: int) -> int:
        return len(self.scale_sets[scale_set_id].script)

    def faults_pending(self, route: str) -> int:
        """How many injected faults are still waiting for requests of ``route``."""
        return self._recorder.faults.pending(route)

    def clear_faults(self) -> None:
        self._recorder.faults.clear()

    def assign(self, scale_set_id: int, capacity: int | None) -> None:
        """Run one assignment round for a scale set, as a poll with this header would."""
        self._assign(self.scale_sets[scale_set_id], capacity)

    # ------------------------------------------------------------------ test API: runner side

    def register_runner(self, scale_set_id: int, runner_name: str) -> int:
        scale_set = self.scale_sets[scale_set_id]
        if runner_name not in scale_set.runners:
            scale_set.runners[runner_name] = next(self._runner_ids)
        return scale_set.runners[runner_name]

    def unregister_runner(self, scale_set_id: int, runner_name: str) -> None:
        self.scale_sets[scale_set_id].runners.pop(runner_name, None)

    def claim_job(self, scale_set_id: int, runner_name: str) -> FakeJob | None:
        """A runner of the scale set takes its oldest assigned job (emits JobStarted)."""
        scale_set = self.scale_sets[scale_set_id]
        job = next(
            (
                j
                for j in self.jobs.values()
                if j.scale_set_id == scale_set_id and j.state is JobState.ASSIGNED
            ),
            None,
        )
        if job is None:
            return None
        busy = {j.runner_name for j in self.jobs.values() if j.state is JobState.RUNNING}
        if runner_name in busy:
            raise ValueError(f"runner {runner_name!r} already runs a job")
        job.runner_id = self.register_runner(scale_set_id, runner_name)
        job.runner_name = runner_name
        job.runner_assign_time = datetime.now(UTC)
        job.claimed_at = self.clock()
        self.claims.append((job.runner_request_id, runner_name))
        self._set_state(job, JobState.RUNNING)
        scale_set.counters["started"] += 1
        self._emit(scale_set, job, "JobStarted")
        return job

    def mark_workflow_started(self, job_id: str | int) -> None:
        """The stand-in saw the job's workflow pod Running: the job is not stranded."""
        job = self.job(job_id)
        if job.workflow_started_at is None:
            job.workflow_started_at = self.clock()

    def report_stranded(self, job_id: str | int) -> None:
        """The stand-in knows this claimed job's workflow will never start."""
        self.job(job_id).stranded_reported = True

    def complete_job(
        self, job_id: str | int, result: str = "succeeded", *, failure: str | None = None
    ) -> FakeJob:
        """Finish a job (emits JobCompleted to its scale set). A job no runner claimed yet
        completes with a zero runnerAssignTime, like a cancellation on GitHub. ``failure``
        records why a failed job failed (e.g. "prepare_timeout")."""
        job = self.job(job_id)
        if job.state is JobState.COMPLETED:
            raise ValueError(f"job {job.job_id} already completed")
        job.result = result
        job.failure = failure
        job.finish_time = datetime.now(UTC)
        job.finished_at = self.clock()
        self._set_state(job, JobState.COMPLETED)
        if job.scale_set_id is not None:
            scale_set = self.scale_sets[job.scale_set_id]
            scale_set.counters["completed"] += 1
            self._emit(scale_set, job, "JobCompleted")
            if job.runner_name is not None:
                # Runners are ephemeral: one job, then gone.
                scale_set.runners.pop(job.runner_name, None)
        self._wake_all()
        return job

    def job(self, job_id: str | int) -> FakeJob:
        """Look a job up by runner_request_id (int) or job_id (str)."""
        if isinstance(job_id, int):
            return self.jobs[job_id]
        for job in self.jobs.values():
            if job.job_id == job_id:
                return job
        raise KeyError(job_id)

    # ------------------------------------------------------------------ test API: observation

    @property
    def requests(self) -> list[RecordedRequest]:
        return self._recorder.requests

    def requests_for(self, route: str) -> list[RecordedRequest]:
        return [r for r in self._recorder.requests if r.route == route]

    def capacity_history(self, scale_set_id: int | None = None) -> list[CapacityRecord]:
        """(time, scale set, X-ScaleSetMaxCapacity) of every authenticated poll, in order."""
        return [
            CapacityRecord(p.monotonic, p.wall, p.scale_set_id, p.capacity)
            for p in self.polls
            if scale_set_id is None or p.scale_set_id == scale_set_id
        ]

    def queued(self) -> list[FakeJob]:
        return [j for j in self.jobs.values() if j.state is JobState.QUEUED]

    def jobs_of(self, scale_set_id: int, *states: JobState) -> list[FakeJob]:
        return [
            j
            for j in self.jobs.values()
            if j.scale_set_id == scale_set_id and (not states or j.state in states)
        ]

    def stranded(self, scale_set_id: int | None = None) -> list[FakeJob]:
        """Claimed jobs whose workflow never started: reported, or not started within
        `strand_grace` seconds of the claim (measured to completion for finished jobs)."""
        now = self.clock()
        found = []
        for job in self.jobs.values():
            if job.claimed_at is None or job.workflow_started_at is not None:
                continue
            if scale_set_id is not None and job.scale_set_id != scale_set_id:
                continue
            waited = (job.finished_at or now) - job.claimed_at
            if job.stranded_reported or waited > self.strand_grace:
                found.append(job)
        return found

    def counters(self, scale_set_id: int) -> dict[str, int]:
        """Cumulative event counts plus current gauges for one scale set."""
        scale_set = self.scale_sets[scale_set_id]
        counts = {k: 0 for k in ("offered", "assigned", "started", "completed", "requeued")}
        counts.update(scale_set.counters)
        counts["stranded"] = len(self.stranded(scale_set_id))
        stats = self.statistics(scale_set_id)
        counts["in_flight"] = stats["totalAvailableJobs"] + stats["totalAssignedJobs"]
        counts["running"] = stats["totalRunningJobs"]
        return counts

    def statistics(self, scale_set_id: int) -> dict[str, int]:
        states = Counter(j.state for j in self.jobs_of(scale_set_id))
        scale_set = self.scale_sets[scale_set_id]
        busy_names = {
            j.runner_name for j in self.jobs_of(scale_set_id, JobState.RUNNING) if j.runner_name
        }
        registered = len(scale_set.runners)
        busy = len(busy_names & set(scale_set.runners))
        assigned = states[JobState.ASSIGNED] + states[JobState.RUNNING]
        return {
            "totalAvailableJobs": states[JobState.AVAILABLE],
            "totalAcquiredJobs": assigned,
            "totalAssignedJobs": assigned,
            "totalRunningJobs": states[JobState.RUNNING],
            "totalRegisteredRunners": registered,
            "totalBusyRunners": busy,
            "totalIdleRunners": registered - busy,
        }

    def session(self, scale_set_id: int) -> FakeSession | None:
        """The scale set's live session, if any."""
        return self._live_session(scale_set_id)

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Wait until `predicate()` holds; wrap in `asyncio.timeout`. Re-checked on every state
        change and at least every 50 ms (for time-based predicates such as `stranded`)."""
        await eventually(predicate, "the fake's state", None, interval=0.05, wake=self._changed)

    # ------------------------------------------------------------------ job machinery

    def _set_state(self, job: FakeJob, state: JobState) -> None:
        job.state = state
        job.history.append((self.clock(), state))
        self._changed.set()
        for observe in self.observers:
            observe(job, state)

    def _emit(self, scale_set: FakeScaleSet, job: FakeJob, message_type: str) -> None:
        message: dict[str, Any] = {
            "messageType": message_type,
            "runnerRequestId": 0 if self.broker else job.runner_request_id,
            "repositoryName": job.repository_name,
            "ownerName": job.owner_name,
            "jobId": job.job_id,
            "jobWorkflowRef": job.workflow_ref,
            "jobDisplayName": job.display_name,
            "workflowRunId": job.workflow_run_id,
            "eventName": job.event_name,
            "requestLabels": list(job.labels),
            "queueTime": format_time(job.queue_time),
            "scaleSetAssignTime": format_time(job.scale_set_assign_time),
            "runnerAssignTime": format_time(job.runner_assign_time),
            "finishTime": format_time(job.finish_time),
        }
        if message_type == "JobAvailable":
            message["acquireJobUrl"] = (
                f"{self.url}{self._service_path}/_apis/runtime/runnerscalesets/"
                f"{scale_set.id}/acquirejobs"
            )
        if message_type in ("JobStarted", "JobCompleted"):
            message["runnerId"] = job.runner_id or 0
            message["runnerName"] = job.runner_name or ""
        if message_type == "JobCompleted":
            message["result"] = job.result or ""
        scale_set.outbox.append(message)
        self._changed.set()
        self._wake(scale_set.id)

    def _assign(self, scale_set: FakeScaleSet, capacity: int | None) -> None:
        """Hand queued jobs to the polling scale set, never beyond its advertised capacity."""
        self._last_capacity[scale_set.id] = capacity
        in_flight = len(self.jobs_of(scale_set.id, *_IN_FLIGHT))
        room = None if capacity is None else max(0, capacity - in_flight)
        for job in self.jobs.values():
            if room is not None and room <= 0:
                break
            if job.state is not JobState.QUEUED or not scale_set.matches(job):
                continue
            if not self._first_choice(scale_set.id, job):
                continue
            job.scale_set_id = scale_set.id
            job.scale_set_assign_time = datetime.now(UTC)
            job.assigned_at = self.clock()
            if self.ghes_mode:
                self._set_state(job, JobState.AVAILABLE)
                scale_set.counters["offered"] += 1
                self._emit(scale_set, job, "JobAvailable")
            else:
                self._set_state(job, JobState.ASSIGNED)
                scale_set.counters["assigned"] += 1
                self._emit(scale_set, job, "JobAssigned")
            if room is not None:
                room -= 1

    def _first_choice(self, scale_set_id: int, job: FakeJob) -> bool:
        """With ``assign_seed``: whether ``scale_set_id`` comes first in the job's order among
        the scale sets that match it and had room at their last poll (always True without)."""
        order = self._preference.get(job.runner_request_id)
        if order is None:
            return True
        for candidate in order:
            if candidate == scale_set_id:
                return True
            other = self.scale_sets.get(candidate)
            if other is None or not other.matches(job) or self._live_session(candidate) is None:
                continue
            capacity = self._last_capacity.get(candidate, 0)
            in_flight = len(self.jobs_of(candidate, *_IN_FLIGHT))
            if capacity is None or capacity > in_flight:
                return False  # the earlier choice can take it on its next poll
        return True

    def _requeue_stale(self) -> None:
        """GitHub's re-assignment: an unclaimed job goes back to the queue, announced to the
        old scale set as JobCompleted(canceled), at most `max_requeues` times per job."""
        if self.requeue_after is None:
            return
        deadline = self.clock() - self.requeue_after
        requeued = False
        for job in self.jobs.values():
            if job.state not in (JobState.AVAILABLE, JobState.ASSIGNED):
                continue
            if job.requeues >= self.max_requeues or job.assigned_at is None:
                continue
            if job.assigned_at > deadline or job.scale_set_id is None:
                continue
            scale_set = self.scale_sets[job.scale_set_id]
            job.result = "canceled"
            self._emit(scale_set, job, "JobCompleted")
            scale_set.counters["requeued"] += 1
            job.result = None
            job.scale_set_id = None
            job.scale_set_assign_time = None
            job.assigned_at = None
            job.requeues += 1
            self._set_state(job, JobState.QUEUED)
            requeued = True
        if requeued:
            self._wake_all()

    async def _sweep_forever(self) -> None:
        assert self.requeue_after is not None
        interval = max(0.01, min(0.25, self.requeue_after / 4))
        while True:
            await asyncio.sleep(interval)
            self._requeue_stale()

    def _next_message(self, scale_set: FakeScaleSet, last_id: int) -> dict[str, Any] | None:
        for message_id in sorted(scale_set.messages):
            if message_id > last_id:
                return scale_set.messages[message_id]
        if not scale_set.outbox:
            return None
        batch = scale_set.outbox[:MAX_JOB_MESSAGES_PER_ENVELOPE]
        del scale_set.outbox[:MAX_JOB_MESSAGES_PER_ENVELOPE]
        message_id = scale_set.next_message_id
        scale_set.next_message_id += 1
        envelope = {
            "messageId": message_id,
            "messageType": MESSAGE_TYPE,
            "body": json.dumps(batch, separators=(",", ":")),
            "statistics": self.statistics(scale_set.id),
        }
        scale_set.messages[message_id] = envelope
        return envelope

    # ------------------------------------------------------------------ sessions

    def _live_session(self, scale_set_id: int) -> FakeSession | None:
        scale_set = self.scale_sets.get(scale_set_id)
        if scale_set is None or scale_set.session is None:
            return None
        session = scale_set.session
        if session.held or self.clock() - session.last_seen < self.session_expiry:
            return session
        self._end_session(scale_set, expired=True)
        return None

    def _end_session(self, scale_set: FakeScaleSet, *, expired: bool) -> None:
        session = scale_set.session
        if session is None:
            return
        session.deleted = True
        if expired:
            self.expired_sessions.append(session)
        evicted = session.queue_id in self._evicted_queues
        self._ended_tokens[session.token] = 401 if evicted else 404
        for poll in session.held:
            poll.superseded = True
            poll.wake.set()
        scale_set.session = None
        self._changed.set()

    def _session_json(self, scale_set: FakeScaleSet, session: FakeSession) -> dict[str, Any]:
        if self.broker:
            queue_url = f"{self.service_url}/scalesets/message"
        else:
            queue_url = (
                f"{self.service_url}_apis/runtime/messagequeues/{session.queue_id}/messages"
                f"?sessionId={session.session_id}"
            )
        return {
            "sessionId": session.session_id,
            "ownerName": session.owner_name,
            "runnerScaleSet": self._scale_set_json(scale_set),
            "messageQueueUrl": queue_url,
            "messageQueueAccessToken": session.token,
            "statistics": self.statistics(scale_set.id),
        }

    def _scale_set_json(self, scale_set: FakeScaleSet) -> dict[str, Any]:
        return {
            "id": scale_set.id,
            "name": scale_set.name,
            "runnerGroupId": scale_set.runner_group_id,
            "runnerGroupName": scale_set.runner_group_name,
            "labels": [{"type": "System", "name": label} for label in scale_set.labels],
            "RunnerSetting": {"disableUpdate": False},
            "createdOn": format_time(datetime(2026, 1, 1, tzinfo=UTC)),
            "runnerJitConfigUrl": (
                f"{self.service_url}_apis/runtime/runnerscalesets/{scale_set.id}/generatejitconfig"
            ),
            "statistics": self.statistics(scale_set.id),
        }

    # ------------------------------------------------------------------ waking held polls

    def _wake(self, scale_set_id: int) -> None:
        scale_set = self.scale_sets.get(scale_set_id)
        if scale_set is not None and scale_set.session is not None:
            for poll in scale_set.session.held:
                poll.wake.set()

    def _wake_all(self) -> None:
        for scale_set_id in self.scale_sets:
            self._wake(scale_set_id)

    def mount(self, register: Callable[[web.Application], None]) -> None:
        """Let another fake serve routes from this server (before `start`): e.g. GitHub's
        REST endpoints, which a client reaches at the same API URL as the ones above."""
        register(self._app)

    def accepts_github_token(self, token: str) -> bool:
        """Whether `token` is a PAT or an unexpired installation token of this fake."""
        expiry = self._installation_tokens.get(token)
        return token in self.pats or (expiry is not None and expiry > self.clock())

    # ------------------------------------------------------------------ HTTP: auth helpers

    def _bearer(self, request: web.Request) -> str:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme != "Bearer" or not token:
            raise _github_reject(401, "Requires authentication")
        return token

    def _check_app_jwt(self, token: str) -> None:
        try:
            header = jwt.get_unverified_header(token)
            if header.get("alg") != "RS256":
                raise _github_reject(401, "A JSON web token could not be decoded")
            if self.app_public_key:
                claims = jwt.decode(
                    token, self.app_public_key, algorithms=["RS256"], leeway=60,
                    options={"require": ["iat", "exp", "iss"]},
                )  # fmt: skip
            else:
                claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError as exc:
            raise _github_reject(401, f"A JSON web token could not be decoded: {exc}") from exc
        issuer = claims.get("iss")
        # GitHub's Go client sends iss as a string; an integer would be a client bug.
        if not isinstance(issuer, str) or issuer != self.app_id:
            raise _github_reject(401, "'Issuer' claim ('iss') must be the app id as a string")
        if claims.get("exp", 0) < time.time():
            raise _github_reject(401, "'Expiration time' claim ('exp') is too far in the past")

    def _require_admin(self, request: web.Request) -> None:
        if request.query.get("api-version") is None:
            raise _reject(400, "VssInvalidPreviewVersionException", "api-version is required")
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme != "Bearer":
            raise _reject(401, "VssUnauthorizedException", "admin token required")
        try:
            jwt.decode(token, self._admin_key, algorithms=["HS256"], audience=self.tenant)
        except jwt.PyJWTError as exc:
            raise _reject(401, "VssUnauthorizedException", f"admin token rejected: {exc}") from exc

    def _scale_set_from(self, request: web.Request) -> FakeScaleSet:
        try:
            return self.scale_sets[int(request.match_info["scale_set_id"])]
        except (KeyError, ValueError) as exc:
            raise _reject(
                404, "RunnerScaleSetNotFoundException", "The runner scale set was not found."
            ) from exc

    def _queue_session(self, request: web.Request) -> tuple[FakeScaleSet, FakeSession]:
        """Resolve a message-queue call to its live session and check the queue token."""
        if self.broker:
            return self._broker_queue_session(request)
        queue_id = request.match_info["queue_id"]
        for scale_set in self.scale_sets.values():
            session = scale_set.session
            if session is not None and session.queue_id == queue_id:
                break
        else:
            if queue_id in self._evicted_queues:
                raise _reject(401, "VssUnauthorizedException", "message queue token is not valid")
            raise _reject(404, "MessageQueueNotFoundException", "The message queue was not found.")
        if self._live_session(scale_set.id) is not session:
            raise _reject(404, "MessageQueueNotFoundException", "The session has expired.")
        if request.query.get("sessionId") != session.session_id:
            raise _reject(400, "ArgumentException", "sessionId query parameter is required")
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme != "Bearer" or not secrets.compare_digest(token, session.token):
            raise _reject(401, "VssUnauthorizedException", "message queue token is not valid")
        session.last_seen = self.clock()
        return scale_set, session

    def _broker_queue_session(self, request: web.Request) -> tuple[FakeScaleSet, FakeSession]:
        """Broker mode: the queue URL is the same for every session; the token names it."""
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme == "Bearer" and token:
            for scale_set in self.scale_sets.values():
                session = scale_set.session
                if session is not None and secrets.compare_digest(token, session.token):
                    if self._live_session(scale_set.id) is not session:
                        break  # expired just now: answered below like any ended session
                    session.last_seen = self.clock()
                    return scale_set, session
        if self._ended_tokens.get(token) == 404:
            raise _reject(404, "MessageQueueNotFoundException", "The session has expired.")
        raise _reject(401, "VssUnauthorizedException", "message queue token is not valid")

    # ------------------------------------------------------------------ HTTP: GitHub API

    async def _access_tokens(self, request: web.Request) -> web.Response:
        if self.app_id is None:
            raise _github_reject(401, "No GitHub App is configured on this fake")
        self._check_app_jwt(self._bearer(request))
        installation_id = int(request.match_info["installation_id"])
        if self.app_installation_id is not None and installation_id != self.app_installation_id:
            raise _github_reject(404, "Not Found")
        token = "ghs_" + secrets.token_hex(16)
        self._installation_tokens[token] = self.clock() + 3600
        self.installation_tokens_issued += 1
        expires = datetime.now(UTC) + timedelta(hours=1)
        return json_response({"token": token, "expires_at": _github_time(expires)}, status=201)

    async def _registration_token(self, request: web.Request) -> web.Response:
        token = self._bearer(request)
        if not self.accepts_github_token(token):
            raise _github_reject(401, "Bad credentials")
        self.registration_scopes.append(request.match_info["scope"])
        registration = "AREG" + secrets.token_hex(12).upper()
        self._registration_tokens[registration] = self.clock() + 3600
        expires = datetime.now(UTC) + timedelta(hours=1)
        return json_response(
            {"token": registration, "expires_at": _github_time(expires)}, status=201
        )

    async def _runner_registration(self, request: web.Request) -> web.Response:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        expiry = self._registration_tokens.get(token)
        if scheme != "RemoteAuth" or expiry is None or expiry < self.clock():
            raise _github_reject(401, "Bad credentials")
        try:
            body = json.loads(await request.read())
        except ValueError as exc:
            raise _github_reject(400, "Problems parsing JSON") from exc
        if not isinstance(body, dict) or not isinstance(body.get("url"), str):
            raise _github_reject(422, "url is required")
        if body.get("runner_event") != "register":
            raise _github_reject(422, "runner_event must be 'register'")
        self.registrations.append(body)
        return json_response(
            {
                "url": self.service_url,
                "token": self._admin_token(),
                "token_schema": "OAuthAccessToken",
            }
        )

    async def _runner_group(self, request: web.Request) -> web.Response:
        """GitHub REST: one runner group of an organization or enterprise."""
        if not self.accepts_github_token(self._bearer(request)):
            raise _github_reject(401, "Bad credentials")
        group_id = int(request.match_info["group_id"])
        names = {s.runner_group_id: s.runner_group_name for s in self.scale_sets.values()}
        if group_id not in names:
            raise _github_reject(404, "Not Found")
        return json_response(
            {
                "id": group_id,
                "name": names[group_id],
                "visibility": "all",
                "default": group_id == 1,
                "allows_public_repositories": self.runner_group_public,
                "restricted_to_workflows": False,
                "selected_workflows": [],
            }
        )

    def _admin_token(self) -> str:
        now = time.time()
        self.admin_tokens_issued += 1
        claims = {
            "iss": "fake-actions",
            "aud": self.tenant,
            "iat": int(now),
            "nbf": int(now) - 1,
            # Rounded up so a sub-second TTL still yields a token valid for a moment.
            "exp": int(now + self.admin_token_ttl + 0.999),
            "n": self.admin_tokens_issued,
        }
        return jwt.encode(claims, self._admin_key, algorithm="HS256")

    # ------------------------------------------------------------------ HTTP: sessions

    async def _session_create(self, request: web.Request) -> web.Response:
        self._require_admin(request)
        scale_set = self._scale_set_from(request)
        try:
            body = json.loads(await request.read() or b"{}")
        except ValueError as exc:
            raise _reject(400, "ArgumentException", "session body is not JSON") from exc
        if not isinstance(body, dict):
            raise _reject(400, "ArgumentException", "session body must be an object")
        owner = str(body.get("ownerName") or "")
        existing = self._live_session(scale_set.id)
        if existing is not None:
            raise _reject(
                409,
                "RunnerScaleSetSessionConflictException",
                f"The actions runner scaleset {scale_set.name} already has an active session "
                f"for owner {existing.owner_name}.",
            )
        now = self.clock()
        session = FakeSession(
            session_id=str(uuid.uuid4()),
            scale_set_id=scale_set.id,
            owner_name=owner,
            queue_id=f"ss{scale_set.id}-{secrets.token_hex(4)}",
            token="mq_" + secrets.token_hex(16),
            created=now,
            last_seen=now,
        )
        scale_set.session = session
        self.sessions_created += 1
        self.session_log.append(session)
        self._changed.set()
        return json_response(self._session_json(scale_set, session))

    def _session_from(self, request: web.Request) -> tuple[FakeScaleSet, FakeSession]:
        scale_set = self._scale_set_from(request)
        session_id = request.match_info["session_id"]
        session = self._live_session(scale_set.id)
        if session is None or session.session_id != session_id:
            if request.method == "PATCH":
                raise _reject(
                    404,
                    "RunnerAdminException",
                    "runner referenced a session ID that doesn't exist",
                )
            raise _reject(
                400,
                "RunnerScaleSetSessionExpiredException",
                f"The session identifier {session_id} is not valid.",
            )
        return scale_set, session

    async def _session_refresh(self, request: web.Request) -> web.Response:
        self._require_admin(request)
        scale_set, session = self._session_from(request)
        session.token = "mq_" + secrets.token_hex(16)
        session.refreshes += 1
        session.last_seen = self.clock()
        return json_response(self._session_json(scale_set, session))

    async def _session_delete(self, request: web.Request) -> web.Response:
        self._require_admin(request)
        scale_set, _ = self._session_from(request)
        self._end_session(scale_set, expired=False)
        return web.Response(status=204)

    # ------------------------------------------------------------------ HTTP: message queue

    async def _get_message(self, request: web.Request) -> web.Response:
        scale_set, session = self._queue_session(request)
        if "api-version" not in request.headers.get("Accept", ""):
            raise _reject(400, "ArgumentException", "Accept must carry api-version")
        raw_capacity = request.headers.get("X-ScaleSetMaxCapacity")
        try:
            capacity = None if raw_capacity is None else int(raw_capacity)
            last_id = int(request.query.get("lastMessageId", "0"))
        except ValueError as exc:
            raise _reject(400, "ArgumentException", "bad X-ScaleSetMaxCapacity or id") from exc
        if capacity is not None and capacity < 0:
            raise _reject(400, "ArgumentException", "X-ScaleSetMaxCapacity must be >= 0")

        record = PollRecord(
            monotonic=self.clock(),
            wall=time.time(),
            scale_set_id=scale_set.id,
            session_id=session.session_id,
            capacity=capacity,
            last_message_id=last_id,
        )
        self.polls.append(record)
        self._changed.set()
        # A new poll means the client gave up any older one still held on this session.
        for older in session.held:
            older.superseded = True
            older.wake.set()
        if scale_set.script:
            return await self._scripted(scale_set, session, record)
        poll = _HeldPoll(record)
        session.held.append(poll)
        try:
            message = await self._hold(scale_set, poll, capacity, last_id)
        except asyncio.CancelledError:
            record.outcome = "disconnected"
            raise
        finally:
            record.ended = self.clock()
            session.held.remove(poll)
            session.last_seen = self.clock()
            self._changed.set()
        if message is None:
            return web.Response(status=202)
        record.outcome = "message"
        record.message_id = int(message["messageId"])
        return json_response(message)

    async def _scripted(
        self, scale_set: FakeScaleSet, session: FakeSession, record: PollRecord
    ) -> web.Response:
        item = scale_set.script.popleft()
        if item.drop is not None:
            record.ended = self.clock()
            record.outcome = item.drop
            if item.drop == "evict":
                self.evict_session(scale_set.id)
                raise _reject(401, "VssUnauthorizedException", "message queue token is not valid")
            self.expire_session(scale_set.id)
            raise _reject(404, "MessageQueueNotFoundException", "The session has expired.")
        try:
            if item.delay:
                await asyncio.sleep(item.delay)
        except asyncio.CancelledError:
            record.outcome = "disconnected"
            raise
        finally:
            record.ended = self.clock()
            session.last_seen = self.clock()
            self._changed.set()
        if item.message is None:
            record.outcome = "empty"
            return web.Response(status=202)
        record.outcome = "message"
        if isinstance(item.message, bytes):
            return web.Response(status=200, body=item.message, content_type="application/json")
        record.message_id = int(item.message.get("messageId", 0))
        return json_response(item.message)

    async def _hold(
        self, scale_set: FakeScaleSet, poll: _HeldPoll, capacity: int | None, last_id: int
    ) -> dict[str, Any] | None:
        deadline = self.clock() + self.poll_hold
        while True:
            poll.wake.clear()
            self._requeue_stale()
            if not poll.superseded and not self._closing:
                self._assign(scale_set, capacity)
                message = self._next_message(scale_set, last_id)
                if message is not None:
                    return message
            if poll.superseded:
                poll.record.outcome = "superseded"
                return None
            if self._closing:
                poll.record.outcome = "closed"
                return None
            remaining = deadline - self.clock()
            if remaining <= CLOCK_RESOLUTION:  # see base.tasks
                poll.record.outcome = "empty"
                return None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await poll.wake.wait()

    async def _delete_message(self, request: web.Request) -> web.Response:
        scale_set, _ = self._queue_session(request)
        try:
            message_id = int(request.match_info["message_id"])
        except ValueError as exc:
            raise _reject(400, "ArgumentException", "message id must be an integer") from exc
        # Idempotent, so an ack retried after a lost response does not fail.
        scale_set.messages.pop(message_id, None)
        self.acks.append((scale_set.id, message_id))
        self._changed.set()
        return web.Response(status=204)

    async def _acquire_jobs(self, request: web.Request) -> web.Response:
        if self.broker:
            # The live probe: a router-level 404 at every location tried, whatever the token.
            return web.Response(status=404, text="404 page not found")
        if request.query.get("api-version") is None:
            raise _reject(400, "VssInvalidPreviewVersionException", "api-version is required")
        scale_set = self._scale_set_from(request)
        session = self._live_session(scale_set.id)
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if (
            session is None
            or scheme != "Bearer"
            or not secrets.compare_digest(token, session.token)
        ):
            raise _reject(401, "VssUnauthorizedException", "message queue token is not valid")
        session.last_seen = self.clock()
        try:
            ids = json.loads(await request.read())
        except ValueError as exc:
            raise _reject(400, "ArgumentException", "body must be a JSON array") from exc
        if not isinstance(ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids
        ):
            raise _reject(400, "ArgumentException", "body must be a JSON array of request ids")
        acquired = []
        for request_id in ids:
            job = self.jobs.get(request_id)
            if job is None or job.scale_set_id != scale_set.id:
                continue
            if job.state is JobState.AVAILABLE:
                self._set_state(job, JobState.ASSIGNED)
                scale_set.counters["assigned"] += 1
                self._emit(scale_set, job, "JobAssigned")
            if job.state is JobState.ASSIGNED:
                acquired.append(request_id)
        return json_response({"count": len(acquired), "value": acquired})

    async def _get_scale_set(self, request: web.Request) -> web.Response:
        self._require_admin(request)
        return json_response(self._scale_set_json(self._scale_set_from(request)))

    # ------------------------------------------------------------------ HTTP: control API

    async def _control_state(self, request: web.Request) -> web.Response:
        return json_response(
            {
                "scaleSets": {
                    str(s.id): {
                        "name": s.name,
                        "labels": list(s.labels),
                        "counters": self.counters(s.id),
                        "statistics": self.statistics(s.id),
                        "session": s.session.session_id if s.session else None,
                    }
                    for s in self.scale_sets.values()
                },
                "jobs": [j.as_dict() for j in self.jobs.values()],
                "capacityHistory": [
                    [c.wall, c.scale_set_id, c.value] for c in self.capacity_history()
                ],
            }
        )

    async def _control_post(self, request: web.Request) -> web.Response:
        action = request.match_info["action"]
        try:
            body = json.loads(await request.read() or b"{}")
        except ValueError:
            return json_response({"error": "body is not JSON"}, status=400)
        try:
            return json_response(self._control(action, body))
        except (KeyError, ValueError, TypeError) as exc:
            return json_response({"error": f"{action}: {exc!r}"}, status=400)

    def _control(self, action: str, body: dict[str, Any]) -> Any:
        if action == "scale-sets":
            scale_set = self.add_scale_set(int(body["id"]), str(body["name"]), body.get("labels"))
            return {"id": scale_set.id, "labels": list(scale_set.labels)}
        if action == "jobs":
            jobs = self.add_jobs(
                int(body.get("count", 1)),
                labels=tuple(body.get("labels", ())),
                duration=body.get("duration"),
                owner=str(body.get("owner", "acme")),
                repo=str(body.get("repo", "app")),
            )
            return [j.as_dict() for j in jobs]
        if action == "claim":
            job = self.claim_job(int(body["scale_set_id"]), str(body["runner_name"]))
            return None if job is None else job.as_dict()
        if action == "complete":
            return self.complete_job(body["job_id"], str(body.get("result", "succeeded"))).as_dict()
        if action == "workflow-started":
            self.mark_workflow_started(body["job_id"])
            return {"ok": True}
        if action == "faults":
            fault = Fault(
                body["kind"],
                status=int(body.get("status", 500)),
                body=str(body.get("body", "")).encode(),
                headers=dict(body.get("headers", {})),
                seconds=float(body.get("seconds", 0.0)),
            )
            self.inject(str(body["route"]), fault, int(body.get("times", 1)))
            return {"ok": True}
        raise ValueError(f"unknown action {action!r}")

    # ------------------------------------------------------------------ app

    def _build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._recorder.middleware])
        svc = f"{self._service_path}/_apis/runtime"
        sets = f"{svc}/runnerscalesets/{{scale_set_id}}"
        scope = r"{scope:(?:orgs/[^/]+|repos/[^/]+/[^/]+|enterprises/[^/]+)}"
        app.router.add_post(
            "/api/v3/app/installations/{installation_id:[0-9]+}/access_tokens",
            self._access_tokens,
            name="access_tokens",
        )
        app.router.add_post(
            f"/api/v3/{scope}/actions/runners/registration-token",
            self._registration_token,
            name="registration_token",
        )
        app.router.add_get(
            r"/api/v3/{owner:(?:orgs|enterprises)/[^/]+}/actions/runner-groups/{group_id:[0-9]+}",
            self._runner_group,
            name="runner_group",
        )
        app.router.add_post(
            "/api/v3/actions/runner-registration",
            self._runner_registration,
            name="runner_registration",
        )
        app.router.add_post(f"{sets}/sessions", self._session_create, name="session_create")
        app.router.add_patch(
            f"{sets}/sessions/{{session_id}}", self._session_refresh, name="session_refresh"
        )
        app.router.add_delete(
            f"{sets}/sessions/{{session_id}}", self._session_delete, name="session_delete"
        )
        app.router.add_post(f"{sets}/acquirejobs", self._acquire_jobs, name="acquire_jobs")
        app.router.add_get(sets, self._get_scale_set, name="get_scale_set")
        if self.broker:
            queue = f"{self._service_path}/scalesets/message"
        else:
            queue = f"{svc}/messagequeues/{{queue_id}}/messages"
        app.router.add_get(queue, self._get_message, name="get_message")
        app.router.add_delete(
            f"{queue}/{{message_id}}", self._delete_message, name="delete_message"
        )
        app.router.add_get("/_fake/state", self._control_state, name="control_state")
        app.router.add_post("/_fake/{action}", self._control_post, name="control_post")
        return app


def _github_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
