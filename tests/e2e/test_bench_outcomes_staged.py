"""The outcome benchmark's staged family, smoke-run (one seed, stock against ours reactive and
predictive, a 2-minute arrival window) so its harness cannot rot: builds queued, shards queued
after them in each variant, the slow GPU pool, the GitHub demand source. It asserts the
harness's structure, never the outcome numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.bench_staged import SHARDS, SMOKE, benchmark
from tools.localcluster import LocalCluster
from tools.localcluster.karpenter import Karpenter


@pytest.mark.timeout(2400)  # about 7 minutes of window, slower under load
async def test_the_staged_benchmark_queues_each_stage_after_its_parents(
    local_cluster: LocalCluster, karpenter: Karpenter, tmp_path: Path
) -> None:
    assert karpenter.pid  # started for this session; the benchmark finds it
    out = tmp_path / "out"
    document = await benchmark(local_cluster, tmp_path, out, SMOKE)

    (seed,) = document["seeds"].values()
    assert set(seed["variants"]) == set(SMOKE.variants)
    assert seed["trace_jobs"] > 0
    windows = {v["window_s"] for v in seed["variants"].values()}
    assert len(windows) == 1  # one window for every variant
    assert windows.pop() == pytest.approx(seed["window_s"], abs=0.02)
    for name, figures in seed["variants"].items():
        staged = figures["staged"]
        # Every job of the trace was queued, or is counted as not queued (its parent failed
        # or had not ended by the window's end).
        assert (
            figures["jobs"] + sum(staged["children_not_queued"].values()) == seed["trace_jobs"]
        ), name
        counts = {k: figures[k] for k in ("succeeded", "failed_by_timeout", "unfinished")}
        assert sum(counts.values()) == figures["jobs"], (name, counts)
        assert figures["failed_other"] == 0, (name, figures["failed_other"])
        assert figures["succeeded"] > 0, name
        # Shards came after their builds, and ran on the shards' scale set's pools.
        assert staged["shard_jobs"] > 0, name
        assert staged["shard_wait_s"]["n"] > 0, name
        assert 0 < figures["jobs_per_site"][SHARDS] <= staged["shard_jobs"], name
        assert staged["shard_node_seconds"]["gpu"] > 0, name
        assert figures["per_pool"][f"{SHARDS}/workflow"]["launches"] > 0, name
        assert figures["per_pool"][f"{SHARDS}/workflow"]["occupancy_s"]["real"] > 0, name
        # The GPU pool is the slow one: each of its nodes took at least the registration
        # delay of its NodeClass on top of the launch delay.
        assert staged["gpu_node_ready_s"], name
        assert min(staged["gpu_node_ready_s"]) >= SMOKE.gpu_registration, name
        path = figures["critical_path"]
        assert len(path["jobs"]) == figures["jobs"], name
        if name == "ours_predictive":
            assert staged["stage_model_loaded"] is True  # the trained model was read
        if name.startswith("ours"):
            # Demand read from the fake GitHub REST API, pairs made for it.
            assert path["steps_s"]["demand_seen"]["n"] > 0, name
            assert path["pair_launch_s"]["n"] > 0, name
        else:
            assert "pair_running" not in path["steps_s"], name
    assert set(document["summary"]) == set(SMOKE.variants)
    assert document["config"]["family"] == "staged"
    assert any("predictive" in line for line in document["config"]["changed_settings"])
    for image in document["images"]:
        assert (out / image).stat().st_size > 0
    assert (out / "outcomes-staged.json").is_file()
