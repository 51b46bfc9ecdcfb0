"""Webhook receiver benchmark (``make bench-receiver`` / ``python -m tools.bench_receiver``):
one JSON document on stdout. Never used for assertions; numbers depend on the machine.

* ``deliveries``: signed `workflow_job` deliveries through the receiver's real HTTP path
  (aiohttp on a loopback port), sent one at a time by an httpx client in the same process:
  client and server share one core, so the rate is a lower bound for the server alone.
  p50/p99 are each delivery's round trip.
* ``memory``: the process's VmRSS after the queue holds 10 k and 100 k queued jobs (20 label
  sets), less its VmRSS before, with the deliveries' ids remembered as the receiver does.
* ``reads``: demand counts per second on the 100 k queue (the work behind one listener read,
  without HTTP), for a scale set whose labels match one label set, and for one matching all.
* ``reconcile``: the REST calls of the receiver's reconcile (the GitHub source with every
  label, at the receiver's default budget) for an organization of 1,000 repositories on the
  fake GitHub REST API (pagination, ETags and 304s as GitHub answers them), some with queued
  jobs: the reconciles one sweep of every repository takes, its calls, the calls that count
  against the hourly rate limit (304s do not), on a first sweep (every answer new: the worst
  case, as if every repository changed between sweeps) and a steady one (nothing changed);
  and per hour at the default interval against the limits of a PAT or App installation
  (5,000) and of an App on GitHub Enterprise Cloud (15,000).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import httpx
from aiohttp import web
from prometheus_client import CollectorRegistry

from capacity.github_demand import GitHubDemand, GitHubScope
from capacity.settings import GitHubDemandSettings
from capacity.webhook_queue import JobEvent, JobQueue, Status, label_set
from listener.receiver import deliveries_app
from listener.receiver_metrics import ReceiverMetrics
from tools.fake_github_rest import FakeGitHubRest
from tools.fake_webhooks import delivery, workflow_job

SECRET = "bench-secret"
LABEL_SETS = [label_set(["self-hosted", "linux", f"pool-{i}"]) for i in range(20)]


def _rss_kib() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def deliveries(count: int) -> dict[str, Any]:
    queue = JobQueue()
    app = deliveries_app(queue, SECRET, ReceiverMetrics(CollectorRegistry()), time.time)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    now = time.time()
    bodies = [
        delivery(
            workflow_job(
                "queued" if i % 2 == 0 else "in_progress",
                i // 2 + 1,
                sorted(LABEL_SETS[i % 20]),
                created_at=now,
            ),
            SECRET,
        )
        for i in range(count)
    ]
    times = []
    async with httpx.AsyncClient(trust_env=False, timeout=10.0) as http:
        url = f"http://127.0.0.1:{port}/webhook"
        started = time.perf_counter()
        for body, headers in bodies:
            t0 = time.perf_counter()
            response = await http.post(url, content=body, headers=headers)
            times.append(time.perf_counter() - t0)
            if response.status_code != 200:
                raise RuntimeError(f"delivery answered {response.status_code}")
        elapsed = time.perf_counter() - started
    await runner.cleanup()
    quantiles = statistics.quantiles(times, n=100)
    return {
        "count": count,
        "per_second": round(count / elapsed, 1),
        "p50_ms": round(quantiles[49] * 1000, 3),
        "p99_ms": round(quantiles[98] * 1000, 3),
        "body_bytes": len(bodies[0][0]),
    }


def memory_and_reads(sizes: Sequence[int], reads: int) -> tuple[dict[str, Any], dict[str, Any]]:
    before = _rss_kib()
    queue = JobQueue(max_jobs=max(sizes) + 1, delivery_memory=max(sizes))
    ids = itertools.count(1)
    now = time.time()
    memory: dict[str, Any] = {"baseline_rss_kib": before}
    for size in sizes:
        while len(queue) < size:
            job = next(ids)
            event = JobEvent(f"{job:032x}", job, Status.QUEUED, LABEL_SETS[job % 20], now)
            queue.apply(event, now)
        memory[f"rss_kib_at_{size}"] = _rss_kib() - before
    rates: dict[str, Any] = {"queued": queue.queued}
    for name, labels in (("one_label_set", LABEL_SETS[0]), ("every_label_set", None)):
        wanted = labels or frozenset().union(*LABEL_SETS)
        started = time.perf_counter()
        for _ in range(reads):
            queue.count(wanted, aged_after=None, now=now)
        rates[f"{name}_per_second"] = round(reads / (time.perf_counter() - started), 1)
    return memory, rates


TOKEN = "ghp_bench_receiver"
HOURLY = {"pat_or_app": 5000, "app_enterprise_cloud": 15000}


async def reconcile_cost(
    repositories: int, busy: int, max_calls: int, interval: float
) -> dict[str, Any]:
    async def token() -> str:
        return TOKEN

    # A limit no sweep reaches: the point is what a sweep costs, set against GitHub's below.
    async with (
        FakeGitHubRest(tokens=[TOKEN], rate_limit=10**9) as fake,
        httpx.AsyncClient(trust_env=False, timeout=10.0) as http,
    ):
        names = [f"repo-{i:04d}" for i in range(repositories)]
        fake.add_repositories("acme", names)
        for i in range(busy):  # a queued job in each of `busy` repositories
            fake.queue_job("acme", names[i * repositories // busy], ["self-hosted", "linux"])
        reader = GitHubDemand(
            GitHubDemandSettings(max_calls_per_interval=max_calls),
            None,
            client=http,
            token=token,
            scope=GitHubScope(fake.api_url, "acme"),
            interval=interval,
        )

        async def sweep() -> dict[str, Any]:
            """Reconciles until every repository was read once more (a reconcile's budget
            may reach only part of them; the next one goes on where it stopped)."""
            first = len(fake.calls)
            reconciles, visited = 0, 0
            while visited < repositories:
                reading = await reader.read()
                reconciles += 1
                visited += reading.outcome.rows
                if reconciles > 100:
                    raise RuntimeError(f"no complete sweep: {reading.outcome.detail}")
            queued = reading.outcome.queued
            calls = fake.calls[first:]
            counted = sum(1 for c in calls if c.status != 304)
            per_hour = counted * 3600 / (interval * reconciles)
            return {
                "reconciles": reconciles,
                "calls": len(calls),
                "counted": counted,
                "queued_found": queued,
                "counted_per_hour": round(per_hour),
                "share_of_hourly_limit": {k: round(per_hour / v, 3) for k, v in HOURLY.items()},
            }

        return {
            "repositories": repositories,
            "repositories_with_queued_jobs": busy,
            "max_calls_per_reconcile": max_calls,
            "interval_s": interval,
            "first_sweep": await sweep(),
            "steady_sweep": await sweep(),
        }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_receiver")
    parser.add_argument("--deliveries", type=int, default=5000)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--reads", type=int, default=20000)
    parser.add_argument("--repositories", type=int, default=1000)
    parser.add_argument("--busy-repositories", type=int, default=50)
    # The receiver's defaults (listener/receiver_main.py: --max-calls, --reconcile-interval).
    parser.add_argument("--max-calls", type=int, default=2000)
    parser.add_argument("--interval", type=float, default=300.0)
    args = parser.parse_args(argv)
    sent = asyncio.run(deliveries(args.deliveries))
    memory, reads = memory_and_reads([int(x) for x in args.sizes.split(",")], args.reads)
    cost = asyncio.run(
        reconcile_cost(args.repositories, args.busy_repositories, args.max_calls, args.interval)
    )
    result = {"deliveries": sent, "memory": memory, "reads": reads, "reconcile": cost}
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
