"""Footprint benchmark (``make bench-footprint`` / ``python -m tools.bench_footprint``;
also ``footprint`` in ``make bench``): one JSON document on stdout, progress on stderr. Never
used for assertions; numbers depend on the machine.

Memory of one listener process, from /proc: ``steady`` is the median VmRSS sampled once a
second over a settled window, ``peak`` is VmHWM (the high-water mark since the process
started, so it includes start-up and the initial lists).

* ``beside_reference``: ARC's Go listener (the reference the conformance suite builds, cached:
  ``make conformance-build``) and ours with capacity-awareness off, each run alone through the
  conformance harness: the same fake Actions service, the same scripted messages (the
  conformance ``happy`` scenario: every message type, acquirejobs, 202s), the same tiny fake
  Kubernetes API, then an idle long poll while memory is sampled. No cluster needed.
* ``in_cluster`` (unless ``--no-cluster``): ours on the local control plane with capacity on,
  at 0 pairs (idle), then at each ``--pairs`` count (default 100 and 1,000), with foreign pods
  in the same namespace that share labels with ours (another scale set's runner, workflow and
  placeholder pods, plus plain workload pods), so the watches' server-side selectors really
  filter. A figure is reported only when the target number of pairs was reached. The Go
  listener watches no pods, so its figure from ``beside_reference`` is its figure at any pair
  count; the ratios divide by it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tools.build_cache import build_once, cache_dir, input_key
from tools.conformance import build, harness
from tools.conformance.harness import _play_out, staged_listener
from tools.conformance.scenarios import by_name
from tools.control_plane import local_control_plane, new_workdir
from tools.e2e_site import Pool, Site, SiteSpec, Stage
from tools.fake_actions import FakeActions
from tools.listener_process import PAT, REPO_ROOT, ListenerProcess, metric_value
from tools.localcluster import LocalCluster
from tools.stats import environment
from tools.waits import eventually, timed_ramp, wait_until

SCENARIO = "happy"
FOREIGN_SCALE_SET = "other-set"
PER_NODE = 260
RECONCILE_HISTOGRAM = "gha_capacity_reconcile_duration_seconds"


def _say(line: str) -> None:
    print(f"bench-footprint: {line}", file=sys.stderr, flush=True)


def _status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


async def sample_memory(pid: int, seconds: float, every: float = 1.0) -> dict[str, Any]:
    """VmRSS once per ``every`` seconds for ``seconds``: the median as steady state; VmHWM
    at the end as the peak."""
    samples = []
    deadline = time.monotonic() + seconds
    while True:
        samples.append(_status_kib(pid, "VmRSS") / 1024)
        if time.monotonic() >= deadline:
            break
        await asyncio.sleep(every)
    return {
        "steady_rss_mib": round(statistics.median(samples), 1),
        "rss_min_max_mib": [round(min(samples), 1), round(max(samples), 1)],
        "peak_hwm_mib": round(_status_kib(pid, "VmHWM") / 1024, 1),
        "samples": len(samples),
    }


def runtime_python() -> Path:
    """The interpreter of a virtualenv holding only deploy/requirements.lock, installed by
    deploy/install.sh as the image's is (cached; about a minute to build the first time).

    The development virtualenv also holds the test tools, and some of those change what the
    listener imports: httpx imports its command-line front end (click, rich, pygments, ~5 MiB)
    whenever they are installed. ``python -m listener`` from the repository root then runs the
    working tree's code with the image's dependencies.
    """
    deploy = REPO_ROOT / "deploy"
    target = cache_dir("footprint") / input_key(deploy / "requirements.lock", deploy / "install.sh")

    def install(staging: Path) -> None:
        _say(f"installing deploy/requirements.lock into {target} (once)")
        env = {**os.environ, "VENV": str(staging), "PYTHON": sys.executable}
        subprocess.run(
            ["sh", "deploy/install.sh", "deps"],
            cwd=REPO_ROOT, env=env, check=True, capture_output=True,
        )  # fmt: skip

    build_once(target, lambda t: (t / "bin" / "python").exists(), install)
    return target / "bin" / "python"


def our_command() -> list[str]:
    return [str(runtime_python()), "-m", "listener"]


# --- beside ARC's Go listener ------------------------------------------------------------


async def _harness_run(command: Sequence[str], settle: float) -> dict[str, Any]:
    """One listener through the conformance scenario, then ``settle`` seconds of sampling
    while it holds an idle long poll."""
    scenario = by_name(SCENARIO)
    async with staged_listener(
        command,
        scenario,
        fake_options={"pats": [harness.PAT], "poll_hold": max(60.0, settle + 30.0)},
        config={},
        home=None,
        env={},
        prefix="footprint-",
    ) as (fake, _kube, listener):
        try:
            if not await _play_out(fake, listener, scenario.budget):
                raise RuntimeError(f"{command[0]} exited early:\n{listener.log_tail()}")
            memory = await sample_memory(listener.pid, settle)
        finally:
            await listener.stop(within=30.0)
        return {"requests_served": len(fake.requests), **memory}


async def beside_reference(settle: float = 20.0) -> dict[str, Any]:
    reference = build.ensure_built()
    result: dict[str, Any] = {
        "scenario": f"conformance '{SCENARIO}' messages, then an idle long poll",
        "ours_environment": "deploy/requirements.lock only, as in the image",
        "settle_s": settle,
    }
    for name, command in (
        ("arc_go_reference", [str(reference)]),
        ("ours_capacity_off", our_command()),
    ):
        _say(f"beside the reference: {name}")
        result[name] = await _harness_run(command, settle)
    go = result["arc_go_reference"]["steady_rss_mib"]
    result["ratio_steady"] = round(result["ours_capacity_off"]["steady_rss_mib"] / go, 2)
    return result


# --- in the cluster ----------------------------------------------------------------------


def foreign_pod(i: int, node: str, tolerations: list[dict[str, str]]) -> dict[str, Any]:
    """A pod of someone else in our namespace, bound to ``node`` (Running via kwok, no
    scheduling work). Three in four carry labels our watches select on, with another scale
    set's values: a runner pod, a workflow pod (``runner-pod``) and a placeholder of
    ``other-set``; the fourth is a plain workload pod."""
    kind = i % 4
    labels: dict[str, str]
    if kind == 0:
        labels = {"actions.github.com/scale-set-name": FOREIGN_SCALE_SET, "app": "runner"}
        name = f"{FOREIGN_SCALE_SET}-runner-{i}"
    elif kind == 1:
        labels = {"runner-pod": f"{FOREIGN_SCALE_SET}-runner-{i - 1}"}
        name = f"{FOREIGN_SCALE_SET}-runner-{i - 1}-workflow"
    elif kind == 2:
        labels = {
            "app.kubernetes.io/managed-by": "capacity-listener",
            "capacity-listener.dev/scale-set": FOREIGN_SCALE_SET,
            "capacity-listener.dev/role": "placeholder-runner",
            "capacity-listener.dev/slot": f"s{i}",
        }
        name = f"{FOREIGN_SCALE_SET}-placeholder-{i}"
    else:
        labels = {"app": "web", "app.kubernetes.io/instance": f"web-{i % 40}"}
        name = f"web-{i}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": {"bench/note": "x" * 200}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
            "terminationGracePeriodSeconds": 0,
            "tolerations": tolerations,
        },
    }


async def create_foreign_pods(api: client.ApiClient, site: Site, count: int) -> None:
    """``count`` foreign pods (``foreign_pod``) in the site's namespace, on nodes of their own."""
    nodes = await site.add_nodes("runner", -(-count // 500), Pool(nodes=1, cpu="256", pods=500))
    core = client.CoreV1Api(api)
    gate = asyncio.Semaphore(16)
    tolerations = site.tolerations("runner")

    async def one(i: int) -> None:
        async with gate:
            with contextlib.suppress(ApiException):
                await core.create_namespaced_pod(
                    site.namespace, foreign_pod(i, nodes[i % len(nodes)], tolerations),
                    _request_timeout=30,
                )  # fmt: skip

    await asyncio.gather(*(one(i) for i in range(count)))


async def _cluster_case(
    cluster: LocalCluster, workdir: Path, pairs: int, foreign: int, settle: float, index: int
) -> dict[str, Any]:
    fake = FakeActions(pats=[PAT], poll_hold=50.0, strand_grace=10.0)
    async with Stage(cluster, workdir / f"footprint-{pairs}", fake=fake, prefix="fp") as stage:
        nodes = max(1, -(-pairs // PER_NODE))
        shape = Pool(nodes=nodes, cpu="128", memory="512Gi", pods=PER_NODE)
        site = await stage.add_site(
            SiteSpec(
                name=f"fp{index}",
                scale_set_id=701 + index,
                runner_pool=shape,
                workflow_pool=shape,
                runner_requests={"cpu": "50m", "memory": "64Mi"},
                workflow_requests={"cpu": "100m", "memory": "128Mi"},
            )
        )
        _say(f"{pairs} pairs: {foreign} foreign pods in {site.namespace}")
        await create_foreign_pods(stage.api, site, foreign)
        listener = site.start_listener(
            # The product's placeholder_ready_timeout (the test default, 10 s, deletes pairs
            # a loaded machine has not started yet, and the ramp never ends).
            capacity=site.capacity_settings(
                proactive=pairs,
                recalculate_interval="10s",
                max_pending_pairs=200,
                placeholder_ready_timeout="300s",
            ),
            max_runners=max(pairs, 1),
            log_level="info",
            process=functools.partial(ListenerProcess, command=our_command()),
        )
        _say(f"{pairs} pairs: waiting for them to be Running")

        async def ramp_up() -> None:
            await site.wait_session(60)
            await wait_until(lambda: site.advertised() == pairs, f"{pairs} pairs", 600, [site])
            await _reconciled(listener, 60)

        reached, ramp = await timed_ramp(
            ramp_up(), listener, lambda line: _say(f"{pairs} pairs: {line}")
        )
        result: dict[str, Any] = {
            "pairs_target": pairs,
            "pairs_reached": reached,
            "foreign_pods": foreign,
            "ramp_s": round(ramp, 1),
        }
        if reached:
            await asyncio.sleep(5.0)  # the last creates' watch events
            result.update(await sample_memory(listener.pid, settle))
        return result


async def _reconciled(listener: ListenerProcess, within: float) -> None:
    """Wait for the monitor's first reconcile pass (its histogram on the metrics page)."""

    async def reconciled() -> bool:
        page = await listener.metrics_text()
        return (metric_value(page, f"{RECONCILE_HISTOGRAM}_count") or 0) > 0

    await eventually(
        reconciled,
        "the first reconcile pass",
        within,
        interval=1.0,
        ignore=(httpx.HTTPError, ValueError),
    )


async def in_cluster(
    cluster: LocalCluster, workdir: Path, pairs: Sequence[int], foreign: int, settle: float
) -> dict[str, Any]:
    result: dict[str, Any] = {"settle_s": settle}
    for index, count in enumerate((0, *pairs)):
        key = "capacity_on_idle_0_pairs" if count == 0 else f"pairs_{count}"
        result[key] = await _cluster_case(cluster, workdir, count, foreign, settle, index)
    return result


async def footprint(
    cluster: LocalCluster | None,
    workdir: Path,
    *,
    pairs: Sequence[int] = (100, 1000),
    foreign: int = 2000,
    settle: float = 20.0,
) -> dict[str, Any]:
    result: dict[str, Any] = {"beside_reference": await beside_reference(settle)}
    if cluster is not None:
        result["in_cluster"] = await in_cluster(cluster, workdir, pairs, foreign, settle)
        go = result["beside_reference"]["arc_go_reference"]["steady_rss_mib"]
        for case in result["in_cluster"].values():
            if isinstance(case, dict) and "steady_rss_mib" in case:
                case["ratio_to_go_steady"] = round(case["steady_rss_mib"] / go, 2)
    result["goals"] = {"idle_mib": 50, "ratio_to_go_at_1000_pairs": 2.5}
    return result


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    document: dict[str, Any] = {"environment": environment()}
    started = time.monotonic()
    workdir = args.workdir or new_workdir("capacity-listener-footprint")
    options = {"pairs": args.pairs or [100, 1000], "foreign": args.foreign, "settle": args.settle}
    if args.no_cluster:
        document["footprint"] = await footprint(None, workdir, **options)
    else:
        with local_control_plane(workdir / "cluster", progress=_say) as cluster:
            document["footprint"] = await footprint(cluster, workdir, **options)
    document["total_seconds"] = round(time.monotonic() - started, 1)
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_footprint")
    parser.add_argument("--pairs", type=int, action="append", help="repeatable; 100 and 1000")
    parser.add_argument("--foreign", type=int, default=2000, help="foreign pods per case")
    parser.add_argument("--settle", type=float, default=20.0, help="seconds of sampling")
    parser.add_argument("--no-cluster", action="store_true", help="only beside_reference")
    parser.add_argument("--workdir", type=Path, default=None, help="keep logs here")
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(_main(args)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
