"""The capacity monitor's own logic on an in-memory cluster (tests/support/memory_cluster.py):
create gate and backoff, expectations, the shutdown budget, adopt/sweep, the signal loop.

Milliseconds per test. What Kubernetes does (scheduling, preemption, garbage collection,
watches) is tested on the real control plane in tests/integration/test_capacity_monitor.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from base.kube import KubeError, Resource
from capacity.contract import ANNOTATION_OWNER_UID, ANNOTATION_SPEC_HASH, LABEL_ROLE
from capacity.demand import GitHubReaderFactory
from capacity.model import Role
from capacity.pods import RUNNER_POD_LABEL, SCALE_SET_LABEL
from capacity.settings import CapacitySettings
from capacity.settings_pools import NodePoolSettings
from capacity.settings_values import Resources
from capacity.warm_pool import FixedPool
from tests.support.fake_clock import FakeClock
from tests.support.memory_cluster import MemoryCluster
from tests.support.monitor_scene import RecordedMonitor, ScaleSet
from tools.waits import eventually

NS = "arc-runners"
SCALE_SET = "linux"
RUNNER_SET = "linux-x7k2p"
OWNER_UID = "ers-uid-1"
NOW = 1_800_000_000.0
SCALE_SET_OF_TESTS = ScaleSet(SCALE_SET, RUNNER_SET, ("linux",))


def runner_set(uid: str = OWNER_UID) -> dict[str, Any]:
    return {
        "metadata": {"name": RUNNER_SET, "uid": uid},
        "spec": {
            "ephemeralRunnerSpec": {
                "spec": {
                    "containers": [
                        {
                            "name": "runner",
                            "image": "runner",
                            "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
                        }
                    ]
                }
            }
        },
    }


class Scene(RecordedMonitor[MemoryCluster]):
    """The one monitor scene (tests/support/monitor_scene.py) on an in-memory cluster, with
    a clock the test moves."""

    def __init__(
        self,
        cluster: MemoryCluster,
        settings: CapacitySettings,
        github_demand: GitHubReaderFactory | None = None,
    ) -> None:
        self.cluster = cluster
        self.clock = FakeClock(NOW)
        cluster.clock = self.clock
        super().__init__(
            cluster,
            NS,
            settings,
            10,
            SCALE_SET_OF_TESTS,
            clock=self.clock,
            github_demand=github_demand,
        )

    def placeholders(self, role: Role | None = None) -> list[str]:
        return sorted(
            name
            for name, pod in self.cluster.pods(NS).items()
            if role is None or pod["metadata"]["labels"].get(LABEL_ROLE) == role.value
        )

    async def settle(self) -> None:
        """Let the view's informer tasks take every queued event: the in-memory watches do
        no I/O, so a few turns of the event loop deliver everything published so far."""
        for _ in range(20):
            await asyncio.sleep(0)

    async def run_all(self, phase: str = "Running") -> None:
        for name in self.placeholders():
            self.cluster.set_phase(NS, name, phase)
        await self.settle()


def start(
    cluster: MemoryCluster | None = None,
    *,
    proactive: int = 1,
    github_demand: GitHubReaderFactory | None = None,
    **overrides: Any,
) -> Scene:
    cluster = cluster or MemoryCluster()
    if not cluster.objects.get(Resource.arc("ephemeralrunnersets", NS).path):
        cluster.add(Resource.arc("ephemeralrunnersets", NS), runner_set())
    settings = CapacitySettings(
        **{
            "enabled": True,
            "proactive_capacity": proactive,
            "workflow_resources": Resources(requests={"cpu": "1", "memory": "1Gi"}),
            "downscale_delay": 0.0,
            # Off unless a test turns it on: these scenes run the view's informers only, and
            # a monitor reading NodePools makes no pair before their first list answers.
            "nodepools": NodePoolSettings(enabled=False),
            **overrides,
        }
    )
    return Scene(cluster, settings, github_demand)


class Running:
    """The view's informers in a task for the duration of a test."""

    def __init__(self, scene: Scene) -> None:
        self.scene = scene
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Scene:
        self.task = asyncio.create_task(self.scene.monitor.view.run())
        await asyncio.wait_for(self.scene.monitor.view.synced_event.wait(), timeout=5)
        return self.scene

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def quota() -> KubeError:
    return KubeError("create pods", 403, "Forbidden: exceeded quota", quota=True)


# --- create gate and backoff --------------------------------------------------------------


async def test_failed_creates_back_off_exponentially_and_recover() -> None:
    scene = start(proactive=2)
    scene.cluster.fail_creates = [quota(), quota()]
    async with Running(scene):
        await scene.reconciler.reconcile_once()
        assert len(scene.cluster.creates) == 1  # the first failure halts the pass's creates

        scene.clock.now = NOW + 0.9  # within the 1 s backoff: nothing is tried
        await scene.reconciler.reconcile_once()
        assert len(scene.cluster.creates) == 1

        scene.clock.now = NOW + 1.0  # backoff over: one try, which fails again
        await scene.reconciler.reconcile_once()
        assert len(scene.cluster.creates) == 2

        scene.clock.now = NOW + 2.9  # now 2 s from the second failure
        await scene.reconciler.reconcile_once()
        assert len(scene.cluster.creates) == 2

        scene.clock.now = NOW + 3.0  # the quota is gone: both pairs are created
        await scene.reconciler.reconcile_once()
        assert len(scene.cluster.creates) == 2 + 4
        assert len(scene.placeholders()) == 4
        assert scene.creates("quota") == 2
        assert scene.creates("ok") == 2

        # A success resets the backoff: the next failure waits 1 s again, not 4.
        await scene.settle()
        scene.reconciler.evaluate(scene.clock())  # the watch showed the pods: settled
        scene.cluster.fail_creates = [quota()]
        gone = scene.placeholders(Role.RUNNER)[0]  # one whole pair disappears
        scene.cluster.remove(NS, gone)
        scene.cluster.remove(NS, gone.removesuffix("-r") + "-w")
        await scene.settle()
        scene.clock.now = NOW + 10.0
        await scene.reconciler.reconcile_once()
        scene.clock.now = NOW + 11.0
        await scene.reconciler.reconcile_once()
        assert scene.creates("quota") == 3
        assert len(scene.placeholders()) == 4


async def test_a_template_the_specs_cannot_use_is_counted_not_fatal() -> None:
    scene = start()

    def broken(*_: object) -> Any:
        raise ValueError("bad template")

    scene.reconciler.build_pair = broken
    async with Running(scene):
        await scene.reconciler.reconcile_once()
    assert scene.cluster.creates == []
    assert scene.creates("invalid") == 1


# --- expectations -------------------------------------------------------------------------


async def test_expectations_stop_a_lagging_watch_from_causing_duplicate_creates() -> None:
    scene = start(proactive=1)
    async with Running(scene):
        scene.cluster.hold_events = asyncio.Event()  # the watch falls behind
        await scene.reconciler.reconcile_once()
        assert len(scene.cluster.creates) == 2
        for _ in range(3):
            await scene.reconciler.reconcile_once()
        assert len(scene.cluster.creates) == 2  # the pair being created counts as Pending

        # Once the expectation TTL passes, the watch is trusted again (a create the watch
        # never shows did not happen as far as the plan is concerned).
        scene.clock.now = NOW + 61
        await scene.reconciler.reconcile_once()
        assert len(scene.cluster.creates) == 4

        scene.cluster.hold_events.set()
        await scene.settle()
        scene.reconciler.evaluate(scene.clock())  # settles what the watch now shows
        assert scene.reconciler.expectations.names() == set()


async def test_expected_deletes_are_not_counted_as_capacity() -> None:
    scene = start(proactive=1)
    async with Running(scene):
        await scene.reconciler.reconcile_once()
        await scene.run_all()
        await scene.reconciler.reconcile_once()
        assert scene.advertised_values[-1] == 1
        scene.cluster.hold_events = asyncio.Event()
        # Demand drops to 0 (as if the operator set proactive_capacity: 0).
        scene.monitor.warm_pool = FixedPool(0)
        scene.clock.now = NOW + 1  # past the (zero) downscale delay
        await scene.reconciler.reconcile_once()  # deletes the pair; the watch lags
        assert len(scene.cluster.deletes) == 2
        plan, *_ = scene.reconciler.evaluate(scene.clock())
        assert plan.advertised == 0
        assert plan.deletes == ()  # not sent twice


# --- shutdown -----------------------------------------------------------------------------


async def test_shutdown_deletes_every_placeholder_within_its_budget() -> None:
    scene = start(proactive=2)
    async with Running(scene):
        await scene.reconciler.reconcile_once()
        await scene.settle()
        scene.cluster.hold_deletes = asyncio.Event()  # an apiserver that does not answer
        sent = await asyncio.wait_for(scene.reconciler.shutdown(0.05), timeout=5)
        assert sent == 4
        assert len(scene.placeholders()) == 4  # left for the next listener to adopt or sweep

        scene.cluster.hold_deletes = None
        sent = await asyncio.wait_for(scene.reconciler.shutdown(5.0), timeout=5)
        assert sent == 4
        assert scene.placeholders() == []


async def test_shutdown_also_deletes_pods_being_created() -> None:
    scene = start(proactive=1)
    async with Running(scene):
        scene.cluster.hold_events = asyncio.Event()  # the view never saw them
        await scene.reconciler.reconcile_once()
        assert await scene.reconciler.shutdown(5.0) == 2
    assert scene.placeholders() == []


# --- adopt and sweep ----------------------------------------------------------------------


async def test_spec_hash_written_and_expected_is_the_one_older_listeners_wrote() -> None:
    """Placeholders made by an earlier version are adopted only if their spec hash is the
    same: these values were written by it for these settings and this runner set (change
    them only with a spec change meant to sweep the old placeholders)."""
    scene = start()
    async with Running(scene):
        owner = scene.monitor.view.runner_set
        assert owner is not None
        hashes = {Role.RUNNER: "788c592a9b491e5e", Role.WORKFLOW: "5ad5003819c28bce"}
        assert dict(scene.monitor.view.expected_hashes()) == hashes
        for pod, role in zip(scene.monitor.pairs.build_pair("7", owner, NOW), Role, strict=True):
            annotations = pod["metadata"]["annotations"]
            assert annotations[ANNOTATION_SPEC_HASH] == hashes[role]
            assert annotations[ANNOTATION_OWNER_UID] == OWNER_UID


async def test_start_adopts_verified_placeholders_and_sweeps_the_rest() -> None:
    cluster = MemoryCluster()
    cluster.add(Resource.arc("ephemeralrunnersets", NS), runner_set())
    scene = start(cluster, proactive=1)
    async with Running(scene):
        owner = scene.monitor.view.runner_set
        assert owner is not None
        ours = scene.monitor.pairs.build_pair("7", owner, NOW)
        stranger = scene.monitor.pairs.build_pair(
            "8", owner.__class__(owner.name, "old-uid", owner.pod_spec), NOW
        )
        stale = scene.monitor.pairs.build_pair("9", owner, NOW)
        for pod in stale:
            pod["metadata"]["annotations"][ANNOTATION_SPEC_HASH] = "another-template"
        for pod in (*ours, *stranger, *stale):
            await cluster.create_pod(NS, pod)
        cluster.creates.clear()
        await scene.run_all()

        await scene.reconciler.reconcile_once()
        assert sorted(cluster.deletes) == sorted(p["metadata"]["name"] for p in (*stranger, *stale))
        assert cluster.creates == []  # the adopted pair covers proactive_capacity
        assert scene.advertised_values[-1] == 1
        assert (
            scene.registry.get_sample_value(
                "gha_capacity_pair_deletes_total",
                {"name": RUNNER_SET, "namespace": NS, "reason": "orphan"},
            )
            == 2
        )


async def test_nothing_is_created_without_the_runner_set() -> None:
    cluster = MemoryCluster()
    cluster.add(
        Resource.arc("ephemeralrunnersets", NS),
        {**runner_set(), "metadata": {"name": "someone-else", "uid": "x"}},
    )
    scene = start(cluster, proactive=1)
    async with Running(scene):
        await scene.reconciler.reconcile_once()
    assert cluster.creates == []
    assert scene.advertised_values[-1] == 0


# --- the signal loop ----------------------------------------------------------------------


async def until(predicate: Callable[[], bool], what: str) -> None:
    """Re-check ``predicate`` every 10 ms (the values arrive through the signal loop's own
    coalescing timer), for at most 5 s."""
    await eventually(predicate, what, 5, interval=0.01)


async def test_signal_loop_follows_the_view_without_a_reconcile_pass() -> None:
    scene = start(proactive=2)
    async with Running(scene):
        await scene.reconciler.reconcile_once()
        assert scene.advertised_values == [
            0,
            0,
        ]  # at start, and after a pass with only Pending pairs
        signal = asyncio.create_task(scene.reconciler.signal_loop())
        try:
            await scene.run_all()
            await until(lambda: scene.advertised_values[-1] == 2, "both Running pairs advertised")
            passes = scene.reconciler.passes

            # A real runner pod preempts one runner placeholder: one pair fewer at once.
            scene.cluster.remove(NS, scene.placeholders(Role.RUNNER)[0])
            await until(lambda: scene.advertised_values[-1] == 1, "the lost pair withdrawn")
            assert scene.reconciler.passes == passes  # the signal path, not a pass
            assert all(v <= 2 for v in scene.advertised_values)
        finally:
            signal.cancel()
            await asyncio.gather(signal, return_exceptions=True)


async def test_signal_loop_waits_for_the_view_to_sync() -> None:
    scene = start(proactive=1)
    signal = asyncio.create_task(scene.reconciler.signal_loop())
    try:
        scene.monitor.view.poke()
        await asyncio.sleep(0.3)  # longer than the signal trigger's coalescing delay
        assert scene.advertised_values == [0]  # only the start-up 0: nothing verified yet
    finally:
        signal.cancel()
        await asyncio.gather(signal, return_exceptions=True)


def job_pods(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A job's runner pod and workflow pod, both bound and Running."""
    workflow = {
        "metadata": {"name": f"{name}-workflow", "labels": {RUNNER_POD_LABEL: name}},
        "spec": {"nodeName": "node-1"},
        "status": {"phase": "Running"},
    }
    return runner_pod(name), workflow


def rise_checks(scene: Scene, result: str) -> float:
    value = scene.registry.get_sample_value(
        "gha_capacity_rise_checks_total", {"name": RUNNER_SET, "namespace": NS, "result": result}
    )
    return -1.0 if value is None else value


async def test_a_job_seen_before_the_placeholders_it_pushed_out_raises_nothing() -> None:
    """The placeholder watch lags: the job's pods are seen, the pair they replaced is not
    gone yet. The watches count both (2); the pods read at one revision count 1."""
    scene = start(proactive=1)
    async with Running(scene):
        await scene.reconciler.reconcile_once()
        signal = asyncio.create_task(scene.reconciler.signal_loop())
        try:
            await scene.run_all()
            await until(lambda: scene.advertised_values[-1] == 1, "the pair advertised")
            view = scene.monitor.view
            confirmed = rise_checks(scene, "confirmed")  # the pair's own rise: 0 -> 1
            lag = scene.cluster.lag_selectors[view.placeholder_selector] = asyncio.Event()
            for name in scene.placeholders():
                scene.cluster.remove(NS, name)  # preempted by the job's pods
            for pod in job_pods("job-1"):
                scene.cluster.add(Resource.pods(NS), pod)
            await scene.settle()
            assert scene.reconciler.evaluate(scene.clock())[0].advertised == 2  # the watches
            await asyncio.sleep(3.0)  # signal passes and confirmations go on meanwhile
            assert max(scene.advertised_values) == 1
            assert rise_checks(scene, "lowered") >= 1
            assert rise_checks(scene, "confirmed") == confirmed

            lag.set()  # the watch catches up: the watches count 1 too
            await scene.settle()
            assert scene.reconciler.evaluate(scene.clock())[0].advertised == 1
            assert scene.advertised_values[-1] == 1
        finally:
            signal.cancel()
            await asyncio.gather(signal, return_exceptions=True)


async def test_a_rise_whose_read_fails_waits_and_is_tried_again() -> None:
    scene = start(proactive=2)
    scene.cluster.fail_lists = [KubeError("list pods", 503, "Service Unavailable")]
    async with Running(scene):
        await scene.reconciler.reconcile_once()
        signal = asyncio.create_task(scene.reconciler.signal_loop())
        try:
            await scene.run_all()
            await until(lambda: scene.advertised_values[-1] == 2, "both pairs advertised")
            assert 1 not in scene.advertised_values[-2:]  # held at 0, then confirmed whole
            assert rise_checks(scene, "failed") == 1
            assert rise_checks(scene, "confirmed") == 1
            # The failed read, then one read of three lists: the placeholders (a consistent
            # read), then the runner and workflow pods at that list's revision.
            versions = [call.rsplit("@", 1)[1] for call in scene.cluster.lists]
            assert len(versions) == 4, scene.cluster.lists
            assert versions[:2] == ["", ""]
            assert versions[2] != ""
            assert versions[3] == versions[2]
        finally:
            signal.cancel()
            await asyncio.gather(signal, return_exceptions=True)


def launches(scene: Scene) -> tuple[float, float]:
    """(count, sum) of the pair-launch histogram."""
    return (
        scene.metric("gha_capacity_pair_launch_seconds_count"),
        scene.metric("gha_capacity_pair_launch_seconds_sum"),
    )


async def test_a_pairs_launch_is_timed_from_its_create_until_both_halves_run() -> None:
    scene = start(proactive=1)
    async with Running(scene):
        await scene.reconciler.reconcile_once()  # creates the pair at NOW
        (runner,) = scene.placeholders(Role.RUNNER)
        (workflow,) = scene.placeholders(Role.WORKFLOW)
        assert launches(scene) == (0.0, 0.0)  # the child is there from the start
        scene.clock.now += 20.0
        scene.cluster.set_phase(NS, runner, "Running")
        await scene.settle()
        await scene.reconciler.reconcile_once()
        assert launches(scene) == (0.0, 0.0)  # one half is not a pair
        scene.clock.now += 45.0
        scene.cluster.set_phase(NS, workflow, "Running")
        await scene.settle()
        await scene.reconciler.reconcile_once()
        assert launches(scene) == (1.0, 65.0)
        scene.clock.now += 30.0
        await scene.reconciler.reconcile_once()
        assert launches(scene) == (1.0, 65.0)  # once per pair


async def test_a_lone_half_gets_its_missing_half_back_as_one_pod_and_is_timed() -> None:
    """A real workflow pod took the pair's workflow half (the pod is gone), the warm pool
    still wants a pair: the reconciler creates the workflow half alone, under the slot's own
    name, and times the slot from the repair until it is whole again."""
    scene = start(proactive=1, downscale_delay=300.0)
    async with Running(scene):
        await scene.reconciler.reconcile_once()  # the pair
        (runner,) = scene.placeholders(Role.RUNNER)
        (workflow,) = scene.placeholders(Role.WORKFLOW)
        for name in (runner, workflow):
            scene.cluster.set_phase(NS, name, "Running")
        await scene.settle()
        await scene.reconciler.reconcile_once()
        assert launches(scene)[0] == 1.0
        scene.cluster.remove(NS, workflow)  # preempted by a job's workflow pod
        await scene.settle()
        scene.clock.now += 10.0
        plan = await scene.reconciler.reconcile_once()
        assert plan.creates == ()
        assert [(r.slot, r.role) for r in plan.repairs] == [(runner.split("-")[-2], Role.WORKFLOW)]
        await scene.settle()
        assert scene.placeholders() == sorted([runner, workflow])  # one pod, the same name
        scene.clock.now += 40.0
        scene.cluster.set_phase(NS, workflow, "Running")
        await scene.settle()
        again = await scene.reconciler.reconcile_once()
        assert (again.creates, again.repairs, again.deletes) == ((), (), ())
        assert again.running_pairs == 1
        assert launches(scene)[0] == 2.0  # the repaired slot, timed from its repair


async def test_the_observed_launch_times_set_the_hold_of_queued_jobs_pairs() -> None:
    scene = start(proactive=1, downscale_delay=300.0)
    assert scene.monitor.params().demand_hold is None  # nothing seen: downscale_delay
    async with Running(scene):
        for launch in range(8):
            await scene.reconciler.reconcile_once()  # creates the warm pair
            (runner,) = scene.placeholders(Role.RUNNER)
            (workflow,) = scene.placeholders(Role.WORKFLOW)
            scene.clock.now += 40.0 + 5.0 * launch
            scene.cluster.set_phase(NS, runner, "Running")
            scene.cluster.set_phase(NS, workflow, "Running")
            await scene.settle()
            await scene.reconciler.reconcile_once()  # sees it whole: one launch timed
            for pod in (runner, workflow):  # a job takes it: the next pass makes another
                await scene.cluster.delete_pod(NS, pod)
            await scene.settle()
    assert launches(scene)[0] == 8.0
    assert scene.monitor.params().demand_hold == 75.0  # the p90 of 40, 45, …, 75 s
    fixed = start(proactive=1, downscale_delay=300.0, demand={"hold": "20s"})
    assert fixed.monitor.params().demand_hold == 20.0


async def test_pairs_this_process_did_not_create_are_not_timed() -> None:
    cluster = MemoryCluster()
    first = start(cluster, proactive=1)
    async with Running(first):
        await first.reconciler.reconcile_once()
        await first.run_all()
    again = start(cluster, proactive=1)  # a restart adopts the Running pair
    async with Running(again):
        await again.reconciler.reconcile_once()
        assert again.placeholders() == first.placeholders()  # adopted, not made again
        assert launches(again) == (0.0, 0.0)


def rise_to_assignment(scene: Scene) -> tuple[float, float]:
    return (
        scene.metric("gha_capacity_rise_to_assignment_seconds_count"),
        scene.metric("gha_capacity_rise_to_assignment_seconds_sum"),
    )


async def test_a_header_rise_is_timed_until_the_next_job_assigned() -> None:
    """What the listener's loop reports (listener/app.py passes these to it)."""
    scene = start()
    monitor = scene.monitor
    monitor.header_sent(0)
    monitor.job_assigned()  # no rise before it: nothing to time
    assert rise_to_assignment(scene) == (0.0, 0.0)
    scene.clock.now += 5.0
    monitor.header_sent(2)  # the rise
    scene.clock.now += 1.0
    monitor.header_sent(2)  # the same value again (a re-issued poll): no new rise
    scene.clock.now += 2.5
    monitor.job_assigned()
    monitor.job_assigned()  # the rise is used up
    monitor.header_sent(1)  # a drop is no rise
    monitor.job_assigned()
    assert rise_to_assignment(scene) == (1.0, 3.5)


# --- warm pools ---------------------------------------------------------------------------


def runner_pod(name: str) -> dict[str, Any]:
    """A real runner pod of the scale set, Running on a node (a job that was assigned)."""
    return {
        "metadata": {"name": name, "labels": {SCALE_SET_LABEL: SCALE_SET}},
        "spec": {"nodeName": "node-1"},
        "status": {"phase": "Running"},
    }


def warm_target(scene: Scene) -> float | None:
    return scene.registry.get_sample_value(
        "gha_capacity_warm_pool_target", {"name": RUNNER_SET, "namespace": NS}
    )


async def test_scheduled_floor_rises_at_the_window_start_and_pairs_follow() -> None:
    # NOW is Friday 2027-01-15 08:00 UTC; the window opens at 08:30 UTC (09:30 in Berlin).
    scene = start(
        proactive=0,
        warm_pool={
            "mode": "scheduled",
            "schedule": [{"window": "Mon-Fri 09:30-18:00 Europe/Berlin", "floor": 3}],
        },
    )
    async with Running(scene):
        scene.clock.now = NOW + 1799
        await scene.reconciler.reconcile_once()
        assert scene.placeholders() == []
        assert warm_target(scene) == 0
        scene.clock.now = NOW + 1800
        plan = await scene.reconciler.reconcile_once()
        assert len(plan.creates) == 3
        assert len(scene.placeholders(Role.RUNNER)) == 3
        assert warm_target(scene) == 3
        mode = {"name": RUNNER_SET, "namespace": NS, "mode": "scheduled"}
        assert scene.registry.get_sample_value("gha_capacity_warm_pool_mode", mode) == 1
