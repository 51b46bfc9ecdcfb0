"""`ghalistener webhook-receiver`: one per cluster, for every scale set in it.

GitHub delivers `workflow_job` events to the deliveries port; every listener with
`demand.source: webhook` reads its labels' count from the reads port once a second. On start
and every `--reconcile-interval` the queue is reconciled with GitHub's REST API (the same
walk as the GitHub demand source, over every label), because GitHub never retries a failed
delivery and a restart loses what the receiver held. Without GitHub credentials there is no
reconcile: the receiver serves deliveries alone and says so at start-up.

Environment: ``WEBHOOK_SECRET`` (required: the hook's secret); for the reconcile,
``GITHUB_TOKEN``, or ``GITHUB_APP_ID``, ``GITHUB_APP_INSTALLATION_ID`` and
``GITHUB_APP_PRIVATE_KEY`` (the keys of ARC's GitHub Secret, upper-cased).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Mapping, Sequence

from base.exposition import new_registry
from base.http.client import make_client, product_user_agent
from capacity.demand import DemandReader
from capacity.github_demand import GitHubDemand, GitHubScope, repositories_for
from capacity.model import DemandResult
from capacity.settings_demand import GitHubDemandSettings
from capacity.webhook_queue import JobQueue, ListedJob, label_set
from listener import signals
from listener.config import AppCredentials, ConfigError, Credentials, TokenCredentials
from listener.github_auth import GitHubAuth
from listener.github_target import parse_github_target
from listener.logs import configure_logging, redact, register_secret
from listener.receiver import Freshness, deliveries_app, reads_routes
from listener.receiver_metrics import ReceiverMetrics
from listener.server import Health, build_app, serve

log = logging.getLogger("listener.receiver")

EXPIRE_EVERY = 60.0


class ReceiverError(ValueError):
    """A start-up problem, one line naming the variable or option at fault."""


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="ghalistener webhook-receiver",
        description="Receives GitHub workflow_job webhooks and serves queued jobs by label.",
    )
    parser.add_argument("--deliveries-addr", default=":8080", help="GitHub's deliveries port")
    parser.add_argument("--reads-addr", default=":8081", help="listeners' reads, metrics, probes")
    parser.add_argument(
        "--github-config-url",
        default="",
        help="the organization (or repository) the hook is on, as ARC's githubConfigUrl; "
        "with credentials, the queue is reconciled with its REST API",
    )
    parser.add_argument(
        "--repositories",
        default="",
        help="comma-separated 'owner/name' to reconcile (default: all)",
    )
    parser.add_argument("--reconcile-interval", type=float, default=300.0)
    parser.add_argument(
        "--max-calls", type=int, default=2000, help="REST calls per reconcile, 304s included"
    )
    parser.add_argument(
        "--stale-after",
        type=float,
        default=900.0,
        help="reads fail once the last good reconcile is this old (seconds)",
    )
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--log-format", default="json")
    return parser.parse_args(argv)


def credentials_from(env: Mapping[str, str]) -> Credentials | None:
    """GitHub credentials from the environment; ConfigError (one line) for a half-set App."""
    if env.get("GITHUB_TOKEN"):
        return TokenCredentials(env["GITHUB_TOKEN"])
    app = [env.get(k, "") for k in ("GITHUB_APP_ID", "GITHUB_APP_INSTALLATION_ID")]
    key = env.get("GITHUB_APP_PRIVATE_KEY", "")
    if not any(app) and not key:
        return None
    if not all(app) or not key:
        raise ReceiverError(
            "GITHUB_APP_ID, GITHUB_APP_INSTALLATION_ID and GITHUB_APP_PRIVATE_KEY: set all three"
        )
    if not app[1].isdigit():
        raise ReceiverError("GITHUB_APP_INSTALLATION_ID: not a number")
    return AppCredentials(app[0], int(app[1]), key)


async def reconcile_once(
    queue: JobQueue,
    reader: DemandReader,
    freshness: Freshness,
    metrics: ReceiverMetrics,
) -> None:
    """One REST listing folded into the queue (see `JobQueue.reconcile`)."""
    began = time.time()
    reading = await reader.read()
    outcome = reading.outcome
    if outcome.result is not DemandResult.OK:
        metrics.reconcile("failed")
        log.warning(
            "reconcile failed", extra={"result": outcome.result.value, "why": outcome.detail}
        )
        return
    listed = (
        ListedJob(job.job_id, label_set(job.labels), job.queued_at)
        for job in reading.queued_jobs
        if job.job_id > 0
    )
    now = time.time()
    added, dropped = queue.reconcile(listed, began=began, complete=reading.complete, now=now)
    # A partial listing heals lost `queued` deliveries but cannot show a lost start.
    metrics.reconcile("ok" if reading.complete else "partial", added=added, dropped=dropped, at=now)
    metrics.queue(queue)
    freshness.reconciled_at = now
    log.info(
        "reconciled",
        extra={
            "added": added,
            "dropped": dropped,
            "complete": reading.complete,
            "detail": outcome.detail,
        },
    )


async def _reconcile_loop(
    queue: JobQueue,
    reader: DemandReader,
    freshness: Freshness,
    metrics: ReceiverMetrics,
    interval: float,
    health: Health,
    stop: asyncio.Event,
) -> None:
    while not stop.is_set():
        await reconcile_once(queue, reader, freshness, metrics)
        health.mark("reconcile", time.monotonic())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval):
                await stop.wait()


async def _expire_loop(queue: JobQueue, metrics: ReceiverMetrics, stop: asyncio.Event) -> None:
    while not stop.is_set():
        queue.expire(time.time())
        metrics.queue(queue)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(EXPIRE_EVERY):
                await stop.wait()


async def run(args: argparse.Namespace, env: Mapping[str, str], stop: asyncio.Event) -> None:
    configure_logging(args.log_level, args.log_format)
    try:
        target = parse_github_target(args.github_config_url) if args.github_config_url else None
    except ConfigError as exc:
        raise ReceiverError(f"--github-config-url: {exc}") from None
    secret = env.get("WEBHOOK_SECRET", "")
    if not secret:
        raise ReceiverError("WEBHOOK_SECRET: required (the webhook's secret)")
    register_secret(secret)
    credentials = credentials_from(env)
    if credentials is not None and target is None:
        raise ReceiverError("--github-config-url: required with GitHub credentials (to reconcile)")
    for value in (env.get("GITHUB_TOKEN", ""), env.get("GITHUB_APP_PRIVATE_KEY", "")):
        if value:
            register_secret(value)
    queue = JobQueue()
    registry = new_registry()
    metrics = ReceiverMetrics(registry)
    freshness = Freshness(stale_after=args.stale_after, reconciles=credentials is not None)
    health = Health()
    reads = build_app(registry=registry, metrics_endpoint="/metrics", health=health)
    reads_routes(reads, queue, freshness, metrics, time.time)
    deliveries = deliveries_app(queue, secret, metrics, time.time)
    async with contextlib.AsyncExitStack() as stack, asyncio.TaskGroup() as tg:
        tg.create_task(serve(deliveries, args.deliveries_addr, stop))
        tg.create_task(serve(reads, args.reads_addr, stop))
        tg.create_task(_expire_loop(queue, metrics, stop))
        if credentials is None or target is None:
            log.warning("no GitHub credentials: no reconcile, a lost delivery stays lost")
            return
        client = await stack.enter_async_context(make_client(user_agent=product_user_agent()))
        auth = GitHubAuth(client, target=target, credentials=credentials, on_secret=register_secret)
        scope = GitHubScope(auth.api_url, target.organization, target.repository)
        settings = GitHubDemandSettings(
            repositories=[r for r in args.repositories.split(",") if r],
            max_calls_per_interval=args.max_calls,
        )
        repositories_for(settings, scope)  # a bad scope fails at start-up
        reader = GitHubDemand(
            settings,
            None,
            client=client,
            token=auth.api_token,
            scope=scope,
            interval=args.reconcile_interval,
        )
        health.add("reconcile", max_age=args.stale_after)
        tg.create_task(
            _reconcile_loop(
                queue, reader, freshness, metrics, args.reconcile_interval, health, stop
            )
        )


async def main(argv: Sequence[str], env: Mapping[str, str]) -> None:
    args = parse_args(argv)
    stop = asyncio.Event()
    signals.attach(asyncio.get_running_loop(), stop.set)
    await run(args, env, stop)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def cli(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """The process boundary: an exit code, and one line per cause on standard error."""
    try:
        asyncio.run(main(argv, env))
    except KeyboardInterrupt:
        return 0
    except Exception as exc:
        leaves = _leaves(exc)
        for leaf in leaves:
            what = "" if isinstance(leaf, ReceiverError) else f"{type(leaf).__name__}: "
            print(f"webhook-receiver: {what}{redact(str(leaf))}", file=sys.stderr)
        return 2 if all(isinstance(leaf, ReceiverError) for leaf in leaves) else 1
    return 0
