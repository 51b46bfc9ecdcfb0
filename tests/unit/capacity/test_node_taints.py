"""Node checks: which nodes confirm the placeholders they run (capacity.pods.node_confirms),
and the view applying it with each placeholder's own tolerations."""

from __future__ import annotations

from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from base.kube import Kube, NodeState, NodeTaint
from capacity.model import Role
from capacity.pods import (
    CA_DELETION_CANDIDATE_TAINT,
    CA_TO_BE_DELETED_TAINT,
    UNUSABLE_TAINTS,
    RunnerSet,
    Toleration,
    node_confirms,
    placeholder_from,
    toleration_from,
)
from capacity.view import View

HARD = ("NoSchedule", "NoExecute")
POOL = Toleration(key="pool", operator="Equal", value="ci", effect="NoSchedule")


def confirms(*taints: NodeTaint, tolerations: tuple[Toleration, ...] = (POOL,)) -> bool:
    return node_confirms(unschedulable=False, taints=taints, tolerations=tolerations)


def test_a_tolerated_taint_keeps_the_node_and_any_other_hard_taint_does_not() -> None:
    assert confirms(NodeTaint("pool", "ci", "NoSchedule"))
    assert not confirms(NodeTaint("pool", "gpu", "NoSchedule"))  # value differs
    assert not confirms(NodeTaint("maintenance", "", "NoSchedule"))
    assert not confirms(NodeTaint("maintenance", "", "NoExecute"))
    # a drain tool's own taint, not one of the well-known ones: still not confirmed
    assert not confirms(NodeTaint("example.com/draining", "true", "NoSchedule"))


def test_cluster_autoscaler_taints() -> None:
    # About to be removed: never confirmed, even by a pod that tolerates everything.
    everything = (Toleration(operator="Exists"),)
    assert not confirms(NodeTaint(CA_TO_BE_DELETED_TAINT, "1764000000", "NoSchedule"))
    assert not confirms(
        NodeTaint(CA_TO_BE_DELETED_TAINT, "1764000000", "NoSchedule"), tolerations=everything
    )
    # Only marked unneeded (PreferNoSchedule): the pod runs there and still counts.
    assert confirms(NodeTaint(CA_DELETION_CANDIDATE_TAINT, "1764000000", "PreferNoSchedule"))


def test_cordoned_is_never_confirmed() -> None:
    assert not node_confirms(unschedulable=True, taints=(), tolerations=(Toleration("", "Exists"),))


def test_a_noexecute_toleration_with_seconds_only_delays_the_eviction() -> None:
    taint = NodeTaint("flaky", "", "NoExecute")
    assert confirms(taint, tolerations=(Toleration("flaky", "Exists", effect="NoExecute"),))
    bounded = Toleration("flaky", "Exists", effect="NoExecute", seconds=300)
    assert not confirms(taint, tolerations=(bounded,))


def test_tolerations_are_read_from_the_pod_spec() -> None:
    raw = {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}
    assert toleration_from(raw) == Toleration("k", "Exists", "", "NoExecute", 30)
    assert toleration_from({"key": "k", "value": "v"}) == Toleration("k", "Equal", "v", "", None)


# --- properties ---------------------------------------------------------------------------

keys = st.sampled_from(
    ["pool", "gpu", "maintenance", CA_DELETION_CANDIDATE_TAINT, *UNUSABLE_TAINTS]
)
values = st.sampled_from(["", "ci", "x"])
effects = st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"])
taints = st.builds(NodeTaint, keys, values, effects)
tolerations = st.builds(
    Toleration,
    st.sampled_from(["", "pool", "gpu", "maintenance"]),
    st.sampled_from(["Equal", "Exists"]),
    values,
    st.sampled_from(["", *HARD, "PreferNoSchedule"]),
    st.sampled_from([None, 60]),
)


@given(st.lists(taints, max_size=4), st.lists(tolerations, max_size=3), taints)
def test_one_more_taint_never_makes_a_node_confirm(
    node: list[NodeTaint], given_: list[Toleration], extra: NodeTaint
) -> None:
    before = node_confirms(unschedulable=False, taints=node, tolerations=given_)
    after = node_confirms(unschedulable=False, taints=[*node, extra], tolerations=given_)
    assert not after or before


@given(st.lists(taints, max_size=4), st.lists(tolerations, max_size=3))
def test_soft_taints_never_change_the_answer(
    node: list[NodeTaint], given_: list[Toleration]
) -> None:
    hard = [t for t in node if t.effect in HARD or t.key in UNUSABLE_TAINTS]
    assert node_confirms(unschedulable=False, taints=node, tolerations=given_) == node_confirms(
        unschedulable=False, taints=hard, tolerations=given_
    )


@given(st.lists(taints, max_size=4))
def test_a_pod_tolerating_everything_is_stopped_only_by_the_removal_taints(
    node: list[NodeTaint],
) -> None:
    got = node_confirms(unschedulable=False, taints=node, tolerations=[Toleration("", "Exists")])
    assert got == (not any(t.key in UNUSABLE_TAINTS for t in node))


# --- the view -----------------------------------------------------------------------------

OWNER = "owner-uid"


def placeholder(name: str, node: str, tolerations: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {
                "capacity-listener.dev/slot": name,
                "capacity-listener.dev/role": "placeholder-runner",
            },
            "ownerReferences": [{"uid": OWNER}],
        },
        "spec": {"nodeName": node, "tolerations": tolerations},
        "status": {"phase": "Running"},
    }


def test_the_view_holds_each_node_against_the_placeholders_tolerations() -> None:
    view = View(
        cast(Kube, None),
        placeholder_namespace="ns",
        runner_namespace="ns",
        runner_set_name="set",
        scale_set_name="set",
        node_checks=True,
    )
    view.runner_set = RunnerSet(name="set", uid=OWNER, pod_spec={})
    pool = [{"key": "pool", "value": "ci", "effect": "NoSchedule"}]
    for name, node in (("a", "pool-node"), ("b", "foreign"), ("c", "candidate"), ("d", "going")):
        got = placeholder_from(placeholder(name, node, pool))
        assert got is not None
        view.placeholders[name] = got
    own = NodeTaint("pool", "ci", "NoSchedule")
    view.nodes.update(
        {
            "pool-node": NodeState("pool-node", False, (own,)),
            "foreign": NodeState(
                "foreign", False, (own, NodeTaint("dedicated", "db", "NoSchedule"))
            ),
            "candidate": NodeState(
                "candidate",
                False,
                (own, NodeTaint(CA_DELETION_CANDIDATE_TAINT, "1", "PreferNoSchedule")),
            ),
            "going": NodeState(
                "going", False, (own, NodeTaint(CA_TO_BE_DELETED_TAINT, "1", "NoSchedule"))
            ),
        }
    )
    usable = {p.name: p.node_usable for p in view.snapshot().placeholders}
    assert usable == {"a": True, "b": False, "c": True, "d": False}
    assert view.on_deletion_candidates() == 1
    assert {p.placeholder.role for p in view.placeholders.values()} == {Role.RUNNER}
