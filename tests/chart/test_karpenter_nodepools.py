"""The example Karpenter NodePools (deploy/karpenter/nodepools.yaml) fit the chart's example
scale sets (ci/example-values.yaml): each placeholder half, with the node selector and
tolerations the chart gives it, lands on exactly the pool the file says, by the capacity
monitor's own placement rules (capacity/nodepools.py, what Karpenter checks before a launch);
and each pool's limits hold every scale set at maxRunners. The files also pass the real
NodePool CRD's validation (`kubectl apply --dry-run=server` on the local control plane with
Karpenter's CRDs, run by hand)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from capacity.nodepools import NodePool, nodepool_from, requests_of, resolve
from tests.support.deploy_files import DEPLOY, yaml_docs
from tests.support.helm_chart import CONTROLLER_NAMESPACE, by_kind, example_values, template

NODEPOOLS = DEPLOY / "karpenter" / "nodepools.yaml"
OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}
# Where each half of each example scale set is meant to run (the file's header says why).
EXPECTED = {
    ("arc-cpu", "runner"): "arc-cpu",
    ("arc-cpu", "workflow"): "arc-cpu",
    ("arc-gpu", "runner"): "arc-cpu",
    ("arc-gpu", "workflow"): "arc-gpu",
}


def _documents() -> list[dict[str, Any]]:
    return yaml_docs(NODEPOOLS)


def _pools() -> list[NodePool]:
    return [nodepool_from(doc) for doc in _documents()]


def test_the_file_is_karpenter_v1_nodepools() -> None:
    docs = _documents()
    assert [(d["apiVersion"], d["kind"]) for d in docs] == [("karpenter.sh/v1", "NodePool")] * 2
    for doc in docs:
        spec = doc["spec"]["template"]["spec"]
        assert set(spec["nodeClassRef"]) == {"group", "kind", "name"}, doc["metadata"]["name"]
        for requirement in spec["requirements"]:
            assert requirement["operator"] in OPERATORS, requirement
        assert doc["spec"]["limits"], doc["metadata"]["name"]  # unlimited: nothing to hold back


@pytest.fixture(scope="module")
def halves(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Any]:
    """Per scale set and half: (node selector, tolerations, requests) as the chart gives
    the placeholders: the workflow half from the settings it writes, the runner half from
    the runner pod of the overlay's values (the placeholders copy the runner template)."""
    docs = template(helm_bin, example_values(), tmp_path_factory.mktemp("np"))
    configmaps = by_kind(docs, "ConfigMap")
    out: dict[tuple[str, str], Any] = {}
    for name, entry in example_values()["scaleSets"].items():
        settings = yaml.safe_load(
            configmaps[f"{CONTROLLER_NAMESPACE}/capacity-listener-{name}"]["data"]["capacity.yaml"]
        )
        runner = entry.get("runnerPod", {})
        out[name, "runner"] = (
            settings.get("node_selector", runner.get("nodeSelector") or {}),
            settings.get("tolerations", runner.get("tolerations") or []),
            runner["resources"]["requests"],
        )
        out[name, "workflow"] = (
            settings.get("workflow_node_selector") or {},
            settings.get("workflow_tolerations") or [],
            settings["workflow_resources"]["requests"],
        )
    return out


def test_each_half_lands_on_exactly_its_pool(halves: dict[tuple[str, str], Any]) -> None:
    assert set(halves) == set(EXPECTED)
    pools = _pools()
    for key, (selector, tolerations, _requests) in halves.items():
        landed = [p.name for p in resolve(pools, selector, tolerations)]
        assert landed == [EXPECTED[key]], (key, selector, tolerations, landed)


def test_the_pools_limits_hold_every_scale_set_at_max_runners(
    halves: dict[tuple[str, str], Any],
) -> None:
    needed: dict[str, dict[str, Fraction]] = {}
    for (name, half), (_selector, _tolerations, requests) in halves.items():
        runners = example_values()["scaleSets"][name]["maxRunners"]
        sums = needed.setdefault(EXPECTED[name, half], {})
        for resource, amount in requests_of(requests).items():
            sums[resource] = sums.get(resource, Fraction(0)) + amount * runners
    assert needed["arc-gpu"]["nvidia.com/gpu"] == 8  # the sums are made of the right halves
    for pool in _pools():
        for resource, amount in needed[pool.name].items():
            limit = pool.limits.get(resource)
            assert limit is not None, (pool.name, resource)  # every requested resource capped
            assert limit >= amount, (pool.name, resource, limit, amount)
