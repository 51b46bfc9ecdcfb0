"""Measure the taint-eviction race on Karpenter's new nodes; prints JSON.

A node Karpenter launches carries ``karpenter.sh/unregistered:NoExecute`` until it
registers. kube-controller-manager's taint-eviction controller may still see that taint
after the scheduler bound a pod to the (by then untainted) node, and delete the pod
(kubernetes#119862). The local control plane runs without that controller; this script
provisions ``--rounds`` × ``--pods`` fresh nodes with the controller on or off and counts the
pods that vanished, so the harness flag is shown to matter rather than assumed.

    python -m tools.karpenter_taint_race --taint-eviction on --rounds 10
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tools.localcluster import LocalCluster, ensure_built
from tools.localcluster.build import ensure_karpenter_built
from tools.localcluster.karpenter import nodepool_manifest, start_karpenter
from tools.localcluster.rest import wait_for
from tools.localcluster.testkit import pod_manifest

OWNER = "race"


def _phase(cluster: LocalCluster, ns: str, name: str) -> str | None:
    path = f"/api/v1/namespaces/{ns}/pods/{name}"
    if not cluster.rest.exists(path):
        return None
    return str(cluster.rest.get(path).get("status", {}).get("phase"))


def measure(taint_eviction: bool, rounds: int, pods: int) -> dict[str, object]:
    workdir = Path(tempfile.mkdtemp(prefix="taint-race-"))
    cluster = LocalCluster(ensure_built(), workdir, taint_eviction=taint_eviction)
    cluster.start()
    try:
        karpenter = start_karpenter(cluster, ensure_karpenter_built())
        pool = karpenter.create_nodepool(nodepool_manifest("race", owner=OWNER, types=["c-2x"]))
        ns = cluster.create_namespace("race")
        lost: list[str] = []
        started = time.monotonic()
        for r in range(rounds):
            # 1500m each: one pod per 2-CPU node, so every pod waits for a fresh node.
            names = [f"p{r}-{i}" for i in range(pods)]
            for name in names:
                cluster.rest.request(
                    "POST",
                    f"/api/v1/namespaces/{ns}/pods",
                    pod_manifest(name, owner=OWNER, cpu="1500m"),
                )

            def settled(names: list[str] = names) -> bool:
                return all(_phase(cluster, ns, n) in (None, "Running") for n in names)

            wait_for(settled, 120, f"round {r} settled")
            time.sleep(2)  # a late eviction comes within a second or so of binding
            lost += [n for n in names if _phase(cluster, ns, n) is None]
            cluster.rest.request(
                "DELETE", f"/api/v1/namespaces/{ns}/pods", params={"gracePeriodSeconds": "0"}
            )
            karpenter.delete_nodepool(pool)
            pool = karpenter.create_nodepool(nodepool_manifest("race", owner=OWNER, types=["c-2x"]))
        events = cluster.rest.request("GET", f"/api/v1/namespaces/{ns}/events")
        evictions = sum(
            1 for e in events.get("items", []) if e.get("reason") == "TaintManagerEviction"
        )
        return {
            "taint_eviction_controller": taint_eviction,
            "provisionings": rounds * pods,
            "pods_lost": len(lost),
            "taint_manager_eviction_events": evictions,
            "seconds": round(time.monotonic() - started, 1),
        }
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.karpenter_taint_race")
    parser.add_argument("--taint-eviction", choices=["on", "off"], default="off")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--pods", type=int, default=5)
    args = parser.parse_args(argv)
    result = measure(args.taint_eviction == "on", args.rounds, args.pods)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
