"""Small builders for capacity policy tests: placeholders, real pods, applying a plan."""

from __future__ import annotations

from dataclasses import replace

from capacity.model import (
    Observed,
    Params,
    Placeholder,
    Plan,
    PodPhase,
    RealPod,
    Role,
)
from capacity.pods import job_pod_name

R = PodPhase.RUNNING
P = PodPhase.PENDING
TTL = 900.0


def ph_name(slot: str, role: Role) -> str:
    return f"ph-{slot}-{'r' if role == Role.RUNNER else 'w'}"


def ph(
    slot: str | int,
    role: Role,
    phase: PodPhase = R,
    *,
    created: float = 0.0,
    ttl: float = TTL,
    terminating: bool = False,
    usable: bool = True,
    owned: bool = True,
) -> Placeholder:
    slot = str(slot)
    return Placeholder(
        name=ph_name(slot, role),
        slot=slot,
        role=role,
        phase=phase,
        terminating=terminating,
        node_name="node-a" if phase != P else None,
        node_usable=usable,
        created_at=created,
        expires_at=created + ttl,
        owned=owned,
    )


def pair(
    slot: str | int,
    runner: PodPhase = R,
    workflow: PodPhase = R,
    *,
    created: float = 0.0,
    ttl: float = TTL,
) -> tuple[Placeholder, Placeholder]:
    return (
        ph(slot, Role.RUNNER, runner, created=created, ttl=ttl),
        ph(slot, Role.WORKFLOW, workflow, created=created, ttl=ttl),
    )


def pairs(n: int, *, start: int = 0, created: float = 0.0, ttl: float = TTL) -> list[Placeholder]:
    out: list[Placeholder] = []
    for i in range(start, start + n):
        out.extend(pair(i, created=created, ttl=ttl))
    return out


def runner(name: str, phase: PodPhase = R, *, bound: bool = True) -> RealPod:
    return RealPod(name=name, phase=phase, bound=bound)


def workflow(runner_name: str, phase: PodPhase = R, *, bound: bool = True) -> RealPod:
    """The job pod of runner pod `runner_name`, named as runner-container-hooks names it."""
    return RealPod(name=job_pod_name(runner_name), phase=phase, bound=bound)


def apply_plan(observed: Observed, plan: Plan, params: Params, now: float) -> Observed:
    """What the cluster looks like right after the plan is carried out: deleted pods vanish,
    each created slot becomes a Pending pair that expires after the TTL, and each repaired
    slot gains its missing half (each probe its one half), Pending."""
    gone = {d.name for d in plan.deletes}
    kept = [p for p in observed.placeholders if p.name not in gone]
    made = [(slot, role) for slot in plan.creates for role in Role]
    made += [(r.slot, r.role) for r in plan.repairs + plan.probes]
    kept += [
        Placeholder(
            name=ph_name(slot, role),
            slot=slot,
            role=role,
            phase=P,
            created_at=now,
            expires_at=now + params.ttl,
        )
        for slot, role in made
    ]
    return replace(observed, placeholders=tuple(kept))


def schedule_all(observed: Observed) -> Observed:
    """The scheduler places every Pending placeholder."""
    return replace(
        observed,
        placeholders=tuple(
            replace(p, phase=R, node_name="node-b") if p.phase == P else p
            for p in observed.placeholders
        ),
    )
