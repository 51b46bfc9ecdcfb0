"""The placeholder contract's values must not drift between versions.

A listener adopts the placeholders an earlier one left behind only when their spec hash
matches, selects them by their label values and must not collide with their names. These
values were computed by the code that wrote placeholders before the contract had one module:
if one changes, placeholders of running clusters are swept instead of adopted (or are not
seen at all). Change a value here only together with a spec change that is meant to do that.
"""

from __future__ import annotations

from capacity.model import Role, label_value
from capacity.pods import fingerprint
from capacity.specs import HalfShape, OwnerRef, PlaceholderTemplate, placeholder_pod, pod_name

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
        for slot, now in (("0", 0.0), ("17", 1_700_000_000.0)):  # neither enters the hash
            pod = placeholder_pod(role, slot, template=TEMPLATE, now=now)
            assert fingerprint(pod["spec"]) == expected


def test_fingerprint_of_a_known_value_is_unchanged() -> None:
    assert fingerprint({"b": [1, 2], "a": {"z": None}}) == "17630869436a4c33"


def test_hashed_label_values_and_pod_names_are_unchanged() -> None:
    assert label_value(LONG) == "a-very-long-scale-set-name-a-very-long-scale-set-nam-55988083ff"
    assert pod_name(LONG, "12", Role.RUNNER) == (
        "a-very-long-scale-set-name-a-very-long-scale-s-55988083-ph-12-r"
    )
    assert pod_name("Linux.X64", "3", Role.WORKFLOW) == "linux-x64-3dfcb4aa-ph-3-w"
