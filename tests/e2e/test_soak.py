"""The fault soak (docs/soak.md), one short seed: 90 s of faults over two Karpenter sites, then
the drain. Seed 19's 90 s schedule has seven kinds: insufficient capacity, apiserver
throttling and restart, listener SIGTERM and SIGKILL, a node loss and a 401. Asserts the
invariants that must hold whatever the timing; the timed figures (restart to session, the
longest header stretch) are printed in the JSON, not asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.localcluster import LocalCluster
from tools.localcluster.karpenter import Karpenter
from tools.soak import Config, soak

SEED = 19
SHORT = Config(duration=90.0, drain=240.0)


# Alone: its header check allows 2 s between a poll and the pods listed, which a second
# worker's load can stretch.
@pytest.mark.alone
@pytest.mark.timeout(1200)  # about 6 minutes with set-up and drain, slower under load
async def test_a_short_soak_loses_duplicates_and_leaks_nothing(
    local_cluster: LocalCluster, karpenter: Karpenter, tmp_path: Path
) -> None:
    assert karpenter.pid  # started for this session; the soak finds it
    document = await soak(local_cluster, tmp_path, SHORT, [SEED])
    print(json.dumps(document["summary"]))
    (run,) = document["seeds"].values()
    kinds = {fault["kind"] for fault in run["schedule"]}
    assert {"listener_sigkill", "listener_sigterm", "node_loss"} <= kinds
    figures = run["invariants"]
    assert figures["jobs"] > 0
    assert figures["jobs_lost"] == 0, run
    assert figures["jobs_duplicated"] == 0, run
    assert figures["acks_duplicated"] == 0, run
    assert figures["placeholders_leaked"] == 0, run
    assert figures["sessions_leaked"] == 0, run
    assert figures["unplanned_exits"] == 0, run["unplanned"]
    # Beyond the documented tolerance (Config.tolerance either side of a poll), never — except
    # in the seconds after an apiserver restart, a known defect (docs/soak.md, "Known").
    over = [(index, site["over"]) for index, site in enumerate(run["header_per_site"])]
    applied = [(a["t"], a["kind"]) for a in run["applied"]]
    assert figures["header_over_capacity_polls_not_after_apiserver_restart"] == 0, (
        f"[site, [t, header, confirmed]...]: {over}; faults: {applied}"
    )
    assert figures["polls_judged"] > 0
    assert figures["restarts"] >= 2  # the SIGTERM and the SIGKILL
    assert figures["restarts_without_session"] == 0, run
