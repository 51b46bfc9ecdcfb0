"""Outcome benchmarks (``make bench`` / ``python -m tools.bench``): one JSON document
on stdout, progress on stderr. Never used for assertions; numbers depend on the machine.

Each benchmark runs the real listener process with the fake Actions service, the fake HUD and
the runner stand-in on the local control plane (docs/benchmarks.md, "Measured"):

* ``capacity_signal_latency``: a placeholder pair becomes Running, or a placeholder is
  preempted → the new ``X-ScaleSetMaxCapacity`` value arrives at the Actions service. From
  timestamps: the pod change as this process's watch saw it vs the fake's poll record. The
  fake holds long polls 50 s, like the real service, so stock ARC's bound is one long poll.
* ``stranded_jobs``: the capacity-loss scenario (workflow pool lost, 6 jobs queued) with the
  monitor on and with the stock static header.
* ``apiserver_requests_100_idle_pairs``: the listener's requests to the apiserver, counted by a
  proxy between the two, per minute once 100 pairs are Running and nothing changes.
* ``listener_memory_1000_pairs``: steady VmRSS (median of samples) and peak VmHWM from /proc
  with 1,000 Running pairs (reported only when all 1,000 were reached) and thousands of
  foreign pods in the same namespace that share labels with ours; reconcile pass time from
  the listener's own histogram; process CPU while idle.
* ``job_start_latency``: queue → workflow pod Running for a burst, with warm pairs, without
  (pairs created on demand from HUD) and with the stock listener (no gating).
* ``demand_sharding``: two clusters serving the same labels from one queue and one HUD, with
  demand sharding (cluster_count 2) and without (each provisions for the whole queue): pairs
  created for the same burst, drain time and start latency.
* ``github_demand_calls``: REST calls per read of the GitHub demand source at 50 repositories,
  with and without 304s (against the fake of those endpoints; no cluster needed).
* ``outcomes``: seeded job traces on two clusters whose nodes come from the real Karpenter,
  for stock ARC (minRunners 0 and N, pause-pod overprovisioning) and ours (demand only, warm
  pool), five seeds (see ``bench_outcomes``; also ``make bench-outcomes``); writes JSON and
  figures (``--images``, default the work directory).
* ``footprint``: RSS of one listener idle, at 100 and at 1,000 pairs, beside ARC's Go
  listener (``bench_footprint``).

The counting proxy lives in tools/counting_proxy.py and the Karpenter trace in
tools/bench_outcomes.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from kubernetes_asyncio import client

from capacity.github_demand import GitHubDemand, GitHubScope
from capacity.settings_demand import GitHubDemandSettings
from tools.bench_footprint import create_foreign_pods, footprint, sample_memory
from tools.bench_outcomes import benchmark
from tools.control_plane import local_control_plane, new_workdir
from tools.counting_proxy import CountingProxy, proxied_kubeconfig
from tools.e2e_site import PodEvent, Pool, SiteSpec, Stage
from tools.fake_actions import FakeActions, FakeJob, JobState
from tools.fake_github_rest import FakeGitHubRest
from tools.listener_process import PAT, metric_value
from tools.localcluster import LocalCluster
from tools.stats import environment, percentile
from tools.waits import timed_ramp, wait_until

LONG_POLL = 50.0
RECONCILE_HISTOGRAM = "gha_capacity_reconcile_duration_seconds"
ROUND = 3


def _say(line: str) -> None:
    print(f"bench: {line}", file=sys.stderr, flush=True)


def _stats(values: list[float]) -> dict[str, Any]:
    def r(x: float | None) -> float | None:
        return None if x is None else round(x, ROUND)

    return {
        "n": len(values),
        "p50_s": r(percentile(values, 50)),
        "p99_s": r(percentile(values, 99)),
        "max_s": r(max(values) if values else None),
    }


def _fake() -> FakeActions:
    return FakeActions(pats=[PAT], poll_hold=LONG_POLL, strand_grace=10.0)


# ---------------------------------------------------------------------- benchmarks


@dataclass
class Bench:
    cluster: LocalCluster
    workdir: Path
    images: Path | None = None

    def stage(self, name: str, *, fake: FakeActions | None = None) -> Stage:
        return Stage(self.cluster, self.workdir / name, fake=fake or _fake(), prefix="bench")

    # --- capacity-signal latency ----------------------------------------------------------

    async def capacity_signal_latency(self, pairs: int = 10, cycles: int = 100) -> dict[str, Any]:
        # 100 preempt/restore cycles are 200 capacity changes: enough for a p99 that is not
        # simply the maximum of a handful.
        async with self.stage("latency") as stage:
            site = await stage.add_site(
                SiteSpec(
                    name="latency",
                    scale_set_id=101,
                    runner_pool=Pool(nodes=1, cpu="16"),
                    # Exactly `pairs` workflow slots, so each intruder preempts one placeholder.
                    workflow_pool=Pool(nodes=1, cpu=str(pairs), memory="64Gi"),
                )
            )
            site.start_listener(
                capacity=site.capacity_settings(proactive=pairs),
                max_runners=pairs,
                log_level="info",
            )
            _say(f"latency: waiting for {pairs} pairs")
            await wait_until(lambda: site.advertised() == pairs, f"{pairs} advertised", 120, [site])
            core = client.CoreV1Api(stage.api)
            # Isolated changes: a higher-priority pod preempts one placeholder (down), leaves,
            # and the monitor restores the pair (up).
            _say(f"latency: {cycles} preempt/restore cycles")
            for cycle in range(cycles):
                name = f"intruder-{cycle}"
                await core.create_namespaced_pod(site.namespace, site.filler_pod(name))
                await wait_until(lambda: site.advertised() == pairs - 1, "a drop", 30, [site])
                await asyncio.sleep(1.5)
                await core.delete_namespaced_pod(name, site.namespace, grace_period_seconds=0)
                await wait_until(lambda: site.advertised() == pairs, "recovery", 60, [site])
                await asyncio.sleep(1.5)
            history = [(c.wall, c.value) for c in stage.fake.capacity_history(site.scale_set_id)]
            latencies, superseded = signal_latencies(site.placeholder_events, history, pairs)
            return {
                "pairs": pairs,
                "preempt_restore_cycles": cycles,
                "transitions": len(latencies) + superseded,
                "superseded_before_sent": superseded,
                **_stats(latencies),
                "goal_p99_s": 1.0,
                "stock_arc_bound_s": LONG_POLL,
                "long_poll_hold_s": LONG_POLL,
            }

    # --- stranded jobs --------------------------------------------------------------------

    async def stranded_jobs(self, jobs: int = 6) -> dict[str, Any]:
        async with self.stage("stranded") as stage:
            stage.fake.poll_hold = 2.0
            result: dict[str, Any] = {"scenario": "workflow pool lost, then jobs queued"}
            guarded = await stage.add_site(_outcome_spec("guarded", 201))
            stock = await stage.add_site(_outcome_spec("stock", 202))
            guarded.start_listener(
                capacity=guarded.capacity_settings(proactive=2), max_runners=8, log_level="info"
            )
            stock.start_listener(capacity=None, max_runners=8, log_level="info")
            await wait_until(
                lambda: guarded.view().pairs_running == 2, "2 warm pairs", 90, [guarded]
            )
            _say("stranded: losing both workflow pools")
            await guarded.remove_nodes("workflow")
            await stock.remove_nodes("workflow")
            await wait_until(lambda: guarded.advertised() == 0, "header 0", 30, [guarded])
            queued = {
                "guarded": stage.fake.add_jobs(jobs, labels=["guarded"]),
                "stock": stage.fake.add_jobs(jobs, labels=["stock"]),
            }
            await asyncio.sleep(guarded.spec.strand_after + 5.0)
            for name, site in (("with_monitor", guarded), ("without_monitor", stock)):
                batch = queued["guarded" if site is guarded else "stock"]
                result[name] = {
                    "stranded": len(stage.fake.stranded(site.scale_set_id)),
                    "still_queued": sum(j.state is JobState.QUEUED for j in batch),
                    "jobs": jobs,
                }
            return result

    # --- apiserver load -------------------------------------------------------------------

    async def apiserver_requests(self, pairs: int = 100, window: float = 420.0) -> dict[str, Any]:
        # The window outlasts the longest server-side watch timeout (360 s), so every watch
        # stream is re-opened inside it at least once and its re-list/re-watch is counted.
        proxy = CountingProxy(self.cluster.server)
        proxy_url = await proxy.start()
        try:
            async with self.stage("apiserver") as stage:
                site = await stage.add_site(
                    SiteSpec(
                        name="idle",
                        scale_set_id=301,
                        runner_pool=Pool(nodes=1, cpu="64", memory="256Gi", pods=pairs + 10),
                        workflow_pool=Pool(nodes=2, cpu="64", memory="256Gi", pods=pairs + 10),
                        runner_requests={"cpu": "100m", "memory": "128Mi"},
                        workflow_requests={"cpu": "200m", "memory": "256Mi"},
                    )
                )
                kubeconfig = proxied_kubeconfig(
                    self.cluster, proxy_url, stage.workdir / "proxied-kubeconfig"
                )
                site.start_listener(
                    capacity=site.capacity_settings(
                        proactive=pairs, recalculate_interval="30s", max_pending_pairs=100
                    ),
                    max_runners=pairs,
                    kubeconfig=kubeconfig,
                    log_level="info",
                )
                _say(f"apiserver: waiting for {pairs} Running pairs")
                await wait_until(lambda: site.advertised() == pairs, f"{pairs} pairs", 240, [site])
                await asyncio.sleep(5.0)  # let creation settle
                _say(f"apiserver: counting the listener's requests for {window:.0f}s while idle")
                start = time.monotonic()
                await asyncio.sleep(window)
                counts = proxy.window(start, time.monotonic())
                per_minute = 60.0 / window
                by_verb: Counter[str] = Counter()
                for (verb, _), n in counts.items():
                    by_verb[verb] += n
                setup = Counter((v, r) for _, v, r in proxy.requests)
                return {
                    "pairs": pairs,
                    "window_s": window,
                    "requests_per_minute": round(sum(counts.values()) * per_minute, 1),
                    "by_verb_per_minute": {
                        k: round(v * per_minute, 1) for k, v in sorted(by_verb.items())
                    },
                    "by_request_in_window": {f"{v} {r}": n for (v, r), n in sorted(counts.items())},
                    "lists_during_setup": sum(n for (v, _), n in setup.items() if v == "list"),
                    "watch_streams_open": {k: v for k, v in proxy.open_watches.items() if v},
                    "watch_opens_in_window": by_verb.get("watch", 0),
                    # Each stream is re-opened when its server-side timeout ends (4-6 min).
                    "watch_timeout_s": "240-360",
                    "listener_long_poll_s": LONG_POLL,
                    "recalculate_interval_s": 30,
                }
        finally:
            await proxy.stop()

    # --- memory ---------------------------------------------------------------------------

    async def listener_memory(self, pairs: int = 1000, unrelated: int = 2000) -> dict[str, Any]:
        async with self.stage("memory") as stage:
            per_node = 260
            site = await stage.add_site(
                SiteSpec(
                    name="big",
                    scale_set_id=401,
                    runner_pool=Pool(nodes=-(-pairs // per_node), cpu="128", memory="512Gi",
                                     pods=per_node),
                    workflow_pool=Pool(nodes=-(-pairs // per_node), cpu="128", memory="512Gi",
                                       pods=per_node),
                    runner_requests={"cpu": "50m", "memory": "64Mi"},
                    workflow_requests={"cpu": "100m", "memory": "128Mi"},
                )
            )  # fmt: skip
            # Foreign pods share labels with ours (another scale set's runner, workflow and
            # placeholder pods), so the watches' server-side selectors really filter.
            _say(f"memory: {unrelated} foreign pods in the same namespace")
            await create_foreign_pods(stage.api, site, unrelated)
            listener = site.start_listener(
                capacity=site.capacity_settings(
                    proactive=pairs, recalculate_interval="10s", max_pending_pairs=200
                ),
                max_runners=pairs,
                log_level="info",
            )
            _say(f"memory: waiting for {pairs} Running pairs (this takes a while)")
            reached, ramp = await timed_ramp(
                wait_until(lambda: site.advertised() == pairs, f"{pairs} pairs", 420, [site]),
                listener,
                lambda line: _say(f"memory: {line}"),
            )
            await asyncio.sleep(10.0)
            before = await listener.metrics_text()
            cpu_before = _cpu_seconds(listener.pid)
            await asyncio.sleep(30.0)
            cpu_idle = (_cpu_seconds(listener.pid) - cpu_before) / 30.0
            after = await listener.metrics_text()
            passes, mean = _histogram_delta(
                before, after, "gha_capacity_reconcile_duration_seconds"
            )
            # Memory only at the target: a figure for fewer pairs would flatter.
            memory = await sample_memory(listener.pid, 10.0) if reached else {}
            return {
                "pairs_target": pairs,
                "pairs_reached": reached,
                "advertised": site.advertised(),
                "placeholder_pods": len(site.placeholders),
                "foreign_pods": unrelated,
                "ramp_s": round(ramp, 1),
                **memory,
                "goal_mib": 128,
                "idle_cpu_fraction_of_one_core": round(cpu_idle, 4),
                "idle_reconcile_passes": passes,
                "idle_reconcile_mean_s": mean,
            }

    # --- job start latency ----------------------------------------------------------------

    async def job_start_latency(self, burst: int = 8) -> dict[str, Any]:
        result: dict[str, Any] = {"burst": burst}
        cases: list[tuple[str, dict[str, Any] | None]] = [
            ("warm_pairs", {"proactive": burst}),
            ("no_warm_pairs_hud_on_demand", {"proactive": 0, "hud": True}),
            ("stock_listener_no_gating", None),
        ]
        for number, (name, settings) in enumerate(cases):
            result[name] = await self._start_case(number, name, settings, burst)
        result["recalculate_interval_s"] = 2
        result["note"] = "kwok starts pods instantly; no node provisioning or image pulls"
        return result

    async def _start_case(
        self, number: int, name: str, settings: dict[str, Any] | None, burst: int
    ) -> dict[str, Any]:
        async with self.stage(f"start-{name}") as stage:
            site = await stage.add_site(
                SiteSpec(
                    name=f"start{number}",
                    scale_set_id=501 + number,
                    workflow_pool=Pool(nodes=1, cpu=str(burst * 2)),
                    job_seconds=2.0,
                )
            )
            capacity = None if settings is None else site.capacity_settings(**settings)
            site.start_listener(capacity=capacity, max_runners=burst * 2, log_level="info")
            await site.wait_session(60)
            if settings and settings["proactive"]:
                await wait_until(lambda: site.advertised() == burst, "warm pairs", 90, [site])
            else:
                await asyncio.sleep(3.0)
            _say(f"start latency: {name}")
            jobs = stage.fake.add_jobs(burst, labels=["linux"])
            await wait_until(
                lambda: all(j.workflow_started_at is not None for j in jobs), name, 120, [site]
            )
            case: dict[str, Any] = _stats(_start_latencies(jobs))
            if settings is not None:
                case["settings"] = settings
            return case

    # --- demand sharding -------------------------------------------------------------------

    async def demand_sharding(self, jobs: int = 16) -> dict[str, Any]:
        result: dict[str, Any] = {
            "scenario": f"two clusters serve the same labels from one queue and one HUD; "
            f"{jobs} jobs queued at once",
        }
        for number, count in enumerate((2, 1)):
            name = "sharded" if count == 2 else "not_sharded"
            result[name] = await self._sharding_case(number, count, jobs)
        result["note"] = (
            "pairs_created counts placeholder pairs both clusters created from the moment the "
            "jobs were queued until the last one finished. Node-seconds cannot be measured "
            "here: kwok nodes are static (no Karpenter provisioning or consolidation yet), so "
            "the cost difference shows as pairs created, not as nodes."
        )
        return result

    async def _sharding_case(self, number: int, count: int, jobs: int) -> dict[str, Any]:
        async with self.stage(f"sharding-{count}") as stage:
            sites = [
                await stage.add_site(
                    SiteSpec(
                        name=f"shard{number}{index}",
                        scale_set_id=601 + 10 * number + index,
                        workflow_pool=Pool(nodes=1, cpu=str(jobs)),
                        job_seconds=3.0,
                    )
                )
                for index in range(2)
            ]
            for index, site in enumerate(sites):
                demand = {"cluster_index": index % count, "cluster_count": count}
                settings = site.capacity_settings(
                    proactive=0, hud=True, hud_floor=0, demand={**demand, "aged_after": "1m"}
                )
                site.start_listener(capacity=settings, max_runners=jobs, log_level="info")
            for site in sites:
                await site.wait_session(60)
                await wait_until(lambda s=site: not s.placeholders, "no pairs", 60, [site])  # type: ignore[misc]
            _say(f"sharding: cluster_count {count}, {jobs} jobs")
            since = time.time()
            queued = stage.fake.add_jobs(jobs, labels=["linux"])
            await wait_until(
                lambda: all(j.state is JobState.COMPLETED for j in queued),
                "the queue to drain",
                180,
                sites,
            )
            drained = time.time() - since
            created = {
                site.spec.name: sum(
                    1
                    for e in site.placeholder_events
                    if e.kind == "ADDED" and e.role == "placeholder-runner" and e.wall >= since
                )
                for site in sites
            }
            return {
                "cluster_count": count,
                "pairs_created": sum(created.values()),
                "pairs_created_per_cluster": list(created.values()),
                "jobs_per_cluster": [
                    sum(j.scale_set_id == site.scale_set_id for j in queued) for site in sites
                ],
                "pairs_per_job": round(sum(created.values()) / jobs, ROUND),
                "drain_seconds": round(drained, 1),
                "start_latency": _stats(_start_latencies(queued)),
                "stranded": len(stage.fake.stranded()),
            }

    # --- GitHub REST demand source: calls per read -------------------------------------------

    async def github_demand_calls(self, repositories: int = 50) -> dict[str, Any]:
        """REST calls one read makes at `repositories` repositories (10 of them with a queued
        run), against the fake of GitHub's REST API: the first read (every answer a 200, as
        with no conditional requests), a read with nothing changed (304s), and a read after
        one new queued job. Counts, not timings: they do not depend on the machine."""
        result: dict[str, Any] = {"repositories": repositories, "queued_runs": 10}
        for in_progress in (True, False):
            async with FakeGitHubRest(tokens=[PAT]) as fake, _plain_client() as http:
                names = [f"repo-{i:03}" for i in range(repositories)]
                fake.add_repositories("acme", names)
                for name in names[:: repositories // 10]:
                    fake.queue_job("acme", name, ["linux"])

                async def token() -> str:
                    return PAT

                reader = GitHubDemand(
                    GitHubDemandSettings(max_calls_per_interval=1000, in_progress_runs=in_progress),
                    ("linux",),
                    client=http,
                    token=token,
                    scope=GitHubScope(fake.api_url, "acme"),
                    interval=30.0,
                )
                reads = {}
                for label in ("first_read_no_304s", "unchanged_read_304s", "after_one_new_job"):
                    if label == "after_one_new_job":
                        fake.queue_job("acme", names[1], ["linux"])
                    before = len(fake.calls)
                    reading = await reader.read()
                    calls = fake.calls[before:]
                    reads[label] = {
                        "calls": len(calls),
                        "counted_against_rate_limit": sum(c.status != 304 for c in calls),
                        "queued": reading.outcome.queued,
                    }
                key = "in_progress_runs_on" if in_progress else "in_progress_runs_off"
                result[key] = reads
        result["note"] = (
            "one read per recalculate_interval (30 s by default); 304 answers do not count "
            "against the token's rate limit (5,000/h for a PAT or App installation). The "
            "repository list "
            "is re-read every repositories_refresh (10 min), not at every read."
        )
        return result


def _plain_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(trust_env=False)


def _outcome_spec(name: str, scale_set_id: int) -> SiteSpec:
    return SiteSpec(
        name=name,
        scale_set_id=scale_set_id,
        labels=(name,),
        workflow_pool=Pool(nodes=1, cpu="4"),
        job_seconds=3.0,
        strand_after=5.0,
    )


def _histogram_delta(before: str, after: str, name: str) -> tuple[int, float | None]:
    """Passes and mean seconds of a histogram between two scrapes."""
    count = (metric_value(after, f"{name}_count") or 0) - (
        metric_value(before, f"{name}_count") or 0
    )
    total = (metric_value(after, f"{name}_sum") or 0) - (metric_value(before, f"{name}_sum") or 0)
    return int(count), (round(total / count, 4) if count else None)


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def _start_latencies(jobs: Iterable[FakeJob]) -> list[float]:
    return [
        j.workflow_started_at - j.history[0][0] for j in jobs if j.workflow_started_at is not None
    ]


def signal_latencies(
    events: list[PodEvent], history: list[tuple[float, int | None]], max_runners: int
) -> tuple[list[float], int]:
    """Replay placeholder events into the confirmed value min(Running runner halves, Running
    workflow halves), clamped to max_runners; for each change, the delay until a poll carried
    the new value. A change overtaken by the next one before any poll carried it is counted
    as superseded, not measured."""
    running: dict[str, str] = {}  # name -> role, for Running non-terminating placeholders
    changes: list[tuple[float, int]] = []
    value = 0
    for event in events:
        if event.kind != "DELETED" and event.phase == "Running" and not event.terminating:
            running[event.name] = event.role
        else:
            running.pop(event.name, None)
        roles = Counter(running.values())
        now = min(roles["placeholder-runner"], roles["placeholder-workflow"], max_runners)
        if now != value:
            value = now
            changes.append((event.wall, now))
    latencies: list[float] = []
    superseded = 0
    for index, (when, target) in enumerate(changes):
        until = changes[index + 1][0] if index + 1 < len(changes) else float("inf")
        sent = next((wall for wall, v in history if wall >= when and v == target), None)
        if sent is None or sent > until:
            superseded += 1
        else:
            latencies.append(sent - when)
    return latencies, superseded


async def _outcomes(bench: Bench) -> dict[str, Any]:
    return await benchmark(bench.workdir, bench.images or bench.workdir / "outcomes")


async def _footprint(bench: Bench) -> dict[str, Any]:
    return await footprint(bench.cluster, bench.workdir)


BENCHES: dict[str, Callable[[Bench], Awaitable[dict[str, Any]]]] = {
    "capacity_signal_latency": Bench.capacity_signal_latency,
    "stranded_jobs": Bench.stranded_jobs,
    "apiserver_requests_100_idle_pairs": Bench.apiserver_requests,
    "listener_memory_1000_pairs": Bench.listener_memory,
    "job_start_latency": Bench.job_start_latency,
    "demand_sharding": Bench.demand_sharding,
    "github_demand_calls": Bench.github_demand_calls,
    "outcomes": _outcomes,
    "footprint": _footprint,
}


async def run(selected: list[str], workdir: Path, images: Path | None = None) -> dict[str, Any]:
    started = time.monotonic()
    document: dict[str, Any] = {"environment": environment()}
    with local_control_plane(workdir / "cluster", progress=_say) as cluster:
        bench = Bench(cluster, workdir, images)
        for name in selected:
            _say(f"--- {name}")
            t0 = time.monotonic()
            try:
                document[name] = await BENCHES[name](bench)
            except Exception as exc:
                _say(f"{name} failed: {exc}")
                document[name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
            document[name]["bench_seconds"] = round(time.monotonic() - t0, 1)
    document["total_seconds"] = round(time.monotonic() - started, 1)
    document["workdir"] = str(workdir)
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__)
    parser.add_argument(
        "--only", action="append", choices=sorted(BENCHES), help="run only these (repeatable)"
    )
    parser.add_argument("--workdir", type=Path, default=None, help="keep logs here")
    parser.add_argument(
        "--images", type=Path, default=None, help="outcomes: write the timeline PNGs here"
    )
    args = parser.parse_args(argv)
    selected = args.only or list(BENCHES)
    workdir = args.workdir or new_workdir("capacity-listener-bench")
    document = asyncio.run(run(selected, workdir, args.images))
    print(json.dumps(document, indent=2))
    return 1 if any(isinstance(v, dict) and "error" in v for v in document.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
