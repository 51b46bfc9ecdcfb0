"""Composition root: the only place that builds and wires the parts.

Start-up follows ARC's order where it matters (config → logging → session → static metrics →
loop), with two deliberate changes: the Kubernetes client is built *before* the session, so a
pod that cannot reach the apiserver does not leave a session behind, and a 409 session
conflict is waited out for a bounded time instead of crash-looping.

Shutdown (SIGTERM from the kubelet, or SIGINT): the loop finishes the message it is handling,
the capacity monitor and the HTTP server stop, then the session is deleted with its own short
deadline. A change of the mounted capacity settings stops it the same way
(listener/settings_watch.py), so ARC's controller recreates it with them. An unexpected error
in any task ends the TaskGroup; the session is still deleted and
the process exits non-zero so the controller recreates the pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from base import kube as kube_mod
from base.exposition import Registry, new_registry
from base.http.client import Client, make_client, product_user_agent
from base.kube import KubeError
from base.tasks import INTERRUPTED, run_until
from listener import github_auth, http, signals
from listener.actions import ActionsClient, service_generation
from listener.advertised import AdvertisedCapacity
from listener.config import Config
from listener.logs import configure_logging, register_secret
from listener.loop import Listener
from listener.metrics import ListenerMetrics, PatchMetrics, RunnerGroupMetrics
from listener.runner_group import check_runner_group
from listener.scaler import KubePatcher, PatchRetry, Scaler
from listener.server import Health, build_app, serve
from listener.settings_watch import wait_for_change
from listener.shutdown import ShutdownBudget
from listener.startup import (
    Options,
    load_config,
    owner_name,
    register_secrets,
    same_port,
)

if TYPE_CHECKING:
    from capacity.demand import GitHubReaderFactory
    from capacity.settings import CapacitySettings

# The capacity package is imported only when capacity-awareness is configured: its settings
# bring pydantic and pydantic-settings (~11 MiB of RSS), which a stock listener never needs.

log = logging.getLogger("listener")

T = TypeVar("T")


async def _guard(name: str, work: Awaitable[None], stop: asyncio.Event) -> None:
    """Run a root task; when it ends for any reason, stop the others."""
    try:
        await work
    finally:
        if not stop.is_set():
            log.info("task ended, stopping", extra={"task": name})
        stop.set()


async def run(env: Mapping[str, str], stop: asyncio.Event) -> None:
    """Run the listener until ``stop`` is set or something fails."""
    # In a worker thread: with an Azure Key Vault the config read is a (blocking) network call.
    cfg = await asyncio.to_thread(load_config, env)
    options = Options.from_env(env)
    configure_logging(cfg.log_level, cfg.log_format)
    register_secrets(cfg)
    capacity_settings = _capacity_settings(env)
    if stop.is_set():
        # SIGTERM during start-up (the pod was deleted right after it was created): the
        # configuration has been checked, nothing exists yet that would need cleaning up.
        log.info("stop requested during start-up; exiting")
        return

    registry = new_registry()
    metrics = (
        ListenerMetrics(
            registry,
            cfg.metrics,
            target=cfg.target,
            scale_set_name=cfg.ephemeral_runner_set_name,
            scale_set_namespace=cfg.ephemeral_runner_set_namespace,
        )
        if cfg.metrics_addr
        else None
    )
    health = Health()
    # Liveness must not kill the pod while it waits out a 409 session conflict or re-checks
    # a scale set answered 404 (at start-up, or when a session has to be created again).
    waits = options.session_conflict_timeout + options.scale_set_gone_timeout
    health.add("poll", max_age=180.0, live_max_age=waits + 3 * 180.0)
    # With the monitor on, nothing is confirmed until its first pass: advertise 0, not
    # max_runners, so a restart never opens the gate to capacity nobody has checked.
    advertised = AdvertisedCapacity(
        cfg.max_runners, confirmed=0 if capacity_settings is not None else None
    )

    async with contextlib.AsyncExitStack() as stack:
        kube = await stack.enter_async_context(kube_mod.connect(env))
        client = await stack.enter_async_context(
            make_client(
                root_ca_pem=cfg.server_root_ca,
                user_agent=http.user_agent(
                    cfg.runner_scale_set_id, arc_version=env.get("LISTENER_ARC_VERSION", "")
                ),
            )
        )
        # Every token obtained later (installation, registration, admin, queue) is masked too.
        auth = github_auth.GitHubAuth(
            client, target=cfg.target, credentials=cfg.credentials, on_secret=register_secret
        )
        actions = ActionsClient(
            client, auth, scale_set_id=cfg.runner_scale_set_id, on_secret=register_secret
        )
        github_demand = None
        hud_client = None
        runner_group_check: Callable[[int], Awaitable[object]] | None = None
        if capacity_settings is not None:
            from capacity.github_demand import GitHubScope, reader_factory, repositories_for

            # The GitHub demand source reads GitHub with this listener's client and credentials.
            scope = GitHubScope(auth.api_url, cfg.target.organization, cfg.target.repository)
            if capacity_settings.demand_source == "github":
                repositories_for(capacity_settings.github, scope)  # a bad scope fails at start-up
            github_demand = reader_factory(client=client, token=auth.api_token, scope=scope)
            group_metrics = (
                RunnerGroupMetrics(
                    registry,
                    name=cfg.ephemeral_runner_set_name,
                    namespace=cfg.ephemeral_runner_set_namespace,
                )
                if metrics is not None
                else None
            )
            report = group_metrics.report if group_metrics is not None else None

            async def runner_group_check(group_id: int) -> object:
                return await check_runner_group(
                    client,
                    api_url=auth.api_url,
                    token=auth.api_token,
                    target=cfg.target,
                    group_id=group_id,
                    report=report or (lambda _allowed: None),
                )

            # HUD and the webhook receiver are read through the same proxy rules as GitHub
            # (Go's NO_PROXY semantics), with the system trust store: the GHES root CA is
            # neither's.
            if capacity_settings.demand_source in ("hud", "webhook"):
                hud_client = await stack.enter_async_context(
                    make_client(user_agent=product_user_agent())
                )
        budget = ShutdownBudget(grace=options.shutdown_grace)
        parts = _Parts(
            cfg,
            options,
            env,
            kube,
            actions,
            advertised,
            registry,
            metrics,
            health,
            budget,
            github_demand,
            hud_client,
            runner_group_check,
        )
        async with asyncio.TaskGroup() as tg:
            tg.create_task(_note_stop(stop, budget))
            # Probes and metrics come up first, so the kubelet sees a live process while the
            # session is being created (which may wait out a 409 for minutes).
            if cfg.metrics_addr:
                metrics_app = build_app(
                    registry=registry, metrics_endpoint=cfg.metrics_endpoint, health=health
                )
                tg.create_task(_guard("metrics", serve(metrics_app, cfg.metrics_addr, stop), stop))
            if options.probe_addr and not same_port(options.probe_addr, cfg.metrics_addr):
                probe_app = build_app(registry=None, metrics_endpoint="", health=health)
                tg.create_task(_guard("probes", serve(probe_app, options.probe_addr, stop), stop))
            tg.create_task(_guard("listener", _listen(parts, capacity_settings, stop), stop))
            if options.settings_check_interval > 0:
                watch = _settings_watch(env, capacity_settings, options.settings_check_interval)
                if watch is not None:
                    tg.create_task(_guard("settings", _until(watch, stop), stop))


class _PatchReport:
    """The scaler's patch trouble, shown in readiness and (with metrics on) on the page."""

    CONDITION = "kubernetes"

    def __init__(self, health: Health, metrics: PatchMetrics | None) -> None:
        self._health = health
        self._metrics = metrics

    def patch_failed(self, error: KubeError) -> None:
        self._health.set_failing(self.CONDITION, str(error))
        if self._metrics is not None:
            self._metrics.patch_failed()

    def patch_pending(self, pending: bool) -> None:
        if not pending:
            self._health.set_failing(self.CONDITION, None)
        if self._metrics is not None:
            self._metrics.patch_pending(pending)


@dataclass(frozen=True)
class _Parts:
    cfg: Config
    options: Options
    env: Mapping[str, str]
    kube: kube_mod.Kube
    actions: ActionsClient
    advertised: AdvertisedCapacity
    registry: Registry
    metrics: ListenerMetrics | None
    health: Health
    budget: ShutdownBudget
    github_demand: GitHubReaderFactory | None = None
    hud_client: Client | None = None
    # Reads the scale set's runner group (by id) and reports what it keeps out.
    runner_group_check: Callable[[int], Awaitable[object]] | None = None


class _CriticalPath:
    """Where the loop reports each header sent and each job assigned: the capacity monitor's
    recorders once it exists (its rise → assignment histogram), nothing before or without."""

    def __init__(self) -> None:
        self.header_sent: Callable[[int], None] = lambda value: None
        self.job_assigned: Callable[[float | None], None] = lambda queued_at: None


async def _listen(
    p: _Parts, capacity_settings: CapacitySettings | None, stop: asyncio.Event
) -> None:
    """Session → loop (+ monitor) → session deleted, whatever happens."""
    cfg = p.cfg
    # A SIGTERM during a long 409 wait ends the wait: no session, nothing to delete.
    session = await run_until(
        p.actions.create_session(
            owner_name(),
            conflict_timeout=p.options.session_conflict_timeout,
            lease=p.options.session_lease,
            gone_timeout=p.options.scale_set_gone_timeout,
        ),
        stop.wait(),
    )
    if session is INTERRUPTED:
        return
    log.info(
        "session created",
        extra={
            "session_id": session.session_id,
            "service": service_generation(session.message_queue_url),
        },
    )
    try:
        if p.metrics is not None:
            p.metrics.record_static(cfg.min_runners, cfg.max_runners)
        patch_metrics = (
            PatchMetrics(
                p.registry,
                name=cfg.ephemeral_runner_set_name,
                namespace=cfg.ephemeral_runner_set_namespace,
            )
            if p.metrics is not None
            else None
        )
        scaler = Scaler(
            min_runners=cfg.min_runners,
            max_runners=cfg.max_runners,
            patcher=KubePatcher(
                p.kube,
                namespace=cfg.ephemeral_runner_set_namespace,
                runner_set_name=cfg.ephemeral_runner_set_name,
            ),
            retry=PatchRetry(outage_budget=p.options.kube_outage_timeout),
            state=_PatchReport(p.health, patch_metrics),
        )
        # The monitor starts after the loop; until then the loop's reports go nowhere.
        critical = _CriticalPath()
        loop = Listener(
            session=p.actions,
            scaler=scaler,
            capacity=p.advertised,
            metrics=p.metrics,
            on_poll=lambda: p.health.mark("poll", time.monotonic()),
            on_header=lambda value: critical.header_sent(value),
            on_job_assigned=lambda queued_at: critical.job_assigned(queued_at),
            reissue_interval=p.options.reissue_interval,
        )
        async with asyncio.TaskGroup() as tg:
            tg.create_task(_guard("loop", loop.run(session, stop), stop))
            # Re-applies a runner-set patch that failed transiently, until stopping; ends the
            # process only when the apiserver stays unusable past LISTENER_KUBE_OUTAGE_TIMEOUT.
            tg.create_task(run_until(scaler.run(), stop.wait()), name="patch-retry")
            if capacity_settings is not None:
                from capacity.monitor import CapacityMonitor

                scale_set = await p.actions.get_scale_set(cfg.runner_scale_set_id)
                if p.runner_group_check is not None:
                    tg.create_task(
                        run_until(p.runner_group_check(scale_set.runner_group_id), stop.wait()),
                        name="runner-group",
                    )
                p.health.add(
                    "reconcile", max_age=max(180.0, 6 * capacity_settings.recalculate_interval)
                )
                monitor = CapacityMonitor(
                    settings=capacity_settings,
                    kube=p.kube,
                    runner_namespace=cfg.ephemeral_runner_set_namespace,
                    runner_set_name=cfg.ephemeral_runner_set_name,
                    scale_set_name=cfg.runner_scale_set_name,
                    runner_labels=scale_set.labels,
                    max_runners=lambda: p.advertised.max_runners,
                    set_max_capacity=p.advertised.set_max_capacity,
                    registry=p.registry,
                    on_reconcile=lambda: p.health.mark("reconcile", time.monotonic()),
                    github_demand=p.github_demand,
                    hud_client=p.hud_client,
                )
                critical.header_sent, critical.job_assigned = (
                    monitor.header_sent,
                    monitor.job_assigned,
                )
                tg.create_task(
                    _guard(
                        "capacity",
                        monitor.run(
                            stop, cleanup_budget=lambda: p.budget.placeholders(time.monotonic())
                        ),
                        stop,
                    )
                )
    finally:
        # Runs on success, on error and on cancellation: a session left behind makes the
        # next pod wait for its expiry (409).
        p.budget.begin(time.monotonic())  # also when the loop ended by itself (an error)
        try:
            async with asyncio.timeout(p.budget.session_delete(time.monotonic())):
                await p.actions.delete_session()
        except Exception as exc:  # logged, as ARC does: the process is ending anyway
            log.warning("could not delete the session", extra={"error": str(exc)})
        else:
            log.info("session deleted")


async def _note_stop(stop: asyncio.Event, budget: ShutdownBudget) -> None:
    """Start the shutdown clock the moment ``stop`` is set, whatever set it."""
    await stop.wait()
    budget.begin(time.monotonic())


def _capacity_settings(env: Mapping[str, str]) -> CapacitySettings | None:
    """The monitor's settings, or None when capacity-awareness is off (ARC's behaviour)."""
    if not any(name.upper().startswith("CAPACITY_") for name in env):
        return None  # nothing configured, so off (the default), without importing pydantic
    from capacity.settings import load_capacity_settings

    settings = load_capacity_settings(env)
    return settings if settings.enabled else None


async def _until(work: Awaitable[object], stop: asyncio.Event) -> None:
    """``work`` until it ends or ``stop`` is set, whichever comes first."""
    await run_until(work, stop.wait())


def _settings_watch(
    env: Mapping[str, str], running: CapacitySettings | None, interval: float
) -> Awaitable[CapacitySettings] | None:
    """Ends once the settings file holds other valid settings (listener/settings_watch.py):
    the listener then stops and ARC's controller recreates it, which reads them. None
    without a settings file (environment variables do not change under a running pod).
    ``running``: the settings in force, None when the monitor is off (they are read again,
    switched-off settings being a baseline too)."""
    path = env.get("CAPACITY_CONFIG_FILE", "").strip()
    if not path:
        return None  # also keeps pydantic out of a stock listener
    from capacity.settings import load_capacity_settings

    if running is None:
        running = load_capacity_settings(env)
    return wait_for_change(
        Path(path), running, lambda: load_capacity_settings(env), interval=interval
    )


async def main(env: Mapping[str, str]) -> None:
    """Route the stop signals to the event loop (one received earlier stops at once), run."""
    stop = asyncio.Event()
    signals.attach(asyncio.get_running_loop(), stop.set)
    await run(env, stop)
