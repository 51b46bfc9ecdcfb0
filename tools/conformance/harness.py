"""Run one listener process against a scripted fake and reduce what it did to comparable text.

A run starts a fresh :class:`~tools.fake_actions.FakeActions` (GHES-style GitHub plus
the Actions service) and a tiny fake Kubernetes API, scripts the fake for the scenario, starts
the listener process with a config.json pointing at them, and waits until either the process
exits on its own or the scenario is played out (script used up, a poll held). Then it sends
SIGTERM, waits for the exit, and keeps:

* the exchange: every request either fake saw, in arrival order, normalized so two runs can
  be compared line by line (method, route, query keys and the values that matter, the headers
  that matter, the body with run-specific values replaced, the status answered, and for a
  retry after an injected fault the wait in whole seconds);
* the scaler calls: for the reference, what its recording scaler reported; for our listener,
  the Kubernetes patches it sent, read back as the calls ARC's scaler would have made (an
  EphemeralRunnerSet patch is a desired-count call with its target; a status patch is a
  JobStarted call; JobCompleted makes no Kubernetes call in ARC, so it is not compared);
* the User-Agent values, compared on their own (they differ on purpose, see the table);
* the end: exit status, whether it stopped by itself or needed SIGTERM, whether a session was
  left on the service.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from tools.fake_actions import FakeActions
from tools.fake_http import LoopbackServer, json_response
from tools.listener_process import LISTENER_COMMAND, ListenerProcess, listener_config

PAT = "ghp_conformance_pat"
SCALE_SET_ID = 7
NAMESPACE = "arc-runners"
RUNNER_SET = "linux-abcde"
# Long enough that an unscripted poll is clearly "held", short enough to end a stuck run.
POLL_HOLD = 45.0
EXIT_TIMEOUT = 45.0

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_HEADERS = ("Content-Type", "Accept", "X-ScaleSetMaxCapacity")


@dataclass(frozen=True)
class Scenario:
    """A scripted situation both listeners are put through."""

    name: str
    about: str
    script: Callable[[FakeActions], None]
    fake_options: Mapping[str, Any] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)
    # Environment for both listeners (the reference ignores the LISTENER_* it does not know).
    env: Mapping[str, str] = field(default_factory=dict)
    # Seconds the whole scenario may take before the harness stops the process anyway.
    budget: float = 90.0
    # The service generations it runs against (tools/fake_actions.py): "pipelines" (the
    # ARC-era service, explicit acquire possible) and "broker" (GitHub.com today: /rest URLs,
    # the queue named by its token, no acquire endpoint). See ``scenarios.RUNS``.
    modes: tuple[str, ...] = ("pipelines", "broker")


@dataclass
class Run:
    """What one listener did in one scenario."""

    exchange: list[str]
    user_agents: list[str]
    exit_code: int
    needed_sigterm: bool
    session_left: bool
    seconds: float
    output: str

    def aspects(self) -> dict[str, str]:
        """Comparable facts, by aspect name (the keys the differences table refers to)."""
        return {
            "exchange": "\n".join(self.exchange),
            "user_agent": "\n".join(self.user_agents),
            "exit": str(self.exit_code),
            "ending": "SIGTERM" if self.needed_sigterm else "by itself",
            "session": "left on the service" if self.session_left else "deleted",
        }


@dataclass
class _Event:
    monotonic: float
    line: str


class FakeKube:
    """Just enough Kubernetes API for the scaler's two merge-patches, plus the reference's
    scaler-call sink (``POST /record``). Records everything in arrival order."""

    def __init__(self) -> None:
        self.events: list[_Event] = []
        app = web.Application()
        base = "/apis/actions.github.com/v1alpha1/namespaces/{ns}"
        app.router.add_patch(base + "/ephemeralrunnersets/{name}", self._runner_set)
        app.router.add_patch(base + "/ephemeralrunners/{name}/status", self._runner_status)
        app.router.add_post("/record", self._record)
        self._server = LoopbackServer(app)

    @property
    def url(self) -> str:
        return self._server.url

    async def start(self) -> None:
        await self._server.start()

    async def stop(self) -> None:
        await self._server.stop()

    def _add(self, line: str) -> None:
        self.events.append(_Event(time.monotonic(), line))

    async def _runner_set(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        replicas = body["spec"].get("replicas") or 0
        self._add(f"scaler desired target={replicas}")
        return json_response({"kind": "EphemeralRunnerSet", **body})

    async def _runner_status(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        status = json.dumps(body.get("status", {}), sort_keys=True)
        self._add(f"scaler job_started runner={request.match_info['name']} status={status}")
        return json_response({"kind": "EphemeralRunner", **body})

    async def _record(self, request: web.Request) -> web.Response:
        event = json.loads(await request.read())
        if event["call"] == "desired":
            self._add(f"scaler desired target={event['target']}")
        elif event["call"] == "job_started":
            status = json.dumps(event["status"], sort_keys=True)
            self._add(f"scaler job_started runner={event['runner']} status={status}")
        # job_completed: ARC's scaler makes no Kubernetes call for it; nothing to compare.
        return web.Response(status=204)


def config_json(fake: FakeActions, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The config.json ARC's controller would write for a PAT scale set on the fake."""
    cfg = listener_config(
        fake,
        namespace=NAMESPACE,
        runner_set_name=RUNNER_SET,
        scale_set_id=SCALE_SET_ID,
        scale_set_name="linux",
        max_runners=10,
        github_token=PAT,
    )
    cfg.update(overrides)
    return cfg


def _kubeconfig(url: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": url}}],
            "users": [{"name": "fake", "user": {"token": "fake-kube-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }
    )


def _normalize_body(raw: bytes, fake_url: str) -> str:
    if not raw:
        return ""
    text = raw.decode("utf-8", "replace").replace(fake_url, "<fake>")
    return _UUID.sub("<uuid>", text)


def _query(query: Mapping[str, str]) -> str:
    shown = []
    for key in sorted(query):
        value = "<uuid>" if key == "sessionId" else query[key]
        shown.append(f"{key}={value}")
    return "&".join(shown)


def _request_line(request: Any, fake_url: str) -> str:
    headers = [f"{h}={request.headers[h]}" for h in _HEADERS if h in request.headers]
    if request.auth_scheme:
        headers.append(f"Authorization={request.auth_scheme}")
    body = _normalize_body(request.body, fake_url)
    parts = [request.method, request.route]
    if request.query:
        parts.append(f"?{_query(request.query)}")
    parts.append(f"[{' '.join(headers)}]")
    if body:
        parts.append(f"body={body!r}")
    parts.append(f"-> {request.status}")
    if request.fault:
        parts.append(f"(scripted {request.fault})")
    return " ".join(parts)


def _request_events(fake: FakeActions) -> list[_Event]:
    """Request lines; a retry after an injected fault also shows the wait, in whole seconds
    (the retry policy's backoff and ``Retry-After`` are part of what is compared)."""
    events = []
    previous: dict[str, Any] = {}
    for request in fake.requests:
        line = _request_line(request, fake.url)
        before = previous.get(request.route)
        if before is not None and before.fault:
            line += f" (after {round(request.monotonic - before.monotonic)}s)"
        previous[request.route] = request
        events.append(_Event(request.monotonic, line))
    return events


def _user_agent(value: str) -> str:
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    return json.dumps(parsed, separators=(",", ":"))


async def run_listener(
    command: Sequence[str], scenario: Scenario, *, extra_env: Mapping[str, str] | None = None
) -> Run:
    """Run ``command`` (a listener process) through ``scenario``; see the module docstring."""
    started = time.monotonic()
    async with staged_listener(
        command,
        scenario,
        fake_options={"pats": [PAT], "poll_hold": POLL_HOLD, **scenario.fake_options},
        config=scenario.config,
        # Both listeners see the same small environment, nothing of this machine's.
        home=os.environ.get("HOME"),
        env={
            # Our probes bind loopback only; the reference has none.
            "LISTENER_PROBE_ADDR": "127.0.0.1:0",
            # The ARC release the reference stands in for, as a deployment would declare it.
            "LISTENER_ARC_VERSION": "0.14.2",
            **scenario.env,
            **(extra_env or {}),
        },
        prefix="conformance-",
    ) as (fake, kube, listener):
        needed_sigterm = await _play_out(fake, listener, scenario.budget)
        # stop() sends SIGTERM only to a process still running (needed_sigterm).
        exit_code = await listener.stop(within=EXIT_TIMEOUT)
        if listener.killed:
            raise TimeoutError(f"{command[0]} still ran {EXIT_TIMEOUT:.0f}s after SIGTERM")
        session_left = fake.session(SCALE_SET_ID) is not None
        events = _request_events(fake)
        events += kube.events
        events.sort(key=lambda e: e.monotonic)
        agents = sorted({_user_agent(r.headers.get("User-Agent", "")) for r in fake.requests})
        return Run(
            exchange=[e.line for e in events],
            user_agents=agents,
            exit_code=exit_code,
            needed_sigterm=needed_sigterm,
            session_left=session_left,
            seconds=time.monotonic() - started,
            output=listener.log_text(),
        )


@contextlib.asynccontextmanager
async def staged_listener(
    command: Sequence[str],
    scenario: Scenario,
    *,
    fake_options: Mapping[str, Any],
    config: Mapping[str, Any],
    home: str | None,
    env: Mapping[str, str],
    prefix: str,
) -> AsyncIterator[tuple[FakeActions, FakeKube, ListenerProcess]]:
    """Both fakes up and scripted for ``scenario``, and ``command`` started against them
    with a config.json and kubeconfig in a fresh directory (HOME is ``home`` or that
    directory; PATH is this process's, nothing else of this machine's environment). The
    process is killed on the way out, whatever happened."""
    fake = FakeActions(**fake_options)
    kube = FakeKube()
    async with contextlib.AsyncExitStack() as stack:
        await fake.start()
        stack.push_async_callback(fake.stop)
        await kube.start()
        stack.push_async_callback(kube.stop)
        fake.add_scale_set(SCALE_SET_ID, "linux")
        scenario.script(fake)

        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
        kubeconfig = workdir / "kubeconfig"
        kubeconfig.write_text(_kubeconfig(kube.url))
        listener = ListenerProcess(
            "listener",
            workdir,
            config_json(fake, config),
            kubeconfig=kubeconfig,
            command=command,
            base_env={"PATH": os.environ.get("PATH", ""), "HOME": home or str(workdir)},
            env={"CONFORMANCE_RECORD_URL": f"{kube.url}/record", **env},
        ).start()
        try:
            yield fake, kube, listener
        finally:
            listener.kill()


async def _play_out(fake: FakeActions, listener: ListenerProcess, budget: float) -> bool:
    """Wait until the process exits (False) or the scenario is played out (True)."""

    def idle() -> bool:
        if listener.returncode is not None:
            return True
        session = fake.session(SCALE_SET_ID)
        return (
            fake.script_left(SCALE_SET_ID) == 0
            and session is not None
            and bool(session.held)
            and not fake.faults_pending("get_message")
        )

    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(budget):
            await fake.wait_until(idle)
    return listener.returncode is None


def our_command() -> list[str]:
    return list(LISTENER_COMMAND)
