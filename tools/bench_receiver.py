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

from capacity.webhook_queue import JobEvent, JobQueue, Status, label_set
from listener.receiver import deliveries_app
from listener.receiver_metrics import ReceiverMetrics
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_receiver")
    parser.add_argument("--deliveries", type=int, default=5000)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--reads", type=int, default=20000)
    args = parser.parse_args(argv)
    sent = asyncio.run(deliveries(args.deliveries))
    memory, reads = memory_and_reads([int(x) for x in args.sizes.split(",")], args.reads)
    json.dump({"deliveries": sent, "memory": memory, "reads": reads}, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
