"""``ghalistener rbac``: ARC's listener ServiceAccount name and the least-privilege RBAC."""

from __future__ import annotations

import pytest

from capacity.kept import stage_model_config_map
from listener.rbac import chart_config_url, fnv1a_32, listener_name, manifests, safe_encode


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # The published FNV-1a 32-bit test vectors (Go's hash/fnv New32a gives the same).
        (b"", 0x811C9DC5),
        (b"a", 0xE40C292C),
        (b"foobar", 0xBF9CF968),
    ],
)
def test_fnv1a_32_known_vectors(data: bytes, expected: int) -> None:
    assert fnv1a_32(data) == expected


def test_safe_encode_maps_each_character_into_the_safe_alphabet() -> None:
    # rand.SafeEncodeString: alphabet "bcdfghjklmnpqrstvwxz2456789" (27), index ord(c) % 27.
    # Digits land on: 0→4 1→5 2→6 3→7 4→8 5→9 6→b 7→c 8→d 9→f.
    assert safe_encode("0123456789") == "456789bcdf"
    assert safe_encode(str(0xE40C292C)) == "7d6b446664"  # 3826002220


def _reference_name(scale_set: str, namespace: str, group: str, url: str) -> str:
    """ARC's formula written out independently: decimal FNV-1a → SafeEncodeString → [:8]."""
    h = 0x811C9DC5
    for byte in f"{namespace}@{group}@{url}".encode():
        h = ((h ^ byte) * 16777619) % 2**32
    digits = "456789bcdf"  # the safe alphabet's characters for '0'..'9'
    return f"{scale_set}-{''.join(digits[int(d)] for d in str(h))[:8]}-listener"


@pytest.mark.parametrize(
    ("scale_set", "namespace", "group", "url"),
    [
        ("arc-cpu", "arc-runners", "", "https://github.com/acme"),
        ("arc-cpu", "arc-runners", "default", "https://github.com/acme"),
        ("linux-gpu", "ci", "gpu-runners", "https://github.com/pytorch/pytorch"),
        ("arc", "arc-runners", "", "https://ghes.example.com/enterprises/big"),
    ],
)
def test_listener_name_follows_arcs_formula(
    scale_set: str, namespace: str, group: str, url: str
) -> None:
    name = listener_name(scale_set, namespace, group, url)
    assert name == _reference_name(scale_set, namespace, group, url)
    assert len(name.split("-")[-2]) == 8


def test_every_input_changes_the_name() -> None:
    base = listener_name("arc-cpu", "arc-runners", "", "https://github.com/acme")
    assert base == "arc-cpu-85f786b5-listener"
    assert listener_name("arc-cpu", "other", "", "https://github.com/acme") != base
    assert listener_name("arc-cpu", "arc-runners", "g", "https://github.com/acme") != base
    assert listener_name("arc-cpu", "arc-runners", "", "https://github.com/acme2") != base


@pytest.mark.parametrize(
    ("given", "hashed"),
    [
        ("https://github.com/acme/", "https://github.com/acme"),
        # sprig's trimSuffix (strings.TrimSuffix) removes one `/`, not every trailing one.
        ("https://github.com/acme//", "https://github.com/acme/"),
        ("https://github.com/acme", "https://github.com/acme"),
    ],
)
def test_listener_name_hashes_the_url_as_arcs_chart_writes_it(given: str, hashed: str) -> None:
    # ARC's chart writes `trimSuffix "/" .Values.githubConfigUrl` into the scale set, and the
    # controller hashes that.
    assert chart_config_url(given) == hashed
    assert listener_name("arc-cpu", "arc-runners", "", given) == _reference_name(
        "arc-cpu", "arc-runners", "", hashed
    )


def test_cli_and_chart_url_with_trailing_slash_name_the_same_account() -> None:
    assert listener_name("arc-cpu", "arc-runners", "", "https://github.com/acme/") == (
        "arc-cpu-85f786b5-listener"
    )


def test_manifests_bind_exactly_the_listener_and_narrow_by_name() -> None:
    role, binding = manifests(
        scale_set="arc-cpu",
        namespace="arc-runners",
        runner_group="",
        github_config_url="https://github.com/acme",
        controller_namespace="arc-systems",
    )
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "arc-cpu-85f786b5-listener", "namespace": "arc-systems"}
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    by_resource = {rule["resources"][0]: rule for rule in role["rules"]}
    # ARC 0.14 generates the runner set's name (`arc-cpu-xxxxx`): no resourceNames, read only.
    assert "resourceNames" not in by_resource["ephemeralrunnersets"]
    assert by_resource["ephemeralrunnersets"]["verbs"] == ["list", "watch"]
    assert by_resource["roles"]["resourceNames"] == ["arc-cpu-85f786b5-listener"]
    assert by_resource["roles"]["verbs"] == ["get"]
    # The stage model: get and patch on its one ConfigMap, create unnarrowed.
    config_maps = [rule for rule in role["rules"] if rule["resources"] == ["configmaps"]]
    assert config_maps == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [stage_model_config_map("arc-cpu")],
            "verbs": ["get", "patch"],
        },
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
    ]
