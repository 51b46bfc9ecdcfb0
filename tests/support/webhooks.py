"""GitHub's `workflow_job` deliveries as GitHub sends them: the payload, its headers and its
signature (HMAC-SHA256 of the raw body with the hook's secret)."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from datetime import UTC, datetime
from typing import Any


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def workflow_job(
    action: str,
    job_id: int,
    labels: list[str],
    *,
    created_at: float,
    run_id: int = 1000,
    repository: str = "octo/app",
) -> dict[str, Any]:
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
            "status": action if action != "waiting" else "waiting",
            "conclusion": "success" if action == "completed" else None,
            "created_at": datetime.fromtimestamp(created_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "started_at": None,
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
        "User-Agent": "GitHub-Hookshot/test",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
        "X-GitHub-Hook-ID": "42",
        "X-Hub-Signature-256": sign(body, secret),
    }
    return body, headers
