"""``ghalistener whatif optimum|simulate|recommend`` in process: JSON out, a table on
request, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from capacity.warm_pool import FixedPool
from tools import whatif_synth
from whatif import cli


def pool_of_two() -> FixedPool:
    """A warm-pool factory for ``--pool-factory`` (any object with observe and target)."""
    return FixedPool(2)


@pytest.fixture
def trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "trace.jsonl"
    assert whatif_synth.main(["--seed", "4", "--minutes", "40", "--out", str(path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["jobs"] == len(path.read_text().splitlines()) > 20
    return path


def test_simulate_adds_the_predictive_pool_learned_from_a_training_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train, trace = tmp_path / "train.jsonl", tmp_path / "trace.jsonl"
    for seed, path in (("11", train), ("12", trace)):
        argv = ["--family", "staged", "--seed", seed, "--minutes", "120"]
        assert whatif_synth.main([*argv, "--out", str(path)]) == 0
    capsys.readouterr()
    argv = ["simulate", str(trace), "--label-set", "linux-gpu", "--pools", "0", "--lead", "180"]
    argv += ["--predictive", "--predictive-train", str(train)]
    assert cli.main(argv) == 0
    curve = json.loads(capsys.readouterr().out)["label_sets"]["linux-gpu"]["curve"]
    # The horizon by default: 1.25 x the longest launch, 180 s x (1 + 0.25).
    assert [p["policy"] for p in curve] == ["reactive", "predictive 281.25s"]
    reactive, predictive = curve
    assert predictive["queue_seconds"]["p50"] < reactive["queue_seconds"]["p50"]
    argv = ["recommend", str(trace), "--label-set", "linux-gpu", "--pools", "0", "--p90", "1"]
    assert cli.main([*argv, "--predictive", "--predictive-count-quantile", "1.5"]) == 1
    assert "--predictive-count-quantile 1.5: must be in (0, 1]" in capsys.readouterr().err
    assert cli.main([*argv, "--predictive", "--predictive-horizon", "-1"]) == 1
    assert "--predictive-horizon -1: must be >= 0" in capsys.readouterr().err


def test_optimum_per_label_set(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["optimum", str(trace), "--lead", "60"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["label_sets"]) == {"linux-cpu", "linux-gpu"}
    cpu = result["label_sets"]["linux-cpu"]
    assert cpu["spare_node_seconds"] > 0
    assert cpu["launches"] >= cpu["peak_concurrency"]
    assert cli.main(["optimum", str(trace), "--table"]) == 0
    assert capsys.readouterr().out.splitlines()[0].split()[:2] == ["label", "set"]


def test_simulate_sweeps_pools_lookahead_and_pool_objects(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", str(trace), "--label-set", "linux-cpu", "--pools", "0,3"]
    argv += ["--lookahead", "60", "--pool-factory", "tests.unit.whatif.test_cli:pool_of_two"]
    assert cli.main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    cpu = result["label_sets"]["linux-cpu"]
    names = [p["policy"] for p in cpu["curve"]]
    assert names == [
        "reactive",
        "fixed B=3",
        "reactive+lookahead 60s",
        "fixed B=3+lookahead 60s",
        "tests.unit.whatif.test_cli:pool_of_two",
    ]
    point = cpu["curve"][1]
    assert point["queue_seconds"]["p90"] <= cpu["curve"][0]["queue_seconds"]["p90"]
    assert point["spare_over_opt0"] > 1  # no policy beats the optimum's spare at zero wait...
    assert result["model"]["nodes"].startswith("a runner pool and a workflow pool")
    assert result["model"]["policy"]["downscale_delay"] == 300.0  # the settings' default


def test_simulate_adds_the_scheduled_pool_the_settings_build(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A scheduled pool in force is simulated as configured, beside the fixed pools.
    config = tmp_path / "capacity.yaml"
    config.write_text(
        "warm_pool:\n  mode: scheduled\n  schedule:\n"
        "    - {window: 'Mon-Sun 00:00-24:00 UTC', floor: 1}\n"
    )
    monkeypatch.setenv("CAPACITY_CONFIG_FILE", str(config))
    argv = ["simulate", str(trace), "--label-set", "linux-cpu", "--pools", "0"]
    assert cli.main(argv) == 0
    curve = json.loads(capsys.readouterr().out)["label_sets"]["linux-cpu"]["curve"]
    assert [p["policy"] for p in curve] == ["reactive", "settings (scheduled)"]
    reactive, scheduled = curve
    # The floor of one pair around the clock costs idle node time the reactive policy spares.
    assert reactive["spare_node_seconds"] < scheduled["spare_node_seconds"]
    assert reactive["ready_share"] <= scheduled["ready_share"]


def test_recommend_names_the_cheapest_setting_or_why_none(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["recommend", str(trace), "--label-set", "linux-gpu", "--pools", "0,2,6"]
    assert cli.main([*argv, "--p90", "1000"]) == 0
    result = json.loads(capsys.readouterr().out)["label_sets"]["linux-gpu"]
    assert result["recommended"]["policy"] == "reactive"  # every setting meets it: the cheapest
    assert len(result["curve"]) == 3
    assert "opt0" in result
    assert cli.main([*argv, "--p90", "0.001"]) == 0
    result = json.loads(capsys.readouterr().out)["label_sets"]["linux-gpu"]
    assert result["recommended"] is None
    assert result["reason"].startswith("no setting swept meets p90 <= 0.001s")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--pools", "a-b"], "Error: --pools 'a-b': use sizes like 0,5,10 or 0-40:5\n"),
        (["--label-set", "arm"], "Error: --label-set arm: not in the trace"),
        (["--pool-factory", "nowhere:thing"], "Error: --pool-factory 'nowhere:thing': not found\n"),
        (["--lead-jitter", "2"], "Error: --lead-jitter 2.0: must be in [0, 1]\n"),
    ],
)
def test_bad_options_are_one_line(
    trace: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert cli.main(["simulate", str(trace), *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith(message)
    assert err.count("\n") == 1


def test_a_bad_trace_line_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"job":"1","run":"1","labels":[],"queued_at":"2026-01-01T00:00:00Z"}\n')
    assert cli.main(["optimum", str(path)]) == 1
    assert capsys.readouterr().err == (
        f"Error: {path}:1: field labels: expected a non-empty list of strings\n"
    )


def test_simulate_an_outage_of_the_workflow_pool_with_and_without_the_pools_word(
    trace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["simulate", str(trace), "--label-set", "linux-cpu", "--pools", "2"]

    def point(*extra: str) -> dict[str, Any]:
        assert cli.main([*base, *extra]) == 0
        result = json.loads(capsys.readouterr().out)
        found: dict[str, Any] = result["label_sets"]["linux-cpu"]["curve"][0]
        found["model"] = result["model"]
        return found

    monkeypatch.setenv("CAPACITY_NODEPOOLS__ENABLED", "false")
    calm = point()
    out = point("--outage", "300,1500", "--outage-pool", "workflow")
    assert out["model"]["outages_after_first_arrival"] == [[300.0, 1500.0]]
    assert out["model"]["outage_pool"] == "workflow"
    assert not out["model"]["pools_say_so"]  # NodePools not read: time alone
    assert out["queue_seconds"]["p90"] > calm["queue_seconds"]["p90"]
    assert calm["stalls"] == 0
    monkeypatch.delenv("CAPACITY_NODEPOOLS__ENABLED")  # the default: the pools are read
    told = point("--outage", "300,1500", "--outage-pool", "workflow")
    assert told["model"]["pools_say_so"]
    assert told["stalls"] > 0  # runner halves released once the pool says it cannot launch
    for bad, said in (("5", "not FROM,TO"), ("9,3", "FROM must be before TO")):
        assert cli.main([*base, "--outage", bad]) == 1
        assert f"--outage {bad}: {said}" in capsys.readouterr().err
