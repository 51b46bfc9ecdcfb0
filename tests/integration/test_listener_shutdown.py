"""The listener process's shutdown fits inside the pod's grace period.

The kubelet sends SIGKILL ``terminationGracePeriodSeconds`` after SIGTERM (Kubernetes' 30 s
default when ARC's template leaves it unset). A slow Actions service must not push the
session DELETE past that: the listener gives the placeholder clean-up its share, the DELETE
the rest, and exits by itself.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tools.e2e_site import SiteSpec, Stage
from tools.fake_http import Fault
from tools.localcluster import LocalCluster

pytestmark = pytest.mark.cluster

# The pod's terminationGracePeriodSeconds in this test: long enough that the interpreter's
# own exit after the cut-off fits on a loaded machine, short beside the hanging DELETE (120 s).
GRACE = 15


async def test_shutdown_fits_in_the_grace_period_when_the_session_delete_hangs(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    async with Stage(local_cluster, tmp_path / "stage", prefix="grace", hud=False) as stage:
        site = await stage.add_site(SiteSpec(name="grace", scale_set_id=92))
        listener = site.start_listener(
            capacity=site.capacity_settings(proactive=1),
            max_runners=4,
            env={"LISTENER_SHUTDOWN_GRACE": str(GRACE)},
        )
        await site.wait_session()
        await site.wait_for(
            lambda: site.advertised() == 1 and site.pair_states()["running"] == 1,
            "one warm pair Running and advertised",
            90,
        )

        stage.fake.inject("session_delete", Fault.slow(120.0), times=10)
        sigterm = time.monotonic()
        # stop() sends SIGTERM and SIGKILLs after GRACE seconds, as the kubelet does.
        code = await listener.stop(within=GRACE)
        took = time.monotonic() - sigterm
        assert code == 0, f"exit {code} after {took:.1f}s:\n{listener.log_tail()}"
        log = listener.log_text()
        assert "could not delete the session" in log
        # The placeholder clean-up ran first, within its share.
        await site.wait_for(lambda: not site.placeholder_counts(), "placeholders gone", 30)
        print(f"\nSIGTERM to exit: {took:.1f}s with a {GRACE}s grace and a hanging DELETE")
