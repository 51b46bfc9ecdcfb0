"""The PriorityClass manifests form the ladder the placeholders rely on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from capacity.model import Role

DIRECTORY = Path(__file__).resolve().parents[3] / "priorityclasses"


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((DIRECTORY / name).read_text())
    assert isinstance(data, dict)
    return data


def test_kustomization_lists_every_class() -> None:
    kustomization = load("kustomization.yaml")
    files = sorted(p.name for p in DIRECTORY.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == files
    assert len(files) == 4


def test_the_ladder() -> None:
    classes = {}
    for name in load("kustomization.yaml")["resources"]:
        manifest = load(name)
        assert manifest["apiVersion"] == "scheduling.k8s.io/v1"
        assert manifest["kind"] == "PriorityClass"
        assert manifest["globalDefault"] is False
        assert manifest["description"].strip()
        assert name == manifest["metadata"]["name"] + ".yaml"
        classes[manifest["metadata"]["name"]] = manifest
    values = {name: c["value"] for name, c in classes.items()}
    assert values == {
        "arc-workflow": 20,
        "placeholder-workflow": 10,
        "arc-runner": 0,
        "placeholder-runner": -10,
    }
    policies = {name: c.get("preemptionPolicy") for name, c in classes.items()}
    assert policies == {
        "arc-workflow": None,
        "placeholder-workflow": "Never",
        "arc-runner": None,
        "placeholder-runner": "Never",
    }
    # placeholder pods name their class by role
    assert {role.value for role in Role} <= set(classes)
    # cluster-autoscaler's default expendable-pods cutoff: pods below -10 never scale up
    assert values["placeholder-runner"] >= -10
