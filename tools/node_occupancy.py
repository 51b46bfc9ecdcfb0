"""What held each node: node-seconds per pool split by what was on the node at the time.

The outcome benchmark reports node-seconds per NodePool; this says what they were spent on,
so a variant that costs more shows where. A node's life, from its NodeClaim's creation to
its Node's deletion, is cut into:

* ``launching`` — NodeClaim created, its Node not registered yet (billed: the instance was
  asked for);
* ``real`` — at least one real pod (a runner or a workflow pod) bound to it;
* ``placeholders`` — only capacity reserve: the listener's placeholders
  (``<scale set>-ph-<slot>-<r|w>``) or stock's pause pods (``overprovisioning-…``);
* ``empty`` — registered, nothing of ours on it (waiting for consolidation, or between
  pods).

A pod holds its node from its first status patch on that node (it is Running) to its
deletion being asked for (a preempted placeholder, a finished runner, a deleted workflow
pod). Read after the run from two logs the local cluster writes anyway: Karpenter's
(``created nodeclaim``, ``registered nodeclaim``, ``deleted node``) and kwok's (``Patch
pod``, ``Delete pod``, and the ``pod-delete`` stage failing because someone else deleted
the pod first). Both components are pinned by the build cache, so their log shapes are too;
a line that does not parse is skipped.

``python -m tools.node_occupancy LOG_DIR [--pool NAME …]`` prints the split per pool as JSON
(over the whole log, or ``--since``/``--until`` epoch seconds).
``python -m tools.node_occupancy LOG_DIR --outcomes RUN.json --workdir DIR --out NEW.json``
adds the split to an outcome benchmark's JSON written before the benchmark recorded it,
from that run's work directory (its cluster logs and listener files): each variant's pools
from its listeners' namespaces, its window from the first listener line of the seed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.localcluster.karpenter import timestamp

STATES = ("launching", "real", "placeholders", "empty")
REMOVAL = "empty_before_removal_s"  # the outcome JSON's key for `lag_figures`


def is_reserve(pod: str) -> bool:
    """A placeholder of ours or a stock pause pod (``namespace/name``)."""
    name = pod.rsplit("/", 1)[-1]
    return "-ph-" in name or name.startswith("overprovisioning-")


@dataclass
class Node:
    name: str
    pool: str
    created: float  # its NodeClaim's creation
    registered: float
    deleted: float | None = None


@dataclass
class Placement:
    pod: str
    node: str
    start: float
    end: float | None = None


@dataclass
class Logs:
    nodes: dict[str, Node] = field(default_factory=dict)
    placements: dict[str, Placement] = field(default_factory=dict)


def _records(lines: Iterable[str]) -> Iterable[tuple[dict[str, object], float]]:
    """Each JSON object line with its ``time`` in epoch seconds; any other line is skipped."""
    for line in lines:
        try:
            record = json.loads(line)
            at = timestamp(record.get("time")) if isinstance(record, dict) else None
        except (ValueError, TypeError, AttributeError):
            continue
        if at is not None:
            yield record, at


def read(karpenter: Iterable[str], kwok: Iterable[str]) -> Logs:
    """Nodes from Karpenter's log lines, pod placements from kwok's."""
    logs = Logs()
    claim_created: dict[str, float] = {}
    for r, at in _records(karpenter):
        message, claim, node = r.get("message"), r.get("NodeClaim"), r.get("Node")
        if not isinstance(claim, dict):
            continue
        if message == "created nodeclaim":
            claim_created[str(claim["name"])] = at
        elif message == "registered nodeclaim" and isinstance(node, dict):
            claim_name, node_name = str(claim["name"]), str(node["name"])
            registered = at
            logs.nodes[node_name] = Node(
                name=node_name,
                # NodeClaims are named <nodepool>-<suffix> by Karpenter.
                pool=claim_name.rsplit("-", 1)[0],
                created=claim_created.get(claim_name, registered),
                registered=registered,
            )
        elif message == "deleted node" and isinstance(node, dict):
            found = logs.nodes.get(str(node["name"]))
            if found is not None and found.deleted is None:
                found.deleted = at
    for r, at in _records(kwok):
        message, pod = r.get("msg"), r.get("pod")
        if not isinstance(pod, str):
            continue
        if message == "Patch pod" and isinstance(r.get("node"), str):
            if pod not in logs.placements:
                logs.placements[pod] = Placement(pod, str(r["node"]), at)
        elif message == "Delete pod" or (
            message == "failed to apply stage" and r.get("stage") == "pod-delete"
        ):
            placed = logs.placements.get(pod)
            if placed is not None and placed.end is None:
                placed.end = at
    return logs


def read_dir(log_dir: Path) -> Logs:
    with (log_dir / "karpenter.log").open() as k, (log_dir / "kwok.log").open() as w:
        return read(k, w)


def occupancy(
    logs: Logs, start: float, end: float, pools: Sequence[str] | None = None
) -> dict[str, dict[str, float]]:
    """Seconds per pool and state (STATES) inside [start, end]. A node still up, or a pod
    still placed, at the end of the logs counts until ``end``."""
    by_node: dict[str, list[Placement]] = {}
    for placed in logs.placements.values():
        by_node.setdefault(placed.node, []).append(placed)
    result: dict[str, dict[str, float]] = {p: dict.fromkeys(STATES, 0.0) for p in pools or ()}
    for node in logs.nodes.values():
        if pools is not None and node.pool not in pools:
            continue
        totals = result.setdefault(node.pool, dict.fromkeys(STATES, 0.0))
        gone = node.deleted if node.deleted is not None else end
        totals["launching"] += _overlap(node.created, node.registered, start, end)
        # Sweep the node's life: each pod adds +1 to its kind at its start, -1 at its end.
        edges: list[tuple[float, int, int]] = []  # (time, real delta, reserve delta)
        for placed in by_node.get(node.name, ()):
            real = 0 if is_reserve(placed.pod) else 1
            edges.append((placed.start, real, 1 - real))
            edges.append((placed.end if placed.end is not None else gone, -real, real - 1))
        edges.sort(key=lambda e: (e[0], e[1] + e[2]))  # ends before starts at one instant
        real_n = reserve_n = 0
        t = node.registered
        for at, d_real, d_reserve in [*edges, (gone, 0, 0)]:
            at = min(max(at, node.registered), gone)
            state = "real" if real_n > 0 else "placeholders" if reserve_n > 0 else "empty"
            totals[state] += _overlap(t, at, start, end)
            t = at
            real_n += d_real
            reserve_n += d_reserve
    return result


def removal_lags(
    logs: Logs, start: float, end: float, pools: Sequence[str] | None = None
) -> list[float]:
    """For each node deleted inside [start, end]: seconds from its last pod leaving (or its
    registration, if none came) to its deletion, sorted. What an empty node costs before
    Karpenter removes it: ``consolidateAfter`` plus its disruption loop's own steps (its
    emptiness is validated again before the node is tainted and deleted). A node whose last
    pod went with it (placeholders evicted when consolidation drained it) counts ~0:
    `lag_figures` tells those apart."""
    ends: dict[str, float] = {}
    for placed in logs.placements.values():
        if placed.end is not None:
            ends[placed.node] = max(placed.end, ends.get(placed.node, placed.end))
    lags = [
        max(0.0, node.deleted - max(node.registered, ends.get(node.name, node.registered)))
        for node in logs.nodes.values()
        if node.deleted is not None
        and start <= node.deleted <= end
        and (pools is None or node.pool in pools)
    ]
    return sorted(lags)


# A node deleted within this many seconds of its last pod leaving was drained (its pods
# evicted by its own disruption), not left empty: an empty node waits `consolidateAfter`
# (tens of seconds) before Karpenter even considers it.
DRAINED_WITHIN = 10.0


def lag_figures(lags: Sequence[float]) -> dict[str, float | int]:
    """The outcome JSON's ``empty_before_removal_s`` from `removal_lags`: n, p50 and p90 of
    the nodes removed empty, and how many were ``drained`` instead (DRAINED_WITHIN)."""
    empty = sorted(lag for lag in lags if lag >= DRAINED_WITHIN)
    drained = len(lags) - len(empty)
    if not empty:
        return {"n": 0, "drained": drained}

    def at(q: float) -> float:
        return round(empty[min(len(empty) - 1, int(q * len(empty)))], 1)

    return {"n": len(empty), "p50": at(0.5), "p90": at(0.9), "drained": drained}


def _overlap(a: float, b: float, start: float, end: float) -> float:
    return max(0.0, min(b, end) - max(a, start))


def by_role(per_pool: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Pools named ``…-runner`` / ``…-workflow`` summed per role, and every pool as
    ``total``; rounded to 0.1 s."""
    roles: dict[str, dict[str, float]] = {"total": dict.fromkeys(STATES, 0.0)}
    for pool, states in per_pool.items():
        role = pool.rsplit("-", 1)[-1]
        into = roles.setdefault(role, dict.fromkeys(STATES, 0.0))
        for state, seconds in states.items():
            into[state] += seconds
            roles["total"][state] += seconds
    return {r: {s: round(v, 1) for s, v in states.items()} for r, states in roles.items()}


_STAMP = re.compile(r"^time=(\S+Z) ")


def add_to_outcomes(document: dict[str, Any], logs: Logs, workdir: Path) -> list[str]:
    """Add ``node_seconds_by_occupancy``, ``empty_before_removal_s`` and per-pool
    ``occupancy_s`` to every variant of
    ``document`` (an outcome benchmark's JSON) whose listener files are in ``workdir``
    (``seed<S>-<variant>/listener-<site>-<n>-config.json``, ``staged<S>-…`` for the staged
    family). Returns what it could not do."""
    missing: list[str] = []
    for seed, figures in document["seeds"].items():
        firsts: list[float] = []
        namespaces: dict[str, dict[str, str]] = {}  # variant -> site -> namespace
        for variant in figures["variants"]:
            # bench_outcomes names a variant's directory seed<S>-<variant>, bench_staged
            # staged<S>-<variant>.
            files = [
                *(workdir / f"seed{seed}-{variant}").glob("listener-*-config.json"),
                *(workdir / f"staged{seed}-{variant}").glob("listener-*-config.json"),
            ]
            for config in sorted(files):
                loaded = json.loads(config.read_text())
                site = str(loaded["runner_scale_set_name"])
                namespaces.setdefault(variant, {})[site] = str(
                    loaded["ephemeral_runner_set_namespace"]
                )
                log = config.with_name(config.name.replace("-config.json", ".log"))
                if log.exists():
                    with log.open(errors="replace") as lines:
                        for line in lines:
                            stamp = _STAMP.match(line)
                            when = timestamp(stamp.group(1)) if stamp else None
                            if when is not None:
                                firsts.append(when)
                                break
        if not firsts:
            missing.append(f"seed {seed}: no listener logs under {workdir}")
            continue
        start = min(firsts)
        end = start + float(figures["window_s"])
        for variant, sites in namespaces.items():
            pools = [f"{ns}-{role}" for ns in sites.values() for role in ("runner", "workflow")]
            found = occupancy(logs, start, end, pools)
            own = figures["variants"][variant]
            own["node_seconds_by_occupancy"] = by_role(found)
            own[REMOVAL] = lag_figures(removal_lags(logs, start, end, pools))
            for site, ns in sites.items():
                for role in ("runner", "workflow"):
                    entry = own.get("per_pool", {}).get(f"{site}/{role}")
                    if entry is not None:
                        states = found.get(f"{ns}-{role}", {})
                        entry["occupancy_s"] = {k: round(v, 1) for k, v in states.items()}
        for variant in figures["variants"]:
            if variant not in namespaces and variant != "reference":
                missing.append(f"seed {seed} {variant}: no listener config under {workdir}")
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.node_occupancy", description=__doc__)
    parser.add_argument("log_dir", type=Path, help="the local cluster's logs directory")
    parser.add_argument("--pool", action="append", default=None, help="only these NodePools")
    parser.add_argument("--since", type=float, default=0.0, help="epoch seconds")
    parser.add_argument("--until", type=float, default=float("inf"), help="epoch seconds")
    parser.add_argument("--outcomes", type=Path, help="an outcome benchmark's JSON to add to")
    parser.add_argument("--workdir", type=Path, help="that run's work directory")
    parser.add_argument("--out", type=Path, help="where to write the JSON with the split")
    args = parser.parse_args(argv)
    if args.outcomes is not None and (args.workdir is None or args.out is None):
        parser.error("--outcomes needs --workdir and --out")
    for name in ("karpenter.log", "kwok.log"):
        if not (args.log_dir / name).is_file():
            print(f"node_occupancy: {args.log_dir / name} does not exist", file=sys.stderr)
            return 2
    logs = read_dir(args.log_dir)
    if args.outcomes is not None:
        document = json.loads(args.outcomes.read_text())
        for problem in add_to_outcomes(document, logs, args.workdir):
            print(f"node_occupancy: {problem}", file=sys.stderr)
        args.out.write_text(json.dumps(document, indent=1) + "\n")
        return 0
    until = args.until
    if until == float("inf"):
        ends = [n.deleted or n.registered for n in logs.nodes.values()]
        until = max(ends, default=0.0)
    found = occupancy(logs, args.since, until, args.pool)
    rounded = {p: {s: round(v, 1) for s, v in st.items()} for p, st in sorted(found.items())}
    print(json.dumps(rounded, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
