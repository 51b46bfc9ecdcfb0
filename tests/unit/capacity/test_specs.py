"""Placeholder pod manifests."""

from __future__ import annotations

import re
from typing import Any

import pytest

from capacity.contract import (
    ANNOTATION_EXPIRES_AT,
    ANNOTATION_OWNER_UID,
    ANNOTATION_SAFE_TO_EVICT,
    ANNOTATION_SCALE_SET,
    ANNOTATION_SPEC_HASH,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    LABEL_SCALE_SET,
    LABEL_SLOT,
    fingerprint,
    format_expiry,
    label_value,
    placeholder_selector,
)
from capacity.model import Role
from capacity.pods import placeholder_from
from capacity.settings import load_capacity_settings
from capacity.specs import (
    HalfShape,
    OwnerRef,
    PlaceholderTemplate,
    build_template,
    placeholder_pod,
    pod_name,
    spec_hash,
    template_requests,
)

NOW = 1_700_000_000.0
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

RUNNER_TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "runner"}},
    "spec": {
        "nodeSelector": {"pool": "runners"},
        "tolerations": [{"key": "ci", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [
            {"name": "sidecar", "resources": {"requests": {"cpu": "50m"}}},
            {"name": "runner", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}},
        ],
    },
}


ERS_UID = "0b6b3c0e-1111-2222-3333-444455556666"


def owner(namespace: str = "arc-runners") -> OwnerRef:
    return OwnerRef(
        api_version="actions.github.com/v1alpha1",
        kind="EphemeralRunnerSet",
        name="linux-abcde",
        uid=ERS_UID,
        namespace=namespace,
    )


def template(**overrides: Any) -> PlaceholderTemplate:
    base: dict[str, Any] = {
        "scale_set": "linux-x64",
        "namespace": "arc-runners",
        "image": "public.ecr.aws/docker/library/alpine:3.21",
        "ttl": 900.0,
        "runner": HalfShape(
            requests={"cpu": "750m", "memory": "512Mi"},
            node_selector={"pool": "runners"},
            tolerations=({"key": "ci", "operator": "Exists"},),
        ),
        "workflow": HalfShape(
            requests={"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
            node_selector={"pool": "gpu"},
        ),
        "owner_uid": ERS_UID,
        "owner": owner(),
    }
    base.update(overrides)
    return PlaceholderTemplate(**base)


def test_runner_half_manifest() -> None:
    pod = placeholder_pod(Role.RUNNER, "12", template=template(), now=NOW)
    meta, spec = pod["metadata"], pod["spec"]
    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    assert meta["name"] == "linux-x64-ph-12-r"
    assert meta["namespace"] == "arc-runners"
    assert meta["labels"] == {
        LABEL_SCALE_SET: "linux-x64",
        LABEL_SLOT: "12",
        LABEL_ROLE: "placeholder-runner",
        LABEL_MANAGED_BY: "capacity-listener",
    }
    assert set(meta["annotations"]) == {
        ANNOTATION_SCALE_SET,
        ANNOTATION_EXPIRES_AT,
        ANNOTATION_OWNER_UID,
        ANNOTATION_SPEC_HASH,
        ANNOTATION_SAFE_TO_EVICT,
    }
    assert meta["annotations"][ANNOTATION_SCALE_SET] == "linux-x64"
    assert read_expiry(meta["annotations"][ANNOTATION_EXPIRES_AT]) == NOW + 900
    assert meta["annotations"][ANNOTATION_OWNER_UID] == ERS_UID
    assert meta["annotations"][ANNOTATION_SPEC_HASH] == fingerprint(spec)
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "actions.github.com/v1alpha1",
            "kind": "EphemeralRunnerSet",
            "name": "linux-abcde",
            "uid": "0b6b3c0e-1111-2222-3333-444455556666",
        }
    ]
    assert spec["priorityClassName"] == "placeholder-runner"
    assert spec["terminationGracePeriodSeconds"] == 0
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert "affinity" not in spec
    assert "preemptionPolicy" not in spec  # comes from the PriorityClass
    assert spec["nodeSelector"] == {"pool": "runners"}
    assert spec["tolerations"] == [{"key": "ci", "operator": "Exists"}]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 65534
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = spec["containers"]
    assert container["image"] == "public.ecr.aws/docker/library/alpine:3.21"
    assert container["command"] == ["sleep", "900"]
    assert container["resources"] == {"requests": {"cpu": "750m", "memory": "512Mi"}}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["runAsNonRoot"] is True


def test_workflow_half_uses_workflow_shape_and_limits_extended_resources() -> None:
    pod = placeholder_pod(Role.WORKFLOW, "12", template=template(), now=NOW)
    spec = pod["spec"]
    assert pod["metadata"]["name"] == "linux-x64-ph-12-w"
    assert pod["metadata"]["labels"][LABEL_ROLE] == "placeholder-workflow"
    assert spec["priorityClassName"] == "placeholder-workflow"
    assert spec["nodeSelector"] == {"pool": "gpu"}
    assert "tolerations" not in spec
    assert spec["containers"][0]["resources"] == {
        "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
        "limits": {"nvidia.com/gpu": "1"},
    }


def test_no_owner_means_no_owner_references() -> None:
    pod = placeholder_pod(Role.RUNNER, "1", template=template(owner=None), now=NOW)
    assert "ownerReferences" not in pod["metadata"]
    # ownership then rests on the annotation, which names the runner set all the same
    assert pod["metadata"]["annotations"][ANNOTATION_OWNER_UID] == ERS_UID


def test_both_halves_let_cluster_autoscaler_evict_them() -> None:
    # cluster-autoscaler will not drain a node holding a pod owned without `controller: true`
    # unless the pod says it is safe to evict: without it, placeholders pin their nodes.
    for role in Role:
        pod = placeholder_pod(role, "3", template=template(), now=NOW)
        annotations = pod["metadata"]["annotations"]
        assert annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "true"


def test_owner_annotation_names_the_runner_set_whatever_the_reference_names() -> None:
    role = OwnerRef(
        api_version="rbac.authorization.k8s.io/v1",
        kind="Role",
        name="linux-listener",
        uid="role-uid",
        namespace="arc-runners",
    )
    pod = placeholder_pod(Role.RUNNER, "1", template=template(owner=role), now=NOW)
    assert [ref["uid"] for ref in pod["metadata"]["ownerReferences"]] == ["role-uid"]
    assert pod["metadata"]["annotations"][ANNOTATION_OWNER_UID] == ERS_UID


def test_empty_owner_uid_is_refused() -> None:
    with pytest.raises(ValueError, match="owner_uid"):
        template(owner_uid="")


def test_spec_hash_is_the_annotation_and_follows_the_spec_only() -> None:
    for role in Role:
        one = placeholder_pod(role, "1", template=template(), now=NOW)
        other = placeholder_pod(role, "2", template=template(owner=None), now=NOW + 60)
        expected = spec_hash(role, template())
        assert one["metadata"]["annotations"][ANNOTATION_SPEC_HASH] == expected
        assert other["metadata"]["annotations"][ANNOTATION_SPEC_HASH] == expected
    assert spec_hash(Role.RUNNER, template()) != spec_hash(Role.WORKFLOW, template())
    assert spec_hash(Role.RUNNER, template()) != spec_hash(Role.RUNNER, template(ttl=901.0))
    assert spec_hash(Role.RUNNER, template()) != spec_hash(
        Role.RUNNER, template(image="registry.local/pause:1")
    )


def test_cross_namespace_owner_is_refused() -> None:
    with pytest.raises(ValueError, match="garbage collector would delete them at once"):
        template(owner=owner(namespace="arc-systems"))


def test_ttl_rounds_up_to_whole_seconds() -> None:
    pod = placeholder_pod(Role.RUNNER, "1", template=template(ttl=90.2), now=NOW)
    assert pod["spec"]["containers"][0]["command"] == ["sleep", "91"]


LONG = "a-very-long-scale-set-name-for-the-gpu-fleet-in-us-east-1-with-extras" * 2


@pytest.mark.parametrize(
    "scale_set",
    ["linux-x64", LONG, LONG + "x", "Mixed.Case_name", "x" * 63, "-weird-"],
    ids=["short", "long", "long-variant", "odd-characters", "exactly-63", "dashes"],
)
@pytest.mark.parametrize("slot", ["0", "123456789", "abc-1"])
def test_names_and_labels_fit_kubernetes_limits(scale_set: str, slot: str) -> None:
    for role in Role:
        name = pod_name(scale_set, slot, role)
        assert len(name) <= 63
        assert DNS_LABEL.match(name), name
        assert name == pod_name(scale_set, slot, role)  # deterministic
    value = label_value(scale_set)
    assert len(value) <= 63


def test_long_names_stay_distinct() -> None:
    assert pod_name(LONG, "1", Role.RUNNER) != pod_name(LONG + "x", "1", Role.RUNNER)
    assert label_value(LONG) != label_value(LONG + "x")
    assert pod_name("a.b", "1", Role.RUNNER) != pod_name("a-b", "1", Role.RUNNER)
    assert pod_name("linux", "1", Role.RUNNER) != pod_name("linux", "1", Role.WORKFLOW)
    assert pod_name("linux", "1", Role.RUNNER) != pod_name("linux", "11", Role.RUNNER)


def test_label_value_of_long_scale_set_is_valid() -> None:
    value = label_value("ab" * 60)
    assert len(value) == 63
    assert LABEL_VALUE.match(value)
    pod = placeholder_pod(Role.RUNNER, "1", template=template(scale_set="ab" * 60), now=NOW)
    assert pod["metadata"]["labels"][LABEL_SCALE_SET] == value
    assert pod["metadata"]["annotations"][ANNOTATION_SCALE_SET] == "ab" * 60


def test_selector_matches_the_labels() -> None:
    pod = placeholder_pod(Role.RUNNER, "1", template=template(scale_set=LONG), now=NOW)
    labels = pod["metadata"]["labels"]
    for term in placeholder_selector(LONG).split(","):
        key, value = term.split("=")
        assert labels[key] == value


@pytest.mark.parametrize("slot", ["", "UPPER", "a_b", "-1", "x" * 21])
def test_bad_slot_ids_are_refused(slot: str) -> None:
    with pytest.raises(ValueError, match="invalid slot id"):
        pod_name("linux", slot, Role.RUNNER)


def read_expiry(text: str) -> float:
    """The expiry as the watch-driven view reads it back from a placeholder."""
    obj = {
        "metadata": {
            "labels": {LABEL_ROLE: Role.RUNNER.value},
            "annotations": {ANNOTATION_EXPIRES_AT: text},
        }
    }
    parsed = placeholder_from(obj)
    assert parsed is not None
    return parsed.placeholder.expires_at


def test_expiry_round_trip_and_garbage() -> None:
    assert format_expiry(0.0) == "1970-01-01T00:00:00Z"
    assert read_expiry(format_expiry(NOW + 0.4)) == NOW + 1
    # Unreadable: epoch 0, so the policy deletes the pod as expired rather than keep it.
    assert read_expiry("soon") == 0.0


# --- build_template -------------------------------------------------------------------------

BASE_ENV = {"CAPACITY_ENABLED": "true", "CAPACITY_WORKFLOW_RESOURCES__REQUESTS__CPU": "4"}


def test_template_defaults_from_the_runner_pod_template() -> None:
    settings = load_capacity_settings(BASE_ENV)
    built = build_template(
        settings,
        scale_set="linux",
        runner_namespace="arc-runners",
        runner_pod_template=RUNNER_TEMPLATE,
        owner_uid=ERS_UID,
        owner=None,
    )
    assert built.namespace == "arc-runners"
    assert built.runner.requests == {"cpu": "1", "memory": "2Gi"}
    assert built.runner.node_selector == {"pool": "runners"}
    assert built.runner.tolerations == (
        {"key": "ci", "operator": "Exists", "effect": "NoSchedule"},
    )
    # the workflow half follows the runner half's scheduling unless told otherwise
    assert built.workflow.node_selector == {"pool": "runners"}
    assert built.workflow.tolerations == built.runner.tolerations
    assert built.workflow.requests == {"cpu": "4"}
    assert built.ttl == 900.0


def test_template_without_requests_uses_the_default_runner_size() -> None:
    settings = load_capacity_settings(BASE_ENV)
    built = build_template(
        settings,
        scale_set="linux",
        runner_namespace="arc-runners",
        runner_pod_template={"spec": {"containers": [{"name": "runner"}]}},
        owner_uid=ERS_UID,
        owner=None,
    )
    assert built.runner.requests == {"cpu": "750m", "memory": "512Mi"}
    assert built.runner.node_selector == {}


def test_limits_stand_in_for_missing_requests() -> None:
    tpl = {"spec": {"containers": [{"name": "runner", "resources": {"limits": {"cpu": "2"}}}]}}
    assert template_requests(tpl) == {"cpu": "2"}


def test_settings_override_the_runner_template() -> None:
    settings = load_capacity_settings(
        BASE_ENV
        | {
            "CAPACITY_RUNNER_RESOURCES__REQUESTS__CPU": "500m",
            "CAPACITY_NODE_SELECTOR": '{"pool": "cheap"}',
            "CAPACITY_TOLERATIONS": "[]",
            "CAPACITY_WORKFLOW_NODE_SELECTOR": '{"pool": "gpu"}',
            "CAPACITY_WORKFLOW_TOLERATIONS": '[{"key": "nvidia.com/gpu", "operator": "Exists"}]',
            "CAPACITY_PLACEHOLDER_NAMESPACE": "placeholders",
            "CAPACITY_PLACEHOLDER_IMAGE": "registry.local/pause:1",
            "CAPACITY_PLACEHOLDER_TTL": "10m",
            "CAPACITY_RENEW_BEFORE": "2m",
        }
    )
    built = build_template(
        settings,
        scale_set="linux",
        runner_namespace="arc-runners",
        runner_pod_template=RUNNER_TEMPLATE,
        owner_uid=ERS_UID,
        owner=owner(namespace="placeholders"),
    )
    assert built.namespace == "placeholders"
    assert built.image == "registry.local/pause:1"
    assert built.ttl == 600.0
    assert built.runner.requests == {"cpu": "500m"}
    assert built.runner.node_selector == {"pool": "cheap"}
    assert built.runner.tolerations == ()
    assert built.workflow.node_selector == {"pool": "gpu"}
    assert built.workflow.tolerations == ({"key": "nvidia.com/gpu", "operator": "Exists"},)
    pod = placeholder_pod(Role.WORKFLOW, "3", template=built, now=NOW)
    assert pod["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert pod["spec"]["containers"][0]["command"] == ["sleep", "600"]


def test_owner_in_the_runner_namespace_while_placeholders_elsewhere_is_refused() -> None:
    settings = load_capacity_settings(BASE_ENV | {"CAPACITY_PLACEHOLDER_NAMESPACE": "elsewhere"})
    with pytest.raises(ValueError, match="namespace 'arc-runners', placeholders in 'elsewhere'"):
        build_template(
            settings,
            scale_set="linux",
            runner_namespace="arc-runners",
            runner_pod_template=RUNNER_TEMPLATE,
            owner_uid=ERS_UID,
            owner=owner(),
        )
