"""The placeholder contract's values must not drift between versions.

A listener adopts the placeholders an earlier one left behind only when their spec hash
matches, selects them by their label values and must not collide with their names. These
values were computed by the code that wrote placeholders before the contract had one module:
if one changes, placeholders of running clusters are swept instead of adopted (or are not
seen at all). Change a value here only together with a spec change that is meant to do that.
"""

from __future__ import annotations

from capacity.contract import (
    ANNOTATION_SPEC_HASH,
    fingerprint,
    format_expiry,
    label_value,
    parse_expiry,
    short_hash,
)
from capacity.model import Role
from capacity.specs import (
    HalfShape,
    OwnerRef,
    PlaceholderTemplate,
    placeholder_pod,
    pod_name,
    spec_hash,
)

LONG = "a-very-long-scale-set-name-" * 3

TEMPLATE = PlaceholderTemplate(
    scale_set="linux-x64",
    namespace="arc-runners",
    image="public.ecr.aws/docker/library/alpine:3.21",
    ttl=900.0,
    runner=HalfShape(
        requests={"cpu": "750m", "memory": "512Mi"},
        node_selector={"pool": "runners"},
        tolerations=({"key": "ci", "operator": "Exists"},),
    ),
    workflow=HalfShape(
        requests={"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
        node_selector={"pool": "gpu"},
    ),
    owner_uid="0b6b3c0e-1111-2222-3333-444455556666",
    owner=OwnerRef(
        api_version="actions.github.com/v1alpha1",
        kind="EphemeralRunnerSet",
        name="linux-abcde",
        uid="0b6b3c0e-1111-2222-3333-444455556666",
        namespace="arc-runners",
    ),
)
SPEC_HASHES = {Role.RUNNER: "18a883e35fa6b9de", Role.WORKFLOW: "2a5d3d4aaede7315"}


def test_spec_hash_of_a_known_template_is_unchanged() -> None:
    for role, expected in SPEC_HASHES.items():
        assert spec_hash(role, TEMPLATE) == expected
        for slot, now in (("0", 0.0), ("17", 1_700_000_000.0)):  # neither enters the hash
            pod = placeholder_pod(role, slot, template=TEMPLATE, now=now)
            assert fingerprint(pod["spec"]) == expected
            assert pod["metadata"]["annotations"][ANNOTATION_SPEC_HASH] == expected


def test_fingerprint_of_a_known_value_is_unchanged() -> None:
    assert fingerprint({"b": [1, 2], "a": {"z": None}}) == "17630869436a4c33"


def test_hashed_label_values_and_pod_names_are_unchanged() -> None:
    assert label_value(LONG) == "a-very-long-scale-set-name-a-very-long-scale-set-nam-55988083ff"
    assert pod_name(LONG, "12", Role.RUNNER) == (
        "a-very-long-scale-set-name-a-very-long-scale-s-55988083-ph-12-r"
    )
    assert pod_name("Linux.X64", "3", Role.WORKFLOW) == "linux-x64-3dfcb4aa-ph-3-w"


def test_fingerprint_ignores_key_order_and_sees_values() -> None:
    a = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}
    b = {"containers": [{"resources": {"requests": {"memory": "1Gi", "cpu": "1"}}, "name": "c"}]}
    c = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]}
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) != fingerprint(c)


def test_short_hash_is_a_prefix_of_one_digest() -> None:
    assert short_hash("linux", 16).startswith(short_hash("linux", 8))
    assert len(short_hash("linux", 10)) == 10
    assert short_hash("linux", 8) != short_hash("linux-x64", 8)


def test_expiry_format_and_parse() -> None:
    assert format_expiry(0.0) == "1970-01-01T00:00:00Z"
    assert format_expiry(1_700_000_000.4) == "2023-11-14T22:13:21Z"  # rounded up
    assert parse_expiry(format_expiry(1_700_000_000.4)) == 1_700_000_001.0
    # Kubernetes' metadata timestamps, epoch seconds as a number or a string
    assert parse_expiry("2023-11-14T22:13:20Z") == 1_700_000_000.0
    assert parse_expiry(1_700_000_000) == 1_700_000_000.0
    assert parse_expiry("1700000000.5") == 1_700_000_000.5
    # absent or unreadable: epoch 0, so the policy deletes the pod as expired
    garbage: tuple[object, ...] = (None, "", "soon", [], {})
    for value in garbage:
        assert parse_expiry(value) == 0.0
