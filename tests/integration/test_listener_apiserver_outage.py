"""The listener process across a real kube-apiserver restart.

ARC's listener exits on the first failed runner-set patch (deleting its session); the next pod
then meets a session conflict. Ours keeps its session and keeps polling while the apiserver is
gone, holds a message it cannot act on (not acked, so the service delivers it again), shows
the outage in /readyz and on the metrics page, and carries on once the apiserver is back.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from tools.capacity_kit import start_apiserver, stop_apiserver
from tools.e2e_site import Site, SiteSpec, Stage
from tools.fake_actions import JobState
from tools.listener_process import metric_value
from tools.localcluster import LocalCluster
from tools.waits import eventually

pytestmark = pytest.mark.cluster

DOWNTIME = 90.0  # seconds the apiserver stays down: longer than a session lives unpolled


async def readyz(site: Site) -> tuple[int, str]:
    listener = site.listener
    assert listener is not None
    async with httpx.AsyncClient(timeout=5.0, trust_env=False) as http:
        response = await http.get(f"http://127.0.0.1:{listener.probe_port}/readyz")
        return response.status_code, response.text


@pytest.mark.restarts_apiserver
async def test_listener_rides_out_an_apiserver_restart(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    async with Stage(local_cluster, tmp_path / "stage", prefix="outage", hud=False) as stage:
        site = await stage.add_site(SiteSpec(name="outage", scale_set_id=91, job_seconds=2.0))
        listener = site.start_listener(
            capacity=None, max_runners=4, env={"LISTENER_KUBE_OUTAGE_TIMEOUT": "240"}
        )
        await site.wait_session()
        fake = stage.fake
        first = fake.add_jobs(1, labels=["linux"])
        await site.wait_for(
            lambda: all(j.state is JobState.COMPLETED for j in first), "a job before", 60
        )

        down_at = time.monotonic()
        await stop_apiserver(local_cluster)
        try:
            # The loop keeps polling; its next runner-set patch fails and is kept for retry.
            await listener.wait_log("runner set patch failed", within=30)
            status, body = await readyz(site)
            assert status == 503, body
            assert '"kubernetes"' in body
            text = await listener.metrics_text()
            labels = {"name": site.runner_set_name, "namespace": site.namespace}
            assert metric_value(text, "gha_listener_kube_patch_pending", labels) == 1
            # Polling goes on (202s) while the apiserver is gone: the session stays alive.
            polls_before = len(fake.polls)
            await site.wait_for(lambda: len(fake.polls) >= polls_before + 2, "more polls", 30)
            # A job arrives during the outage: its message is delivered but held, not acked.
            acked_before = len(fake.acks)
            during = fake.add_jobs(2, labels=["linux"])
            await listener.wait_log("holding a message", within=30)
            left = DOWNTIME - (time.monotonic() - down_at)
            if left > 0:
                await asyncio.sleep(left)  # the outage itself: nothing to wait for
            assert len(fake.acks) == acked_before
            assert listener.returncode is None
            assert fake.expired_sessions == []  # kept alive by polls while the message waits
        finally:
            await start_apiserver(local_cluster)
        back_at = time.monotonic()

        async def acked() -> bool:
            return len(fake.acks) > acked_before

        await eventually(acked, "the held message acked once the apiserver is back", 120)
        recovered = time.monotonic() - back_at
        await site.wait_for(
            lambda: all(j.state is JobState.COMPLETED for j in during), "jobs after", 120
        )

        async def ready_again() -> bool:
            return (await readyz(site))[0] == 200

        await eventually(ready_again, "/readyz ok again", 60)
        text = await listener.metrics_text()
        assert metric_value(text, "gha_listener_kube_patch_pending", labels) == 0
        failures = metric_value(text, "gha_listener_kube_patch_failures_total", labels) or 0
        assert failures >= 1
        assert listener.returncode is None  # never exited
        assert fake.sessions_created == 1  # the session was kept: no new one, no 409
        assert fake.expired_sessions == []
        conflicts = [r for r in fake.requests_for("session_create") if r.status == 409]
        assert conflicts == []
        print(
            f"\napiserver down {back_at - down_at:.1f}s; listener exits: 0, sessions created: 1, "
            f"409s: 0; held message acked {recovered:.1f}s after the apiserver was ready; "
            f"failed patch attempts {failures:.0f}"
        )
        assert await listener.stop() == 0
