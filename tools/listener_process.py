"""Our listener as a real subprocess (test infrastructure for the e2e, conformance and image
tiers, the demo and the benchmarks).

* ``listener_config``: the ``config.json`` ARC's controller writes for one scale set.
* ``ListenerProcess``: ``python -m listener`` (or another command: the conformance tier runs
  ARC's reference the same way) with that file, capacity settings YAML and an environment;
  its output is kept in a log file; ``stop()`` sends SIGTERM as the kubelet does and returns
  the exit status.
* ``metric_value``: one sample of a Prometheus text page (the listener's metrics endpoint).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tools.fake_actions import FakeActions
from tools.localcluster.ports import free_port
from tools.waits import WaitFailed, eventually, exited

REPO_ROOT = Path(__file__).resolve().parents[1]
PAT = "ghp_e2e_fake_token"
HUD_TOKEN = "hud-e2e-token"
LISTENER_COMMAND = (sys.executable, "-m", "listener")
_PR_SET_PDEATHSIG = 1


def listener_config(
    fake: FakeActions,
    *,
    namespace: str,
    runner_set_name: str,
    scale_set_id: int,
    scale_set_name: str,
    max_runners: int,
    min_runners: int = 0,
    metrics_port: int | None = None,
    log_level: str = "debug",
    log_format: str = "text",
    github_token: str = PAT,
) -> dict[str, Any]:
    """ARC's config.json for one scale set (PAT credentials, keys in the controller's order)."""
    return {
        "configure_url": fake.configure_url("acme"),
        "vault_type": "",
        "vault_lookup_key": "",
        "github_app_id": "",
        "github_app_installation_id": 0,
        "github_app_private_key": "",
        "github_token": github_token,
        "ephemeral_runner_set_namespace": namespace,
        "ephemeral_runner_set_name": runner_set_name,
        "max_runners": max_runners,
        "min_runners": min_runners,
        "runner_scale_set_id": scale_set_id,
        "runner_scale_set_name": scale_set_name,
        "server_root_ca": "",
        "log_level": log_level,
        "log_format": log_format,
        "metrics_addr": f"127.0.0.1:{metrics_port}" if metrics_port else "",
        "metrics_endpoint": "/metrics" if metrics_port else "",
        "metrics": None,
    }


def _die_with_parent() -> None:
    # The listener must not outlive a test run that is killed without cleanup.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class ListenerProcess:
    """``python -m listener`` as a subprocess. ``start()``; ``await stop()`` sends SIGTERM.

    ``command`` runs another listener the same way (the conformance tier's reference).
    ``base_env`` is the environment it starts from: by default this process's, without the
    listener's own variables (CAPACITY_*, LISTENER_*, HUD_*); ``env`` is laid over the
    result."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        config_json: Mapping[str, Any],
        *,
        kubeconfig: Path,
        capacity: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        command: Sequence[str] = LISTENER_COMMAND,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.workdir = workdir
        self.config = dict(config_json)
        self.kubeconfig = kubeconfig
        self.capacity = dict(capacity) if capacity is not None else None
        self.extra_env = dict(env or {})
        self.command = list(command)
        self.base_env = dict(base_env) if base_env is not None else None
        self.log_path = workdir / f"{name}.log"
        self.probe_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.killed = False  # stop() had to SIGKILL it

    @property
    def metrics_url(self) -> str | None:
        addr = self.config.get("metrics_addr") or ""
        if not addr:
            return None
        return f"http://{addr}{self.config.get('metrics_endpoint') or '/metrics'}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "listener not started"
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def environment(self) -> dict[str, str]:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config_path = self.workdir / f"{self.name}-config.json"
        config_path.write_text(json.dumps(self.config, separators=(",", ":")) + "\n")
        if self.base_env is not None:
            env = dict(self.base_env)
        else:
            env = {
                k: v
                for k, v in os.environ.items()
                if not k.startswith(("CAPACITY_", "LISTENER_", "HUD_"))
            }
        env.update(
            {
                "LISTENER_CONFIG_PATH": str(config_path),
                "KUBECONFIG": str(self.kubeconfig),
                "LISTENER_PROBE_ADDR": f"127.0.0.1:{self.probe_port}",
                # Loopback fakes: never route them through a developer's proxy.
                "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost",
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.capacity is not None:
            settings_path = self.workdir / f"{self.name}-capacity.yaml"
            settings_path.write_text(yaml.safe_dump(self.capacity, sort_keys=False))
            env["CAPACITY_CONFIG_FILE"] = str(settings_path)
            env["HUD_API_TOKEN"] = HUD_TOKEN
        env.update(self.extra_env)
        return env

    def start(self) -> ListenerProcess:
        self.launch(self.command, env=self.environment(), preexec_fn=_die_with_parent)
        return self

    def launch(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        preexec_fn: Callable[[], None] | None = None,
        how: str = "",
    ) -> None:
        """Start ``argv`` with its output appended to the log, after a line saying when."""
        with self.log_path.open("ab") as log:
            log.write(f"--- {self.name}{how} starting at {time.strftime('%H:%M:%S')}\n".encode())
            self.proc = subprocess.Popen(
                list(argv),
                cwd=REPO_ROOT,
                env=None if env is None else dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=preexec_fn,
            )
        self.started_at = time.monotonic()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def rss_kib(self) -> int | None:
        """VmRSS of the process from /proc, in KiB."""
        return _proc_status_kib(self.pid, "VmRSS")

    def hwm_kib(self) -> int | None:
        return _proc_status_kib(self.pid, "VmHWM")

    async def wait_exit(self, within: float) -> int | None:
        """The exit status once the process has exited; None if it still runs after
        ``within`` seconds."""
        with contextlib.suppress(WaitFailed):
            await eventually(lambda: self.returncode is not None, "exit", within, interval=0.05)
        return self.returncode

    async def stop(self, within: float = 30.0) -> int:
        """SIGTERM and wait (as the kubelet does); SIGKILL after ``within`` seconds (then the
        status is negative)."""
        if self.proc is None:
            raise RuntimeError("listener not started")
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            if await self.wait_exit(within) is None:
                self.killed = True
                self.proc.kill()
                await self.wait_exit(5.0)
        return int(self.proc.returncode)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    async def wait_log(self, needle: str, within: float = 30.0) -> None:
        """Wait until ``needle`` appears in the log; fail with the log tail otherwise."""
        await eventually(
            lambda: needle in self.log_text(),
            f"{self.name} to log {needle!r}",
            within,
            interval=0.1,
            alive=lambda: exited(self, f"it to log {needle!r}"),
            detail=lambda: f":\n{self.log_tail()}",
        )

    async def metrics_text(self) -> str:
        url = self.metrics_url
        if url is None:
            return ""
        async with httpx.AsyncClient(timeout=5.0, trust_env=False) as http:
            response = await http.get(url)
            response.raise_for_status()
            return response.text


class ReceiverProcess(ListenerProcess):
    """``ghalistener webhook-receiver`` as a subprocess, on two free loopback ports.
    ``github_config_url`` and ``token`` turn on its reconcile with (the fake of) GitHub."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        *,
        secret: str,
        github_config_url: str = "",
        token: str = "",
        reconcile_interval: float = 300.0,
    ) -> None:
        super().__init__(name, workdir, {}, kubeconfig=Path(os.devnull))
        self.secret = secret
        self.github_config_url = github_config_url
        self.token = token
        self.reconcile_interval = reconcile_interval
        self.deliveries_port = free_port()
        self.reads_port = free_port()

    @property
    def metrics_url(self) -> str | None:
        return f"{self.reads_url}/metrics"

    @property
    def deliveries_url(self) -> str:
        return f"http://127.0.0.1:{self.deliveries_port}/webhook"

    @property
    def reads_url(self) -> str:
        return f"http://127.0.0.1:{self.reads_port}"

    def start(self) -> ReceiverProcess:
        argv = [
            *LISTENER_COMMAND,
            "webhook-receiver",
            f"--deliveries-addr=127.0.0.1:{self.deliveries_port}",
            f"--reads-addr=127.0.0.1:{self.reads_port}",
            f"--reconcile-interval={self.reconcile_interval:g}",
            "--log-format=text",
        ]
        if self.github_config_url:
            argv.append(f"--github-config-url={self.github_config_url}")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "WEBHOOK_"))}
        env.update(
            {
                "WEBHOOK_SECRET": self.secret,
                "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost",
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.token:
            env["GITHUB_TOKEN"] = self.token
        self.launch(argv, env=env, preexec_fn=_die_with_parent)
        return self


def _proc_status_kib(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def metric_value(text: str, name: str, labels: Mapping[str, str] | None = None) -> float | None:
    """The value of the first sample called ``name`` whose labels include ``labels``, in a
    Prometheus text page (parsed by prometheus_client's own parser), or None."""
    want = labels or {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in want.items()):
                return float(sample.value)
    return None
