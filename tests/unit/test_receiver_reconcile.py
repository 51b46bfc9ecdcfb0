"""The webhook receiver heals itself (listener/receiver_main.py): a reconcile with the fake
GitHub REST API adds jobs whose deliveries were lost and drops those whose start was lost;
a failing reconcile changes nothing. And its start-up errors are one line each."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import httpx
import pytest
from prometheus_client import CollectorRegistry

from capacity.github_demand import GitHubDemand, GitHubScope
from capacity.settings_demand import GitHubDemandSettings
from capacity.webhook_queue import JobEvent, JobQueue, Status, label_set
from listener import receiver_main
from listener.receiver import Freshness
from listener.receiver_metrics import ReceiverMetrics
from tools.fake_github_rest import FakeGitHubRest

TOKEN = "ghp_receiver_reconcile"
LINUX = label_set(["self-hosted", "linux"])


@pytest.fixture
async def fake() -> AsyncIterator[FakeGitHubRest]:
    async with FakeGitHubRest(tokens=[TOKEN]) as server:
        server.add_repositories("acme", ["app", "lib"])
        yield server


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False) as client:
        yield client


def every_label(
    fake: FakeGitHubRest, http: httpx.AsyncClient, max_calls: int = 200
) -> GitHubDemand:
    async def token() -> str:
        return TOKEN

    return GitHubDemand(
        GitHubDemandSettings(max_calls_per_interval=max_calls),
        None,
        client=http,
        token=token,
        scope=GitHubScope(fake.api_url, "acme"),
        interval=300.0,
    )


def count(queue: JobQueue, labels: frozenset[str] = LINUX) -> int:
    return queue.count(labels, aged_after=None, now=time.time()).queued


async def test_a_reconcile_heals_lost_deliveries(
    fake: FakeGitHubRest, http: httpx.AsyncClient
) -> None:
    queue = JobQueue()
    freshness = Freshness(stale_after=900.0)
    metrics = ReceiverMetrics(CollectorRegistry())
    lost_queued = fake.queue_job("acme", "app", ["self-hosted", "linux"])
    fake.queue_job("acme", "lib", ["self-hosted", "gpu"])  # another scale set's
    started = fake.queue_job("acme", "app", ["self-hosted", "linux"])
    # Delivered long ago; its in_progress delivery was lost.
    queue.apply(
        JobEvent("d-1", started.id, Status.QUEUED, LINUX, time.time() - 60), time.time() - 60
    )
    fake.set_status(started.id, "in_progress")

    await receiver_main.reconcile_once(queue, every_label(fake, http), freshness, metrics)

    assert queue.status(lost_queued.id) is Status.QUEUED
    assert queue.status(started.id) is None  # dropped: GitHub no longer lists it as queued
    assert count(queue) == 1
    assert count(queue, label_set(["gpu"])) == 1
    assert freshness.reconciled_at is not None
    assert freshness.problem(time.time()) is None


async def test_a_failed_reconcile_changes_nothing(
    fake: FakeGitHubRest, http: httpx.AsyncClient
) -> None:
    queue = JobQueue()
    freshness = Freshness(stale_after=900.0)
    fake.queue_job("acme", "app", ["self-hosted", "linux"])
    fake.outage(503)
    metrics = ReceiverMetrics(CollectorRegistry())
    await receiver_main.reconcile_once(queue, every_label(fake, http), freshness, metrics)
    assert len(queue) == 0
    assert freshness.reconciled_at is None
    assert freshness.problem(time.time()) == "not reconciled with GitHub since the start"


async def test_a_reconcile_cut_short_by_its_budget_adds_but_drops_nothing(
    fake: FakeGitHubRest, http: httpx.AsyncClient
) -> None:
    queue = JobQueue()
    held = fake.queue_job("acme", "lib", ["self-hosted", "linux"])
    queue.apply(JobEvent("d-1", held.id, Status.QUEUED, LINUX, time.time() - 60), time.time() - 60)
    fake.set_status(held.id, "in_progress")
    fake.queue_job("acme", "app", ["self-hosted", "linux"])
    freshness = Freshness(stale_after=900.0)
    metrics = ReceiverMetrics(CollectorRegistry())
    # The repository list, then "app"'s queued and in-progress runs and its one run's jobs:
    # "lib" is not reached.
    reader = every_label(fake, http, max_calls=4)
    await receiver_main.reconcile_once(queue, reader, freshness, metrics)
    assert queue.status(held.id) is Status.QUEUED  # not dropped on a partial listing
    assert count(queue) == 2


def test_app_credentials_must_come_whole() -> None:
    env = {"GITHUB_APP_ID": "1", "GITHUB_APP_PRIVATE_KEY": "key"}
    with pytest.raises(receiver_main.ReceiverError, match="set all three"):
        receiver_main.credentials_from(env)
    assert receiver_main.credentials_from({}) is None
    assert receiver_main.credentials_from({"GITHUB_TOKEN": "t"}) is not None


def test_a_receiver_without_its_secret_stops_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert receiver_main.cli([], {}) == 2
    err = capsys.readouterr().err
    assert err == "webhook-receiver: WEBHOOK_SECRET: required (the webhook's secret)\n"


def test_a_token_without_an_organization_stops_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {"WEBHOOK_SECRET": "s3cret-value", "GITHUB_TOKEN": "ghp_secret_value"}
    assert receiver_main.cli(["--deliveries-addr", ":0", "--reads-addr", ":0"], env) == 2
    err = capsys.readouterr().err
    assert err.startswith("webhook-receiver: --github-config-url: required")
    assert "s3cret-value" not in err
    assert "ghp_secret_value" not in err
