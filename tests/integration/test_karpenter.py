"""The capacity model on the real Karpenter (provider-neutral core, kwok cloud provider).

No node in here is made by hand: placeholders make Karpenter provision, NodePool limits and
the fake cloud's capacity (``Karpenter.set_capacity``) hold it back, consolidation takes nodes
away. Each test has its own NodePools (nodes reserved for its namespace): a runner pool of
2-CPU general nodes and, where it matters, a workflow pool of the workflow-only type. Sizes in
``tests/support/karpenter_kit.py``: a 2-CPU node holds two placeholder halves.

The observed timings are printed at the end of the run ("karpenter timings").

test_karpenter_nodepool_limits.py reuses the ``scene`` fixture.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from capacity import policy
from capacity.model import Role
from capacity.settings_pools import NodePoolSettings
from tests.support.karpenter_kit import (
    RUNNER_SET,
    Scene,
    Timeline,
    pod_on_pool,
    record_timings,
    runner_template,
    settings,
)
from tools.capacity_kit import ROOT, apply_ladder, create_runner_set, read_pod
from tools.localcluster.karpenter import (
    DISRUPTED_TAINT,
    GENERAL_TYPES,
    NODECLAIMS,
    WORKFLOW_TYPE,
    Karpenter,
    nodepool_manifest,
)
from tools.waits import eventually

pytestmark = pytest.mark.cluster

RUNNERS, WORKFLOWS = "runners", "workflows"
DO_NOT_DISRUPT = {"karpenter.sh/do-not-disrupt": "true"}


@pytest.fixture
async def scene(
    kube_api: client.ApiClient,
    namespace: str,
    karpenter: Karpenter,
    nodepools: Callable[[dict[str, Any]], str],
) -> AsyncIterator[Scene]:
    await apply_ladder(kube_api)
    await create_runner_set(kube_api, namespace, RUNNER_SET, runner_template(namespace, RUNNERS))
    s = Scene(kube_api, namespace, karpenter, nodepools)
    yield s
    await s.crash_runs()


def runner_pool(scene: Scene, **kw: Any) -> str:
    """2-CPU general nodes for runner pods and runner placeholders."""
    return scene.nodepool(
        nodepool_manifest(
            scene.pool_name(RUNNERS),
            owner=scene.ns,
            types=[GENERAL_TYPES[0]],
            labels={"capacity-test/pool": RUNNERS},
            **kw,
        )
    )


def workflow_pool(scene: Scene, **kw: Any) -> str:
    """Nodes of the workflow-only type for workflow pods and their placeholders."""
    return scene.nodepool(
        nodepool_manifest(
            scene.pool_name(WORKFLOWS),
            owner=scene.ns,
            types=[WORKFLOW_TYPE],
            labels={"capacity-test/pool": WORKFLOWS},
            **kw,
        )
    )


async def test_placeholders_make_karpenter_provision_and_count_only_when_running(
    scene: Scene,
) -> None:
    # The fake cloud takes a few seconds per node, so the Pending phase is long enough to
    # see that nothing is advertised before the pods run.
    scene.karpenter.set_registration_delay("3s")
    runners, workflows = runner_pool(scene), workflow_pool(scene)
    timeline = Timeline(scene).start()
    started = time.monotonic()
    run = scene.start(settings(scene.ns, WORKFLOWS, proactive_capacity=2))
    advertised = await run.advertises(2)
    await timeline.stop()
    await timeline.sample()

    timeline.never_above_running_pairs()
    # Every half on a node Karpenter made for its own pool, none anywhere else.
    pods = await scene.running_placeholders()
    assert len(pods) == 4
    pools = {
        p.metadata.labels["capacity-listener.dev/role"]: scene.node_pool_of(p.spec.node_name)
        for p in pods.values()
    }
    assert pools == {"placeholder-runner": runners, "placeholder-workflow": workflows}
    # Two runner halves fill one 2-CPU node; two workflow halves fit one workflow node.
    assert len(scene.karpenter.nodes(runners)) == 1
    assert len(scene.karpenter.nodes(workflows)) == 1
    assert max(v for _, v in run.values) == 2

    claimed = timeline.first(lambda x: x.nodeclaims >= 2)
    ready = timeline.first(lambda x: x.ready_nodes >= 2)
    both = timeline.first(lambda x: min(x.running.values(), default=0) >= 2 and len(x.running) == 2)
    assert claimed is not None
    assert ready is not None
    assert both is not None
    record_timings(
        "provision (registration delay 3s)",
        nodeclaims_s=claimed - started,
        nodes_ready_s=ready - started,
        pairs_running_s=both - started,
        advertised_s=advertised - started,
    )
    await run.close()


async def test_a_launch_in_flight_does_not_hold_back_the_next_one(scene: Scene) -> None:
    # A real cloud returns the instance at once and boots it for the launch delay; Karpenter
    # keeps provisioning meanwhile. A fake cloud that spent the delay inside its launch call
    # would leave the NodeClaim unlaunched, and Karpenter provisions nothing while one is
    # ("cluster is waiting on sync"): launches would go in rounds, each after the slowest
    # launch of the round before, which is not what a cloud does.
    delay = 30.0
    scene.karpenter.set_launch_delay(delay, delay, seed=1)
    pool = runner_pool(scene)
    for name in ("first-a", "first-b"):  # two halves fill one node
        await scene.create(pod_on_pool(name, scene.ns, RUNNERS))
    started = time.monotonic()

    def launched() -> list[dict[str, Any]]:
        claims = scene.karpenter.nodeclaims(pool)
        return [c for c in claims if (c.get("status") or {}).get("providerID")]

    await eventually(lambda: asyncio.to_thread(lambda: len(launched()) >= 1), "a launch", 60)
    first_launched = time.monotonic()
    for name in ("second-a", "second-b"):  # no room left on the node in flight
        await scene.create(pod_on_pool(name, scene.ns, RUNNERS))
    await eventually(lambda: asyncio.to_thread(lambda: len(launched()) >= 2), "a second launch", 60)
    second_launched = time.monotonic()
    # The first node is still booting when the second launch is under way: the two launches
    # overlap, which launches in rounds (the second after the first node came up) never do.
    assert scene.karpenter.nodes(pool) == []

    def two_nodes() -> bool:
        return len(scene.karpenter.nodes(pool)) >= 2

    await eventually(lambda: asyncio.to_thread(two_nodes), "two nodes", 90)
    both = time.monotonic()
    record_timings(
        "launches side by side (launch delay 30s)",
        first_launch_s=first_launched - started,
        second_launch_after_first_s=second_launched - first_launched,
        both_nodes_s=both - started,
    )


async def test_a_refused_type_is_not_retried_within_the_clouds_memory(scene: Scene) -> None:
    # A real provider remembers an offering that ran out (AWS: 3 minutes) and reports it
    # unavailable meanwhile, so Karpenter stops asking. Without that memory Karpenter asks
    # again on every provisioning pass: NodeClaims created and refused in a loop.
    pool = workflow_pool(scene)
    scene.karpenter.set_capacity(insufficient=[WORKFLOW_TYPE])

    def refused_claims() -> set[str]:
        found = scene.karpenter.cluster.rest.request(
            "GET",
            "/api/v1/namespaces/default/events",
            params={"fieldSelector": "reason=InsufficientCapacityError"},
        )
        names = {(e.get("involvedObject") or {}).get("name", "") for e in found.get("items", [])}
        return {n for n in names if n.startswith(f"{pool}-")}

    def refusals() -> int:
        return len(refused_claims())

    # Without the memory the pending pod's type is tried again pass after pass.
    await scene.create(pod_on_pool("wants-a-workflow-node", scene.ns, WORKFLOWS))
    await eventually(lambda: asyncio.to_thread(lambda: refusals() >= 3), "refusals repeated", 60)
    # With it, the next refusal is the last for as long as the cloud remembers it.
    scene.karpenter.set_insufficient_capacity_ttl(120.0)
    before = refusals()
    await eventually(lambda: asyncio.to_thread(lambda: refusals() > before), "a refusal", 60)
    await asyncio.sleep(5.0)  # a claim already on its way when the memory was made
    remembered = refusals()
    await asyncio.sleep(20.0)
    assert refusals() == remembered
    record_timings("refused type remembered 120s", refusals_before_the_memory=remembered)


async def test_nodepool_limits_hold_pairs_pending_until_raised(scene: Scene) -> None:
    # Room for one runner node only: two pairs run, the third cannot.
    runners = runner_pool(scene, limits={"cpu": "2"})
    workflow_pool(scene)
    cfg = settings(
        scene.ns,
        WORKFLOWS,
        proactive_capacity=3,
        max_pending_pairs=1,
        placeholder_ready_timeout=6.0,
        # Karpenter's limit alone: with the limits read no pair beyond them is made
        # (tests/integration/test_karpenter_nodepool_limits.py).
        nodepools=NodePoolSettings(enabled=False),
    )
    timeline = Timeline(scene).start()
    started = time.monotonic()
    run = scene.start(cfg)
    await run.advertises(2)

    async def timed_out() -> bool:
        return run.metric("gha_capacity_pair_deletes_total", reason="timeout") >= 2

    await eventually(timed_out, "Pending pairs deleted after the ready timeout", 90)
    assert max(v for _, v in run.values) == 2
    assert len(scene.karpenter.nodes(runners)) == 1
    held = time.monotonic()

    # Raise the limit: Karpenter launches a second runner node, the pair in flight runs.
    scene.karpenter.patch_nodepool(runners, {"spec": {"limits": {"cpu": "4"}}})
    raised = time.monotonic()
    rose = await run.advertises(3, within=90)
    await timeline.stop()
    timeline.never_above_running_pairs()
    assert len(scene.karpenter.nodes(runners)) == 2
    assert max(v for t, v in run.values if t < raised) == 2
    record_timings(
        "nodepool limit",
        held_pending_s=held - started,
        timeout_deletes=run.metric("gha_capacity_pair_deletes_total", reason="timeout"),
        limit_raised_to_advertised_s=rose - raised,
    )
    await run.close()


@pytest.mark.parametrize("how", ["insufficient", "unavailable"])
async def test_workflow_type_without_cloud_capacity_drops_the_header_and_recovers(
    scene: Scene, how: str
) -> None:
    runners, workflows = runner_pool(scene), workflow_pool(scene)
    cfg = settings(scene.ns, WORKFLOWS, proactive_capacity=1, placeholder_ready_timeout=6.0)
    run = scene.start(cfg)
    await run.advertises(1)

    # The cloud runs out of the workflow type, and the node that had it goes away (deleted
    # through Karpenter, as an interruption or a repair would): its placeholder is evicted.
    if how == "insufficient":
        scene.karpenter.set_capacity(insufficient=[WORKFLOW_TYPE])
    else:
        scene.karpenter.set_capacity(unavailable=[WORKFLOW_TYPE])
    (claim,) = scene.karpenter.nodeclaims(workflows)
    lost = time.monotonic()
    scene.karpenter.cluster.rest.request("DELETE", f"{NODECLAIMS}/{claim['metadata']['name']}")
    dropped = await run.advertises(0, within=90)

    # Re-created pairs cannot get a workflow node: they stay Pending, are deleted after the
    # ready timeout, and nothing is advertised; the runner side is untouched.
    async def timed_out() -> bool:
        return run.metric("gha_capacity_pair_deletes_total", reason="timeout") >= 2

    await eventually(timed_out, "Pending pairs deleted after the ready timeout", 90)
    assert run.values_since(dropped) == [0] * len(run.values_since(dropped))
    assert scene.karpenter.nodes(workflows) == []
    assert len(scene.karpenter.nodes(runners)) == 1
    if how == "insufficient":
        # Karpenter did try, and the launch failed the way a cloud's would.
        log = (scene.karpenter.cluster.log_paths()["karpenter"]).read_text()
        assert "insufficient capacity" in log.lower()

    # Capacity comes back: recovery without anyone touching the cluster.
    scene.karpenter.set_capacity()
    back = time.monotonic()
    recovered = await run.advertises(1, within=90)
    assert len(scene.karpenter.nodes(workflows)) == 1
    record_timings(
        f"workflow type {how}",
        node_lost_to_header_drop_s=dropped - lost,
        capacity_back_to_advertised_s=recovered - back,
    )
    await run.close()


async def test_a_pair_whose_workflow_type_cannot_launch_is_released_and_backs_off(
    scene: Scene, caplog: pytest.LogCaptureFixture
) -> None:
    """The cloud has no workflow nodes from the start: the runner half of the warm pair
    runs, its workflow half waits, and Karpenter's every launch for the workflow pool fails
    with its insufficient-capacity error (an Event on the NodeClaim, which the monitor reads
    with `nodepools` on). Karpenter's next scheduling run finds no other way to place the
    workflow half and says so (a FailedScheduling Event on the pod, from `karpenter`, read
    through the API server's field selector): the shortage is confirmed then, well before
    the minute the NodeClaim's word alone needs. On that word the pair goes as `stalled`
    (cause `cloud`) after one longest launch (the 60 s floor), where time alone would wait
    for twice the longest launch with the 180 s floor; no pair is made during the back-off,
    and Karpenter removes the runner node nothing holds any more."""
    caplog.set_level(logging.INFO, logger="capacity.reconciler")
    runners = runner_pool(scene, consolidate_after="5s")
    workflow_pool(scene)
    # The cloud remembers the refusal as AWS does (3 minutes), so Karpenter stops asking for
    # the type and reports the pod it cannot place; without that memory it asks again every
    # pass, and the shortage is confirmed on time alone.
    memory = scene.karpenter.insufficient_ttl
    scene.karpenter.set_insufficient_capacity_ttl(180.0)
    scene.karpenter.set_capacity(insufficient=[WORKFLOW_TYPE])
    # Before the listener starts: the pair is made after this, and its wait is timed from
    # its creation.
    started = time.monotonic()
    run = scene.start(
        settings(
            scene.ns,
            WORKFLOWS,
            proactive_capacity=1,
            placeholder_ready_timeout=300.0,
            nodepools=NodePoolSettings(enabled=True),
        )
    )
    # As if this listener had timed 8 launches of 20 s: one launch is then the 60 s floor,
    # two the 180 s floor (policy.SIGNAL_STALL_FLOOR, policy.STALL_FLOOR).
    run.reconciler.launch_times.extend([20.0] * 8)
    assert policy.signal_stall_timeout(run.reconciler.launch_times, 300.0) == 60.0
    assert policy.stall_timeout(run.reconciler.launch_times, 300.0) == 180.0

    refusals = run.monitor.pod_refusals
    assert refusals is not None

    async def refused() -> bool:
        halves = {name for name in run.monitor.view.placeholders if name.endswith("-w")}
        return bool(halves & refusals.latest().keys())

    async def confirmed() -> bool:
        return any(r.getMessage() == "shortage confirmed, new pairs held" for r in caplog.records)

    await eventually(refused, "Karpenter's word on the workflow half read", 55)
    await eventually(confirmed, "the shortage confirmed on it", 10)
    confirmed_after = time.monotonic() - started
    # On the word, not on the minute floor: the record comes before the refused half is
    # SIGNAL_STALL_FLOOR old by its own creationTimestamp (the monitor's clock, not the test's).
    (half,) = [p.placeholder for n, p in run.monitor.view.placeholders.items() if n.endswith("-w")]
    record = next(
        r for r in caplog.records if r.getMessage() == "shortage confirmed, new pairs held"
    )
    assert record.created - half.created_at < policy.SIGNAL_STALL_FLOOR, (record.created, half)
    assert run.metric("gha_capacity_pod_refusal_state", state="watching") == 1

    async def stalled() -> bool:
        return run.count("gha_capacity_pair_deletes_total", reason="stalled") >= 1

    await eventually(stalled, "the pair released as stalled", 170)
    released = time.monotonic() - started
    # Not before one launch (60 s) of the half's age (a creationTimestamp has whole seconds,
    # so up to one less); on the pools' word, not on the 180 s of time alone (its cause).
    release = next(r for r in caplog.records if r.getMessage() == "pair released as stalled")
    assert release.created - half.created_at >= 59, (release.created, half)
    assert run.count("gha_capacity_stalls_total", cause="cloud") >= 1
    assert run.count("gha_capacity_stalls_total", cause="time") == 0
    assert run.metric("gha_capacity_launch_failure_state", state="watching") == 1
    assert run.count("gha_capacity_pair_deletes_total", reason="timeout") == 0
    assert run.metric("gha_capacity_stall_backoff_seconds") > 0

    def pairs_made() -> float:
        # Creates less probes: a probe (one workflow half, during the back-off) is made in
        # the pass that releases the pair or the next, so it may land on either side of
        # the count below.
        return run.creates() - run.count("gha_capacity_probes_total", role=Role.WORKFLOW.value)

    creates = pairs_made()

    async def runner_node_gone() -> bool:
        return scene.karpenter.nodes(runners) == []

    await eventually(runner_node_gone, "the stalled runner half's node consolidated", 50)
    assert pairs_made() == creates, "a pair was made during the back-off"
    assert set(run.advertised_values) == {0}
    scene.karpenter.set_capacity()
    scene.karpenter.set_insufficient_capacity_ttl(memory)
    record_timings(
        "stalled pair", shortage_confirmed_after_s=confirmed_after, released_after_s=released
    )
    await run.close()


async def test_consolidation_evicts_placeholders_and_the_monitor_settles(scene: Scene) -> None:
    runners = runner_pool(scene, consolidate_after="5s")
    workflow_pool(scene)
    # A filler pod takes half of the first runner node, so the two runner placeholders end
    # up on two nodes; when the filler goes, both nodes are underutilized and Karpenter
    # consolidates one of them by evicting its placeholder onto the other.
    await scene.create(pod_on_pool("filler", scene.ns, RUNNERS))
    await scene.running("filler", within=90)
    run = scene.start(settings(scene.ns, WORKFLOWS, proactive_capacity=2))
    await run.advertises(2)
    nodes = {
        p.spec.node_name
        for p in (await scene.running_placeholders()).values()
        if scene.node_pool_of(p.spec.node_name) == runners
    }
    assert len(nodes) == 2

    timeline = Timeline(scene, interval=0.5).start()
    creates_before = run.creates()
    await scene.core.delete_namespaced_pod("filler", scene.ns, grace_period_seconds=0)
    freed = time.monotonic()

    async def consolidated() -> bool:
        return len(scene.karpenter.nodes(runners)) == 1

    await eventually(consolidated, "one runner node consolidated away", 150)
    gone = time.monotonic()
    evicted = [
        e
        for e in await scene.events("Evicted")
        if "placeholder" in (e.involved_object.name or "")
        or "-ph-" in (e.involved_object.name or "")
    ]
    settled = await run.advertises(2, within=90)
    dipped = run.first_time(1, freed)
    recreated = run.creates() - creates_before
    assert recreated >= 1  # the evicted placeholder's pair was replaced

    # A fixed window after settling: no new pairs, no new nodes, the value holds.
    window_start = time.monotonic()
    claims_before = set(timeline.nodeclaims_seen)
    creates_at_window = run.creates()
    await asyncio.sleep(40)
    await timeline.stop()
    assert run.creates() == creates_at_window
    assert timeline.nodeclaims_seen == claims_before
    assert run.values_since(window_start) in ([], [2] * len(run.values_since(window_start)))
    assert len(scene.karpenter.nodes(runners)) == 1
    record_timings(
        "consolidation",
        filler_gone_to_node_removed_s=gone - freed,
        header_dip_after_free_s=(dipped - freed) if dipped else None,
        settled_after_node_removed_s=settled - gone,
        evicted_events=len(evicted),
        pairs_recreated=int(recreated),
        node_launches_total=len(timeline.nodeclaims_seen),
        window_s=40,
        creates_in_window=int(run.creates() - creates_at_window),
        launches_in_window=len(timeline.nodeclaims_seen - claims_before),
    )
    await run.close()


async def test_ladder_on_karpenter_nodes_with_the_runner_pdb(scene: Scene) -> None:
    body = yaml.safe_load((ROOT / "deploy" / "pdb-runners.yaml").read_text())
    await client.PolicyV1Api(scene.api).create_namespaced_pod_disruption_budget(scene.ns, body)
    # One shared pool: each 2-CPU node holds one pair, a runner and its workflow side by side.
    shared = runner_pool(scene)
    cfg = settings(scene.ns, RUNNERS, proactive_capacity=1)
    run = scene.start(cfg, max_runners=5)
    await run.advertises(1)
    (first_node,) = [n["metadata"]["name"] for n in scene.karpenter.nodes(shared)]
    started = time.monotonic()

    await scene.job("r1", RUNNERS)
    runner = await scene.running("r1")
    workflow_manifest = pod_on_pool(
        "r1-workflow",
        scene.ns,
        RUNNERS,
        priority_class="arc-workflow",
        labels={"runner-pod": "r1"},
    )
    await scene.create(workflow_manifest)
    workflow = await scene.running("r1-workflow")
    assert runner.spec.node_name == first_node == workflow.spec.node_name

    preempted = await scene.events("Preempted")
    victims = {
        preemptor: sorted(
            e.involved_object.name.rsplit("-", 1)[1] for e in preempted if uid in (e.message or "")
        )
        for preemptor, uid in (("runner", runner.metadata.uid), ("workflow", workflow.metadata.uid))
    }
    # Each real pod took its own half's place: r = placeholder-runner, w = -workflow.
    assert victims == {"runner": ["r"], "workflow": ["w"]}
    pod = await read_pod(scene.core, scene.ns, "r1")
    assert pod is not None
    assert pod.status.phase == "Running"

    # The monitor replenishes: a new pair, on a new node Karpenter launches for it.
    replenished = await run.advertises(2, within=90)
    assert len(scene.karpenter.nodes(shared)) == 2
    record_timings("ladder", job_to_replenished_s=replenished - started)
    await run.close()


@pytest.mark.parametrize("protection", ["none", "pdb", "do-not-disrupt"])
async def test_consolidation_and_a_running_runner(scene: Scene, protection: str) -> None:
    """A runner pod alone on an underutilized node, room for it on another node: Karpenter
    consolidates by evicting it (the job dies) unless it is protected by the runner PDB
    (deploy/pdb-runners.yaml) or the karpenter.sh/do-not-disrupt annotation."""
    if protection == "pdb":
        body = yaml.safe_load((ROOT / "deploy" / "pdb-runners.yaml").read_text())
        await client.PolicyV1Api(scene.api).create_namespaced_pod_disruption_budget(scene.ns, body)
    pool = runner_pool(scene, consolidate_after="5s")
    # Node B: a keeper pod (do-not-disrupt keeps B) and a blocker that fills it, so the
    # runner gets a node A of its own. When the blocker goes, the runner alone on A would fit
    # on B: consolidation may move it, i.e. evict it.
    await scene.create(pod_on_pool("keeper", scene.ns, RUNNERS, annotations=DO_NOT_DISRUPT))
    node_b = (await scene.running("keeper", within=90)).spec.node_name
    await scene.create(pod_on_pool("blocker", scene.ns, RUNNERS))
    assert (await scene.running("blocker")).spec.node_name == node_b
    labels = {"actions-ephemeral-runner": "True", "app.kubernetes.io/component": "runner"}
    runner = pod_on_pool(
        "runner",
        scene.ns,
        RUNNERS,
        priority_class="arc-runner",
        labels=labels,
        annotations=DO_NOT_DISRUPT if protection == "do-not-disrupt" else None,
    )
    await scene.create(runner)
    node_a = (await scene.running("runner", within=90)).spec.node_name
    assert node_a != node_b
    await scene.core.delete_namespaced_pod("blocker", scene.ns, grace_period_seconds=0)
    placed = time.monotonic()

    async def runner_gone() -> bool:
        return await read_pod(scene.core, scene.ns, "runner") is None

    if protection == "none":
        await eventually(runner_gone, "the runner evicted by consolidation", 150)
        record_timings("running runner, unprotected", evicted_after_s=time.monotonic() - placed)

        async def eviction_recorded() -> bool:
            # Karpenter's event recorder writes asynchronously: the event can trail the pod's
            # removal by seconds on a busy machine.
            events = await scene.events("Evicted")
            return any(e.involved_object.name == "runner" for e in events)

        await eventually(eviction_recorded, "an Evicted event for the runner", 60)
        return
    # Protected: over a window longer than the unprotected eviction took, nothing happens.
    await asyncio.sleep(60)
    pod = await read_pod(scene.core, scene.ns, "runner")
    assert pod is not None
    assert pod.status.phase == "Running"
    assert pod.metadata.deletion_timestamp is None
    nodes = scene.karpenter.nodes(pool)
    assert node_a in {n["metadata"]["name"] for n in nodes}
    assert len(nodes) == 2


async def test_node_checks_drop_placeholders_on_a_node_karpenter_disrupts(scene: Scene) -> None:
    runners, _ = runner_pool(scene), workflow_pool(scene)
    # Placeholders that refuse eviction keep the disrupted node's drain waiting, so the
    # karpenter.sh/disrupted taint stays there while the placeholders still run: only node
    # checks can tell that they are no longer capacity.
    await client.PolicyV1Api(scene.api).create_namespaced_pod_disruption_budget(
        scene.ns,
        {
            "metadata": {"name": "hold-placeholders"},
            "spec": {
                "minAvailable": 100000,
                "selector": {"matchLabels": {"capacity-listener.dev/role": "placeholder-runner"}},
            },
        },
    )
    run = scene.start(
        settings(scene.ns, WORKFLOWS, proactive_capacity=1, node_checks=True), max_runners=5
    )
    await run.advertises(1)
    (claim,) = scene.karpenter.nodeclaims(runners)
    (node,) = [n["metadata"]["name"] for n in scene.karpenter.nodes(runners)]
    disrupted = time.monotonic()
    scene.karpenter.cluster.rest.request("DELETE", f"{NODECLAIMS}/{claim['metadata']['name']}")

    def tainted() -> bool:
        got = scene.karpenter.cluster.rest.get(f"/api/v1/nodes/{node}")
        return any(t["key"] == DISRUPTED_TAINT for t in got["spec"].get("taints") or [])

    await eventually(lambda: asyncio.to_thread(tainted), "Karpenter's disrupted taint", 60)
    tainted_at = time.monotonic()
    dropped = await run.advertises(0, within=60)
    # The monitor replaced the pair on a node that is not going away.
    back = await run.advertises(1, within=90)
    pods = await scene.running_placeholders()
    assert node not in {p.spec.node_name for p in pods.values()}
    assert run.metric("gha_capacity_pair_deletes_total", reason="unusable") >= 1
    record_timings(
        "disrupted taint (node checks)",
        taint_after_delete_s=tainted_at - disrupted,
        header_drop_after_taint_s=dropped - tainted_at,
        replaced_after_drop_s=back - dropped,
    )
    await run.close()


async def test_deleting_a_pool_also_removes_the_late_node_of_an_unregistered_claim(
    scene: Scene,
) -> None:
    # The kwok provider creates a launched NodeClaim's Node after the registration delay even
    # when the NodeClaim was deleted meanwhile. The harness must remove that Node too, or it
    # outlives its pool (and a later wait for the pool's nodes to go never ends).
    delay = 8.0
    scene.karpenter.set_registration_delay(f"{delay:.0f}s")
    pool = runner_pool(scene)
    await scene.create(pod_on_pool("pending", scene.ns, RUNNERS))

    def launched_unregistered() -> bool:
        claims = scene.karpenter.nodeclaims(pool)
        return any(
            (c.get("status") or {}).get("providerID") and not c["status"].get("nodeName")
            for c in claims
        )

    await eventually(lambda: asyncio.to_thread(launched_unregistered), "a launched NodeClaim", 60)
    launched = time.monotonic()
    assert scene.karpenter.nodes(pool) == []
    await asyncio.to_thread(scene.karpenter.delete_nodepool, pool, 60.0)
    # Past the moment the provider creates the Node, whenever delete_nodepool returned.
    await asyncio.sleep(max(0.0, launched + delay + 3.0 - time.monotonic()))
    assert scene.karpenter.nodes(pool) == []
