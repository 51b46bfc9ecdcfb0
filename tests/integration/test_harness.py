"""Test support that other tests rely on, on the real control plane."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tools.capacity_kit import restart_apiserver
from tools.localcluster import LocalCluster


@pytest.mark.restarts_apiserver
async def test_restart_apiserver_stops_it_gracefully_and_brings_it_back(
    local_cluster: LocalCluster,
) -> None:
    async def down() -> None:
        while True:
            try:
                await asyncio.to_thread(local_cluster.rest.get, "/readyz")
            except (httpx.HTTPError, OSError, RuntimeError):
                return
            await asyncio.sleep(0.05)

    restart = asyncio.create_task(restart_apiserver(local_cluster, downtime=1.0))
    await asyncio.wait_for(down(), timeout=30)  # it really went away
    # The old apiserver closed its watches and exited by itself on SIGTERM. Without the
    # harness's --shutdown-watch-termination-grace-period it waits for its open watches
    # until the restart gives up on it and kills it (-9): down for ~30 s whatever was asked.
    assert await restart == 0
    assert local_cluster.rest.get("/readyz") == "ok"
