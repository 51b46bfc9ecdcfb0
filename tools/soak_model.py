"""The pure half of the fault soak (tools/soak.py; docs/soak.md): the seeded fault
schedule and every invariant, computed from what the run recorded. No I/O, no clock: the unit
tier checks these on hand-made records (tests/unit/test_soak_model.py).

docs/soak.md defines each number the summary reports.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

# Every fault kind, each switchable on its own (``--faults``/``--no-faults``).
NODE_LOSS = "node_loss"
INSUFFICIENT_CAPACITY = "insufficient_capacity"
LISTENER_SIGKILL = "listener_sigkill"
LISTENER_SIGTERM = "listener_sigterm"
APISERVER_RESTART = "apiserver_restart"
APISERVER_THROTTLE = "apiserver_throttle"
ACTIONS_5XX = "actions_5xx"
ACTIONS_429 = "actions_429"
ACTIONS_401 = "actions_401"
ACTIONS_SLOW = "actions_slow"
HUD_OUTAGE = "hud_outage"
HUD_GARBAGE = "hud_garbage"
KINDS = (
    NODE_LOSS,
    INSUFFICIENT_CAPACITY,
    LISTENER_SIGKILL,
    LISTENER_SIGTERM,
    APISERVER_RESTART,
    APISERVER_THROTTLE,
    ACTIONS_5XX,
    ACTIONS_429,
    ACTIONS_401,
    ACTIONS_SLOW,
    HUD_OUTAGE,
    HUD_GARBAGE,
)
LISTENER_KINDS = (LISTENER_SIGKILL, LISTENER_SIGTERM)
# Routes of the fake Actions service the request faults land on (the next requests of the
# route, whichever listener sends them: both sites share one service, as they share GitHub).
ERROR_ROUTES = ("get_message", "delete_message", "session_refresh", "session_create")
SLOW_ROUTES = ("get_message", "delete_message", "session_refresh")

# What ``ok`` requires: each invariant at most this. The restart goal is issue 24's.
THRESHOLDS: Mapping[str, float] = {
    "jobs_lost": 0,
    "jobs_duplicated": 0,
    "acks_duplicated": 0,
    "jobs_failed_prepare_timeout": 0,
    "header_over_capacity_polls": 0,
    "placeholders_leaked": 0,
    "sessions_leaked": 0,
    "unplanned_exits": 0,
    "sigkill_expiry_to_session_s_max": 3.0,
}


@dataclass(frozen=True)
class Fault:
    """One scheduled fault. ``at``: seconds after the run's start; ``site``: which cluster
    (None: shared by both); ``seconds``: how long a lasting fault lasts, the apiserver's
    downtime, the delay before a killed listener is started again (as the kubelet would), or
    the slowness of a slow answer; ``count``: how many requests an injected fault answers;
    ``target``: the route, or the node pool a node is lost from."""

    at: float
    kind: str
    site: int | None = None
    seconds: float = 0.0
    count: int = 0
    target: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def schedule(
    seed: int,
    duration: float,
    kinds: Sequence[str] = KINDS,
    *,
    sites: int = 2,
    lease: float = 30.0,
    start: float = 20.0,
    quiet_tail: float = 15.0,
    gap: tuple[float, float] = (5.0, 12.0),
) -> tuple[Fault, ...]:
    """The faults of one seed: one every ``gap`` seconds from ``start`` until ``quiet_tail``
    before ``duration``, kinds taken from a shuffled cycle of ``kinds`` (every kind comes once
    before any comes twice). A listener is not killed again within ``lease`` + 20 s of its
    last kill, so each restart's wait for the old session is measured on its own."""
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"faults: unknown kind(s) {', '.join(unknown)}")
    if duration <= 0:
        raise ValueError(f"duration: must be > 0, got {duration}")
    rng = random.Random(f"soak-faults-{seed}")
    faults: list[Fault] = []
    cycle: list[str] = []
    last_kill = [float("-inf")] * sites
    t = start
    while kinds:
        t += rng.uniform(*gap)
        if t >= duration - quiet_tail:
            break
        if not cycle:
            cycle = list(kinds)
            rng.shuffle(cycle)
        kind = cycle.pop()
        site = rng.randrange(sites)
        if kind in LISTENER_KINDS:
            free = [s for s in range(sites) if t - last_kill[s] >= lease + 20.0]
            if not free:
                cycle.append(kind)  # next slot
                continue
            site = rng.choice(free)
            last_kill[site] = t
        faults.append(_draw(rng, round(t, 1), kind, site))
    return tuple(faults)


def _draw(rng: random.Random, at: float, kind: str, site: int) -> Fault:
    def s(low: float, high: float) -> float:
        return round(rng.uniform(low, high), 1)

    if kind == NODE_LOSS:
        return Fault(at, kind, site, target=rng.choice(("runner", "workflow")))
    if kind == INSUFFICIENT_CAPACITY:
        return Fault(at, kind, site, seconds=s(20, 60))
    if kind in LISTENER_KINDS:
        return Fault(at, kind, site, seconds=s(1, 5))
    if kind == APISERVER_RESTART:
        return Fault(at, kind, seconds=s(2, 8))
    if kind == APISERVER_THROTTLE:
        return Fault(at, kind, seconds=s(10, 30))
    if kind in (ACTIONS_5XX, ACTIONS_429):
        return Fault(at, kind, count=rng.randint(1, 4), target=rng.choice(ERROR_ROUTES))
    if kind == ACTIONS_401:
        return Fault(at, kind, count=rng.randint(1, 2), target="get_message")
    if kind == ACTIONS_SLOW:
        return Fault(
            at, kind, seconds=s(2, 8), count=rng.randint(1, 3), target=rng.choice(SLOW_ROUTES)
        )
    return Fault(at, kind, seconds=s(15, 45))  # HUD outage or garbage


# ---------------------------------------------------------------------- jobs and acks


@dataclass(frozen=True)
class JobFacts:
    """One job as the fake recorded it: its state transitions, the runners that claimed it,
    its result and (for a failed one) why."""

    job_id: str
    states: tuple[str, ...]
    runners: tuple[str, ...]
    result: str | None
    failure: str | None


def job_invariants(jobs: Iterable[JobFacts]) -> dict[str, int]:
    """``jobs_lost``: not completed at the end; ``jobs_duplicated``: run more than once (two
    claims, two runners or two completions); ``jobs_failed_prepare_timeout``: failed by the
    hooks' prepare-job timeout; ``jobs_failed_other``: failed otherwise (e.g. its pod was on
    a lost node — a failure the user sees, not a lost job)."""
    jobs = list(jobs)
    return {
        "jobs": len(jobs),
        "jobs_lost": sum(not j.states or j.states[-1] != "completed" for j in jobs),
        "jobs_duplicated": sum(
            j.states.count("running") > 1 or j.states.count("completed") > 1 or len(j.runners) > 1
            for j in jobs
        ),
        "jobs_failed_prepare_timeout": sum(j.failure == "prepare_timeout" for j in jobs),
        "jobs_failed_other": sum(
            j.result == "failed" and j.failure != "prepare_timeout" for j in jobs
        ),
    }


def acks_duplicated(acks: Iterable[tuple[int, int]]) -> int:
    """Deletes of a (scale set, message id) beyond the first."""
    return sum(count - 1 for count in Counter(acks).values() if count > 1)


# ---------------------------------------------------------------------- the header


PLACEHOLDER_ROLE_LABEL = "capacity-listener.dev/role"
RUNNER_POD_LABEL = "actions-ephemeral-runner"  # ARC's label on runner pods
WORKFLOW_POD_LABEL = "runner-pod"  # the hooks' label on workflow pods


def confirmed_capacity(pods: Iterable[Mapping[str, Any]], max_runners: int) -> int:
    """What an outside observer can confirm from one list of a site's pods, as
    docs/capacity-model.md §3 counts: ``min(max_runners, runner side, workflow side)``, a side
    being its bound real pods (on a node, not terminating, Pending or Running) plus its
    Running placeholders (not terminating). Node health is not looked at, so this is never
    below the listener's own count from the same pods: the check is strict about capacity
    that does not exist or is not Running, lenient about placeholders on a failing node."""
    runner = workflow = 0
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if meta.get("deletionTimestamp"):
            continue
        phase = status.get("phase")
        role = labels.get(PLACEHOLDER_ROLE_LABEL)
        if role is not None:
            if phase == "Running":
                runner += role == "placeholder-runner"
                workflow += role == "placeholder-workflow"
            continue
        if not spec.get("nodeName") or phase not in ("Pending", "Running"):
            continue
        if RUNNER_POD_LABEL in labels:
            runner += 1
        elif WORKFLOW_POD_LABEL in labels:
            workflow += 1
    return max(0, min(max_runners, runner, workflow))


@dataclass(frozen=True)
class Poll:
    """One long poll of one scale set: when it started and ended (monotonic seconds) and its
    ``X-ScaleSetMaxCapacity`` (None: absent, i.e. no limit)."""

    start: float
    end: float | None
    header: int | None


@dataclass(frozen=True)
class Sample:
    """Confirmed capacity of one site as listed at ``t`` (monotonic seconds)."""

    t: float
    confirmed: int


def over_polls(
    polls: Sequence[Poll], samples: Sequence[Sample], tolerance: float
) -> list[tuple[float, int | None, int]]:
    """(start, header, largest confirmed capacity within ``tolerance`` of the start) of every
    poll whose header was above it (an absent header is above any); unobserved polls left
    out."""
    found = []
    for poll in sorted(polls, key=lambda p: p.start):
        near = [s.confirmed for s in samples if abs(s.t - poll.start) <= tolerance]
        if near and (poll.header is None or poll.header > max(near)):
            found.append((poll.start, poll.header, max(near)))
    return found


def header_over_capacity(
    polls: Sequence[Poll], samples: Sequence[Sample], tolerance: float
) -> dict[str, float]:
    """How often and how long the header exceeded confirmed capacity (docs/soak.md).

    A poll is *over* when its header is above the largest confirmed capacity sampled within
    ``tolerance`` seconds of its start (an absent header is above any); a poll with no sample
    in that window is *unobserved* (the apiserver was down) and not judged. A sample is over
    when the header in force then (the latest poll started at or before it and not yet
    ended) is above the largest confirmed capacity within ``tolerance`` of it; the longest
    stretch runs from the first over sample to the next sample that is not over."""
    ordered = sorted(samples, key=lambda s: s.t)

    def most(t: float) -> int | None:
        near = [s.confirmed for s in ordered if abs(s.t - t) <= tolerance]
        return max(near) if near else None

    def above(header: int | None, bound: int) -> bool:
        return header is None or header > bound

    over = len(over_polls(polls, samples, tolerance))
    unobserved = sum(most(poll.start) is None for poll in polls)
    by_start = sorted(polls, key=lambda p: p.start)
    longest = 0.0
    run_start: float | None = None
    for sample in ordered:
        in_force = [
            p for p in by_start if p.start <= sample.t and (p.end is None or p.end >= sample.t)
        ]
        bound = most(sample.t)
        is_over = bool(in_force) and bound is not None and above(in_force[-1].header, bound)
        if is_over and run_start is None:
            run_start = sample.t
        elif not is_over and run_start is not None:
            longest = max(longest, sample.t - run_start)
            run_start = None
    if run_start is not None and ordered:
        longest = max(longest, ordered[-1].t - run_start)
    return {
        "header_over_capacity_polls": over,
        "header_over_capacity_longest_s": round(longest, 2),
        "polls_judged": len(polls) - unobserved,
        "polls_unobserved": unobserved,
    }


# How long after an apiserver restart an over-capacity poll is put down to it: the downtime
# (at most 8 s), the apiserver's start (about 10 s on a busy machine) and the listener's
# watch back-off until every stream has relisted (docs/soak.md, "Known").
AFTER_RESTART = 40.0


def after_restart(t: float, restarts: Iterable[float], within: float = AFTER_RESTART) -> bool:
    """Whether ``t`` falls within ``within`` seconds after one of the ``restarts``."""
    return any(0.0 <= t - r <= within for r in restarts)


# ---------------------------------------------------------------------- restarts


@dataclass(frozen=True)
class Restart:
    """A listener started again at ``at`` (monotonic) after ``cause`` (a fault kind, or
    "crash"); ``old_expiry``: when the killed listener's session ran out on the service (its
    last contact plus the lease), for a SIGKILL; ``session_at``: when the new listener's
    session was created (None: never)."""

    site: int
    cause: str
    at: float
    session_at: float | None
    old_expiry: float | None = None


def restart_figures(restarts: Sequence[Restart]) -> dict[str, float | int | None]:
    """Restart → new session (every restart), and old session's expiry → new session (after a
    SIGKILL; issue 24's goal is ≤ 3 s). A restart that never got a session counts apart."""
    to_session = [r.session_at - r.at for r in restarts if r.session_at is not None]
    after_expiry = [
        r.session_at - r.old_expiry
        for r in restarts
        if r.cause == LISTENER_SIGKILL and r.session_at is not None and r.old_expiry is not None
    ]
    return {
        "restarts": len(restarts),
        "restarts_without_session": sum(r.session_at is None for r in restarts),
        "restart_to_session_s_max": _rounded(max(to_session) if to_session else None),
        "restart_to_session_s_median": _rounded(
            statistics.median(to_session) if to_session else None
        ),
        "sigkill_expiry_to_session_s_max": _rounded(max(after_expiry) if after_expiry else None),
        "sigkill_expiry_to_session_s_median": _rounded(
            statistics.median(after_expiry) if after_expiry else None
        ),
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


# ---------------------------------------------------------------------- verdict and summary


def verdict(invariants: Mapping[str, Any]) -> tuple[bool, list[str]]:
    """``ok`` and the names of the invariants above their threshold (a missing or None value,
    e.g. no SIGKILL in the run, passes)."""
    failed = [
        name
        for name, limit in THRESHOLDS.items()
        if isinstance(invariants.get(name), int | float) and invariants[name] > limit
    ]
    return not failed, failed


def summarize(per_seed: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float] | None]:
    """Per numeric invariant: min, median and max over the seeds that have a value."""
    names: list[str] = []
    for invariants in per_seed:
        names += [n for n, v in invariants.items() if n not in names and _number(v)]
    summary: dict[str, dict[str, float] | None] = {}
    for name in names:
        values = [float(i[name]) for i in per_seed if _number(i.get(name))]
        summary[name] = (
            {
                "min": round(min(values), 2),
                "median": round(statistics.median(values), 2),
                "max": round(max(values), 2),
            }
            if values
            else None
        )
    return summary


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
