"""Fixtures for tests on the real local control plane.

``shared_cluster`` (session): one control plane for the whole run (per xdist worker), built
from the Go module proxy on first use (a warm cache takes seconds) or, with
LOCALCLUSTER_KUBECONFIG set, an existing disposable cluster. A failed build or start fails the
tests; nothing is skipped.

``local_cluster`` (per test): that shared control plane, except for tests marked
``restarts_apiserver``, which get one of their own (~9 s to start). After a long apiserver
outage the scheduler's and kwok's caches can stay wrong for minutes (pods that never schedule,
a wrong count of what a node holds), and a test that met them later failed for reasons of
the test before it.

``karpenter`` (session, opt-in): Karpenter started on that control plane the first time a test
asks for it, so runs without such tests neither build nor start it. ``nodepools`` (per test)
creates the test's NodePools and removes them, and their nodes, afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from tests.support.karpenter_kit import TIMINGS
from tests.support.marks import mark_tier
from tools.localcluster import BuildError, ClusterError, LocalCluster, ensure_built
from tools.localcluster.build import ensure_karpenter_built
from tools.localcluster.karpenter import Karpenter, attach_karpenter, start_karpenter
from tools.localcluster.testkit import node_reservation


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, __file__, pytest.mark.cluster)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    cluster = getattr(item, "funcargs", {}).get("local_cluster")
    if report.failed and isinstance(cluster, LocalCluster) and cluster.log_dir is not None:
        report.sections.append(("local control plane logs", cluster.describe_logs()))
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    # Under pytest-xdist each worker measures its own scenarios: hand them to the controller,
    # whose terminal summary prints them.
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["karpenter_timings"] = json.dumps(TIMINGS)


def pytest_testnodedown(node: Any, error: object) -> None:
    TIMINGS.extend(json.loads(getattr(node, "workeroutput", {}).get("karpenter_timings", "[]")))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """What the Karpenter tests observed (seconds), one line per scenario."""
    if TIMINGS:
        terminalreporter.section("karpenter timings")
        for entry in TIMINGS:
            terminalreporter.write_line(json.dumps(entry))


def _started_cluster(workdir: Path) -> Iterator[LocalCluster]:
    try:
        artifacts = ensure_built()
    except BuildError as exc:
        pytest.fail(f"local control plane build failed: {exc}", pytrace=False)
    cluster = LocalCluster(artifacts, workdir)
    try:
        cluster.start()
    except ClusterError as exc:
        pytest.fail(f"local control plane did not start: {exc}", pytrace=False)
    print(f"\nlocal control plane up in {cluster.start_seconds:.1f}s at {cluster.server}")
    try:
        yield cluster
    finally:
        cluster.stop()
        # etcd preallocates its WAL; pytest keeps the last few temp dirs, logs are enough.
        shutil.rmtree(workdir / "etcd", ignore_errors=True)


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    external = os.environ.get("LOCALCLUSTER_KUBECONFIG")
    if external:
        try:
            artifacts = ensure_built()
        except BuildError as exc:
            pytest.fail(f"local control plane build failed: {exc}", pytrace=False)
        cluster = LocalCluster.attach(Path(external))
        cluster.install_crds(artifacts.crd_dir)
        yield cluster
        cluster.stop()
        return
    yield from _started_cluster(tmp_path_factory.mktemp("localcluster"))


@pytest.fixture
def local_cluster(
    request: pytest.FixtureRequest,
    shared_cluster: LocalCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LocalCluster]:
    """The shared control plane, or a private one for a test that takes the apiserver down
    (on an attached external cluster such a test skips itself: it cannot restart it)."""
    if request.node.get_closest_marker("restarts_apiserver") is None or not (
        shared_cluster.components
    ):
        yield shared_cluster
        return
    if "karpenter" in request.fixturenames:
        pytest.fail("Karpenter runs on the shared control plane only", pytrace=False)
    yield from _started_cluster(tmp_path_factory.mktemp("private-cluster"))


@pytest.fixture
def namespace(local_cluster: LocalCluster) -> Iterator[str]:
    """A fresh namespace (its `default` ServiceAccount exists), deleted after the test."""
    name = local_cluster.create_namespace("t")
    yield name
    local_cluster.delete_namespace(name)


@pytest.fixture
def controller_namespace(local_cluster: LocalCluster) -> Iterator[str]:
    """A namespace standing in for ARC's controller namespace, where the listener's
    ServiceAccount lives (the RBAC tests bind deploy/rbac to it)."""
    name = local_cluster.create_namespace("ctl")
    yield name
    local_cluster.delete_namespace(name)


@pytest.fixture
def fake_nodes(
    local_cluster: LocalCluster, namespace: str
) -> Iterator[Callable[..., dict[str, Any]]]:
    """Create fake nodes reserved for this test, removed afterwards.

    Nodes are cluster-wide, so each carries a label and a NoSchedule taint naming the test's
    namespace; pods built with ``testkit.placement(namespace)`` select and tolerate them.
    """
    created: list[str] = []

    def make(cpu: str = "2", memory: str = "4Gi", pods: int = 20) -> dict[str, Any]:
        name = f"kwok-{namespace}-{uuid.uuid4().hex[:4]}"
        node = local_cluster.add_node(
            name, cpu=cpu, memory=memory, pods=pods, **node_reservation(namespace)
        )
        created.append(name)
        return node

    yield make
    for name in created:
        local_cluster.remove_node(name)


@pytest.fixture
async def kube_api(local_cluster: LocalCluster) -> AsyncIterator[client.ApiClient]:
    """A kubernetes_asyncio ApiClient for the local cluster's kubeconfig."""
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(local_cluster.kubeconfig), client_configuration=configuration
    )
    async with client.ApiClient(configuration) as api:
        yield api


@pytest.fixture(scope="session")
def karpenter(shared_cluster: LocalCluster) -> Karpenter:
    """Karpenter with the kwok cloud provider, running until the control plane stops."""
    if not shared_cluster.components:
        attached = attach_karpenter(shared_cluster)
        if attached is None:
            pytest.fail(
                "Karpenter tests need a cluster started here or by `up --karpenter`",
                pytrace=False,
            )
        return attached
    try:
        artifacts = ensure_karpenter_built()
    except BuildError as exc:
        pytest.fail(f"Karpenter build failed: {exc}", pytrace=False)
    try:
        return start_karpenter(shared_cluster, artifacts)
    except ClusterError as exc:
        pytest.fail(f"Karpenter did not start: {exc}", pytrace=False)


@pytest.fixture
def nodepools(
    karpenter: Karpenter, local_cluster: LocalCluster, namespace: str
) -> Iterator[Callable[[dict[str, Any]], str]]:
    """Create NodePools for this test; afterwards delete the test's pods (grace 0: PDBs must
    not hold up the drain), the pools and their nodes, and give the cloud its capacity back."""
    created: list[str] = []

    def make(manifest: dict[str, Any]) -> str:
        created.append(karpenter.create_nodepool(manifest))
        return created[-1]

    yield make
    local_cluster.rest.request(
        "DELETE", f"/api/v1/namespaces/{namespace}/pods", params={"gracePeriodSeconds": "0"}
    )
    for name in created:
        karpenter.delete_nodepool(name)
    karpenter.set_capacity()
    karpenter.set_launch_delay(0.0, 0.0, seed=0)
    karpenter.set_insufficient_capacity_ttl(0.0)
    karpenter.set_registration_delay("0s")
