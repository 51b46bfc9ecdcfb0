"""The fault soak (``make soak``; docs/soak.md): two clusters on the real Karpenter, a seeded
job trace and a seeded schedule of faults, with invariants checked over the whole run.

``python -m tools.soak run --seed N --duration S [--out F.json]`` (or ``--seeds 1 2
3``, one after the other, each on fresh state) prints one JSON document: per seed the fault
schedule, every invariant as a number and ``ok`` against the thresholds; over several seeds a
min/median/max summary per invariant.

The world is the outcome benchmark's (tools/bench_outcomes.py): two Sites (namespaces
with their own Karpenter NodePools, kwok cloud provider, on one control plane) share one fake
Actions service and one fake HUD; each runs our listener as a real process, restarted by a
small supervisor as the kubelet would after a delay, and the runner stand-in. The listeners
reach the apiserver through a proxy (tools/counting_proxy.py) that can answer 429 as
the apiserver's priority and fairness does; everything else (the stand-in, Karpenter, the
observer) talks to the apiserver directly. The faults and the invariants are defined, purely,
in tools/soak_model.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aiohttp import web

from tools.counting_proxy import CountingProxy, proxied_kubeconfig
from tools.e2e_karpenter import (
    create_site_nodepools,
    delete_nodepools,
    ensure_karpenter,
    nodepool_name,
    reset_cloud,
)
from tools.e2e_site import Pool, Site, SiteSpec, Stage
from tools.fake_actions import FakeActions, FakeSession, JobState
from tools.fake_http import Fault as HttpFault
from tools.localcluster import LocalCluster
from tools.localcluster.karpenter import NODECLAIMS, WORKFLOW_TYPE, Karpenter
from tools.localcluster.rest import TRANSIENT, KubeError
from tools.soak_model import (
    ACTIONS_5XX,
    ACTIONS_401,
    ACTIONS_429,
    ACTIONS_SLOW,
    APISERVER_RESTART,
    APISERVER_THROTTLE,
    HUD_GARBAGE,
    HUD_OUTAGE,
    INSUFFICIENT_CAPACITY,
    KINDS,
    LISTENER_KINDS,
    LISTENER_SIGKILL,
    LISTENER_SIGTERM,
    NODE_LOSS,
    PLACEHOLDER_ROLE_LABEL,
    THRESHOLDS,
    Fault,
    JobFacts,
    Poll,
    Restart,
    Sample,
    acks_duplicated,
    after_restart,
    confirmed_capacity,
    header_over_capacity,
    job_invariants,
    over_polls,
    restart_figures,
    schedule,
    summarize,
    verdict,
)
from tools.whatif_synth import SynthSpec, generate

PAT = "ghp_e2e_fake_token"
SITE_NAMES = ("soak-a", "soak-b")
# Runner pods two to a c-2x node; workflow pods two to a 4-CPU node. Each site's workflow
# pool has its own instance type, so insufficient capacity hits one site at a time.
RUNNER_REQUESTS = {"cpu": "900m", "memory": "1Gi"}
WORKFLOW_REQUESTS = {"cpu": "1900m", "memory": "3Gi"}
SITE_TYPES: tuple[dict[str, tuple[str, ...]], ...] = (
    {"runner": ("c-2x",), "workflow": (WORKFLOW_TYPE,)},
    {"runner": ("c-2x",), "workflow": ("c-4x",)},
)
CRASH_RESTART_DELAY = 2.0  # the kubelet's first back-off after an unplanned exit, roughly
APISERVER_READY = "apiserver_ready"  # recorded beside the faults, not one of them
STOP_BUDGET = 30.0  # a SIGTERMed listener that has not exited by then is counted and killed


def _say(line: str) -> None:
    print(f"soak: {line}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Config:
    """Everything a run depends on; ``describe()`` is printed with the results."""

    duration: float = 240.0  # the fault window (arrivals and faults), seconds
    kinds: tuple[str, ...] = KINDS
    drain: float = 300.0  # after the window: wait at most this long for every job to finish
    lease: float = 30.0  # the fake's session expiry and the listener's LISTENER_SESSION_LEASE
    poll_hold: float = 50.0  # the real service holds a long poll about 50 s
    max_runners: int = 6
    proactive: int = 1  # a warm pair per site, so the header is tested while idle too
    prepare_timeout: float = 150.0
    launch_delay: tuple[float, float] = (3.0, 12.0)
    tolerance: float = 2.0  # seconds either side of a poll for the header check
    # Confirmed capacity can last under a second (a pair Running in room a finished job
    # freed, then taken): at 1 s a 0.8 s stretch of 5 went unsampled and a true header of 5
    # was judged over.
    sample_interval: float = 0.25
    hud_lag: float = 10.0
    throttle_share: float = 0.5  # share of the listeners' apiserver requests answered 429
    trace: SynthSpec = field(
        default_factory=lambda: SynthSpec(
            minutes=4,
            runs_per_minute_quiet=2.0,
            runs_per_minute_busy=4.0,
            mean_quiet_seconds=60.0,
            mean_busy_seconds=60.0,
            batch_cap=4,
            second_stage_share=0.0,
            duration_median_seconds=300.0,
            duration_sigma=0.5,
            duration_cap_seconds=900.0,
            duration_scale=0.1,
        )
    )

    def describe(self) -> dict[str, Any]:
        return {
            "duration_s": self.duration,
            "faults_enabled": list(self.kinds),
            "drain_s": self.drain,
            "session_lease_s": self.lease,
            "poll_hold_s": self.poll_hold,
            "max_runners_per_site": self.max_runners,
            "proactive_capacity": self.proactive,
            "prepare_timeout_s": self.prepare_timeout,
            "node_launch_delay_s": list(self.launch_delay),
            "header_tolerance_s": self.tolerance,
            "sample_interval_s": self.sample_interval,
            "hud_lag_s": self.hud_lag,
            "apiserver_throttle_share": self.throttle_share,
            "trace": self.trace.describe(),
            "thresholds": dict(THRESHOLDS),
            "sites": {
                name: {k: list(v) for k, v in types.items()}
                for name, types in zip(SITE_NAMES, SITE_TYPES, strict=True)
            },
        }


def arrivals(config: Config, seed: int) -> list[tuple[float, float]]:
    """(seconds after the run's start, job duration) of the seed's trace, inside the window
    (from 10 s in to 30 s before its end, so the last jobs run while faults still come)."""
    jobs = generate(replace(config.trace, minutes=max(1.0, config.duration / 60)), seed)
    found = []
    for job in jobs:
        at = 10.0 + job.queued_at - config.trace.start
        if at < config.duration - 30.0:
            found.append((round(at, 2), float(job.duration or 0.0)))
    return found


# ---------------------------------------------------------------------- the apiserver proxy


class ThrottlingProxy(CountingProxy):
    """The counting proxy, answering a share of requests 429 while ``throttled`` (as the
    apiserver's priority and fairness does: a Status body and ``Retry-After: 1``)."""

    def __init__(self, upstream: str, seed: int, share: float) -> None:
        super().__init__(upstream)
        self.throttled_until = 0.0
        self.share = share
        self.rejected = 0
        self._rng = random.Random(f"throttle-{seed}")

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if time.monotonic() < self.throttled_until and self._rng.random() < self.share:
            self.rejected += 1
            body = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": "Too many requests, please try again later.",
                "reason": "TooManyRequests",
                "details": {"retryAfterSeconds": 1},
                "code": 429,
            }
            return web.json_response(body, status=429, headers={"Retry-After": "1"})
        try:
            return await super()._forward(request)
        except (OSError, TimeoutError) as exc:  # the apiserver is down: as a load balancer
            return web.json_response({"message": str(exc)}, status=503)


# ---------------------------------------------------------------------- the supervisor


@dataclass
class Exit:
    site: int
    listener: str
    code: int
    planned: bool
    at: float
    log_tail: str = ""


class Supervisor:
    """Runs one site's listener as the kubelet would: when it exits it is started again after
    a delay (the fault's for a kill we sent, ``CRASH_RESTART_DELAY`` otherwise). Exits we did
    not cause, or a SIGTERM answered by anything but status 0, are *unplanned*."""

    def __init__(self, index: int, site: Site, start: Mapping[str, Any]) -> None:
        self.index = index
        self.site = site
        self.start_kwargs = dict(start)
        self.exits: list[Exit] = []
        # (cause, when started again, the killed listener's session after a SIGKILL)
        self.restarts: list[tuple[str, float, FakeSession | None]] = []
        self.stopping = False
        self._signalled: dict[str, tuple[str, float, float]] = {}  # name -> kind, delay, at
        self._old_session: FakeSession | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.site.start_listener(**self.start_kwargs)
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="supervisor")

    def signal(self, kind: str, delay: float) -> bool:
        listener = self.site.listener
        if listener is None or listener.returncode is not None or listener.name in self._signalled:
            return False
        assert listener.proc is not None
        self._signalled[listener.name] = (kind, delay, time.monotonic())
        # The killed listener's session lives on the service until the lease runs out after
        # its last use (kept here: its last_seen is read when the figures are computed).
        self._old_session = self.site.fake.session(self.site.scale_set_id)
        listener.proc.send_signal(signal.SIGKILL if kind == LISTENER_SIGKILL else signal.SIGTERM)
        return True

    async def _watch(self) -> None:
        while not self.stopping:
            await asyncio.sleep(0.1)
            listener = self.site.listener
            if listener is None:
                continue
            code = listener.returncode
            signalled = self._signalled.get(listener.name)
            if code is None:
                if (
                    signalled is not None
                    and signalled[0] == LISTENER_SIGTERM
                    and time.monotonic() - signalled[2] > STOP_BUDGET
                ):
                    listener.kill()  # the kubelet's grace period is over; -9 is unplanned
                continue
            if self.stopping:
                return
            planned = signalled is not None and (
                (signalled[0] == LISTENER_SIGKILL and code == -signal.SIGKILL)
                or (signalled[0] == LISTENER_SIGTERM and code == 0)
            )
            self.exits.append(
                Exit(
                    self.index,
                    listener.name,
                    code,
                    planned,
                    time.monotonic(),
                    "" if planned else listener.log_tail(30),
                )
            )
            if not planned:
                _say(f"{listener.name} exited with {code} (unplanned)")
            cause = signalled[0] if signalled else "crash"
            delay = signalled[1] if signalled else CRASH_RESTART_DELAY
            old = self._old_session if cause == LISTENER_SIGKILL else None
            await asyncio.sleep(delay)
            if self.stopping:
                return
            self.site.start_listener(**self.start_kwargs)
            self.restarts.append((cause, time.monotonic(), old))

    async def stop(self) -> list[int]:
        """Stop supervising, then SIGTERM the listener (as at the end of a rollout)."""
        self.stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        codes = []
        listener = self.site.listener
        if listener is not None and listener.returncode is None:
            code = await listener.stop(within=STOP_BUDGET)
            codes.append(code)
            if code != 0:
                self.exits.append(
                    Exit(self.index, listener.name, code, False, time.monotonic(), "final stop")
                )
        return codes


# ---------------------------------------------------------------------- one seed


@dataclass
class SeedRun:
    seed: int
    config: Config
    faults: tuple[Fault, ...]
    stage: Stage
    karpenter: Karpenter
    proxy: ThrottlingProxy
    sites: list[Site] = field(default_factory=list)
    supervisors: list[Supervisor] = field(default_factory=list)
    samples: list[list[Sample]] = field(default_factory=list)
    applied: list[dict[str, Any]] = field(default_factory=list)
    short: dict[int, float] = field(default_factory=dict)  # site -> insufficient until
    background: list[asyncio.Task[None]] = field(default_factory=list)
    origin: float = 0.0  # monotonic time of the run's t=0


async def run_seed(
    cluster: LocalCluster, karpenter: Karpenter, workdir: Path, config: Config, seed: int
) -> dict[str, Any]:
    """One seed on fresh state (new fakes, namespaces, NodePools); returns its document."""
    faults = schedule(seed, config.duration, config.kinds, lease=config.lease)
    trace = arrivals(config, seed)
    _say(f"seed {seed}: {len(trace)} jobs, {len(faults)} faults over {config.duration:g}s")
    karpenter.set_launch_delay(*config.launch_delay, seed=seed)
    fake = FakeActions(
        pats=[PAT],
        poll_hold=config.poll_hold,
        session_expiry=config.lease,
        strand_grace=config.prepare_timeout,
        assign_seed=seed,
        broker=True,
    )
    proxy = ThrottlingProxy(cluster.server, seed, config.throttle_share)
    proxy_url = await proxy.start()
    pools: list[str] = []
    started = time.monotonic()
    try:
        async with Stage(cluster, workdir / f"seed{seed}", fake=fake, prefix="soak") as stage:
            assert stage.hud is not None
            stage.hud.link(fake, lag=config.hud_lag)
            run = SeedRun(seed, config, faults, stage, karpenter, proxy)
            kubeconfig = proxied_kubeconfig(cluster, proxy_url, stage.workdir / "kubeconfig")
            for index, name in enumerate(SITE_NAMES):
                site = await stage.add_site(
                    SiteSpec(
                        name=name,
                        scale_set_id=2000 + 10 * (seed % 100) + index,
                        runner_pool=Pool(nodes=0),
                        workflow_pool=Pool(nodes=0),
                        runner_requests=RUNNER_REQUESTS,
                        workflow_requests=WORKFLOW_REQUESTS,
                        strand_after=config.prepare_timeout,
                        prepare_timeout=config.prepare_timeout,
                    )
                )
                pools += await asyncio.to_thread(
                    create_site_nodepools, karpenter, site, SITE_TYPES[index]
                )
                run.sites.append(site)
                run.samples.append([])
            for index, site in enumerate(run.sites):
                run.supervisors.append(
                    Supervisor(index, site, _listener_args(site, index, config, kubeconfig))
                )
            try:
                document = await _play(run, trace)
            finally:
                for task in run.background:
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
                for supervisor in run.supervisors:
                    with contextlib.suppress(Exception):
                        await supervisor.stop()
                await asyncio.to_thread(karpenter.set_capacity)
    finally:
        await proxy.stop()
        _say(f"seed {seed}: removing NodePools and nodes")
        with contextlib.suppress(Exception):
            await asyncio.to_thread(delete_nodepools, karpenter, pools)
    document["run_seconds"] = round(time.monotonic() - started, 1)
    return document


def _listener_args(site: Site, index: int, config: Config, kubeconfig: Path) -> dict[str, Any]:
    assert site.stage.hud is not None
    capacity = site.capacity_settings(
        proactive=config.proactive,
        hud=True,
        demand={"cluster_index": index, "cluster_count": len(SITE_NAMES)},
        placeholder_ready_timeout="60s",  # a pair waits for Karpenter's node
    )
    return {
        "capacity": capacity,
        "max_runners": config.max_runners,
        "log_level": "info",
        "kubeconfig": kubeconfig,
        "env": {"LISTENER_SESSION_LEASE": f"{config.lease:g}"},
    }


async def _play(run: SeedRun, trace: Sequence[tuple[float, float]]) -> dict[str, Any]:
    config = run.config
    origin = run.origin = time.monotonic()
    for supervisor in run.supervisors:
        supervisor.start()
    sampler = asyncio.get_running_loop().create_task(_sample_forever(run), name="sampler")
    run.background.append(sampler)
    events: list[tuple[float, int, Fault | tuple[float, float]]] = [(a[0], 0, a) for a in trace]
    events += [(f.at, 1, f) for f in run.faults]
    events.sort(key=lambda e: (e[0], e[1]))
    jobs_added = 0
    said = -1
    while True:
        now = time.monotonic() - origin
        while events and events[0][0] <= now:
            _, _, item = events.pop(0)
            if isinstance(item, Fault):
                await _apply(run, item, now)
            else:
                run.stage.fake.add_jobs(1, labels=["linux"], duration=item[1])
                jobs_added += 1
        await _expire_lasting(run)
        if now >= config.duration and not events:
            break
        if int(now) // 30 != said:
            said = int(now) // 30
            done = sum(j.state is JobState.COMPLETED for j in run.stage.fake.jobs.values())
            _say(f"t={now:5.0f}s: {jobs_added} jobs queued, {done} done")
        await asyncio.sleep(0.5)
    # The window is over: every fault off, then the trace drains.
    _say(f"t={time.monotonic() - origin:5.0f}s: faults over, draining")
    run.stage.fake.clear_faults()
    assert run.stage.hud is not None
    run.stage.hud.clear_outage()
    run.proxy.throttled_until = 0.0
    run.short.clear()
    await asyncio.to_thread(run.karpenter.set_capacity)
    for task in list(run.background):
        if task.get_name() == "apiserver-restart":
            with contextlib.suppress(Exception):
                await task  # the apiserver must be back before the drain
        elif task is not sampler:
            task.cancel()  # a HUD outage's end: already cleared
    fake = run.stage.fake
    deadline = time.monotonic() + config.drain
    while time.monotonic() < deadline:
        # Also until every site's listener holds a session again: a listener restarted after
        # a late SIGKILL waits out the old session's lease, and is stopped only once it has
        # taken over (adopted or swept its predecessor's placeholders), as in a steady state.
        if all(j.state is JobState.COMPLETED for j in fake.jobs.values()) and all(
            fake.session(site.scale_set_id) is not None for site in run.sites
        ):
            break
        await asyncio.sleep(1.0)
    drained_after = round(time.monotonic() - origin - config.duration, 1)
    # The end: the listeners stop as in a rollout; what they leave behind is leaked.
    for supervisor in run.supervisors:
        await supervisor.stop()
    sampler.cancel()
    with contextlib.suppress(BaseException):
        await sampler
    leaked, unowned = await _placeholders_left(run)
    sessions_leaked = sum(fake.session(site.scale_set_id) is not None for site in run.sites)
    return _document(run, drained_after, leaked, unowned, sessions_leaked)


async def _apply(run: SeedRun, fault: Fault, now: float) -> None:
    """Apply one fault; what happened is recorded beside the schedule."""
    stage, fake = run.stage, run.stage.fake
    assert stage.hud is not None
    note = "applied"
    kind = fault.kind
    if kind in LISTENER_KINDS:
        assert fault.site is not None
        if not run.supervisors[fault.site].signal(kind, fault.seconds):
            note = "skipped: no running listener"
    elif kind == NODE_LOSS:
        assert fault.site is not None
        note = await asyncio.to_thread(_lose_node, run, fault)
    elif kind == INSUFFICIENT_CAPACITY:
        assert fault.site is not None
        run.short[fault.site] = time.monotonic() + fault.seconds
        await asyncio.to_thread(_write_capacity, run)
    elif kind == APISERVER_RESTART:
        if not stage.cluster.components:
            note = "skipped: the control plane was not started by this process"
        else:
            run.background.append(
                asyncio.get_running_loop().create_task(
                    _restart_apiserver(run, fault.seconds), name="apiserver-restart"
                )
            )
    elif kind == APISERVER_THROTTLE:
        run.proxy.throttled_until = time.monotonic() + fault.seconds
    elif kind in (ACTIONS_5XX, ACTIONS_429, ACTIONS_401, ACTIONS_SLOW):
        fake.inject(fault.target, _http_fault(fault), fault.count)
    elif kind in (HUD_OUTAGE, HUD_GARBAGE):
        stage.hud.outage("5xx" if kind == HUD_OUTAGE else "garbage")
        run.background.append(
            asyncio.get_running_loop().create_task(_clear_hud_after(run, fault.seconds))
        )
    run.applied.append({"t": round(now, 1), "kind": kind, "site": fault.site, "note": note})
    _say(f"t={now:5.0f}s: {kind} site={fault.site} {fault.target} {note}")


def _http_fault(fault: Fault) -> HttpFault:
    if fault.kind == ACTIONS_5XX:
        return HttpFault.server_error(503)
    if fault.kind == ACTIONS_429:
        return HttpFault.rate_limited(1)
    if fault.kind == ACTIONS_401:
        return HttpFault.unauthorized()
    return HttpFault.slow(fault.seconds)


async def _clear_hud_after(run: SeedRun, seconds: float) -> None:
    await asyncio.sleep(seconds)
    assert run.stage.hud is not None
    run.stage.hud.clear_outage()


async def _restart_apiserver(run: SeedRun, downtime: float) -> None:
    from tools.capacity_kit import restart_apiserver

    await restart_apiserver(run.stage.cluster, downtime)
    # The allowance after a restart (docs/soak.md, "Known") runs from here as well as from
    # the stop: on a loaded machine the apiserver can take 10 s or more to be ready again.
    now = round(time.monotonic() - run.origin, 1)
    run.applied.append({"t": now, "kind": APISERVER_READY, "site": None, "note": "ready again"})
    _say(f"t={now:5.0f}s: {APISERVER_READY}")


async def _expire_lasting(run: SeedRun) -> None:
    now = time.monotonic()
    ended = [s for s, until in run.short.items() if until <= now]
    if ended:
        for site in ended:
            del run.short[site]
        await asyncio.to_thread(_write_capacity, run)


def _write_capacity(run: SeedRun) -> None:
    run.karpenter.set_capacity(
        insufficient=[t for s in run.short for t in SITE_TYPES[s]["workflow"]]
    )


def _lose_node(run: SeedRun, fault: Fault) -> str:
    """A node of the site's pool disappears at once, as a reclaimed spot instance does: its
    pods are deleted without grace, then its NodeClaim (Karpenter removes the node)."""
    assert fault.site is not None
    site = run.sites[fault.site]
    rest = site.stage.cluster.rest
    try:
        claims = [
            c
            for c in run.karpenter.nodeclaims(nodepool_name(site, fault.target))
            if (c.get("status") or {}).get("nodeName")
        ]
        if not claims:
            return f"skipped: no {fault.target} node"
        claim = random.Random(f"{run.seed}-{fault.at}").choice(
            sorted(claims, key=lambda c: c["metadata"]["name"])
        )
        node = claim["status"]["nodeName"]
        pods = rest.request(
            "GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={node}"}
        )
        for pod in pods.get("items", []):
            meta = pod["metadata"]
            with contextlib.suppress(KubeError):
                rest.request(
                    "DELETE",
                    f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                    {"gracePeriodSeconds": 0},
                )
        rest.request("DELETE", f"{NODECLAIMS}/{claim['metadata']['name']}")
        return f"lost {node} ({len(pods.get('items', []))} pods)"
    except TRANSIENT as exc:
        return f"failed: {type(exc).__name__}: {exc}"


async def _sample_forever(run: SeedRun) -> None:
    """Confirmed capacity of every site, listed from the apiserver (directly, not through the
    throttling proxy) every ``sample_interval`` seconds; a failed list is a missed sample."""
    rest = run.stage.cluster.rest
    while True:
        for index, site in enumerate(run.sites):
            with contextlib.suppress(*TRANSIENT):
                asked = time.monotonic()
                pods = await asyncio.to_thread(
                    rest.request, "GET", f"/api/v1/namespaces/{site.namespace}/pods"
                )
                # The list shows the state at some moment between asking and the answer.
                run.samples[index].append(
                    Sample(
                        (asked + time.monotonic()) / 2,
                        confirmed_capacity(pods.get("items", []), run.config.max_runners),
                    )
                )
        await asyncio.sleep(run.config.sample_interval)


async def _placeholders_left(run: SeedRun) -> tuple[int, int]:
    """Placeholders still there 15 s after the listeners stopped (terminating ones that are
    gone by then are not leaked), and placeholders without an owner reference at that time."""
    rest = run.stage.cluster.rest
    leaked = unowned = 0
    for attempt in range(16):
        leaked = unowned = 0
        for site in run.sites:
            with contextlib.suppress(*TRANSIENT):
                found = await asyncio.to_thread(
                    rest.request,
                    "GET",
                    f"/api/v1/namespaces/{site.namespace}/pods",
                    params={"labelSelector": PLACEHOLDER_ROLE_LABEL},
                )
                items = found.get("items", [])
                leaked += len(items)
                unowned += sum(not p["metadata"].get("ownerReferences") for p in items)
        if leaked == 0 or attempt == 15:
            break
        await asyncio.sleep(1.0)
    return leaked, unowned


def _restart_times(applied: Sequence[Mapping[str, Any]]) -> list[float]:
    """When each allowance for the header after an apiserver restart starts (docs/soak.md,
    "Known"): at the stop and again once the apiserver is ready (runs recorded before
    ``apiserver_ready`` existed have the stops only)."""
    return [a["t"] for a in applied if a["kind"] in (APISERVER_RESTART, APISERVER_READY)]


def _document(
    run: SeedRun, drained_after: float, leaked: int, unowned: int, sessions_leaked: int
) -> dict[str, Any]:
    fake = run.stage.fake
    runners: dict[int, list[str]] = {}
    for request_id, runner in fake.claims:
        runners.setdefault(request_id, []).append(runner)
    facts = [
        JobFacts(
            job.job_id,
            tuple(str(state) for _, state in job.history),
            tuple(runners.get(job.runner_request_id, ())),
            job.result,
            job.failure,
        )
        for job in fake.jobs.values()
    ]
    invariants: dict[str, Any] = job_invariants(facts)
    invariants["acks_duplicated"] = acks_duplicated(fake.acks)
    header: dict[str, float] = {}
    per_site_header: list[dict[str, Any]] = []
    restarts_at = _restart_times(run.applied)
    for index, site in enumerate(run.sites):
        polls = [
            Poll(p.monotonic, p.ended, p.capacity)
            for p in fake.polls
            if p.scale_set_id == site.scale_set_id
        ]
        figures = header_over_capacity(polls, run.samples[index], run.config.tolerance)
        over = [
            (round(t - run.origin, 2), h, c)
            for t, h, c in over_polls(polls, run.samples[index], run.config.tolerance)
        ]
        unexplained = [o for o in over if not after_restart(o[0], restarts_at)]
        per_site_header.append(
            {
                **figures,
                # [t since the start, header, largest confirmed capacity within tolerance]
                "over": [list(o) for o in over[:20]],
                "over_not_after_apiserver_restart": len(unexplained),
            }
        )
        for name, value in figures.items():
            header[name] = (
                max(header.get(name, 0.0), value)
                if name.endswith("longest_s")
                else int(header.get(name, 0) + value)  # a count, summed over the sites
            )
    invariants.update(header)
    invariants["header_over_capacity_polls_not_after_apiserver_restart"] = sum(
        int(h["over_not_after_apiserver_restart"]) for h in per_site_header
    )
    invariants["placeholders_leaked"] = leaked + unowned
    invariants["sessions_leaked"] = sessions_leaked
    exits = [e for s in run.supervisors for e in s.exits]
    invariants["listener_exits"] = len(exits)
    invariants["unplanned_exits"] = sum(not e.planned for e in exits)
    restarts = []
    for supervisor in run.supervisors:
        scale_set = supervisor.site.scale_set_id
        for cause, at, old in supervisor.restarts:
            old_expiry = None if old is None else old.last_seen + run.config.lease
            created = [
                s.created
                for s in fake.session_log
                if s.scale_set_id == scale_set and s.created >= at
            ]
            restarts.append(
                Restart(supervisor.index, cause, at, min(created, default=None), old_expiry)
            )
    invariants.update(restart_figures(restarts))
    invariants["apiserver_requests_throttled"] = run.proxy.rejected
    ok, failed = verdict(invariants)
    return {
        "seed": run.seed,
        "ok": ok,
        "failed": failed,
        "invariants": invariants,
        "schedule": [f.as_dict() for f in run.faults],
        "applied": run.applied,
        "drained_s_after_window": drained_after,
        "header_per_site": per_site_header,
        "unplanned": [
            {"site": e.site, "listener": e.listener, "code": e.code, "log_tail": e.log_tail}
            for e in exits
            if not e.planned
        ],
        "samples": [len(s) for s in run.samples],
    }


# ---------------------------------------------------------------------- several seeds


async def soak(
    cluster: LocalCluster,
    workdir: Path,
    config: Config,
    seeds: Sequence[int],
    out: Path | None = None,
) -> dict[str, Any]:
    """Every seed one after the other, each on fresh state; one document (also written to
    ``out`` after every seed, so a long run that fails later keeps what it measured)."""
    karpenter = await asyncio.to_thread(ensure_karpenter, cluster, _say)
    karpenter.set_registration_delay("0s")  # the launch delay replaces it
    started = time.monotonic()
    results: dict[str, Any] = {}

    def document() -> dict[str, Any]:
        return {
            "config": config.describe(),
            "seeds": results,
            "summary": summarize(
                [r["invariants"] for r in results.values() if "environment_failed" not in r]
            ),
            "ok": all(r["ok"] for r in results.values()),
            "run_seconds": round(time.monotonic() - started, 1),
            "load_average_end": list(os.getloadavg()),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }

    try:
        for seed in seeds:
            result = results[str(seed)] = await run_seed(cluster, karpenter, workdir, config, seed)
            # A control-plane process that exited (kube-scheduler has, after an apiserver
            # restart) is not restarted here as a kubelet would: the seed measured a broken
            # cluster, not the listener, and so would every later one.
            dead = [c.name for c in cluster.components if c.proc and c.proc.poll() is not None]
            if dead:
                result["environment_failed"] = dead
                result["ok"] = False
                result["failed"] = [*result["failed"], "environment"]
            _say(f"seed {seed}: ok={result['ok']} {result['failed']}")
            if out is not None:
                text = json.dumps(document(), indent=1) + "\n"
                await asyncio.to_thread(out.write_text, text)
            if dead:
                _say(f"control-plane process(es) exited: {', '.join(dead)}; stopping")
                break
    finally:
        await asyncio.to_thread(reset_cloud, karpenter)
    return document()


def merge(
    documents: Sequence[Mapping[str, Any]], broken: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Several runs (e.g. two soaks run side by side over different seeds) as one document:
    the seeds together, the summary and ``ok`` computed again, each run's configuration kept.
    A seed recorded before the count of over-capacity polls not after an apiserver restart
    existed gets it from its own ``over`` lists and fault log, by the same rule. ``broken``:
    seed -> why its cluster broke (as ``environment_failed`` records it in later runs); such
    seeds are kept, marked, and left out of the summary."""
    seeds: dict[str, Any] = {}
    for document in documents:
        for seed, run in document["seeds"].items():
            invariants = run["invariants"]
            name = "header_over_capacity_polls_not_after_apiserver_restart"
            if name not in invariants:
                restarts = _restart_times(run["applied"])
                invariants[name] = sum(
                    not after_restart(over[0], restarts)
                    for site in run["header_per_site"]
                    for over in site["over"]
                )
            if seed in (broken or {}):
                run["environment_failed"] = [(broken or {})[seed]]
            seeds[seed] = run
    valid = [run for run in seeds.values() if "environment_failed" not in run]
    return {
        # A merged document may be merged again: it carries its parts' configs and times.
        "configs": [
            config
            for document in documents
            for config in document.get("configs", [document.get("config")])
        ],
        "seeds": dict(sorted(seeds.items(), key=lambda item: int(item[0]))),
        "summary": summarize([run["invariants"] for run in valid]),
        "seeds_summarized": len(valid),
        "environment_failed": {
            seed: run["environment_failed"]
            for seed, run in seeds.items()
            if "environment_failed" in run
        },
        "ok": all(run["ok"] for run in seeds.values()),
        "failed_by_seed": {seed: run["failed"] for seed, run in seeds.items() if run["failed"]},
        "run_seconds": [
            seconds
            for document in documents
            for seconds in (
                document["run_seconds"]
                if isinstance(document["run_seconds"], list)
                else [document["run_seconds"]]
            )
        ],
        "date": max(document["date"] for document in documents),
    }


def main(argv: list[str] | None = None) -> int:
    from tools.control_plane import local_control_plane, new_workdir

    parser = argparse.ArgumentParser(prog="python -m tools.soak")
    sub = parser.add_subparsers(dest="command", required=True)
    run_cmd = sub.add_parser("run", help="run the soak; prints one JSON document")
    run_cmd.add_argument("--seed", type=int, default=None)
    run_cmd.add_argument("--seeds", type=int, nargs="+", default=None)
    run_cmd.add_argument("--duration", type=float, default=Config.duration)
    run_cmd.add_argument("--faults", nargs="+", default=list(KINDS), help="kinds to inject")
    run_cmd.add_argument("--no-faults", nargs="*", default=[], help="kinds to leave out")
    run_cmd.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    run_cmd.add_argument("--workdir", type=Path, default=None)
    merge_cmd = sub.add_parser("merge", help="one document from several runs' JSON files")
    merge_cmd.add_argument("json", type=Path, nargs="+")
    merge_cmd.add_argument("--out", type=Path, default=None)
    merge_cmd.add_argument(
        "--broken",
        nargs="*",
        default=[],
        metavar="SEED=WHY",
        help="seeds whose cluster broke (kept, marked, left out of the summary)",
    )
    args = parser.parse_args(argv)
    if args.command == "merge":
        broken = dict(item.partition("=")[::2] for item in args.broken)
        merged = merge([json.loads(path.read_text()) for path in args.json], broken)
        text = json.dumps(merged, indent=1)
        if args.out is not None:
            args.out.write_text(text + "\n")
        with contextlib.suppress(BrokenPipeError):
            print(text)
        return 0 if merged["ok"] else 1
    # A shell starts background jobs with SIGINT ignored; a long soak must still stop
    # cleanly on it (the clusters' processes and NodePools are removed on the way out).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    seeds = args.seeds or [args.seed if args.seed is not None else 1]
    kinds = tuple(k for k in args.faults if k not in set(args.no_faults))
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"--faults: unknown kind(s) {', '.join(unknown)}; known: {', '.join(KINDS)}")
    config = Config(duration=args.duration, kinds=kinds)
    workdir = args.workdir or new_workdir("capacity-listener-soak")

    async def go() -> dict[str, Any]:
        with local_control_plane(workdir / "cluster", progress=_say) as cluster:
            return await soak(cluster, workdir, config, seeds, args.out)

    document = asyncio.run(go())
    with contextlib.suppress(BrokenPipeError):
        print(json.dumps(document, indent=1))
    return 0 if document["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
