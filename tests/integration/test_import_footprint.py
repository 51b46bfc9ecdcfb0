"""What a listener process imports, checked in a fresh interpreter (a subprocess, so not in
the unit tier; no cluster needed).

One listener runs per scale set, so every module it imports is paid once per scale set. The
listener with capacity-awareness off, after it has connected its Kubernetes client, must not
have imported kubernetes-asyncio's generated API and model classes (~31 MiB), PyJWT and
cryptography (~9 MiB; GitHub App credentials and a GHES root CA only), the capacity package
with pydantic and pydantic-settings (~11 MiB; capacity-awareness only) or the Azure SDK (Key
Vault only), nor in a pod (no ``KUBECONFIG``) the kubeconfig loader with yaml (~1 MiB).
Module names, not megabytes: the set is exact, RSS depends on the machine
(``python -m tools.bench_footprint`` measures it).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tools.listener_process import REPO_ROOT

NOT_AT_IDLE = (
    "kubernetes_asyncio.client.api",
    "kubernetes_asyncio.client.api.core_v1_api",
    "kubernetes_asyncio.client.models.v1_pod",
    "kubernetes_asyncio.dynamic",
    "kubernetes_asyncio.watch",
    "jwt",
    "cryptography",
    "pydantic",
    "pydantic_settings",
    "capacity.settings",
    "azure",
)

_PROBE = """
import asyncio, json, sys
from listener import app
from base import kube

settings = app._capacity_settings(dict(CAPACITY))
kube._client_classes()
kube._config_loader(kubeconfig=KUBECONFIG)
print(json.dumps({"modules": sorted(sys.modules), "capacity_on": settings is not None}))
"""


def _imported(capacity: dict[str, str], *, kubeconfig: bool = False) -> tuple[set[str], bool]:
    probe = f"CAPACITY = {capacity!r}\nKUBECONFIG = {kubeconfig!r}\n{_PROBE}"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    answer = json.loads(done.stdout)
    return set(answer["modules"]), bool(answer["capacity_on"])


def test_a_stock_listener_imports_none_of_the_heavy_packages() -> None:
    modules, capacity_on = _imported({})
    assert not capacity_on
    assert "kubernetes_asyncio.client.api_client" in modules  # the client is there
    assert "kubernetes_asyncio.config.incluster_config" in modules
    assert sorted(m for m in (*NOT_AT_IDLE, "kubernetes_asyncio.config.kube_config", "yaml")
                  if m in modules) == []  # fmt: skip


def test_a_kubeconfig_brings_its_loader() -> None:
    modules, _ = _imported({}, kubeconfig=True)
    assert {"kubernetes_asyncio.config.kube_config", "yaml"} <= modules
    assert sorted(m for m in NOT_AT_IDLE if m in modules) == []


@pytest.mark.parametrize(
    "env", [{"CAPACITY_ENABLED": "false"}, {"capacity_proactive_capacity": "2"}]
)
def test_any_capacity_variable_loads_the_settings_with_pydantic(env: dict[str, str]) -> None:
    """Any CAPACITY_* variable (names are case-insensitive) is read and checked, even when
    it leaves capacity-awareness off: a typo must still fail at start-up."""
    modules, capacity_on = _imported(env)
    assert not capacity_on
    assert {"pydantic", "pydantic_settings", "capacity.settings"} <= modules
    # Still without the generated Kubernetes classes or cryptography.
    assert sorted(m for m in NOT_AT_IDLE[:7] if m in modules) == []
