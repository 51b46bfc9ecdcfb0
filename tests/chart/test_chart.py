"""The companion chart (charts/capacity-listener) rendered by the real, pinned Helm: the
listener account it binds equals `ghalistener rbac`'s on generated inputs (non-ASCII
included), its rules equal what the code needs, its objects equal the shipped deploy/ files,
and the schema refuses bad values naming the field (NOTES need an install:
tests/integration/test_chart_install.py; the ARC overlay: test_overlays.py; monitoring:
test_monitoring.py). Skipped without the Helm build on a
developer machine, failing in CI (tests/support/helm_chart.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capacity.settings import CapacitySettings
from listener.rbac import listener_name, manifests
from tests.support.deploy_files import DEPLOY, ROOT, hook_template, yaml_docs
from tests.support.helm_chart import (
    CHART,
    CONTROLLER_NAMESPACE,
    by_kind,
    example_values,
    helm,
    scale_set,
    template,
    template_error,
)

_WAITER = "capacity-listener-account-wait"  # the helm test pod that waits for the accounts


def test_helm_lint_passes_with_the_example_values(helm_bin: Path) -> None:
    result = helm(
        helm_bin,
        "lint",
        "--strict",
        str(CHART),
        "--values",
        str(CHART / "ci" / "example-values.yaml"),
    )
    assert result.returncode == 0, result.stdout + result.stderr


_LABEL = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?\Z", fullmatch=True)
_TEXT = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=12)
_URL = st.builds(
    lambda host, path, slash: f"https://{host}/{path}{'/' if slash else ''}",
    _LABEL,
    _TEXT.filter(lambda t: not any(c.isspace() for c in t)),
    st.booleans(),
)
_SETS = st.dictionaries(
    _LABEL, st.tuples(_LABEL, _URL, _TEXT.filter(lambda t: t.strip() == t)), min_size=1, max_size=4
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sets=_SETS)
def test_bound_account_equals_the_python_function(
    helm_bin: Path, tmp_path_factory: pytest.TempPathFactory, sets: dict[str, tuple[str, str, str]]
) -> None:
    """Helm's integer-arithmetic FNV-1a names the same account as listener/rbac.py, on
    generated names, namespaces, URLs (trailing `/`, non-ASCII) and runner groups."""
    values = {
        "priorityClasses": {"create": False},
        "scaleSets": {
            name: scale_set(namespace, url, group) for name, (namespace, url, group) in sets.items()
        },
    }
    docs = template(helm_bin, values, tmp_path_factory.mktemp("h"))
    bindings = by_kind(docs, "RoleBinding")
    for name, (namespace, url, group) in sets.items():
        (subject,) = bindings[f"{namespace}/capacity-listener-{name}"]["subjects"]
        assert subject == {
            "kind": "ServiceAccount",
            "name": listener_name(name, namespace, group, url),
            "namespace": CONTROLLER_NAMESPACE,
        }, (name, namespace, url, group)


def test_role_and_binding_equal_ghalistener_rbac(helm_bin: Path, tmp_path: Path) -> None:
    values = example_values()
    docs = template(helm_bin, values, tmp_path)
    for name, entry in values["scaleSets"].items():
        role, binding = manifests(
            scale_set=name,
            namespace=entry["namespace"],
            runner_group=entry.get("runnerGroup", ""),
            github_config_url=entry["githubConfigUrl"],
            controller_namespace=CONTROLLER_NAMESPACE,
        )
        key = f"{entry['namespace']}/capacity-listener-{name}"
        assert by_kind(docs, "Role")[key]["rules"] == role["rules"]
        assert by_kind(docs, "RoleBinding")[key]["subjects"] == binding["subjects"]
        assert by_kind(docs, "RoleBinding")[key]["roleRef"] == binding["roleRef"]


def test_group_binding_is_opt_in(helm_bin: Path, tmp_path: Path) -> None:
    values = {"scaleSets": {"arc-cpu": scale_set()}, "rbac": {"bindControllerNamespaceGroup": True}}
    bindings = by_kind(template(helm_bin, values, tmp_path), "RoleBinding")
    binding = bindings["arc-runners/capacity-listener-arc-cpu"]
    (shipped,) = yaml_docs(DEPLOY / "rbac" / "rolebinding.yaml")
    assert binding["subjects"][1] == shipped["subjects"][0]  # system:serviceaccounts:arc-systems


def test_cluster_roles_only_for_the_scale_sets_that_need_them(
    helm_bin: Path, tmp_path: Path
) -> None:
    docs = template(helm_bin, example_values(), tmp_path)
    gpu = listener_name("arc-gpu", "arc-runners", "gpu-runners", "https://github.com/my-org")
    cpu = listener_name("arc-cpu", "arc-runners", "", "https://github.com/my-org")
    # Only arc-gpu sets node_checks; both read NodePools (on unless set false).
    for suffix, accounts in (("node-checks", [gpu]), ("nodepools", [cpu, gpu])):
        (shipped, _) = yaml_docs(DEPLOY / "rbac" / f"clusterrole-{suffix}.yaml")
        role = by_kind(docs, "ClusterRole")[f"/capacity-listener-{suffix}"]
        binding = by_kind(docs, "ClusterRoleBinding")[f"/capacity-listener-{suffix}"]
        assert role["rules"] == shipped["rules"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": name, "namespace": CONTROLLER_NAMESPACE}
            for name in accounts
        ]
    plain = template(helm_bin, {"scaleSets": {"arc-cpu": scale_set()}}, tmp_path)
    assert list(by_kind(plain, "ClusterRole")) == ["/capacity-listener-nodepools"]
    values = {
        "scaleSets": {
            "arc-off": scale_set(nodepools={"enabled": False}),
            "arc-stock": {**scale_set(), "capacity": {"enabled": False}},
        }
    }
    assert not by_kind(template(helm_bin, values, tmp_path), "ClusterRole")


def test_cluster_autoscaler_status_role_only_for_scale_sets_that_read_it(
    helm_bin: Path, tmp_path: Path
) -> None:
    ca = {"enabled": True, "status_namespace": "autoscaling"}
    values = {
        "scaleSets": {
            "arc-cpu": scale_set(),
            "arc-ca": scale_set(cluster_autoscaler=ca),
        }
    }
    docs = template(helm_bin, values, tmp_path)
    (shipped, _) = yaml_docs(DEPLOY / "rbac" / "role-cluster-autoscaler-status.yaml")
    roles = {k: v for k, v in by_kind(docs, "Role").items() if "-ca-status-" in k}
    assert list(roles) == ["autoscaling/capacity-listener-ca-status-arc-ca"]
    assert roles["autoscaling/capacity-listener-ca-status-arc-ca"]["rules"] == shipped["rules"]
    binding = by_kind(docs, "RoleBinding")["autoscaling/capacity-listener-ca-status-arc-ca"]
    account = listener_name("arc-ca", "arc-runners", "", "https://github.com/acme")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": CONTROLLER_NAMESPACE}
    ]


def test_karpenter_events_role_only_for_scale_sets_that_read_nodepools(
    helm_bin: Path, tmp_path: Path
) -> None:
    values = {
        "scaleSets": {
            "arc-cpu": scale_set(),  # nodepools on by default
            "arc-kp": scale_set(nodepools={"enabled": True}),
            "arc-kp2": scale_set(nodepools={"enabled": True, "events_namespace": "karpenter"}),
            "arc-off": scale_set(nodepools={"enabled": True, "events_namespace": ""}),
            "arc-no": scale_set(nodepools={"enabled": False}),
        }
    }
    docs = template(helm_bin, values, tmp_path)
    (shipped, _) = yaml_docs(DEPLOY / "rbac" / "role-karpenter-events.yaml")
    roles = {k: v for k, v in by_kind(docs, "Role").items() if "-karpenter-events-" in k}
    assert sorted(roles) == [
        "default/capacity-listener-karpenter-events-arc-cpu",
        "default/capacity-listener-karpenter-events-arc-kp",
        "karpenter/capacity-listener-karpenter-events-arc-kp2",
    ]
    for role in roles.values():
        assert role["rules"] == shipped["rules"]
    binding = by_kind(docs, "RoleBinding")["default/capacity-listener-karpenter-events-arc-kp"]
    account = listener_name("arc-kp", "arc-runners", "", "https://github.com/acme")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": CONTROLLER_NAMESPACE}
    ]


def test_capacity_configmap_takes_workflow_resources_from_the_pod_template(
    helm_bin: Path, tmp_path: Path
) -> None:
    values = example_values()
    docs = template(helm_bin, values, tmp_path)
    for name, entry in values["scaleSets"].items():
        data = by_kind(docs, "ConfigMap")[f"{CONTROLLER_NAMESPACE}/capacity-listener-{name}"]
        settings = CapacitySettings.model_validate(yaml.safe_load(data["data"]["capacity.yaml"]))
        workflow = by_kind(docs, "ConfigMap")[f"{entry['namespace']}/workflow-pod-template-{name}"]
        pod = yaml.safe_load(workflow["data"]["workflow.yaml"])
        (job,) = pod["spec"]["containers"]
        assert settings.workflow_resources is not None
        assert settings.workflow_resources.requests == job["resources"]["requests"]
        assert settings.workflow_node_selector == pod["spec"].get("nodeSelector")
        tolerations = [t.to_k8s() for t in settings.workflow_tolerations or []]
        assert tolerations == pod["spec"].get("tolerations", [])
    cpu_settings = by_kind(docs, "ConfigMap")[f"{CONTROLLER_NAMESPACE}/capacity-listener-arc-cpu"]
    shipped = yaml.safe_load((DEPLOY / "config" / "capacity-cpu.yaml").read_text())
    assert yaml.safe_load(cpu_settings["data"]["capacity.yaml"]) == shipped


@pytest.mark.parametrize("flavour", ["cpu", "gpu"])
def test_workflow_pod_template_equals_the_shipped_one(
    helm_bin: Path, tmp_path: Path, flavour: str
) -> None:
    docs = template(helm_bin, example_values(), tmp_path)
    rendered = by_kind(docs, "ConfigMap")[f"arc-runners/workflow-pod-template-arc-{flavour}"]
    assert yaml.safe_load(rendered["data"]["workflow.yaml"]) == hook_template(flavour)
    (shipped,) = yaml_docs(DEPLOY / "helm" / f"workflow-pod-template-{flavour}.yaml")
    assert shipped["metadata"]["name"] == rendered["metadata"]["name"]


def test_priority_classes_and_pdb_equal_the_shipped_ones(helm_bin: Path, tmp_path: Path) -> None:
    docs = template(helm_bin, example_values(), tmp_path)
    fields = ("value", "globalDefault", "preemptionPolicy")
    shipped = {}
    for path in sorted((ROOT / "priorityclasses").glob("*.yaml")):
        for doc in yaml_docs(path):
            if doc["kind"] == "PriorityClass":
                shipped[doc["metadata"]["name"]] = {f: doc.get(f) for f in fields}
    rendered = {
        d["metadata"]["name"]: {f: d.get(f) for f in fields}
        for d in by_kind(docs, "PriorityClass").values()
    }
    assert rendered == shipped
    # `helm uninstall` leaves them: a pod naming a missing PriorityClass is rejected.
    for pc in by_kind(docs, "PriorityClass").values():
        assert pc["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    (pdb,) = yaml_docs(DEPLOY / "pdb-runners.yaml")
    (ours,) = by_kind(docs, "PodDisruptionBudget").values()  # one runner namespace
    assert ours["spec"] == pdb["spec"]
    assert ours["metadata"]["namespace"] == "arc-runners"


def test_helm_test_pod_runs_as_the_listener_account(helm_bin: Path, tmp_path: Path) -> None:
    docs = template(helm_bin, example_values(), tmp_path)
    pods = {d["spec"]["serviceAccountName"]: d for d in docs if d["kind"] == "Pod"}
    cpu = listener_name("arc-cpu", "arc-runners", "", "https://github.com/my-org")
    gpu = listener_name("arc-gpu", "arc-runners", "gpu-runners", "https://github.com/my-org")
    assert set(pods) == {cpu, gpu, _WAITER}
    assert pods[cpu]["metadata"]["annotations"]["helm.sh/hook"] == "test"
    checks = {tuple(c["command"][3:5]) for c in pods[cpu]["spec"]["containers"]}
    assert ("create", "pods") in checks
    assert ("get", f"roles.rbac.authorization.k8s.io/{cpu}") in checks


def _with(path: str, value: Any) -> dict[str, Any]:
    values = {"scaleSets": {"arc-cpu": scale_set()}}
    node: Any = values
    *parents, leaf = path.split(".")
    for key in parents:
        node = node[key]
    node[leaf] = value
    return copy.deepcopy(values)


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        ("scaleSets.arc-cpu.capacity.proactive_capacty", 2, "proactive_capacty"),
        ("scaleSets.arc-cpu.capacity.placeholder_ttl", "15 minutes", "placeholder_ttl"),
        ("scaleSets.arc-cpu.capacity.proactive_capacity", -1, "proactive_capacity"),
        ("scaleSets.arc-cpu.capacity.demand", {"source": "hub"}, "source"),
        ("scaleSets.arc-cpu.capacity.hud", {"enabled": "yes"}, "enabled"),
        ("scaleSets.arc-cpu.workflowPod", {"resources": {"requests": {"cpu": "2 cores"}}}, "cpu"),
        ("scaleSets.arc-cpu.namespace", "Arc_Runners", "namespace"),
        ("scaleSets.arc-cpu.githubConfigUrl", "github.com/acme", "githubConfigUrl"),
        ("rbac", {"bindGroup": True}, "bindGroup"),
        ("image", {"registery": "ghcr.io"}, "registery"),
        ("imagePullSecrets", [{"nam": "x"}], "nam"),
        ("monitoring", {"podMonitor": {"enable": True}}, "enable"),
        ("webhook", {"enable": True}, "enable"),
        ("webhook", {"githubConfigUrl": "github.com/acme"}, "githubConfigUrl"),
        ("scaleSets.arc-cpu.maxRunners", -1, "maxRunners"),
        ("scaleSets.arc-cpu.runnerPod", {"resource": {}}, "resource"),
        ("scaleSets.arc-cpu.workVolumeClaim", {"storageClass": "x"}, "storageClass"),
    ],
)
def test_schema_refuses_bad_values_naming_the_field(
    helm_bin: Path, tmp_path: Path, path: str, value: Any, named: str
) -> None:
    error = template_error(helm_bin, _with(path, value), tmp_path)
    assert "values don't meet the specifications of the schema" in error, error
    assert named in error, error


def test_schema_refuses_a_scale_set_without_its_workflow_pod(
    helm_bin: Path, tmp_path: Path
) -> None:
    entry = scale_set()
    del entry["workflowPod"]
    error = template_error(helm_bin, {"scaleSets": {"arc-cpu": entry}}, tmp_path)
    assert "workflowPod" in error, error
