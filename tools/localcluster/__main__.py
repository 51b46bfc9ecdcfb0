"""CLI: ``python -m tools.localcluster build|up|down|status``.

``up`` starts a cluster that outlives the command (state under the cache's ``run/``
directory); ``down`` stops it by its recorded PIDs. ``--karpenter`` (build, up) adds Karpenter
with its kwok cloud provider; ``--helm`` (build) the Helm CLI the chart tests run, which
``helm -- ARGS`` runs (``make chart-package``); ``--kubectl`` (build) kubectl, for the
quick-start test.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .build import (
    BuildError,
    cache_root,
    ensure_built,
    ensure_helm_built,
    ensure_karpenter_built,
    ensure_kubectl_built,
)
from .harness import STATE_FILE, ClusterError, LocalCluster, pid_runs, save_state, stop_pid
from .karpenter import karpenter_state, start_karpenter
from .rest import KubeREST


def run_dir() -> Path:
    return cache_root() / "run"


def _state_file() -> Path:
    return run_dir() / STATE_FILE


def _load_state() -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(_state_file().read_text())
    except (OSError, ValueError):
        return None
    return state


def _live(state: dict[str, Any]) -> dict[str, bool]:
    return {
        name: pid_runs(pid, state["binaries"][name]) for name, pid in state.get("pids", {}).items()
    }


def cmd_build(args: argparse.Namespace) -> int:
    started = time.monotonic()
    art = ensure_built()
    print(f"binaries: {art.bin_dir}")
    print(f"ARC CRDs: {art.crd_dir}")
    print(f"kwok stages: {art.kwok_config}")
    for name, version in art.versions.items():
        print(f"  {name}: {version}")
    if args.karpenter:
        k = ensure_karpenter_built()
        print(f"karpenter {k.version}: {k.binary}")
    if args.helm:
        h = ensure_helm_built()
        print(f"helm {h.version}: {h.binary}")
    if args.kubectl:
        kc = ensure_kubectl_built()
        print(f"kubectl {kc.version}: {kc.binary}")
    print(f"ready in {time.monotonic() - started:.1f}s")
    return 0


def _print_env(kubeconfig: str) -> None:
    print(f"KUBECONFIG={kubeconfig}")
    print(f"export KUBECONFIG={kubeconfig}")


def cmd_up(args: argparse.Namespace) -> int:
    state = _load_state()
    if state and any(_live(state).values()):
        print(f"already up (server {state['server']})", file=sys.stderr)
        _print_env(state["kubeconfig"])
        return 0
    art = ensure_built()
    karpenter_art = ensure_karpenter_built() if args.karpenter else None
    workdir = run_dir()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    cluster = LocalCluster(art, workdir)
    cluster.start(detach=True)
    extra: dict[str, Any] = {}
    if karpenter_art is not None:
        try:
            karpenter = start_karpenter(cluster, karpenter_art)
        except BaseException:
            cluster.stop()
            raise
        extra["karpenter"] = karpenter_state(karpenter)
        print(f"karpenter {karpenter_art.version} up (pid {karpenter.pid})", file=sys.stderr)
    save_state(_state_file(), cluster, extra)
    print(f"up in {cluster.start_seconds:.1f}s, server {cluster.server}", file=sys.stderr)
    print(f"phases (s since start): {cluster.timings}", file=sys.stderr)
    print(f"logs:\n{cluster.describe_logs()}", file=sys.stderr)
    _print_env(str(cluster.kubeconfig))
    return 0


def cmd_down(_: argparse.Namespace) -> int:
    state = _load_state()
    if state is None:
        print("not running (no state file)", file=sys.stderr)
        return 0
    live = _live(state)
    # Newest first: kwok and the controllers before the API server, etcd last.
    for name, pid in reversed(list(state.get("pids", {}).items())):
        if live.get(name):
            stop_pid(pid)
            print(f"stopped {name} (pid {pid})", file=sys.stderr)
    _state_file().unlink(missing_ok=True)
    shutil.rmtree(Path(state["workdir"]) / "etcd", ignore_errors=True)
    return 0


def cmd_helm(args: argparse.Namespace) -> int:
    """The pinned Helm (built first if needed) with the given arguments."""
    binary = ensure_helm_built().binary
    helm_args = args.args[1:] if args.args[:1] == ["--"] else args.args  # argparse keeps "--"
    return subprocess.run([str(binary), *helm_args], check=False).returncode


def cmd_status(_: argparse.Namespace) -> int:
    state = _load_state()
    if state is None:
        print("not running")
        return 1
    live = _live(state)
    for name, pid in state.get("pids", {}).items():
        print(f"{name:<24} pid {pid:<8} {'running' if live[name] else 'NOT RUNNING'}")
    ready = "unreachable"
    if all(live.values()):
        rest = KubeREST(Path(state["kubeconfig"]), timeout=3)
        try:
            ready = str(rest.get("/readyz"))
        except Exception as exc:
            ready = f"error: {exc}"
        finally:
            rest.close()
    print(f"server {state['server']} readyz: {ready}")
    _print_env(state["kubeconfig"])
    return 0 if all(live.values()) and ready == "ok" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.localcluster",
        description="Build and run a local Kubernetes control plane from the Go module proxy.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func, text in (
        ("build", cmd_build, "build (or find cached) binaries, ARC CRDs and kwok stages"),
        ("up", cmd_up, "start a cluster in the background and print its KUBECONFIG"),
        ("down", cmd_down, "stop the background cluster by its recorded PIDs"),
        ("status", cmd_status, "show the background cluster's processes and readiness"),
        ("helm", cmd_helm, "run the pinned Helm (built first if needed): helm -- ARGS"),
    ):
        cmd = sub.add_parser(name, help=text)
        cmd.set_defaults(func=func)
        if name in ("build", "up"):
            cmd.add_argument(
                "--karpenter",
                action="store_true",
                help="also Karpenter (kwok cloud provider), built from go/karpenter",
            )
        if name == "build":
            cmd.add_argument(
                "--helm", action="store_true", help="also the Helm CLI, built from go/helm"
            )
            cmd.add_argument(
                "--kubectl",
                action="store_true",
                help="also kubectl, built from go/k8s (the control plane's pins)",
            )
        if name == "helm":
            cmd.add_argument("args", nargs=argparse.REMAINDER, help="Helm's arguments")
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except (BuildError, ClusterError) as exc:
        print(f"localcluster: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
