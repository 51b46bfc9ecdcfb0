"""Capacity monitor benchmarks: ``python -m tools.bench_capacity`` prints JSON.

1. ``reconcile_cpu``: CPU time of one planning pass (view snapshot + expectations + policy)
   at 1,000 pairs, on a view filled in memory (no cluster: this is the pure CPU path the
   signal loop and every reconcile pass run), and the same measured on a live view below.
2. ``memory``: RSS of a process running a CapacityMonitor whose view holds 1,000 pairs
   (2,000 placeholder pods, Running on a big kwok node) while the namespace also holds
   3,000 unrelated pods (2,000 application pods, 500 runner pods and 500 workflow pods of
   another scale set). The pods are real objects on the local control plane; the monitor
   runs in a child process so its RSS is not mixed with the set-up's.
3. ``apiserver_load``: requests the monitor sends per minute with 100 pairs idle, over 400 s
   (longer than one watch renewal cycle), counted by the Kube wrapper (every request;
   a watch counts once per stream opened).
4. ``signal_latency_ms``: a Running placeholder disappears (as when preempted) → the lower
   value reaches ``set_max_capacity`` (the monitor's share of the capacity-signal latency;
   the listener's poll re-issue comes on top).

Options: ``--pairs``, ``--unrelated``, ``--idle-pairs``, ``--idle-seconds``, ``--no-cluster``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from prometheus_client import CollectorRegistry

from base.kube import Kube, connect
from capacity.contract import LABEL_ROLE, LABEL_SLOT
from capacity.metrics import CapacityMetrics
from capacity.model import (
    Demand,
    DemandSource,
    PodPhase,
    RealPod,
    Role,
)
from capacity.monitor import CapacityMonitor
from capacity.pods import RunnerSet, WorkflowPod, placeholder_from
from capacity.reconciler import Reconciler
from capacity.settings import CapacitySettings, to_params
from capacity.settings_values import Resources
from capacity.view import View
from tools.waits import eventually

SCALE_SET = "bench-cpu"
RUNNER_SET = "bench-cpu-q8w2z"
HALF = {"cpu": "1", "memory": "1Gi"}


def rss_mib() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return (
        int(fields["VmRSS"].split()[0]) / 1024,
        int(fields["VmHWM"].split()[0]) / 1024,
    )


def monitor_settings(pairs: int, **extra: Any) -> CapacitySettings:
    return CapacitySettings(
        enabled=True,
        proactive_capacity=pairs,
        max_pending_pairs=pairs,
        recalculate_interval=30.0,
        placeholder_ready_timeout=900.0,
        placeholder_ttl=3600.0,
        workflow_resources=Resources(requests=HALF),
        downscale_delay=0.0,
        **extra,
    )


# --- 1. planning CPU on an in-memory view -------------------------------------------------


def _placeholder_object(slot: int, role: Role, uid: str, now: float) -> dict[str, Any]:
    half = "r" if role == Role.RUNNER else "w"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 60))
    expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 3000))
    return {
        "metadata": {
            "name": f"{SCALE_SET}-ph-{slot}-{half}",
            "uid": f"pod-{slot}-{half}",
            "labels": {LABEL_SLOT: str(slot), LABEL_ROLE: role.value},
            "annotations": {"capacity-listener.dev/expires-at": expires},
            "creationTimestamp": stamp,
            "ownerReferences": [{"uid": uid}],
        },
        "spec": {"nodeName": f"node-{slot % 50}"},
        "status": {"phase": "Running"},
    }


def bench_planning(pairs: int, runners: int = 200, rounds: int = 40) -> dict[str, Any]:
    now = time.time()
    owner = RunnerSet(name=RUNNER_SET, uid="owner-uid", pod_spec={})
    view = View(
        cast(Kube, None),
        placeholder_namespace="ns",
        runner_namespace="ns",
        runner_set_name=RUNNER_SET,
        scale_set_name=SCALE_SET,
    )
    view.runner_set = owner
    for slot in range(pairs):
        for role in Role:
            got = placeholder_from(_placeholder_object(slot, role, owner.uid, now))
            assert got is not None
            view.placeholders[got.placeholder.name] = got
    for i in range(runners):
        view.runner_pods[f"r{i}"] = RealPod(name=f"r{i}", phase=PodPhase.RUNNING, bound=True)
        view.workflow_pods[f"r{i}-workflow"] = WorkflowPod(
            pod=RealPod(name=f"r{i}-workflow", phase=PodPhase.RUNNING, bound=True),
            runner=f"r{i}",
        )
        view.runners[f"er{i}"] = True
    for stream in ("placeholders", "runner pods", "workflow pods", "runners", "runner set"):
        view._mark_synced(stream)
    cfg = monitor_settings(pairs)
    params = to_params(cfg, pairs + runners)
    reconciler = Reconciler(
        view=view,
        kube=cast(Kube, None),
        namespace="ns",
        params=lambda: params,
        demand=lambda _now: Demand(queued=0, source=DemandSource.DISABLED),
        build_pair=lambda *_: ({}, {}),
        set_max_capacity=lambda _v: None,
        metrics=CapacityMetrics(CollectorRegistry(), name=RUNNER_SET, namespace="ns"),
        on_reconcile=lambda: None,
        interval=30.0,
    )
    snapshot_ms, evaluate_ms = [], []
    plan = None
    for _ in range(rounds):
        t0 = time.process_time()
        view.snapshot()
        t1 = time.process_time()
        plan, *_ = reconciler.evaluate(now)
        t2 = time.process_time()
        snapshot_ms.append((t1 - t0) * 1000)
        evaluate_ms.append((t2 - t1) * 1000)
    assert plan is not None
    return {
        "pairs": pairs,
        "real_runners": runners,
        "snapshot_ms_median": round(statistics.median(snapshot_ms), 2),
        "evaluate_ms_median": round(statistics.median(evaluate_ms), 2),
        "evaluate_ms_max": round(max(evaluate_ms), 2),
        "advertised": plan.advertised,
        "method": "process CPU time, in-memory view, "
        "evaluate = snapshot + expectations + policy.plan",
    }


# --- cluster helpers ----------------------------------------------------------------------


async def _create_many(kube: Kube, namespace: str, pods: list[dict[str, Any]]) -> None:
    gate = asyncio.Semaphore(32)

    async def one(pod: dict[str, Any]) -> None:
        async with gate:
            await kube.create_pod(namespace, pod)

    await asyncio.gather(*(one(p) for p in pods))


def unrelated_pods(count: int) -> list[dict[str, Any]]:
    """Pods of other workloads, about as big as real ones. They name a scheduler that does
    not exist, so they stay inert (no scheduling, no status churn) but are real objects."""
    pods = []
    other_runners = count // 6
    for i in range(count):
        labels = {"app.kubernetes.io/name": "web", "app.kubernetes.io/instance": f"web-{i % 40}"}
        name = f"web-{i}"
        if i < other_runners:
            name = f"other-set-runner-{i}"
            labels = {"actions.github.com/scale-set-name": "other-set", "app": "runner"}
        elif i < 2 * other_runners:
            runner = f"other-set-runner-{i - other_runners}"
            name = f"{runner}-workflow"
            labels = {"runner-pod": runner}
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "labels": labels,
                    "annotations": {"bench/comment": "x" * 200},
                },
                "spec": {
                    "schedulerName": "bench-nobody",
                    "containers": [
                        {
                            "name": c,
                            "image": "registry.k8s.io/pause:3.10",
                            "env": [{"name": f"VAR_{k}", "value": "v" * 20} for k in range(8)],
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                        }
                        for c in ("app", "sidecar")
                    ],
                },
            }
        )
    return pods


class _Recorder:
    def __init__(self) -> None:
        self.value = -1
        self.at = 0.0
        self.changed = asyncio.Event()

    def __call__(self, value: int) -> None:
        if value != self.value:
            self.at = time.monotonic()
        self.value = value
        self.changed.set()

    async def until(self, value: int, within: float) -> None:
        await eventually(
            lambda: self.value == value, f"advertised {value}", within, wake=self.changed
        )


def _monitor(
    kube: Kube, namespace: str, pairs: int, recorder: _Recorder, registry: CollectorRegistry
) -> CapacityMonitor:
    return CapacityMonitor(
        settings=monitor_settings(pairs),
        kube=kube,
        runner_namespace=namespace,
        runner_set_name=RUNNER_SET,
        scale_set_name=SCALE_SET,
        runner_labels=("bench",),
        max_runners=lambda: pairs,
        set_max_capacity=recorder,
        registry=registry,
        on_reconcile=lambda: None,
    )


async def _stage(kubeconfig: str, namespace: str, pairs: int, unrelated: int) -> dict[str, Any]:
    """Unrelated pods, then a monitor that creates `pairs` pairs and is then killed (its
    placeholders stay for the measured process to adopt)."""
    async with connect({"KUBECONFIG": kubeconfig}) as kube:
        started = time.monotonic()
        await _create_many(kube, namespace, unrelated_pods(unrelated))
        unrelated_s = time.monotonic() - started
        recorder = _Recorder()
        monitor = _monitor(kube, namespace, pairs, recorder, CollectorRegistry())
        stop = asyncio.Event()
        task = asyncio.create_task(monitor.run(stop))
        started = time.monotonic()
        await recorder.until(pairs, within=1200)
        pairs_s = time.monotonic() - started
        task.cancel()  # like a kill: the pairs stay
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return {"unrelated_create_s": round(unrelated_s, 1), "pairs_running_s": round(pairs_s, 1)}


async def _child(kubeconfig: str, namespace: str, pairs: int) -> dict[str, Any]:
    """Runs in a fresh process: adopt the pairs, report RSS and planning CPU."""
    gc.collect()
    rss_imports, _ = rss_mib()
    async with connect({"KUBECONFIG": kubeconfig}) as kube:
        recorder = _Recorder()
        registry = CollectorRegistry()
        monitor = _monitor(kube, namespace, pairs, recorder, registry)
        stop = asyncio.Event()
        task = asyncio.create_task(monitor.run(stop))
        started = time.monotonic()
        await recorder.until(pairs, within=300)
        synced_s = time.monotonic() - started
        await asyncio.sleep(3)
        gc.collect()
        rss, hwm = rss_mib()
        cpu = []
        for _ in range(20):
            t0 = time.process_time()
            monitor.reconciler.evaluate(time.time())
            cpu.append((time.process_time() - t0) * 1000)
        view = monitor.view
        result = {
            "rss_mib_after_imports": round(rss_imports, 1),
            "rss_mib_synced": round(rss, 1),
            "rss_mib_peak": round(hwm, 1),
            "view_rss_mib": round(rss - rss_imports, 1),
            "placeholders_in_view": len(view.placeholders),
            "workflow_pods_in_view": len(view.workflow_pods),
            "runner_pods_in_view": len(view.runner_pods),
            "adopt_and_advertise_s": round(synced_s, 2),
            "live_evaluate_ms_median": round(statistics.median(cpu), 2),
            "creates_after_adoption": registry.get_sample_value(
                "gha_capacity_pair_creates_total",
                {"name": RUNNER_SET, "namespace": namespace, "result": "ok"},
            ),
        }
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return result


async def _idle_load(kubeconfig: str, namespace: str, pairs: int, seconds: float) -> dict[str, Any]:
    async with connect({"KUBECONFIG": kubeconfig}) as kube:
        recorder = _Recorder()
        monitor = _monitor(kube, namespace, pairs, recorder, CollectorRegistry())
        stop = asyncio.Event()
        task = asyncio.create_task(monitor.run(stop))
        await recorder.until(pairs, within=600)
        await asyncio.sleep(5)  # the last creates' watch events
        kube.requests.clear()
        passes = monitor.reconciler.passes
        await asyncio.sleep(seconds)
        counted = dict(kube.requests)
        passes = monitor.reconciler.passes - passes
        latency = await _signal_latency(monitor, kube, recorder, pairs)
        stop.set()
        await task
    total = sum(counted.values())
    return {
        "signal_latency_ms": latency,
        "pairs": pairs,
        "window_s": seconds,
        "requests": counted,
        "requests_per_minute": round(total * 60 / seconds, 2),
        "reconcile_passes": passes,
        "method": "Kube.requests counter (every request the monitor sent; a watch counts "
        "once per stream); watches are renewed every 240-360 s, so the steady state "
        "is about 5 streams / 5 min = 1 request per minute",
    }


async def _signal_latency(
    monitor: CapacityMonitor, kube: Kube, recorder: _Recorder, pairs: int, rounds: int = 10
) -> dict[str, Any]:
    """A Running placeholder-runner disappears (as when preempted) → the lower value reaches
    set_max_capacity. Timed from just before the delete request to the callback."""
    samples = []
    for _ in range(rounds):
        victim = next(
            p.placeholder.name
            for p in monitor.view.placeholders.values()
            if p.placeholder.role == Role.RUNNER
            and p.placeholder.phase == PodPhase.RUNNING
            and not p.placeholder.terminating
        )
        started = time.monotonic()
        await kube.delete_pod(monitor.placeholder_namespace, victim)
        await recorder.until(pairs - 1, within=30)
        samples.append((recorder.at - started) * 1000)
        await recorder.until(pairs, within=120)  # replenished before the next round
    samples.sort()
    return {
        "rounds": rounds,
        "median": round(statistics.median(samples), 1),
        "max": round(samples[-1], 1),
        "what": "placeholder deleted on the apiserver -> set_max_capacity(lower value); "
        "includes the delete request, watch delivery, 50 ms coalescing and planning",
    }


def bench_cluster(pairs: int, unrelated: int, idle_pairs: int, idle_seconds: float) -> Any:
    from kubernetes_asyncio import client, config

    from tools.capacity_kit import apply_ladder, create_runner_set, runner_pod_spec
    from tools.localcluster import LocalCluster, ensure_built
    from tools.localcluster.testkit import node_reservation

    art = ensure_built()
    workdir = Path(tempfile.mkdtemp(prefix="bench-capacity-"))
    cluster = LocalCluster(art, workdir)
    cluster.start()
    try:
        kubeconfig = str(cluster.kubeconfig)

        async def prepare(ns: str, node_cpu: int) -> None:
            conf = client.Configuration()
            await config.load_kube_config(config_file=kubeconfig, client_configuration=conf)
            async with client.ApiClient(conf) as api:
                await apply_ladder(api)
                await create_runner_set(api, ns, RUNNER_SET, runner_pod_spec(ns, **HALF))
            cluster.add_node(
                f"big-{ns}",
                cpu=str(node_cpu),
                memory=f"{node_cpu}Gi",
                pods=node_cpu + 10,
                **node_reservation(ns),
            )

        out: dict[str, Any] = {}
        ns = cluster.create_namespace("mem")
        asyncio.run(prepare(ns, 2 * pairs + 50))
        staged = asyncio.run(_stage(kubeconfig, ns, pairs, unrelated))
        child = subprocess.run(
            [
                *(sys.executable, "-m", "tools.bench_capacity"),
                *("--child", kubeconfig, ns, "--pairs", str(pairs)),
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        measured = json.loads(child.stdout)
        out["memory"] = {
            "pairs": pairs,
            "placeholder_pods": 2 * pairs,
            "unrelated_pods": unrelated,
            **staged,
            **{k: v for k, v in measured.items() if k != "live_evaluate_ms_median"},
            "method": "real local control plane; a fresh process runs CapacityMonitor, which "
            "lists+watches and adopts the pairs; RSS from /proc/self/status",
        }
        out["live_evaluate_ms_median"] = measured["live_evaluate_ms_median"]
        cluster.delete_namespace(ns)

        ns = cluster.create_namespace("idle")
        asyncio.run(prepare(ns, 2 * idle_pairs + 10))
        out["apiserver_load"] = asyncio.run(_idle_load(kubeconfig, ns, idle_pairs, idle_seconds))
        out["signal_latency_ms"] = out["apiserver_load"].pop("signal_latency_ms")
        return out
    finally:
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_capacity")
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--unrelated", type=int, default=3000)
    parser.add_argument("--idle-pairs", type=int, default=100)
    parser.add_argument("--idle-seconds", type=float, default=400.0)
    parser.add_argument("--no-cluster", action="store_true", help="only the in-memory part")
    parser.add_argument(
        "--child", nargs=2, metavar=("KUBECONFIG", "NAMESPACE"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(asyncio.run(_child(args.child[0], args.child[1], args.pairs))))
        return 0
    result: dict[str, Any] = {"reconcile_cpu": bench_planning(args.pairs)}
    if not args.no_cluster:
        cluster = bench_cluster(args.pairs, args.unrelated, args.idle_pairs, args.idle_seconds)
        result["reconcile_cpu"]["live_view_evaluate_ms_median"] = cluster.pop(
            "live_evaluate_ms_median"
        )
        result.update(cluster)
    result["python"] = sys.version.split()[0]
    result["cpus"] = os.cpu_count()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
