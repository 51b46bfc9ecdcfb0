"""deploy/rbac: each rule explained by a comment, and exactly the operations the listener
performs granted. That they are sufficient and each needed is shown on a real API server in
tests/integration/test_shipped_rbac.py."""

from __future__ import annotations

from tests.support.deploy_files import DEPLOY, yaml_docs


def test_rbac_rules_are_each_explained() -> None:
    """Every rule is preceded by a comment naming the operation that needs it."""
    for path in sorted((DEPLOY / "rbac").glob("*.yaml")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for index, line in enumerate(lines):
            if line.strip().startswith("- apiGroups:"):
                above = lines[index - 1].strip()
                assert above.startswith("#"), f"{path.name}:{index + 1}: rule without a comment"


def test_rbac_grants_exactly_the_listed_operations() -> None:
    def rules(name: str) -> set[tuple[str, str, str]]:
        (doc, *_) = yaml_docs(DEPLOY / "rbac" / name)
        return {
            (group, resource, verb)
            for rule in doc["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }

    arc = "actions.github.com"
    # Exactly the calls base/kube.py makes for the view and the reconciler (proven
    # sufficient on a real API server in tests/integration/test_shipped_rbac.py).
    assert rules("role.yaml") == {
        *(("", "pods", v) for v in ("list", "watch", "create", "delete")),
        *((arc, "ephemeralrunners", v) for v in ("list", "watch")),
        *((arc, "ephemeralrunnersets", v) for v in ("list", "watch")),
        ("rbac.authorization.k8s.io", "roles", "get"),
        *(("", "configmaps", v) for v in ("get", "patch", "create")),
        # capacity/pod_refusals.py: one field-selected list+watch of Events.
        *(("", "events", v) for v in ("list", "watch")),
    }
    assert rules("clusterrole-node-checks.yaml") == {("", "nodes", "get")}
    # capacity/nodepool_watch.py: one list+watch of NodePools (test_nodepool_rbac.py).
    assert rules("clusterrole-nodepools.yaml") == {
        ("karpenter.sh", "nodepools", v) for v in ("get", "list", "watch")
    }
    # capacity/node_group_watch.py: one list+watch of CA's status ConfigMap, by name only
    # (test_node_group_rbac.py).
    assert rules("role-cluster-autoscaler-status.yaml") == {
        ("", "configmaps", v) for v in ("get", "list", "watch")
    }
    (role, _) = yaml_docs(DEPLOY / "rbac" / "role-cluster-autoscaler-status.yaml")
    assert role["kind"] == "Role"
    assert [r["resourceNames"] for r in role["rules"]] == [["cluster-autoscaler-status"]]
    # capacity/launch_failures.py: one field-selected list+watch of Events, in one namespace.
    assert rules("role-karpenter-events.yaml") == {("", "events", v) for v in ("list", "watch")}
    (role, _) = yaml_docs(DEPLOY / "rbac" / "role-karpenter-events.yaml")
    assert role["kind"] == "Role"
