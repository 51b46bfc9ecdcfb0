"""A real Prometheus server for the end-to-end tier (test infrastructure).

Debian's ``prometheus`` (the package that also ships promtool) scrapes listeners every second
and evaluates the shipped alert rules every second, from a copy of
deploy/prometheus/alerts.yaml whose durations are shortened by ``TIME_SCALE``: every ``for:``
and every range or subquery window in an expression is divided by it (minutes become
seconds), so an alert that needs 15 + 15 minutes in production needs 15 + 15 seconds here.
Thresholds are left as they are. The copy is derived from the shipped file on every run, so
it cannot drift from it.
"""

from __future__ import annotations

import asyncio
import ctypes
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

from tools.waits import WaitFailed, eventually

REPO_ROOT = Path(__file__).resolve().parents[2]
ALERTS = REPO_ROOT / "deploy" / "prometheus" / "alerts.yaml"
TIME_SCALE = 60
SCRAPE_INTERVAL = "1s"
_PR_SET_PDEATHSIG = 1
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")
_WINDOW = re.compile(r"\[([0-9smhd]+)(?::([0-9smhd]+))?\]")


def promtool(binary: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``promtool`` (Debian's prometheus package) with ``args``; the caller asserts on
    the return code with ``stdout + stderr`` as the message."""
    return subprocess.run(
        [binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def seconds(duration: str) -> float:
    """A Prometheus duration ("15m", "1h30m") in seconds."""
    parts = _DURATION.findall(duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"not a Prometheus duration: {duration!r}")
    return sum(int(n) * _UNITS[u] for n, u in parts)


def scaled(duration: str, factor: int = TIME_SCALE) -> str:
    """``duration`` divided by ``factor``, in whole milliseconds ("15m" / 60 -> "15s")."""
    millis = round(seconds(duration) * 1000 / factor)
    if millis % 1000 == 0:
        return f"{millis // 1000}s"
    return f"{max(millis, 1)}ms"


def shortened_rules(factor: int = TIME_SCALE, source: Path = ALERTS) -> dict[str, Any]:
    """The shipped PrometheusRule's rule groups, as a rule file with every duration scaled."""
    (doc,) = [d for d in yaml.safe_load_all(source.read_text(encoding="utf-8")) if d]
    spec: dict[str, Any] = doc["spec"]

    def windows(match: re.Match[str]) -> str:
        rng, step = match.group(1), match.group(2)
        return f"[{scaled(rng, factor)}" + (f":{scaled(step, factor)}]" if step else "]")

    for group in spec["groups"]:
        for rule in group["rules"]:
            rule["expr"] = _WINDOW.sub(windows, rule["expr"])
            if "for" in rule:
                rule["for"] = scaled(rule["for"], factor)
            # Templates are for humans; evaluating them here only adds noise to the log.
            rule.pop("annotations", None)
    return spec


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class Prometheus:
    """``prometheus`` on a loopback port scraping ``targets`` every second, with the shortened
    rules. ``start()``, ``await ready()``, ``await stop()``."""

    def __init__(
        self,
        workdir: Path,
        targets: Sequence[str],
        port: int,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.targets = list(targets)
        # Target labels, as the chart's PodMonitor sets them from the listener pod's labels
        # (scale_set, namespace): the alerts name the scale set by them.
        self.labels = dict(labels or {})
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "prometheus.log"

    @staticmethod
    def binary() -> str | None:
        return shutil.which("prometheus")

    def start(self) -> Prometheus:
        binary = self.binary()
        if binary is None:
            raise RuntimeError("prometheus is not installed (Debian: apt-get install prometheus)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        rules = self.workdir / "capacity-listener.rules.yaml"
        rules.write_text(yaml.safe_dump(shortened_rules()), encoding="utf-8")
        config = {
            "global": {
                "scrape_interval": SCRAPE_INTERVAL,
                "scrape_timeout": SCRAPE_INTERVAL,
                "evaluation_interval": SCRAPE_INTERVAL,
            },
            "rule_files": [str(rules)],
            "scrape_configs": [
                {
                    "job_name": "listener",
                    # The PodMonitor's honorLabels: the metrics' own `namespace` stays.
                    "honor_labels": True,
                    "static_configs": [{"targets": self.targets, "labels": self.labels}],
                }
            ],
        }
        config_path = self.workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config_path}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
        return self

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def _get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        async with httpx.AsyncClient(timeout=5.0, trust_env=False) as http:
            response = await http.get(f"{self.url}{path}", params=params)
            response.raise_for_status()
            body = response.json()
        assert body["status"] == "success", body
        return body["data"]

    async def ready(self, within: float = 60.0) -> None:
        """Until the server answers, has loaded every rule and scraped every target."""

        def alive() -> None:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise WaitFailed(f"prometheus exited {self.proc.returncode}:\n{self.log_tail()}")

        async def up() -> bool:
            samples = await self.query("up")
            return len(samples) == len(self.targets) and all(s["value"][1] == "1" for s in samples)

        await eventually(
            up,
            "prometheus ready",
            within,
            alive=alive,
            detail=lambda: f":\n{self.log_tail()}",
            ignore=(httpx.HTTPError,),
        )

    async def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query at the current time; the vector's samples."""
        data = await self._get("/api/v1/query", {"query": expr})
        result: list[dict[str, Any]] = data["result"]
        return result

    async def alerts(self) -> list[dict[str, Any]]:
        """The active alerts (labels, state, ...)."""
        data = await self._get("/api/v1/alerts")
        active: list[dict[str, Any]] = data["alerts"]
        return active

    async def alert_states(self, name: str) -> list[str]:
        """States ("pending", "firing") of the active alerts named ``name``."""
        data = await self._get("/api/v1/alerts")
        return [a["state"] for a in data["alerts"] if a["labels"].get("alertname") == name]

    async def rule_names(self) -> set[str]:
        data = await self._get("/api/v1/rules")
        return {rule["name"] for group in data["groups"] for rule in group["rules"]}

    async def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                await asyncio.to_thread(self.proc.wait, 15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait, 5)
