"""The capacity monitor on the real local control plane: real kube-scheduler (priority
preemption), real garbage collector, real watches, kwok nodes of a known size.

Sizes: every placeholder half, runner pod and workflow pod requests 1 CPU / 1 GiB, so a
node with N CPUs holds N halves, and one job (runner + workflow) needs 2 CPUs. "True
capacity" below is what the nodes can really hold: the jobs running plus the job slots that
the scheduler has confirmed.

The scene itself is tests/support/monitor_scene.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from base.kube import Kube, KubeError
from capacity.settings import CapacitySettings
from capacity.settings_demand import HudSettings
from capacity.settings_values import Resources
from tests.support.monitor_scene import MonitorScene, ScaleSet
from tools.capacity_kit import (
    ROOT,
    apply_ladder,
    create_ephemeral_runner,
    create_runner_set,
    delete_runner_set,
    restart_apiserver,
    runner_pod,
    runner_pod_spec,
    wait_gc_knows_runner_sets,
    workflow_pod,
)
from tools.fake_hud import FakeHUD, Outage
from tools.localcluster import LocalCluster
from tools.waits import eventually

pytestmark = pytest.mark.cluster

SCALE_SET = "linux-cpu"
RUNNER_SET = "linux-cpu-x7k2p"
LABEL = "linux.2xlarge"
HALF = {"cpu": "1", "memory": "1Gi"}


def settings(**overrides: Any) -> CapacitySettings:
    values: dict[str, Any] = {
        "enabled": True,
        "proactive_capacity": 1,
        "recalculate_interval": 1.0,
        "placeholder_ready_timeout": 3.0,
        "workflow_resources": Resources(requests=HALF),
        "downscale_delay": 0.0,
        "max_pending_pairs": 1,
    }
    values.update(overrides)
    return CapacitySettings(**values)


@pytest.fixture
async def scene(
    kube_api: client.ApiClient, namespace: str, fake_nodes: Callable[..., dict[str, Any]]
) -> AsyncIterator[Scene]:
    await apply_ladder(kube_api)
    s = Scene(kube_api, namespace, fake_nodes)
    await create_runner_set(kube_api, namespace, RUNNER_SET, runner_pod_spec(namespace, **HALF))
    yield s
    await s.crash_runs()


class Scene(MonitorScene):
    """The test's scale set on fake kwok nodes reserved for its namespace."""

    def __init__(
        self, api: client.ApiClient, namespace: str, fake_nodes: Callable[..., dict[str, Any]]
    ) -> None:
        super().__init__(api, namespace, ScaleSet(SCALE_SET, RUNNER_SET, ("self-hosted", LABEL)))
        self.fake_nodes = fake_nodes

    def node(self, cpu: int) -> str:
        node = self.fake_nodes(cpu=str(cpu), memory=f"{2 * cpu}Gi", pods=50)
        return str(node["metadata"]["name"])

    async def runner_pdb(self) -> None:
        body = yaml.safe_load((ROOT / "deploy" / "pdb-runners.yaml").read_text())
        await client.PolicyV1Api(self.api).create_namespaced_pod_disruption_budget(self.ns, body)

    async def victims_of(self, preemptor_uid: str) -> list[tuple[str, str]]:
        """(slot, role) of each placeholder the scheduler preempted for that pod, from its
        "Preempted" events (the victims themselves are gone by then)."""

        async def found() -> list[tuple[str, str]]:
            events = await self.core.list_namespaced_event(self.ns)
            names = sorted(
                e.involved_object.name
                for e in events.items
                if e.reason == "Preempted" and preemptor_uid in (e.message or "")
            )
            return [_slot_and_role(name) for name in names]

        return await eventually(found, f"preemption events for pod {preemptor_uid}")

    async def job(self, runner: str) -> None:
        """What ARC does when a job is assigned: an EphemeralRunner and its runner pod."""
        await create_ephemeral_runner(self.api, self.ns, runner, SCALE_SET, phase="Running")
        await self.create(runner_pod(runner, owner=self.ns, scale_set=SCALE_SET, **HALF))


def _slot_and_role(pod_name: str) -> tuple[str, str]:
    """Placeholder names end in -ph-<slot>-<r|w> (capacity.specs.pod_name)."""
    *_, slot, half = pod_name.split("-")
    return slot, {"r": "placeholder-runner", "w": "placeholder-workflow"}.get(half, pod_name)


# --- the tests ----------------------------------------------------------------------------


async def test_running_pairs_are_advertised_and_pending_ones_never(scene: Scene) -> None:
    scene.node(cpu=4)  # room for two pairs
    run = scene.start(settings(proactive_capacity=3))
    await run.advertises(2)
    assert len(await scene.running_placeholders()) == 4

    # The third pair cannot fit: it stays Pending, is deleted after the ready timeout and
    # retried on a later pass, and is never advertised.
    async def timed_out() -> bool:
        return run.metric("gha_capacity_pair_deletes_total", reason="timeout") >= 2

    await eventually(timed_out, "two Pending pairs deleted for the ready timeout", 60)
    assert max(v for _, v in run.values) == 2
    assert run.metric("gha_capacity_advertised") == 2

    # New room: the pair in flight lands and is advertised.
    grown = time.monotonic()
    scene.node(cpu=2)
    await run.advertises(3)
    assert run.values_since(grown)[-1] == 3

    # The signal path advertised it; the pair metrics follow with the next reconcile pass.
    async def counted() -> bool:
        return run.metric("gha_capacity_pairs", state="running") == 3

    await eventually(counted, "three running pairs in the metrics")
    assert run.metric("gha_capacity_reconcile_last_success_timestamp_seconds") > 0
    assert run.reconciles > 0
    await run.close()
    assert await scene.placeholders() == [] or all(
        p.metadata.deletion_timestamp for p in await scene.placeholders()
    )


async def test_placeholders_as_stored_let_cluster_autoscaler_evict_them(scene: Scene) -> None:
    # What the apiserver keeps, not what the builder returns: both halves carry
    # cluster-autoscaler's safe-to-evict annotation, or CA never drains their nodes.
    scene.node(cpu=2)
    run = scene.start(settings(proactive_capacity=1))
    await run.advertises(1)
    stored = await scene.placeholders()
    assert {p.metadata.labels["capacity-listener.dev/role"] for p in stored} == {
        "placeholder-runner",
        "placeholder-workflow",
    }
    for pod in stored:
        assert pod.metadata.annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "true"
    await run.close()


async def test_preemption_hand_off_keeps_the_value_right(scene: Scene) -> None:
    await scene.runner_pdb()  # without it a workflow pod evicts the runner (see test_ladder)
    scene.node(cpu=2)  # room for exactly one job
    run = scene.start(settings(proactive_capacity=1), max_runners=5)
    await run.advertises(1)
    start = time.monotonic()

    # 1. A job arrives: the runner pod takes the placeholder-runner's place, the
    #    placeholder-workflow survives and keeps the workflow's room.
    await scene.job("r1")
    await scene.running("r1")
    roles = await scene.running_roles()
    assert sorted(roles.values()) == ["placeholder-workflow"]
    await run.advertises(1)

    # 2. The workflow pod takes the placeholder-workflow's place.
    await scene.create(workflow_pod("r1", owner=scene.ns, **HALF))
    await scene.running("r1-workflow")
    await asyncio.sleep(2)  # a few passes with the job running and the node full
    await run.advertises(1)
    # The node holds exactly one job the whole time: nothing above 1 was ever advertised,
    # although the monitor kept trying to replenish (its new pairs stayed Pending).
    assert max(run.values_since(start)) == 1

    # The side gauges come from the last full pass; one that ran while the workflow pod was
    # still taking the placeholder's place saw workflow side 0, so wait for a later one.
    def sides() -> bool:
        return (
            run.metric("gha_capacity_runner_side"),
            run.metric("gha_capacity_workflow_side"),
        ) == (1, 1)

    await eventually(sides, "a pass with runner side 1 and workflow side 1 (the job r1)", 30)

    # 3. Room appears: the monitor replenishes and the job in flight still counts.
    grown = time.monotonic()
    scene.node(cpu=2)
    await run.advertises(2)
    assert max(run.values_since(start)) == 2
    assert all(v <= 1 for t, v in run.values if start <= t < grown)
    await run.close()


async def test_a_runner_being_created_takes_a_runner_halfs_room_not_more(scene: Scene) -> None:
    """max_runners through creates (docs/capacity-model.md §5, step 3): at the cap, ARC's
    new EphemeralRunner makes the monitor delete a runner half at once (the damping would
    keep the pair for the downscale delay), so the placeholder-runner and the runner pod
    are never both held; the workflow half stays for the job's workflow pod."""
    await scene.runner_pdb()
    scene.node(cpu=2)  # room for one pair
    run = scene.start(settings(proactive_capacity=1, downscale_delay=300.0), max_runners=1)
    await run.advertises(1)

    # ARC creates the EphemeralRunner first; its controller creates the pod a moment later.
    await create_ephemeral_runner(scene.api, scene.ns, "r1", SCALE_SET, phase="Pending")

    async def runner_half_gone() -> bool:
        return sorted((await scene.running_roles()).values()) == ["placeholder-workflow"]

    await eventually(runner_half_gone, "the runner half deleted, the workflow half kept")
    assert run.metric("gha_capacity_pair_deletes_total", reason="excess") >= 1
    await scene.create(runner_pod("r1", owner=scene.ns, scale_set=SCALE_SET, **HALF))
    await scene.running("r1")  # in the freed room, nothing preempted
    await scene.create(workflow_pod("r1", owner=scene.ns, **HALF))
    await scene.running("r1-workflow")  # takes the kept workflow half's room
    await run.advertises(1)
    assert await scene.running_roles() == {}
    await run.close()


async def test_a_step_pod_is_not_counted_as_the_workflow_half(scene: Scene) -> None:
    """A container action's step pod (same runner-pod label as the job pod, priority 20)
    takes the workflow placeholder's room: the job has no room left for its workflow pod,
    and the value must say so instead of counting the step pod as the workflow half."""
    await scene.runner_pdb()
    scene.node(cpu=2)  # room for exactly one job
    run = scene.start(settings(proactive_capacity=1), max_runners=5)
    await run.advertises(1)

    await scene.job("r1")
    await scene.running("r1")
    step = workflow_pod("r1", owner=scene.ns, **HALF)
    step["metadata"]["name"] = "r1-step-a1b2c3"
    await scene.create(step)
    step_pod = await scene.running("r1-step-a1b2c3")
    victims = await scene.victims_of(step_pod.metadata.uid)
    assert [role for _, role in victims] == ["placeholder-workflow"]

    await run.advertises(0)
    # The side gauges are those of the last full pass, which can be older than the drop (a
    # drop is advertised at once): wait for a pass that saw the step pod.

    async def sides() -> bool:
        return (
            run.metric("gha_capacity_workflow_side"),
            run.metric("gha_capacity_runner_side"),
        ) == (0, 1)

    await eventually(sides, "a pass with workflow side 0 (the step pod) and runner side 1 (r1)")
    assert run.advertised == 0
    await run.close()


async def test_workflow_pod_evicting_another_slots_placeholder(scene: Scene) -> None:
    await scene.runner_pdb()
    scene.node(cpu=2)
    scene.node(cpu=2)  # two pairs, their halves spread over the two nodes
    run = scene.start(settings(proactive_capacity=2), max_runners=5)
    await run.advertises(2)
    start = time.monotonic()

    await scene.job("r1")
    runner = await scene.running("r1")
    await scene.create(workflow_pod("r1", owner=scene.ns, **HALF))
    workflow = await scene.running("r1-workflow")
    # The scheduler evicts the lowest-priority victim it can: for the workflow pod that is
    # a placeholder-runner (-10) of the *other* slot, not a placeholder-workflow (10).
    by_runner = await scene.victims_of(runner.metadata.uid)
    by_workflow = await scene.victims_of(workflow.metadata.uid)
    assert [role for _, role in by_runner] == ["placeholder-runner"]
    assert [role for _, role in by_workflow] == ["placeholder-runner"]
    assert by_runner[0][0] != by_workflow[0][0]  # different slots

    # One job runs; the two surviving placeholder-workflows cannot pair with any runner
    # half, so the monitor removes them and builds a new pair from the freed room.
    await run.advertises(2)
    # Between the eviction and the new pair the cluster held the one job and room for no
    # other (a runner pod cannot evict a placeholder-workflow): the true value was 1. On kwok
    # the replacement pair can be Running before a busy machine's signal loop looks again,
    # so the dip itself may never be sent; what must never be sent is more than 2.
    values = run.values_since(start)
    assert all(value <= 2 for value in values), values
    assert run.metric("gha_capacity_pair_deletes_total", reason="broken") >= 1
    roles = sorted((await scene.running_roles()).values())
    assert roles == ["placeholder-runner", "placeholder-workflow"]
    await run.close()


async def test_restart_adopts_verified_placeholders_and_sweeps_the_rest(scene: Scene) -> None:
    await wait_gc_knows_runner_sets(scene.api, scene.ns)
    scene.node(cpu=4)
    first = scene.start(settings(proactive_capacity=2))
    await first.advertises(2)

    # Graceful stop: nothing new advertised, this listener's placeholders deleted.
    published = len(first.values)
    await first.close()
    assert len(first.values) == published

    async def none_left() -> bool:
        return not await scene.placeholders()

    await eventually(none_left, "placeholders deleted at shutdown")

    # A crash leaves them behind ...
    second = scene.start(settings(proactive_capacity=2))
    await second.advertises(2)
    names = {p.metadata.name: p.metadata.uid for p in await scene.placeholders()}
    assert len(names) == 4
    await second.crash()

    # ... and the next listener with the same runner set and settings adopts them: no
    # new pods, same uids, and 0 advertised until its own view confirmed them Running.
    third = scene.start(settings(proactive_capacity=2))
    await third.advertises(2)
    assert third.values[0][1] == 0
    assert {p.metadata.name: p.metadata.uid for p in await scene.placeholders()} == names
    assert third.metric("gha_capacity_pair_creates_total", result="ok") == 0
    await third.crash()

    # A listener with other settings (bigger workflow pods) must not count or keep them.
    bigger = settings(proactive_capacity=1, workflow_resources=Resources(requests={"cpu": "2"}))
    fourth = scene.start(bigger)

    async def old_gone() -> bool:
        current = {p.metadata.uid for p in await scene.placeholders()}
        return not current & set(names.values())

    await eventually(old_gone, "stale placeholders swept")
    assert fourth.metric("gha_capacity_pair_deletes_total", reason="orphan") >= 2
    await fourth.advertises(1)  # its own pair (runner 1 CPU + workflow 2 CPU) fits
    # It wants one pair: a 2 could only have come from counting the old, Running ones.
    assert max(v for _, v in fourth.values) == 1
    await fourth.crash()

    # Deleting the owner removes what is left through the real garbage collector.
    assert await scene.placeholders()
    await delete_runner_set(scene.api, scene.ns, RUNNER_SET)
    await eventually(none_left, "placeholders garbage-collected with their runner set")


LISTENER = "linux-cpu-7b5c8d9f-listener"  # ARC's name for the listener, its SA and its Role


async def arc_listener_objects(scene: Scene) -> None:
    """What ARC's controller creates for a listener: ServiceAccount, config Secret and pod in
    the controller namespace (here the same one), Role and RoleBinding in the runner
    namespace, all named after the listener (resourcebuilder.go)."""
    rbac = client.RbacAuthorizationV1Api(scene.api)
    labels = {
        "actions.github.com/scale-set-name": SCALE_SET,
        "actions.github.com/scale-set-namespace": scene.ns,
        "auto-scaling-listener-name": LISTENER,
        "auto-scaling-listener-namespace": scene.ns,
    }
    await scene.core.create_namespaced_service_account(scene.ns, {"metadata": {"name": LISTENER}})
    await scene.core.create_namespaced_secret(
        scene.ns, {"metadata": {"name": f"{LISTENER}-config"}, "data": {}}
    )
    await rbac.create_namespaced_role(
        scene.ns,
        {
            "metadata": {"name": LISTENER, "labels": labels},
            "rules": [
                {
                    "apiGroups": ["actions.github.com"],
                    "resources": ["ephemeralrunnersets"],
                    "resourceNames": [RUNNER_SET],
                    "verbs": ["patch"],
                }
            ],
        },
    )
    await rbac.create_namespaced_role_binding(
        scene.ns,
        {
            "metadata": {"name": LISTENER, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": LISTENER},
            "subjects": [{"kind": "ServiceAccount", "name": LISTENER, "namespace": scene.ns}],
        },
    )
    pod = runner_pod(LISTENER, owner=scene.ns, scale_set="listener", cpu="10m", memory="16Mi")
    pod["metadata"]["labels"] = {"app.kubernetes.io/component": "runner-scale-set-listener"}
    await scene.create(pod)


async def arc_removes_the_listener(scene: Scene) -> None:
    """ARC's cleanup of a listener: everything deleted in the same second, without waiting
    for the pod to stop (uninstall, rollback, or a scale-set change that recreates it)."""
    rbac = client.RbacAuthorizationV1Api(scene.api)
    await asyncio.gather(
        scene.core.delete_namespaced_pod(LISTENER, scene.ns),
        scene.core.delete_namespaced_secret(f"{LISTENER}-config", scene.ns),
        rbac.delete_namespaced_role_binding(LISTENER, scene.ns),
        rbac.delete_namespaced_role(LISTENER, scene.ns),
        scene.core.delete_namespaced_service_account(LISTENER, scene.ns),
    )


@contextlib.asynccontextmanager
async def as_listener_account(
    scene: Scene, local_cluster: LocalCluster
) -> AsyncIterator[client.ApiClient]:
    """An ApiClient that authenticates as the listener pod does: a bound token of ARC's
    listener ServiceAccount (dead once the account is deleted), with deploy/rbac's Role
    bound to that account."""
    role = yaml.safe_load((ROOT / "deploy" / "rbac" / "role.yaml").read_text())
    await client.RbacAuthorizationV1Api(scene.api).create_namespaced_role(scene.ns, role)
    await client.RbacAuthorizationV1Api(scene.api).create_namespaced_role_binding(
        scene.ns,
        {
            "metadata": {"name": "capacity-listener"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": role["metadata"]["name"]},
            "subjects": [{"kind": "ServiceAccount", "name": LISTENER, "namespace": scene.ns}],
        },
    )  # fmt: skip
    request = await scene.core.create_namespaced_service_account_token(
        LISTENER, scene.ns, {"spec": {"expirationSeconds": 3600}}
    )
    configuration = client.Configuration(host=local_cluster.server)
    configuration.verify_ssl = False
    configuration.api_key = {"BearerToken": request.status.token}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    async with client.ApiClient(configuration) as api:
        yield api


async def test_placeholders_go_when_arc_removes_the_listener(
    scene: Scene, local_cluster: LocalCluster
) -> None:
    scene.node(cpu=4)
    scene.node(cpu=1)  # room for the stand-in listener pod
    await arc_listener_objects(scene)
    async with as_listener_account(scene, local_cluster) as token_api:
        await _placeholders_go_when_arc_removes_the_listener(scene, token_api)


async def _placeholders_go_when_arc_removes_the_listener(
    scene: Scene, token_api: client.ApiClient
) -> None:
    cfg = settings(proactive_capacity=2, listener_role=LISTENER)
    first = scene.start(cfg, api=token_api)
    await first.advertises(2)
    pods = await scene.placeholders()
    assert len(pods) == 4
    role = await client.RbacAuthorizationV1Api(scene.api).read_namespaced_role(LISTENER, scene.ns)
    for pod in pods:
        assert [(o.kind, o.name, o.uid) for o in pod.metadata.owner_references] == [
            ("Role", LISTENER, role.metadata.uid)
        ]

    # A plain listener pod restart (crash, OOM kill): the Role stays, the next listener
    # adopts the placeholders: same pods, none created.
    names = {p.metadata.name: p.metadata.uid for p in pods}
    await first.crash()
    second = scene.start(cfg, api=token_api)
    await second.advertises(2)
    assert {p.metadata.name: p.metadata.uid for p in await scene.placeholders()} == names
    assert second.metric("gha_capacity_pair_creates_total", result="ok") == 0

    # ARC removes the listener, all in the same second, the pod still running; the runner
    # set stays, as on a rollback. The listener's token is dead from then on.
    removed_at = time.monotonic()
    await arc_removes_the_listener(scene)
    token_kube = Kube(token_api)

    async def token_dead() -> bool:
        try:
            await token_kube.get_role_uid(scene.ns, "anything")
        except KubeError as exc:
            return exc.status == 401
        return False

    await eventually(token_dead, "the listener's token rejected (401)", 30)
    # SIGTERM reaches the listener now: its shutdown deletes cannot succeed (401; or 404 if
    # the garbage collector was first). The placeholders must go anyway.
    await second.close()

    async def none_left() -> bool:
        return not await scene.placeholders()

    await eventually(none_left, "placeholders garbage-collected with the listener's Role", 60)
    print(f"\nno placeholders {time.monotonic() - removed_at:.1f}s after ARC's clean-up")
    crd = client.CustomObjectsApi(scene.api)
    assert await crd.get_namespaced_custom_object(
        "actions.github.com", "v1alpha1", scene.ns, "ephemeralrunnersets", RUNNER_SET
    )


async def test_hud_outage_falls_back_to_the_floor_and_recovers(scene: Scene) -> None:
    scene.node(cpu=16)
    async with FakeHUD() as hud:
        hud.set_queued(LABEL, 3)
        hud_settings = HudSettings(
            enabled=True, url=hud.endpoint, timeout=0.5, stale_after=2.0, failure_base_capacity=1
        )
        run = scene.start(
            settings(proactive_capacity=0, hud=hud_settings, max_pending_pairs=10), max_runners=10
        )

        def source() -> str:
            for name in ("hud", "stale", "floor", "disabled"):
                if run.metric("gha_capacity_demand_source", source=name) == 1:
                    return name
            return "none"

        async def state(expected_source: str, queued: int) -> bool:
            return source() == expected_source and run.metric("gha_capacity_queued_jobs") == queued

        await eventually(lambda: state("hud", 3), "HUD demand of 3 in use")
        await run.advertises(3)

        for outage, result in (
            (Outage.SERVER_ERROR, "http_error"),
            (Outage.HANG, "timeout"),
            (Outage.GARBAGE, "bad_response"),
        ):
            hud.outage(outage)

            async def counted(result: str = result) -> bool:
                return run.metric("gha_capacity_hud_requests_total", result=result) >= 1

            await eventually(counted, f"a {result} HUD request")
            await eventually(lambda: state("floor", 1), f"the floor after HUD {outage}", 30)
            await run.advertises(1)
            hud.clear_outage()
            await eventually(lambda: state("hud", 3), "HUD demand again", 30)

        hud.set_queued(LABEL, 2)
        await eventually(lambda: state("hud", 2), "HUD demand follows")
        await run.advertises(2)
        assert run.task.done() is False
        await run.close()


@pytest.mark.restarts_apiserver
async def test_monitor_survives_an_apiserver_restart(
    local_cluster: LocalCluster, scene: Scene
) -> None:
    scene.node(cpu=4)
    run = scene.start(settings(proactive_capacity=2))
    await run.advertises(2)
    await restart_apiserver(local_cluster)
    assert not run.task.done()

    # The monitor still sees and repairs the cluster: a placeholder deleted behind its back
    # is noticed (its pair is broken) and capacity is rebuilt.
    victim = next(iter(await scene.running_placeholders()))
    deleted = time.monotonic()
    await scene.core.delete_namespaced_pod(victim, scene.ns, grace_period_seconds=0)

    async def dipped() -> bool:
        return 1 in run.values_since(deleted)

    await eventually(dipped, "the lost half noticed", 90)
    await run.advertises(2, within=90)
    errors = run.metric(
        "gha_capacity_kube_errors_total", operation="watch placeholders", kind="transport"
    )
    assert errors >= 1  # it did lose the apiserver, and came back by itself
    await run.close()


async def test_node_checks_stop_counting_placeholders_on_a_cordoned_node(scene: Scene) -> None:
    first = scene.node(cpu=2)
    run = scene.start(settings(proactive_capacity=1, node_checks=True))
    await run.advertises(1)
    pods = {p.metadata.name: p.spec.node_name for p in await scene.placeholders()}
    assert set(pods.values()) == {first}

    # Cordon the node: its placeholders are no longer confirmed capacity. The pair is
    # replaced on a node that is usable.
    second = scene.node(cpu=2)
    cordoned = time.monotonic()
    await scene.core.patch_node(first, {"spec": {"unschedulable": True}})
    await eventually(_async(lambda: 0 in run.values_since(cordoned)), "the value dropped")
    await run.advertises(1)
    replaced = {p.metadata.name: p.spec.node_name for p in await scene.placeholders()}
    assert set(replaced.values()) == {second}
    assert not set(replaced) & set(pods)
    assert run.metric("gha_capacity_pair_deletes_total", reason="unusable") >= 1
    # Nodes are read one by one, never listed or watched (ci-infra #965).
    assert run.kube.requests["get nodes"] >= 2
    assert not any(k.endswith(" nodes") and not k.startswith("get") for k in run.kube.requests)
    await run.close()


@pytest.mark.parametrize(
    "taint",
    [
        # cluster-autoscaler's mark on a node it is removing (it also cordons it, later)
        {"key": "ToBeDeletedByClusterAutoscaler", "value": "1764000000", "effect": "NoSchedule"},
        # any other taint the placeholders do not tolerate: a drain tool, a dedicated node
        {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"},
    ],
    ids=["ca-to-be-deleted", "untolerated-noschedule"],
)
async def test_node_checks_stop_counting_placeholders_on_a_node_tainted_against_them(
    scene: Scene, taint: dict[str, str]
) -> None:
    first = scene.node(cpu=2)
    run = scene.start(settings(proactive_capacity=1, node_checks=True))
    await run.advertises(1)
    assert {p.spec.node_name for p in await scene.placeholders()} == {first}

    # The taint lands on the node holding the Running pair (not cordoned): the pair is no
    # longer confirmed capacity, the value drops, and it is replaced on a usable node.
    second = scene.node(cpu=2)
    node = await scene.core.read_node(first)
    taints = [t.to_dict() for t in node.spec.taints or []]
    tainted = time.monotonic()
    await scene.core.patch_node(first, {"spec": {"taints": [*taints, taint]}})
    await eventually(_async(lambda: 0 in run.values_since(tainted)), "the value dropped")
    dropped = run.first_time(0, tainted)
    assert dropped is not None
    await run.advertises(1)
    assert {p.spec.node_name for p in await scene.placeholders()} == {second}
    assert run.metric("gha_capacity_pair_deletes_total", reason="unusable") >= 1
    print(f"header drop after taint: {dropped - tainted:.2f} s")
    await run.close()


def _async(check: Callable[[], bool]) -> Callable[[], Any]:
    async def wrapped() -> bool:
        return check()

    return wrapped


async def test_quota_exceeded_is_counted_and_backed_off_not_fatal(scene: Scene) -> None:
    scene.node(cpu=4)
    await scene.core.create_namespaced_resource_quota(
        scene.ns, {"metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}}
    )

    async def quota_in_force() -> bool:
        # Until the controller manager has computed the quota's usage, admission refuses
        # every pod with "status unknown for quota" (a plain 403, not "exceeded quota"); a
        # busy controller manager can take seconds. A real cluster's quota is older than this.
        quota = await scene.core.read_namespaced_resource_quota("no-pods", scene.ns)
        return bool(quota.status and quota.status.hard)

    await eventually(quota_in_force, "the ResourceQuota's status computed", 60)
    run = scene.start(settings(proactive_capacity=1))

    async def refused() -> bool:
        return run.metric("gha_capacity_pair_creates_total", result="quota") >= 1

    await eventually(refused, "a create refused for quota")
    await asyncio.sleep(3)
    # Backed off: a handful of attempts, not one per pass per pod.
    attempts = run.metric("gha_capacity_kube_errors_total", operation="create", kind="quota")
    assert 1 <= attempts <= 4
    assert not run.task.done()
    assert run.advertised == 0

    await scene.core.delete_namespaced_resource_quota("no-pods", scene.ns)
    await run.advertises(1, within=90)
    await run.close()
