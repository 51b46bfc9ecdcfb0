"""The chart's own checks (templates/preflight.yaml) and the `helm test` pods' order: keys
the chart derives, set under `capacity` by hand, fail naming the key to set instead; the
namespace check needs a cluster and stays out of the way offline; the first test pod waits,
bounded, for the listener ServiceAccounts ARC creates, with the right to read only those.
(The namespace check against a real API server was run by hand; see the chart README.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from listener.rbac import listener_name
from tests.support.helm_chart import (
    CONTROLLER_NAMESPACE,
    by_kind,
    example_values,
    scale_set,
    template,
    template_error,
)

WAITER = "capacity-listener-account-wait"


@pytest.mark.parametrize(
    ("key", "value", "instead"),
    [
        ("workflow_resources", {"requests": {"cpu": "1"}}, "workflowPod.resources.requests"),
        ("workflow_node_selector", {"pool": "gpu"}, "workflowPod.nodeSelector"),
        ("workflow_tolerations", [{"key": "gpu", "operator": "Exists"}], "workflowPod.tolerations"),
    ],
)
def test_a_derived_setting_under_capacity_names_where_it_goes(
    helm_bin: Path, tmp_path: Path, key: str, value: Any, instead: str
) -> None:
    values = {"scaleSets": {"arc-cpu": scale_set(**{key: value})}}
    error = template_error(helm_bin, values, tmp_path)
    (line,) = [line for line in error.splitlines() if line.startswith("scaleSets.")]
    assert line.startswith(f"scaleSets.arc-cpu.capacity.{key}: set scaleSets.arc-cpu.{instead}")


def test_offline_rendering_skips_the_namespace_check(helm_bin: Path, tmp_path: Path) -> None:
    values = {"scaleSets": {"arc-cpu": scale_set(namespace="nowhere-yet")}}
    docs = template(helm_bin, values, tmp_path)
    assert "nowhere-yet/capacity-listener-arc-cpu" in by_kind(docs, "Role")


def _hook(doc: dict[str, Any]) -> tuple[str, int]:
    annotations = doc["metadata"]["annotations"]
    return annotations["helm.sh/hook"], int(annotations["helm.sh/hook-weight"])


def test_the_first_test_pod_waits_for_every_listener_account(
    helm_bin: Path, tmp_path: Path
) -> None:
    values = {**example_values(), "test": {"accountTimeout": 120}}
    docs = template(helm_bin, values, tmp_path)
    accounts = {
        "arc-cpu": listener_name("arc-cpu", "arc-runners", "", "https://github.com/my-org"),
        "arc-gpu": listener_name(
            "arc-gpu", "arc-runners", "gpu-runners", "https://github.com/my-org"
        ),
    }
    pods = by_kind(docs, "Pod")
    waiter = pods.pop(f"{CONTROLLER_NAMESPACE}/{WAITER}")
    # Helm runs test hooks one at a time by weight: the wait ends before any check starts.
    assert _hook(waiter) == ("test", -1)
    assert {_hook(pod) for pod in pods.values()} == {("test", 0)}
    assert waiter["spec"]["serviceAccountName"] == WAITER
    commands = {c["name"]: c["command"] for c in waiter["spec"]["containers"]}
    assert commands == {
        f"wait-{name}": [
            "kubectl", "wait", "--for=create", f"serviceaccount/{account}",
            "--namespace", CONTROLLER_NAMESPACE, "--timeout=120s",
        ]
        for name, account in accounts.items()
    }  # fmt: skip
    (rule,) = by_kind(docs, "Role")[f"{CONTROLLER_NAMESPACE}/{WAITER}"]["rules"]
    assert rule == {
        "apiGroups": [""],
        "resources": ["serviceaccounts"],
        "resourceNames": sorted(accounts.values()),
        "verbs": ["get"],  # what `kubectl wait --for=create` polls with
    }
    binding = by_kind(docs, "RoleBinding")[f"{CONTROLLER_NAMESPACE}/{WAITER}"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": WAITER, "namespace": CONTROLLER_NAMESPACE}
    ]
    # Not a hook: the release owns the waiter's account and removes it on uninstall.
    assert (
        "annotations"
        not in by_kind(docs, "ServiceAccount")[f"{CONTROLLER_NAMESPACE}/{WAITER}"]["metadata"]
    )


def test_no_scale_sets_no_test_objects(helm_bin: Path, tmp_path: Path) -> None:
    docs = template(helm_bin, {}, tmp_path)
    assert not [d for d in docs if WAITER in d["metadata"]["name"]]


def test_the_wait_is_bounded(helm_bin: Path, tmp_path: Path) -> None:
    values = {"scaleSets": {"arc-cpu": scale_set()}, "test": {"accountTimeout": 0}}
    error = template_error(helm_bin, values, tmp_path)
    assert "accountTimeout" in error, error
