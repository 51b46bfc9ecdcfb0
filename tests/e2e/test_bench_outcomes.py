"""The outcome benchmark's harness, smoke-run (one seed, two variants, a 3-minute trace) so it
cannot rot. It asserts the harness's structure, never the outcome numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.bench_outcomes import REFERENCE, SMOKE, benchmark


@pytest.mark.timeout(1800)  # about 8 minutes of trace and window, slower under load
async def test_the_outcome_benchmark_runs_and_accounts_every_job(tmp_path: Path) -> None:
    out = tmp_path / "out"
    document = await benchmark(tmp_path, out, SMOKE)
    # Each variant on a control plane of its own, with its own Karpenter.
    assert document["config"]["control_planes"] == "one per variant"
    (seed_number,) = document["seeds"]
    for name in SMOKE.variants:
        logs = tmp_path / f"seed{seed_number}-{name}-cluster" / "logs"
        assert (logs / "kube-scheduler.log").is_file(), name
        assert (logs / "karpenter.log").is_file(), name

    (seed,) = document["seeds"].values()
    assert set(seed["variants"]) == set(SMOKE.variants)
    assert seed["jobs"] > 0
    windows = {v["window_s"] for v in seed["variants"].values()}
    assert len(windows) == 1  # one window for every variant
    assert windows.pop() == pytest.approx(seed["window_s"], abs=0.02)
    for name, figures in seed["variants"].items():
        assert figures["jobs"] == seed["jobs"], name
        # Every job is in exactly one bucket. Whether all finish within the overtime is an
        # outcome (on a loaded machine a stock job may still be queued), not the harness's
        # structure, so unfinished ones are allowed; failures of another kind are not.
        counts = {k: figures[k] for k in ("succeeded", "failed_by_timeout", "unfinished")}
        assert sum(counts.values()) == figures["jobs"], (name, counts)
        assert figures["failed_other"] == 0, (name, figures["failed_other"])
        assert figures["succeeded"] > 0, name
        assert figures["node_seconds"]["total"] > 0, name
        assert figures["node_seconds"]["runner"] > 0, name
        assert figures["node_seconds"]["workflow"] > 0, name
        assert figures["karpenter_launches"] > 0, name
        # What held the nodes, from the cluster's logs: the same node-seconds, split.
        held = figures["node_seconds_by_occupancy"]["total"]
        assert held["real"] > 0, name
        assert sum(held.values()) == pytest.approx(figures["node_seconds"]["total"], rel=0.1)
        # Where the time goes: every job has its milestones; the assignment is on the path
        # of every finished one, and the steps' shares make up the whole of their waits.
        path = figures["critical_path"]
        assert len(path["jobs"]) == figures["jobs"], name
        finished = figures["succeeded"] + figures["failed_by_timeout"]
        # An unfinished job may have been assigned too.
        assert finished <= path["steps_s"]["assigned"]["n"] <= figures["jobs"], name
        shares = sum(step["share"] for step in path["steps_s"].values())
        assert shares == pytest.approx(1.0, abs=0.01), (name, path["steps_s"])
        if name.startswith("ours"):
            # A job still queued when a reading looked (the HUD is hud_lag behind, read every
            # demand_interval) was counted in it; one a pair took sooner never is, so a fast
            # run can have no demand step on any path, but no slow job may lack the count.
            rows = [dict(zip(path["columns"], job, strict=True)) for job in path["jobs"]]
            slow_after = SMOKE.hud_lag + 3 * SMOKE.demand_interval
            slow = [r for r in rows if r["assigned"] and r["assigned"] - r["queued"] > slow_after]
            assert all(r["demand_seen"] is not None for r in slow), (name, slow)
            assert path["pair_launch_s"]["n"] > 0, name
        else:
            assert "pair_running" not in path["steps_s"], name
    assert set(document["summary"]) == {*SMOKE.variants, REFERENCE}
    assert seed["reference"]["node_seconds"]["total"] > 0  # the offline optimum's bound
    assert len(document["load_average"]["start"]) == 3
    assert document["config"]["changed_settings"]
    for image in document["images"]:
        assert (out / image).stat().st_size > 0
    assert (out / "outcomes.json").is_file()
