"""Where a job's wait goes, step by step (the outcome benchmark's per-job critical path).

A job's milestones, in the order they come on the path (seconds since cluster start):

* ``queued`` — GitHub queued it (the fake Actions service's job history);
* ``demand_seen`` — first counted in a demand reading the fake HUD (or the fake GitHub REST
  API) served (``first_served`` of those fakes): ours only, stock reads no demand;
* ``pair_created`` / ``pair_running`` — the placeholder pair attributed to it was created /
  had both halves Running (the placeholder pods' watch events);
* ``header_rise`` — the first poll after that pair turned Running whose
  X-ScaleSetMaxCapacity rose above the poll before it (the fake's poll records);
* ``assigned`` — assigned to the scale set that ran it (the job's last assignment);
* ``runner_running`` — its runner pod Running and the runner idle (the runner stand-in);
* ``workflow_running`` — its workflow pod Running; or ``failed``: the prepare-job timeout
  failed it (its wait ends there, as in the headline wait).

Exact per job: queued, demand_seen, assigned, runner_running, workflow_running and failed.
A pair is not made for one job, so the pair milestones (and the rise after them) are
**attributed by order**: per scale set, jobs in the order they were assigned to it and pairs
in the order they turned Running; each job takes the first pair not taken yet that turned
Running at or before the job's assignment and was still whole then (neither half gone nor
terminating). A pair that ended before the job's assignment is passed over for good (used by
no job, or by a runner pod the order missed); a job with no such pair (assigned under a
header that counted no pair for it: stock's static header, the demand floor, a stale
reading) has no pair milestones and no header rise.

Steps: the job's critical path, walked back from its end (workflow pod Running, or the
failure): the step before a milestone is the latest of the milestones listed before it that
the job reached between its queueing and that milestone; the one that came last is what it
waited for. A milestone reached before the job was queued (a warm pair, an idle runner),
after the milestone it would have led to (a demand reading that counted a job already
assigned), or earlier than another that also had to come first (a runner ready before its
job was assigned), is not on the path. Each step is the time from the step before on the
path (or from the queueing) to its milestone, so a job's steps add up to its wait. Per step:
how many finished jobs had it on their path, its median and p90 there, and its share of all
the finished jobs' waits.

Everything is computed after the run from what the fakes and watches record anyway (no
sampling of its own), so six variants on two cores pay nothing for it.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tools.e2e_site import PodEvent
from tools.stats import percentile

MILESTONES = (
    "demand_seen",
    "pair_created",
    "pair_running",
    "header_rise",
    "assigned",
    "runner_running",
    "workflow_running",
    "failed",
)
LABELS = {
    "demand_seen": "queued → counted in a demand reading",
    "pair_created": "→ pair created",
    "pair_running": "→ pair Running (both halves)",
    "header_rise": "→ header rise sent",
    "assigned": "→ assigned to the scale set",
    "runner_running": "→ runner pod Running",
    "workflow_running": "→ workflow pod Running",
    "failed": "→ failed by the prepare-job timeout",
}
ROUND = 2
# Why a pair that never ran went, besides the listener's delete reasons: a half taken by a
# real pod (preempted) or removed at shutdown; or still there when the run ended.
NOT_BY_THE_LISTENER = "not deleted by the policy"
NOT_DELETED = "alive at the end"


@dataclass(frozen=True)
class Pair:
    """One placeholder pair as the watch saw it; None: never reached."""

    slot: str
    created: float
    running: float | None  # both halves Running
    ended: float | None  # the first half gone or terminating
    reason: str | None = None  # why the listener deleted it (None: it did not, or unknown)


@dataclass(frozen=True)
class JobPath:
    """One job's milestones (None: not reached, or not known for this variant)."""

    queued: float
    demand_seen: float | None = None
    pair_created: float | None = None
    pair_running: float | None = None
    header_rise: float | None = None
    assigned: float | None = None
    runner_running: float | None = None
    workflow_running: float | None = None
    failed: float | None = None

    @property
    def finished(self) -> bool:
        return self.workflow_running is not None or self.failed is not None


def delete_reasons(log_text: str) -> dict[str, str]:
    """Slot → the reason the listener gave when it deleted that slot's placeholders (its
    "placeholders deleted" log lines; the first reason per slot)."""
    found: dict[str, str] = {}
    for line in log_text.splitlines():
        if "placeholders deleted" not in line:
            continue
        reason = _DELETED_REASON.search(line)
        slots = _DELETED_SLOTS.search(line)
        if reason is None or slots is None:
            continue
        for slot in slots.group(1).split(","):
            found.setdefault(slot, reason.group(1))
    return found


_DELETED_REASON = re.compile(r'\breason="?([^"\s]+)')
_DELETED_SLOTS = re.compile(r'\bslots="?([^"\s]+)')


def pairs_from_events(
    events: Iterable[PodEvent], offset: float = 0.0, reasons: Mapping[str, str] | None = None
) -> list[Pair]:
    """The pairs of one site from its placeholder pod events (``wall - offset`` is the time
    used), in no particular order. A pair is whole Running from the later of its halves'
    first Running event, if that is before either half went. ``reasons``: slot → why the
    listener deleted it (`delete_reasons`)."""
    reasons = reasons or {}
    created: dict[str, float] = {}
    running: dict[str, dict[str, float]] = {}
    ended: dict[str, float] = {}
    for event in events:
        slot = event.slot
        if not slot:
            continue
        t = event.wall - offset
        gone = event.kind == "DELETED" or event.terminating
        if gone:
            ended.setdefault(slot, t)
            continue
        created.setdefault(slot, t)
        if event.phase == "Running":
            running.setdefault(slot, {}).setdefault(event.role, t)
    pairs = []
    for slot, born in created.items():
        halves = running.get(slot, {})
        whole = max(halves.values()) if len(halves) == 2 else None
        end = ended.get(slot)
        if whole is not None and end is not None and end < whole:
            whole = None
        pairs.append(Pair(slot, born, whole, end, reasons.get(slot) if end is not None else None))
    return pairs


def rises(records: Iterable[tuple[float, int | None]]) -> list[float]:
    """When the header went up: each poll whose value is above the poll's before it (no
    header means no limit, above any value); the first poll is no rise."""
    found = []
    previous: int | None = None
    first = True
    for t, value in records:
        if not first and (
            (value is None and previous is not None)
            or (value is not None and previous is not None and value > previous)
        ):
            found.append(t)
        previous, first = value, False
    return found


def attribute(
    paths: Sequence[JobPath], pairs: Iterable[Pair], rise_times: Sequence[float]
) -> list[JobPath]:
    """The paths of one scale set's jobs with their pair and rise milestones (see the
    module's docstring), in the order given."""
    ready = sorted((p for p in pairs if p.running is not None), key=lambda p: p.running or 0.0)
    order = sorted(
        (i for i, p in enumerate(paths) if p.assigned is not None),
        key=lambda i: paths[i].assigned or 0.0,
    )
    result = list(paths)
    next_pair = 0
    for i in order:
        path = paths[i]
        assigned = path.assigned or 0.0
        while next_pair < len(ready):
            pair = ready[next_pair]
            if (pair.running or 0.0) > assigned:
                break  # not Running yet: no pair for this job; later jobs may have it
            next_pair += 1
            if pair.ended is not None and pair.ended < assigned:
                continue  # gone before this job: passed over for good
            rise = next((t for t in rise_times if (pair.running or 0.0) <= t <= assigned), None)
            result[i] = replace(
                path, pair_created=pair.created, pair_running=pair.running, header_rise=rise
            )
            break
    return result


def steps(path: JobPath) -> dict[str, float]:
    """The steps of a finished job's critical path, in path order, each the seconds from
    the step before (they add up to its wait); {} for an unfinished job."""
    end = "workflow_running" if path.workflow_running is not None else "failed"
    end_at: float | None = getattr(path, end)
    if end_at is None:
        return {}
    chain = [(end, end_at)]
    before = MILESTONES.index(end)
    while True:
        found: tuple[int, float] | None = None
        for index in range(before):
            t = getattr(path, MILESTONES[index])
            if t is None or not path.queued <= t <= chain[-1][1]:
                continue
            if found is None or t >= found[1]:  # the latest; on a tie the later one listed
                found = (index, t)
        if found is None:
            break
        chain.append((MILESTONES[found[0]], found[1]))
        before = found[0]
    result = {}
    reached = path.queued
    for name, t in reversed(chain):
        result[name] = t - reached
        reached = t
    return result


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, ROUND)


def pair_seconds(pairs: Iterable[Pair], until: float) -> dict[str, float]:
    """Where the pairs' time went, in pair-seconds within [0, ``until``]: Pending (created →
    both halves Running, or gone); Running until a real pod took a half (no delete reason:
    the placeholder was preempted), until the listener released it (a reason), or until
    ``until``. Running and released is capacity nobody used."""
    spent = dict.fromkeys(
        ("pending", "running_then_taken", "running_then_released", "running_at_end"), 0.0
    )

    def span(a: float, b: float) -> float:
        return max(0.0, min(b, until) - max(a, 0.0))

    for p in pairs:
        end = until if p.ended is None else p.ended
        spent["pending"] += span(p.created, end if p.running is None else p.running)
        if p.running is None:
            continue
        kind = (
            "running_at_end"
            if p.ended is None
            else ("running_then_released" if p.reason else "running_then_taken")
        )
        spent[kind] += span(p.running, end)
    return {k: round(v, 1) for k, v in spent.items()}


def figures(
    paths: Sequence[JobPath], pairs: Iterable[Pair], until: float | None = None
) -> dict[str, Any]:
    """The JSON of one variant: per step (finished jobs) n, p50, p90 and share of the waits;
    the pairs' launch (created → both halves Running) and, with the window's end ``until``,
    where their time went (`pair_seconds`); every job's milestones."""
    pairs = list(pairs)
    per_step: dict[str, list[float]] = {name: [] for name in MILESTONES}
    for path in paths:
        if not path.finished:
            continue
        for name, seconds in steps(path).items():
            per_step[name].append(seconds)
    total = sum(sum(v) for v in per_step.values())
    launches = [p.running - p.created for p in pairs if p.running is not None]
    never = sum(1 for p in pairs if p.running is None)
    never_by: dict[str, int] = {}
    for p in pairs:
        if p.running is None:
            why = p.reason or (NOT_DELETED if p.ended is None else NOT_BY_THE_LISTENER)
            never_by[why] = never_by.get(why, 0) + 1
    return {
        "steps_s": {
            name: {
                "n": len(values),
                "p50": _r(percentile(values, 50)),
                "p90": _r(percentile(values, 90)),
                "share": round(sum(values) / total, 3) if total else None,
            }
            for name, values in per_step.items()
            if values
        },
        "pair_launch_s": {
            "n": len(launches),
            "p50": _r(percentile(launches, 50)),
            "p90": _r(percentile(launches, 90)),
            "never_running": never,
            "never_running_by": dict(sorted(never_by.items())),
        },
        **({"pair_seconds": pair_seconds(pairs, until)} if until is not None else {}),
        "columns": ["queued", *MILESTONES],
        "jobs": [
            [_r(path.queued), *(_r(getattr(path, name)) for name in MILESTONES)]
            for path in sorted(paths, key=lambda p: p.queued)
        ],
    }


def table(seeds: Mapping[str, Any], variants: Sequence[str], headers: Mapping[str, str]) -> str:
    """Per variant and step: the median over seeds of the step's p50 and p90, and of its
    share of the waits ("" when no seed recorded the steps: a run from before them)."""
    names = [
        v
        for v in variants
        if any("critical_path" in (f["variants"].get(v) or {}) for f in seeds.values())
    ]
    if not names:
        return ""

    def cell(variant: str, step: str) -> str:
        p50s, p90s, shares = [], [], []
        for figures_ in seeds.values():
            found = ((figures_["variants"].get(variant) or {}).get("critical_path") or {}).get(
                "steps_s", {}
            )
            entry = found.get(step)
            if entry and entry["p50"] is not None:
                p50s.append(entry["p50"])
                p90s.append(entry["p90"])
                shares.append(entry["share"] or 0.0)
        if not p50s:
            return "–"
        return (
            f"{statistics.median(p50s):g} / {statistics.median(p90s):g} "
            f"({statistics.median(shares):.0%})"
        )

    lines = [
        "Where the wait goes: each step's p50 / p90 (s) over the jobs that finished, and its "
        "share of their waits (median over seeds)",
        "",
        "| step | " + " | ".join(headers.get(n, n) for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for step in MILESTONES:
        cells = [cell(n, step) for n in names]
        if all(c == "–" for c in cells):
            continue
        lines.append(f"| {LABELS[step]} | " + " | ".join(cells) + " |")
    launch = []
    for n in names:
        values = [
            f["variants"][n]["critical_path"]["pair_launch_s"]["p50"]
            for f in seeds.values()
            if "critical_path" in (f["variants"].get(n) or {})
            and f["variants"][n]["critical_path"]["pair_launch_s"]["p50"] is not None
        ]
        launch.append(f"{statistics.median(values):g}" if values else "–")
    if any(c != "–" for c in launch):
        lines.append(
            "| pair launch, created → Running, p50 (any job) | " + " | ".join(launch) + " |"
        )
    return "\n".join(lines)
