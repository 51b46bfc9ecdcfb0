"""Hypothesis invariants of the capacity policy (docs/capacity-model.md §5)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from capacity.model import (
    Demand,
    DemandSource,
    Memory,
    Observed,
    Params,
    Placeholder,
    Plan,
    PodPhase,
    RealPod,
    Role,
)
from capacity.pods import job_pod_name
from capacity.policy import count_sides, desired_pairs, is_ready, plan

from .builders import apply_plan, ph_name

NOW = 10_000.0
World = tuple[Observed, Params, Demand, Memory]
PHASES = st.sampled_from(list(PodPhase))


@st.composite
def params_st(draw: st.DrawFn) -> Params:
    ttl = draw(st.floats(60.0, 1800.0))
    return Params(
        max_runners=draw(st.integers(0, 20)),
        proactive_capacity=draw(st.integers(0, 8)),
        max_pending_pairs=draw(st.integers(0, 8)),
        ready_timeout=draw(st.floats(0.0, 600.0)),
        downscale_delay=draw(st.floats(0.0, 900.0)),
        ttl=ttl,
        renew_before=draw(st.floats(0.0, ttl * 0.99)),
        node_checks=draw(st.booleans()),
        demand_hold=draw(st.none() | st.floats(0.0, 900.0)),
        stall_timeout=draw(st.none() | st.floats(0.0, 600.0)),
        signal_stall_timeout=draw(st.none() | st.floats(0.0, 600.0)),
        cannot_launch_at=draw(
            st.dictionaries(st.sampled_from(list(Role)), st.floats(NOW - 1200.0, NOW + 60.0))
        ),
    )


@st.composite
def placeholder_st(draw: st.DrawFn, slot: str, role: Role, params: Params) -> Placeholder:
    phase = draw(st.sampled_from([PodPhase.RUNNING] * 3 + [PodPhase.PENDING] * 2 + list(PodPhase)))
    created = NOW - draw(st.floats(0.0, params.ttl * 1.2))
    return Placeholder(
        name=ph_name(slot, role),
        slot=slot,
        role=role,
        phase=phase,
        terminating=draw(st.booleans()) and draw(st.booleans()),
        node_name=None if phase == PodPhase.PENDING else "n1",
        node_usable=draw(st.sampled_from([True, True, True, False])),
        created_at=created,
        expires_at=created + params.ttl,
        owned=draw(st.sampled_from([True] * 9 + [False])),
    )


@st.composite
def world_st(draw: st.DrawFn) -> tuple[Observed, Params, Demand, Memory]:
    params = draw(params_st())
    placeholders: list[Placeholder] = []
    for slot in map(str, range(draw(st.integers(0, 10)))):
        for role in Role:
            if draw(st.integers(0, 4)) > 0:  # mostly whole pairs, sometimes lone halves
                placeholders.append(draw(placeholder_st(slot, role, params)))
    runner_pods: list[RealPod] = []
    workflow_pods: list[RealPod] = []
    for i in range(draw(st.integers(0, 6))):
        name = f"arc-{i}"
        runner_pods.append(
            RealPod(
                name=name,
                phase=draw(PHASES),
                bound=draw(st.booleans()),
                terminating=draw(st.booleans()) and draw(st.booleans()),
            )
        )
        if draw(st.booleans()):
            workflow_pods.append(
                RealPod(
                    name=job_pod_name(name),
                    phase=draw(PHASES),
                    bound=draw(st.booleans()),
                    terminating=draw(st.booleans()) and draw(st.booleans()),
                )
            )
    observed = Observed(
        placeholders=tuple(draw(st.permutations(placeholders))),
        runner_pods=tuple(runner_pods),
        workflow_pods=tuple(workflow_pods),
        active_runners=draw(st.integers(0, 25)),
    )
    demand = Demand(
        queued=draw(st.integers(0, 40)),
        source=DemandSource.HUD,
        as_of=draw(st.none() | st.floats(NOW - 300.0, NOW)),
        started_since=draw(st.integers(0, 10)),
    )
    window = draw(st.lists(st.tuples(st.floats(NOW - 1000.0, NOW), st.integers(0, 30)), max_size=4))
    warm = draw(st.lists(st.tuples(st.floats(NOW - 1000.0, NOW), st.integers(0, 8)), max_size=4))
    memory = Memory(
        desired_window=tuple(sorted(window)),
        next_slot=draw(st.integers(0, 12)),
        warm_window=tuple(sorted(warm)),
    )
    return observed, params, demand, memory


def live_runner_halves(observed: Observed) -> int:
    return sum(1 for p in observed.placeholders if p.role == Role.RUNNER and not p.terminating)


def ready_count(pods: tuple[RealPod, ...]) -> int:
    return sum(
        1
        for p in pods
        if p.bound and not p.terminating and p.phase in (PodPhase.PENDING, PodPhase.RUNNING)
    )


@settings(max_examples=400, deadline=None)
@given(world_st())
def test_advertised_never_exceeds_max_runners(
    world: World,
) -> None:
    observed, params, demand, memory = world
    result, _ = plan(observed, demand, params, memory, NOW)
    assert 0 <= result.advertised <= params.max_runners
    assert count_sides(observed, params).advertised <= params.max_runners


@settings(max_examples=400, deadline=None)
@given(world_st(), st.data())
def test_uncounted_placeholders_never_change_advertised(world: World, data: st.DataObject) -> None:
    """Flip any placeholder that is not Running (or is terminating) to another uncounted
    state: the count does not move."""
    observed, params, _, _ = world
    uncounted = [i for i, p in enumerate(observed.placeholders) if not is_ready(p, params)]
    assume(uncounted)
    i = data.draw(st.sampled_from(uncounted))
    before = count_sides(observed, params)
    flipped = replace(
        observed.placeholders[i],
        phase=data.draw(st.sampled_from(list(PodPhase))),
        terminating=data.draw(st.booleans()),
    )
    assume(not is_ready(flipped, params))
    changed = list(observed.placeholders)
    changed[i] = flipped
    after = count_sides(replace(observed, placeholders=tuple(changed)), params)
    assert after == before


@settings(max_examples=400, deadline=None)
@given(world_st())
def test_advertised_is_backed_only_by_running_pods(
    world: World,
) -> None:
    observed, params, demand, memory = world
    result, _ = plan(observed, demand, params, memory, NOW)
    running = [
        p for p in observed.placeholders if p.phase == PodPhase.RUNNING and not p.terminating
    ]
    runner_bound = ready_count(observed.runner_pods) + sum(
        1 for p in running if p.role == Role.RUNNER
    )
    workflow_bound = ready_count(observed.workflow_pods) + sum(
        1 for p in running if p.role == Role.WORKFLOW
    )
    assert result.advertised <= min(runner_bound, workflow_bound)
    # the plan's value is exactly the count of the snapshot once the deletes are done
    applied = apply_plan(observed, result, params, NOW)
    assert result.advertised == count_sides(applied, params).advertised


@settings(max_examples=400, deadline=None)
@given(world_st())
def test_desired_pairs_within_headroom(world: World) -> None:
    observed, params, demand, memory = world
    result, _ = plan(observed, demand, params, memory, NOW)
    assert 0 <= result.desired_pairs <= max(0, params.max_runners - observed.active_runners)


@settings(max_examples=400, deadline=None)
@given(world_st())
def test_creates_never_push_runners_over_max_runners(
    world: World,
) -> None:
    """ci-infra #528: placeholders created by a pass fit in max_runners − active runners,
    and no pass leaves more placeholder-runners than max_runners."""
    observed, params, demand, memory = world
    result, _ = plan(observed, demand, params, memory, NOW)
    applied = apply_plan(observed, result, params, NOW)
    live = live_runner_halves(applied)
    if result.creates:
        assert live <= max(0, params.max_runners - observed.active_runners)
    assert live <= max(params.max_runners, live_runner_halves(observed))


def real_runners(observed: Observed) -> int:
    """Real runners holding or about to take runner room: active EphemeralRunners (also
    those whose pod does not exist yet), or the runner pods alive, whichever is more."""
    alive = sum(
        1
        for p in observed.runner_pods
        if not p.terminating and p.phase in (PodPhase.PENDING, PodPhase.RUNNING)
    )
    return max(observed.active_runners, alive)


@settings(max_examples=600, deadline=None)
@given(world_st())
def test_runner_side_never_held_beyond_max_runners(world: World) -> None:
    """Through creates (issue: 8 pairs and 7 runners being created held 15 runner slots
    against max_runners 8): after every pass, live placeholder-runners plus real runners —
    counting runners whose pods are still being created — stay within max_runners. Runners
    alone above it (max_runners lowered) leave no placeholder-runner."""
    observed, params, demand, memory = world
    assume(observed.synced)
    result, _ = plan(observed, demand, params, memory, NOW)
    applied = apply_plan(observed, result, params, NOW)
    assert live_runner_halves(applied) <= max(0, params.max_runners - real_runners(observed))


@settings(max_examples=400, deadline=None)
@given(world_st())
def test_plan_is_idempotent(world: World) -> None:
    observed, params, demand, memory = world
    first, memory = plan(observed, demand, params, memory, NOW)
    applied = apply_plan(observed, first, params, NOW)
    second, again = plan(applied, demand, params, memory, NOW)
    assert second.creates == ()
    assert second.deletes == ()
    assert second.advertised == first.advertised
    # The one step that may follow: a slot whose half this pass deleted (an orphan, a
    # finished pod) gets that half back once its name is free (a pod cannot be created
    # under the name of one being deleted).
    freed = {(p.slot, p.role) for p in observed.placeholders if p.name in first_deleted(first)}
    assert all((r.slot, r.role) in freed for r in second.repairs)
    if not second.repairs:
        assert again == memory


def first_deleted(result: Plan) -> set[str]:
    return {d.name for d in result.deletes}


@settings(max_examples=400, deadline=None)
@given(world_st(), st.integers(1, 20))
def test_more_demand_never_means_fewer_pairs(world: World, extra: int) -> None:
    observed, params, demand, memory = world
    more = replace(demand, queued=demand.queued + extra)
    low, _ = plan(observed, demand, params, memory, NOW)
    high, _ = plan(observed, more, params, memory, NOW)
    assert high.desired_pairs >= low.desired_pairs
    assert high.target_pairs >= low.target_pairs
    # Placeholders after the pass, not creates: at the max_runners cap a pass with less
    # demand may replace a renewing pair (delete one, create one) where one with more keeps
    # it, since a replacement would go over the cap (make-before-break, step 6).
    after_low = len(apply_plan(observed, low, params, NOW).placeholders)
    after_high = len(apply_plan(observed, high, params, NOW).placeholders)
    assert after_high >= after_low
    assert len(high.deletes) <= len(low.deletes)
    assert desired_pairs(params, more, observed.active_runners) >= desired_pairs(
        params, demand, observed.active_runners
    )


@settings(max_examples=400, deadline=None)
@given(world_st())
def test_pending_pairs_after_a_pass_within_the_in_flight_cap(
    world: World,
) -> None:
    observed, params, demand, memory = world
    first, memory = plan(observed, demand, params, memory, NOW)
    applied = apply_plan(observed, first, params, NOW)
    second, _ = plan(applied, demand, params, memory, NOW)
    assert second.pending_pairs <= params.max_pending_pairs


@settings(max_examples=300, deadline=None)
@given(world_st())
def test_deletes_name_existing_live_pods_and_creates_are_new_slots(
    world: World,
) -> None:
    observed, params, demand, memory = world
    result, _ = plan(observed, demand, params, memory, NOW)
    live = {p.name for p in observed.placeholders if not p.terminating}
    names = [d.name for d in result.deletes]
    assert len(names) == len(set(names))
    assert set(names) <= live
    assert not set(result.creates) & {p.slot for p in observed.placeholders}
    assert len(result.creates) + len(result.repairs) <= params.max_pending_pairs
    # A repair gives a lone half, live and kept, its missing half, whose name is free.
    present = {p.name for p in observed.placeholders}
    deleted = {d.name for d in result.deletes}
    kept_roles: dict[str, set[Role]] = {}
    for p in observed.placeholders:
        if not p.terminating and p.name not in deleted:
            kept_roles.setdefault(p.slot, set()).add(p.role)
    for repair in result.repairs:
        assert kept_roles.get(repair.slot) == set(Role) - {repair.role}
        assert ph_name(repair.slot, repair.role) not in present
    assert len({r.slot for r in result.repairs}) == len(result.repairs)
