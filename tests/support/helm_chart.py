"""The companion chart (charts/capacity-listener) through the real Helm CLI (test
infrastructure): ``helm_binary`` finds the pinned build (tools/localcluster/build.py,
``make cluster-build``), ``template`` renders values to manifests, ``helm`` runs any command.

Without the build, chart tests skip on a developer machine and fail in CI (``CI`` set), as
the promtool tests do: CI builds it in ``make test``, so a missing binary there is a bug.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.deploy_files import ROOT
from tools.localcluster.build import find_helm

CHART = ROOT / "charts" / "capacity-listener"
RELEASE = "capacity-listener"
CONTROLLER_NAMESPACE = "arc-systems"


def example_values() -> dict[str, Any]:
    """The chart's example values (ci/example-values.yaml): scale sets arc-cpu and arc-gpu."""
    loaded: dict[str, Any] = yaml.safe_load((CHART / "ci" / "example-values.yaml").read_text())
    return loaded


def helm_binary() -> Path:
    """The cached Helm, or skip (fail in CI) saying how to build it."""
    art = find_helm()
    if art is not None:
        return art.binary
    if os.environ.get("CI"):
        pytest.fail("Helm is not built; CI builds it in `make test` (make cluster-build)")
    pytest.skip("Helm not built: make cluster-build (python -m tools.localcluster build --helm)")


def helm(
    helm_bin: Path, *args: str, kubeconfig: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run Helm with its own state directories under the cache home (no user config read)."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
        "HELM_CACHE_HOME": str(helm_bin.parent.parent / "home" / "cache"),
        "HELM_CONFIG_HOME": str(helm_bin.parent.parent / "home" / "config"),
        "HELM_DATA_HOME": str(helm_bin.parent.parent / "home" / "data"),
    }
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return subprocess.run(
        [str(helm_bin), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def write_values(values: dict[str, Any], tmp_path: Path, name: str = "values.yaml") -> Path:
    """Values as JSON (valid YAML): every string quoted, so Helm's YAML 1.1 parser cannot
    read a generated `n` or `on` as a boolean."""
    path = tmp_path / name
    path.write_text(json.dumps(values, ensure_ascii=False), encoding="utf-8")
    return path


def template(
    helm_bin: Path, values: dict[str, Any], tmp_path: Path, *extra: str
) -> list[dict[str, Any]]:
    """``helm template`` of the chart with ``values`` (hooks included), as documents."""
    result = helm(
        helm_bin, "template", RELEASE, str(CHART), "--namespace", CONTROLLER_NAMESPACE,
        "--values", str(write_values(values, tmp_path)), *extra,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def template_error(helm_bin: Path, values: dict[str, Any], tmp_path: Path) -> str:
    """The error ``helm template`` reports for ``values`` (which must be refused)."""
    result = helm(
        helm_bin, "template", RELEASE, str(CHART), "--namespace", CONTROLLER_NAMESPACE,
        "--values", str(write_values(values, tmp_path)),
    )  # fmt: skip
    assert result.returncode != 0, f"accepted: {values}"
    return result.stderr


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """Documents of one kind by ``<namespace>/<name>`` (cluster-scoped: ``/<name>``)."""
    return {
        f"{d['metadata'].get('namespace', '')}/{d['metadata']['name']}": d
        for d in docs
        if d["kind"] == kind
    }


def scale_set(
    namespace: str = "arc-runners",
    url: str = "https://github.com/acme",
    group: str = "",
    **capacity: Any,
) -> dict[str, Any]:
    """One `scaleSets` entry with a 2-CPU workflow pod."""
    entry: dict[str, Any] = {
        "namespace": namespace,
        "githubConfigUrl": url,
        "workflowPod": {"resources": {"requests": {"cpu": "2", "memory": "8Gi"}}},
        "capacity": {"enabled": True, **capacity},
    }
    if group:
        entry["runnerGroup"] = group
    return entry


def notes_fetch_command(install_output: str, scale_set_name: str) -> str:
    """The command the chart's NOTES print to fetch one scale set's ARC values overlay."""
    notes = install_output.split("NOTES:", 1)[1]
    (line,) = [
        line.strip()
        for line in notes.splitlines()
        if line.strip().startswith(f"kubectl get configmap {scale_set_name}-arc-values ")
    ]
    return line


def overlay_text(docs: list[dict[str, Any]], scale_set_name: str) -> str:
    """The ARC values overlay the chart wrote for one scale set (ConfigMap data, as text)."""
    configmap = by_kind(docs, "ConfigMap")[f"{CONTROLLER_NAMESPACE}/{scale_set_name}-arc-values"]
    text: str = configmap["data"]["values.yaml"]
    return text


def overlay(docs: list[dict[str, Any]], scale_set_name: str) -> dict[str, Any]:
    """The ARC values overlay the chart wrote for one scale set, parsed."""
    values: dict[str, Any] = yaml.safe_load(overlay_text(docs, scale_set_name))
    return values
