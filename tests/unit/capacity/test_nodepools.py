"""NodePool limits: the NodePool projection, placement, and the pure room check
(``capacity.nodepools``, ``policy.nodepool_room``), with Hypothesis properties."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capacity.model import Demand, DemandSource, Memory, Observed, Params, Placeholder, Role
from capacity.nodepools import (
    NodePool,
    PoolMemory,
    Requirement,
    Taint,
    can_land,
    nodepool_from,
    resolve,
)
from capacity.policy import nodepool_room, plan
from capacity.quantity import parse_quantity
from tools.localcluster.karpenter import nodepool_manifest
from tools.localcluster.testkit import OWNER_KEY

from .builders import P, R, ph, runner

HALF = {"cpu": Fraction(9, 10), "memory": Fraction(2**30)}
REQUESTS = {Role.RUNNER: HALF, Role.WORKFLOW: HALF}
OWNER_TAINT = {"key": "team", "operator": "Equal", "value": "ci", "effect": "NoSchedule"}


def pool(name: str, *, cpu: str | None = None, used: str = "0", **kw: object) -> NodePool:
    limits = {"cpu": parse_quantity(cpu)} if cpu is not None else {}
    return NodePool(name=name, limits=limits, used={"cpu": parse_quantity(used)}, **kw)  # type: ignore[arg-type]


def halves(role: Role, running: int = 0, pending: int = 0, start: int = 0) -> list[Placeholder]:
    out = [ph(start + i, role, R) for i in range(running)]
    out += [ph(start + running + i, role, P) for i in range(pending)]
    return out


def observed(*placeholders: Placeholder, **kw: object) -> Observed:
    return Observed(placeholders=tuple(placeholders), **kw)  # type: ignore[arg-type]


# --- the projection -----------------------------------------------------------------------


def test_nodepool_from_a_real_manifest() -> None:
    manifest = nodepool_manifest(
        "runners", owner="t-1", types=["c-2x"], labels={"pool": "r"}, limits={"cpu": "4"}
    )
    manifest["status"] = {"resources": {"cpu": "3600m", "memory": "4Gi", "nodes": "2"}}
    got = nodepool_from(manifest)
    assert got.name == "runners"
    assert got.labels == {OWNER_KEY: "t-1", "pool": "r"}
    assert got.limits == {"cpu": 4}
    assert got.used["cpu"] == Fraction(18, 5)
    assert got.remaining("cpu") == Fraction(2, 5)
    assert got.remaining("memory") is None  # not limited
    assert [t.effect for t in got.taints] == ["NoSchedule"]
    assert {r.key for r in got.requirements} >= {"node.kubernetes.io/instance-type"}


def test_nodepool_from_skips_unreadable_quantities() -> None:
    got = nodepool_from({"metadata": {"name": "x"}, "spec": {"limits": {"cpu": "lots"}}})
    assert got.limits == {}


# --- placement ----------------------------------------------------------------------------

CI = NodePool(
    name="ci",
    labels={"pool": "ci"},
    requirements=(
        Requirement(key="node.kubernetes.io/instance-type", operator="In", values=("c-2x",)),
        Requirement(key="gpu-count", operator="Gt", values=("0",)),
    ),
    taints=(
        Taint(key="team", value="ci", effect="NoSchedule"),
        Taint(key="soft", value="x", effect="PreferNoSchedule"),  # a preference: ignored
    ),
)


@pytest.mark.parametrize(
    ("selector", "tolerations", "lands"),
    [
        ({"pool": "ci"}, [OWNER_TAINT], True),
        ({"pool": "other"}, [OWNER_TAINT], False),  # the template's label says otherwise
        ({"pool": "ci"}, [], False),  # the NoSchedule taint is not tolerated
        ({}, [{"operator": "Exists"}], True),  # tolerates everything
        ({}, [{"key": "team", "operator": "Exists"}], True),
        ({}, [{**OWNER_TAINT, "value": "web"}], False),
        ({}, [{**OWNER_TAINT, "effect": "NoExecute"}], False),
        ({"node.kubernetes.io/instance-type": "c-2x"}, [OWNER_TAINT], True),
        ({"node.kubernetes.io/instance-type": "c-4x"}, [OWNER_TAINT], False),
        ({"gpu-count": "2"}, [OWNER_TAINT], True),
        ({"gpu-count": "0"}, [OWNER_TAINT], False),
        ({"topology.kubernetes.io/zone": "z"}, [OWNER_TAINT], True),  # well-known, free
        ({"team-label": "x"}, [OWNER_TAINT], False),  # a label the pool cannot give a node
        ({"karpenter.sh/nodepool": "ci"}, [OWNER_TAINT], True),
        ({"karpenter.sh/nodepool": "gpu"}, [OWNER_TAINT], False),
    ],
)
def test_can_land(selector: dict[str, str], tolerations: list[dict[str, str]], lands: bool) -> None:
    assert can_land(CI, selector, tolerations) is lands


def test_resolve_by_template_or_by_name() -> None:
    other = NodePool(name="web", labels={"pool": "web"})
    assert resolve([other, CI], {"pool": "ci"}, [OWNER_TAINT]) == (CI,)
    assert resolve([other, CI], {}, [OWNER_TAINT]) == (CI, other)
    assert resolve([other, CI], {"pool": "ci"}, [], named=["web", "gone"]) == (other,)


# --- the room check: examples -------------------------------------------------------------


def split(
    runner_pools: list[NodePool], workflow_pools: list[NodePool]
) -> dict[Role, tuple[NodePool, ...]]:
    return {Role.RUNNER: tuple(runner_pools), Role.WORKFLOW: tuple(workflow_pools)}


def test_an_empty_limited_pool_admits_what_its_limit_holds() -> None:
    placement = split([pool("r", cpu="4")], [pool("w")])
    room, _ = nodepool_room(placement, REQUESTS, observed(), PoolMemory())
    assert room == 4  # 4 / 0.9 halves; the workflow pool has no limit


def test_no_limit_no_pool_no_cap() -> None:
    assert (
        nodepool_room(split([pool("r")], [pool("w")]), REQUESTS, observed(), PoolMemory())[0]
        is None
    )
    assert nodepool_room(split([], []), REQUESTS, observed(), PoolMemory())[0] is None
    memory_only = {Role.RUNNER: {"cpu": Fraction(1)}, Role.WORKFLOW: {"cpu": Fraction(1)}}
    limited = NodePool(name="m", limits={"memory": parse_quantity("1Gi")})
    assert nodepool_room(split([limited], []), memory_only, observed(), PoolMemory())[0] is None


def test_pending_halves_take_their_share() -> None:
    placement = split([pool("r", cpu="4")], [])
    seen = observed(*halves(Role.RUNNER, pending=3))
    assert nodepool_room(placement, REQUESTS, seen, PoolMemory())[0] == 1


def test_usage_that_trails_the_launches_does_not_open_the_gate() -> None:
    """Four halves already run on the pool's two nodes, but status.resources still says 0
    (Karpenter updates it a moment later): no room."""
    placement = split([pool("r", cpu="4", used="0")], [])
    seen = observed(*halves(Role.RUNNER, running=4))
    assert nodepool_room(placement, REQUESTS, seen, PoolMemory())[0] == 0


def test_other_workloads_in_the_pool_count_through_its_usage() -> None:
    placement = split([pool("r", cpu="4", used="3600m")], [])
    room, _ = nodepool_room(placement, REQUESTS, observed(), PoolMemory())
    assert room == 0  # someone else's nodes: only 400m left


def test_room_freed_on_existing_nodes_is_used_again() -> None:
    """Renewal at the limit: the four halves expired and went; their nodes (and the pool's
    usage) stay, and so does the room on them."""
    placement = split([pool("r", cpu="4", used="3600m")], [])
    full = observed(*halves(Role.RUNNER, running=4))
    room, memory = nodepool_room(placement, REQUESTS, full, PoolMemory())
    assert room == 0
    room, memory = nodepool_room(placement, REQUESTS, observed(), memory)
    assert room == 4
    # A node went away (usage fell): the room it had is gone with it.
    smaller = split([pool("r", cpu="4", used="1800m")], [])
    room, _ = nodepool_room(smaller, REQUESTS, observed(), memory)
    assert room == 2


def test_a_real_runner_in_its_placeholders_room_keeps_it_taken() -> None:
    placement = split([pool("r", cpu="4", used="3600m")], [])
    full = observed(*halves(Role.RUNNER, running=4))
    _, memory = nodepool_room(placement, REQUESTS, full, PoolMemory())
    preempted = observed(*halves(Role.RUNNER, running=3), runner_pods=(runner("arc-1"),))
    assert nodepool_room(placement, REQUESTS, preempted, memory)[0] == 0


def test_halves_sharing_a_pool_need_room_for_both() -> None:
    shared = pool("all", cpu="4")
    room, _ = nodepool_room(split([shared], [shared]), REQUESTS, observed(), PoolMemory())
    assert room == 2  # 1.8 CPU a pair


def test_a_raised_limit_admits_more() -> None:
    seen = observed(*halves(Role.RUNNER, running=4))
    _, memory = nodepool_room(
        split([pool("r", cpu="4", used="3600m")], []), REQUESTS, seen, PoolMemory()
    )
    raised = split([pool("r", cpu="6", used="3600m")], [])
    assert nodepool_room(raised, REQUESTS, seen, memory)[0] == 2


def test_plan_creates_no_more_than_the_room_and_says_how_many_it_held() -> None:
    params = Params(max_runners=10, proactive_capacity=6)
    demand = Demand(queued=0, source=DemandSource.DISABLED)
    free, _ = plan(observed(), demand, params, Memory(), 0.0)
    capped, _ = plan(observed(), demand, params, Memory(), 0.0, pool_room=4)
    assert len(free.creates) == 6
    assert len(capped.creates) == 4
    assert capped.held_by_nodepools == 2
    assert plan(observed(), demand, params, Memory(), 0.0, pool_room=-3)[0].creates == ()


# --- properties ---------------------------------------------------------------------------

CPU = st.integers(0, 40).map(lambda n: Fraction(n, 2))


@st.composite
def worlds(draw: st.DrawFn) -> tuple[dict[Role, tuple[NodePool, ...]], Observed, PoolMemory]:
    shared = draw(st.booleans())
    limit = draw(CPU)
    used = draw(CPU)
    runner_pool = NodePool(name="r", limits={"cpu": limit}, used={"cpu": used})
    workflow_pool = NodePool(name="w", limits={"cpu": draw(CPU)}, used={"cpu": draw(CPU)})
    placement = (
        split([runner_pool], [runner_pool]) if shared else split([runner_pool], [workflow_pool])
    )
    pods: list[Placeholder] = []
    for role in Role:
        pods += halves(
            role,
            running=draw(st.integers(0, 6)),
            pending=draw(st.integers(0, 3)),
            start=100 if role == Role.WORKFLOW else 0,
        )
    memory = PoolMemory(
        used=tuple(
            sorted({(p.name, "cpu", p.used["cpu"]) for found in placement.values() for p in found})
        ),
        peak=tuple((role.value, draw(st.integers(0, 8))) for role in Role),
    )
    return placement, observed(*pods), memory


def holding(seen: Observed, role: Role) -> int:
    return sum(1 for p in seen.placeholders if p.role == role and not p.terminating)


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_admitted_halves_never_exceed_what_the_limits_hold(
    world: tuple[dict[Role, tuple[NodePool, ...]], Observed, PoolMemory],
) -> None:
    """Whatever the usage and the memory say, the halves that would exist after creating
    the admitted pairs fit in the pools' limits (each half takes its request out of some
    node, and the nodes stay within the limit)."""
    placement, seen, memory = world
    room, _ = nodepool_room(placement, REQUESTS, seen, memory)
    assert room is not None
    assert room >= 0
    if placement[Role.RUNNER] == placement[Role.WORKFLOW]:
        (shared,) = placement[Role.RUNNER]
        total = sum(holding(seen, role) for role in Role) + 2 * room
        assert room == 0 or total * HALF["cpu"] <= shared.limits["cpu"]
    else:
        for role in Role:
            (only,) = placement[role]
            assert room == 0 or (holding(seen, role) + room) * HALF["cpu"] <= only.limits["cpu"]


@settings(max_examples=300, deadline=None)
@given(worlds(), st.integers(1, 10))
def test_raising_a_limit_never_lowers_the_room(
    world: tuple[dict[Role, tuple[NodePool, ...]], Observed, PoolMemory], more: int
) -> None:
    placement, seen, memory = world
    before, _ = nodepool_room(placement, REQUESTS, seen, memory)
    raised = {
        role: tuple(replace(p, limits={"cpu": p.limits["cpu"] + more}) for p in found)
        for role, found in placement.items()
    }
    after, _ = nodepool_room(raised, REQUESTS, seen, memory)
    assert before is not None
    assert after is not None
    assert after >= before


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_the_check_is_stable_once_applied(
    world: tuple[dict[Role, tuple[NodePool, ...]], Observed, PoolMemory],
) -> None:
    """Checking again with the returned memory (nothing changed) gives the same room."""
    placement, seen, memory = world
    first, memory = nodepool_room(placement, REQUESTS, seen, memory)
    second, again = nodepool_room(placement, REQUESTS, seen, memory)
    assert first == second
    assert again == memory


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 12), st.integers(-2, 12), st.integers(0, 8))
def test_the_cap_only_removes_creates(proactive: int, room: int, pending: int) -> None:
    """A cap changes nothing but the number of creates: same deletes, same value."""
    params = Params(max_runners=10, proactive_capacity=proactive, max_pending_pairs=8)
    seen = observed(
        *[p for i in range(pending) for p in (ph(i, Role.RUNNER, P), ph(i, Role.WORKFLOW, P))]
    )
    demand = Demand(queued=0, source=DemandSource.DISABLED)
    free, _ = plan(seen, demand, params, Memory(), 0.0)
    capped, _ = plan(seen, demand, params, Memory(), 0.0, pool_room=room)
    assert len(capped.creates) == min(len(free.creates), max(0, room))
    assert capped.held_by_nodepools == len(free.creates) - len(capped.creates)
    assert capped.deletes == free.deletes
    assert capped.advertised == free.advertised
