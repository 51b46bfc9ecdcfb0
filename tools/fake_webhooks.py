"""GitHub's `workflow_job` webhooks, as the fake's jobs move: each state change of a
`FakeActions` job becomes one signed delivery to a receiver, after a seeded delay, and a
seeded share of them is lost (GitHub never retries a failed delivery on its own).

A job's `workflow_job.id` is its runner request id, as in the fake REST API
(tools/fake_github_rest.py), so a reconcile and the deliveries speak of the same job.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import random
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from tools.fake_actions import FakeActions, FakeJob, JobState

ACTIONS = {JobState.RUNNING: "in_progress", JobState.COMPLETED: "completed"}


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def workflow_job(
    action: str,
    job_id: int,
    labels: list[str],
    *,
    created_at: float,
    run_id: int = 1000,
    repository: str = "octo/app",
) -> dict[str, Any]:
    """A `workflow_job` payload with the fields GitHub sends."""
    owner, name = repository.split("/")
    started = action in ("in_progress", "completed")
    return {
        "action": action,
        "workflow_job": {
            "id": job_id,
            "run_id": run_id,
            "run_attempt": 1,
            "name": f"job-{job_id}",
            "workflow_name": "ci",
            "labels": labels,
            "status": action,
            "conclusion": "success" if action == "completed" else None,
            "created_at": _time(created_at),
            "started_at": _time(created_at) if started else None,
            "runner_id": 5 if started else None,
            "runner_name": "runner-5" if started else None,
            "runner_group_id": 1 if started else None,
        },
        "repository": {"full_name": repository, "name": name, "owner": {"login": owner}},
        "organization": {"login": owner},
        "sender": {"login": "octocat"},
    }


def delivery(
    payload: dict[str, Any] | bytes,
    secret: str,
    *,
    event: str = "workflow_job",
    delivery_id: str | None = None,
) -> tuple[bytes, dict[str, str]]:
    """The body and headers of one signed delivery."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/fake",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
        "X-GitHub-Hook-ID": "42",
        "X-Hub-Signature-256": sign(body, secret),
    }
    return body, headers


@dataclass
class Sent:
    """One delivery: the job, its action, and what became of it (a status, "lost" or the
    transport error's class)."""

    job_id: int
    action: str
    result: str


class WebhookSender:
    """Watches `actions` and delivers its jobs' moves to `url` (see the module docstring)."""

    def __init__(
        self,
        actions: FakeActions,
        url: str,
        secret: str,
        *,
        seed: int = 0,
        delay: tuple[float, float] = (0.3, 3.0),
        loss: float = 0.02,
    ) -> None:
        self.url = url
        self._secret = secret
        self._rng = random.Random(seed)
        self._delay = delay
        self._loss = loss
        self._lose_next = 0
        self.sent: list[Sent] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._http = httpx.AsyncClient(timeout=10.0, trust_env=False)  # GitHub's deadline
        actions.observers.append(self._observe)

    def lose_next(self, count: int = 1) -> None:
        """The next `count` deliveries are lost, whatever the seed says."""
        self._lose_next += count

    def results(self, result: str) -> list[Sent]:
        return [s for s in self.sent if s.result == result]

    async def drain(self) -> None:
        """Until every delivery scheduled so far has been made (or lost)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._http.aclose()

    def _observe(self, job: FakeJob, state: JobState) -> None:
        if state is JobState.QUEUED:
            if job.requeues:  # GitHub sends no second `queued` when it takes a job back
                return
            action = "queued"
        elif state in ACTIONS:
            action = ACTIONS[state]
        else:
            return  # assignment to a scale set is not a webhook event
        payload = workflow_job(
            action,
            job.runner_request_id,
            list(job.labels),
            created_at=job.queue_time.timestamp(),
            run_id=job.workflow_run_id,
            repository=f"{job.owner_name}/{job.repository_name}",
        )
        lost = self._lose_next > 0 or self._rng.random() < self._loss
        self._lose_next = max(0, self._lose_next - 1)
        wait = self._rng.uniform(*self._delay)
        task = asyncio.get_running_loop().create_task(self._deliver(payload, wait, lost))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, payload: dict[str, Any], wait: float, lost: bool) -> None:
        await asyncio.sleep(wait)
        job = payload["workflow_job"]
        if lost:
            self.sent.append(Sent(job["id"], payload["action"], "lost"))
            return
        body, headers = delivery(payload, self._secret)
        try:
            response = await self._http.post(self.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            self.sent.append(Sent(job["id"], payload["action"], type(exc).__name__))
            return
        self.sent.append(Sent(job["id"], payload["action"], str(response.status_code)))
