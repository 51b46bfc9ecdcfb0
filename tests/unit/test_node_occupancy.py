"""tools/node_occupancy.py: a node's life split by what was on it, read from Karpenter's and
kwok's log lines (shaped as the pinned versions write them)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tools import node_occupancy
from tools.node_occupancy import (
    add_to_outcomes,
    by_role,
    is_reserve,
    lag_figures,
    occupancy,
    read,
    removal_lags,
)

T0 = 1_800_000_000.0


def _at(offset: float) -> str:
    return datetime.fromtimestamp(T0 + offset, UTC).isoformat().replace("+00:00", "Z")


def _karpenter(message: str, offset: float, claim: str, node: str | None = None) -> str:
    record: dict[str, object] = {
        "level": "INFO",
        "time": _at(offset),
        "message": message,
        "NodeClaim": {"name": claim},
    }
    if node is not None:
        record["Node"] = {"name": node}
    return json.dumps(record)


def _kwok(msg: str, offset: float, pod: str, node: str | None = None, **extra: str) -> str:
    record: dict[str, object] = {"time": _at(offset), "level": "INFO", "msg": msg, "pod": pod}
    if node is not None:
        record["node"] = node
    record.update(extra)
    return json.dumps(record)


def _one_node() -> node_occupancy.Logs:
    """A runner node: asked for at 0, joined at 60; a placeholder from 61 (preempted at 150),
    a real runner from 150 to 300; deleted at 400."""
    karpenter = [
        _karpenter("created nodeclaim", 0, "ns1-runner-abcde"),
        "not json",
        _karpenter("registered nodeclaim", 60, "ns1-runner-abcde", "node-a"),
        _karpenter("deleted node", 400, "ns1-runner-abcde", "node-a"),
    ]
    kwok = [
        _kwok("Patch pod", 61, "ns1/site-ph-3-r", "node-a"),
        _kwok("Patch pod", 70, "ns1/site-ph-3-r", "node-a"),  # a later status patch
        _kwok("failed to apply stage", 150, "ns1/site-ph-3-r", stage="pod-delete", err="not found"),
        _kwok("Patch pod", 150, "ns1/site-ers-runner-x1", "node-a"),
        _kwok("Delete pod", 300, "ns1/site-ers-runner-x1"),
    ]
    return read(karpenter, kwok)


def test_a_nodes_life_is_cut_by_what_held_it() -> None:
    found = occupancy(_one_node(), T0 - 10, T0 + 1000)
    assert found == {
        "ns1-runner": {"launching": 60.0, "real": 150.0, "placeholders": 89.0, "empty": 101.0}
    }


def test_an_empty_nodes_removal_lag_runs_from_its_last_pod_to_its_deletion() -> None:
    # The runner left at 300, the node was deleted at 400.
    assert removal_lags(_one_node(), T0, T0 + 1000) == [100.0]
    assert removal_lags(_one_node(), T0, T0 + 399) == []  # deleted after the window
    assert removal_lags(_one_node(), T0, T0 + 1000, ["ns2-runner"]) == []
    never_used = read(
        [
            _karpenter("created nodeclaim", 0, "ns1-workflow-zzzzz"),
            _karpenter("registered nodeclaim", 10, "ns1-workflow-zzzzz", "node-b"),
            _karpenter("deleted node", 55, "ns1-workflow-zzzzz", "node-b"),
        ],
        [],
    )
    assert removal_lags(never_used, T0, T0 + 100) == [45.0]  # from its registration
    # 1 s: drained (its pods evicted by its own disruption), not left empty.
    assert lag_figures([50.0, 1.0, 45.0, 60.0]) == {
        "n": 3,
        "p50": 50.0,
        "p90": 60.0,
        "drained": 1,
    }
    assert lag_figures([]) == {"n": 0, "drained": 0}


def test_the_window_clips_every_state() -> None:
    found = occupancy(_one_node(), T0 + 30, T0 + 200)
    assert found["ns1-runner"] == {
        "launching": 30.0,
        "real": 50.0,
        "placeholders": 89.0,
        "empty": 1.0,
    }


def test_a_pool_filter_lists_asked_pools_even_without_nodes() -> None:
    found = occupancy(_one_node(), T0, T0 + 1000, ["ns2-workflow"])
    assert found == {"ns2-workflow": dict.fromkeys(node_occupancy.STATES, 0.0)}


def test_a_node_still_up_and_a_pod_still_placed_count_to_the_end() -> None:
    logs = read(
        [
            _karpenter("created nodeclaim", 0, "ns1-workflow-zzzzz"),
            _karpenter("registered nodeclaim", 10, "ns1-workflow-zzzzz", "node-b"),
        ],
        [_kwok("Patch pod", 20, "ns1/overprovisioning-workflow-5f-abc", "node-b")],
    )
    found = occupancy(logs, T0, T0 + 100)["ns1-workflow"]
    assert found == {"launching": 10.0, "real": 0.0, "placeholders": 80.0, "empty": 10.0}


def test_real_pods_win_over_placeholders_on_one_node() -> None:
    logs = read(
        [
            _karpenter("created nodeclaim", 0, "p-runner-aaaaa"),
            _karpenter("registered nodeclaim", 0, "p-runner-aaaaa", "n"),
            _karpenter("deleted node", 100, "p-runner-aaaaa", "n"),
        ],
        [
            _kwok("Patch pod", 0, "p/s-ph-1-r", "n"),
            _kwok("Patch pod", 20, "p/s-ers-runner-1", "n"),
            _kwok("Delete pod", 40, "p/s-ers-runner-1"),
            _kwok("Delete pod", 90, "p/s-ph-1-r"),
        ],
    )
    found = occupancy(logs, T0, T0 + 100)["p-runner"]
    assert found == {"launching": 0.0, "real": 20.0, "placeholders": 70.0, "empty": 10.0}


@pytest.mark.parametrize(
    ("pod", "reserve"),
    [
        ("ns/site-a-ph-12-r", True),
        ("ns/site-b-ph-0-w", True),
        ("ns/overprovisioning-runner-6874cc5866-vc9hx", True),
        ("ns/site-a-ers-runner-4eq7x", False),
        ("ns/site-a-ers-runner-4eq7x-workflow", False),
    ],
)
def test_reserve_pods_are_placeholders_and_pause_pods(pod: str, reserve: bool) -> None:
    assert is_reserve(pod) is reserve


def test_by_role_sums_pools_per_role_and_in_total() -> None:
    per_pool = {
        "a-runner": {"launching": 1.0, "real": 2.0, "placeholders": 3.0, "empty": 4.0},
        "b-runner": {"launching": 1.0, "real": 1.0, "placeholders": 1.0, "empty": 1.0},
        "a-workflow": {"launching": 5.0, "real": 0.0, "placeholders": 0.0, "empty": 0.0},
    }
    roles = by_role(per_pool)
    assert roles["runner"] == {"launching": 2.0, "real": 3.0, "placeholders": 4.0, "empty": 5.0}
    assert roles["total"] == {"launching": 7.0, "real": 3.0, "placeholders": 4.0, "empty": 5.0}


def test_add_to_outcomes_maps_variants_by_their_listeners_namespaces(tmp_path: Path) -> None:
    variant_dir = tmp_path / "seed4-ours_demand"
    variant_dir.mkdir()
    config = {"runner_scale_set_name": "site-a", "ephemeral_runner_set_namespace": "ns1"}
    (variant_dir / "listener-site-a-1-config.json").write_text(json.dumps(config))
    stamp = _at(-5)
    (variant_dir / "listener-site-a-1.log").write_text(
        f"--- listener-site-a-1 starting\ntime={stamp} level=INFO msg=hello\n"
    )
    document: dict[str, Any] = {
        "seeds": {
            "4": {
                "window_s": 1000.0,
                "variants": {
                    "ours_demand": {"per_pool": {"site-a/runner": {"node_seconds": 400.0}}},
                    "stock_min0": {"per_pool": {}},
                },
            }
        }
    }
    missing = add_to_outcomes(document, _one_node(), tmp_path)
    own = document["seeds"]["4"]["variants"]["ours_demand"]
    assert own["node_seconds_by_occupancy"]["total"] == {
        "launching": 60.0,
        "real": 150.0,
        "placeholders": 89.0,
        "empty": 101.0,
    }
    assert own["per_pool"]["site-a/runner"]["occupancy_s"]["placeholders"] == 89.0
    assert own["empty_before_removal_s"] == {"n": 1, "p50": 100.0, "p90": 100.0, "drained": 0}
    assert missing == [f"seed 4 stock_min0: no listener config under {tmp_path}"]


def test_the_command_says_which_log_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert node_occupancy.main([str(tmp_path)]) == 2
    assert "karpenter.log does not exist" in capsys.readouterr().err
