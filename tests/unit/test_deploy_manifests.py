"""Every YAML file under deploy/ parses, and the Kubernetes manifests are well-formed and
free of a namespace (`kubectl apply -n` chooses it). Applied to a real API server:
tests/integration/test_deploy_apply.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.deploy_files import ALERTS, DEPLOY, yaml_docs

YAML_FILES = sorted(DEPLOY.rglob("*.yaml"))
MANIFESTS = [
    *sorted((DEPLOY / "rbac").glob("*.yaml")),
    DEPLOY / "pdb-runners.yaml",
    *sorted((DEPLOY / "helm").glob("workflow-pod-template-*.yaml")),
    ALERTS,
]


def test_deploy_has_yaml_files() -> None:
    names = {p.relative_to(DEPLOY).as_posix() for p in YAML_FILES}
    assert names >= {
        "helm/values-capacity-cpu.yaml",
        "helm/values-capacity-gpu.yaml",
        "helm/workflow-pod-template-cpu.yaml",
        "helm/workflow-pod-template-gpu.yaml",
        "rbac/role.yaml",
        "rbac/rolebinding.yaml",
        "rbac/clusterrole-node-checks.yaml",
        "rbac/clusterrole-nodepools.yaml",
        "rbac/role-cluster-autoscaler-status.yaml",
        "rbac/role-karpenter-events.yaml",
        "pdb-runners.yaml",
        "prometheus/alerts.yaml",
    }


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_yaml_parses(path: Path) -> None:
    docs = yaml_docs(path)
    assert docs, f"{path} is empty"
    for doc in docs:
        assert isinstance(doc, dict)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_manifests_are_namespace_free_kubernetes_objects(path: Path) -> None:
    for doc in yaml_docs(path):
        assert {"apiVersion", "kind", "metadata"} <= doc.keys(), path
        assert doc["metadata"].get("name"), path
        # No hard-coded namespace: `kubectl apply -n <namespace>` must choose it.
        assert "namespace" not in doc["metadata"], f"{path}: {doc['metadata']}"
