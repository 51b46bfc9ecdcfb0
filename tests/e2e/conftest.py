"""Fixtures for the end-to-end tier: the listener process, the fake Actions service and HUD,
the runner stand-in, on the real local control plane.

``local_cluster`` (session): an external disposable cluster (``LOCALCLUSTER_KUBECONFIG``), a
running ``python -m tools.localcluster up``, or one started for this run (built from
the Go module proxy on first use). A failed build or start fails the tests; nothing is skipped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path

import pytest

from tests.support.marks import mark_tier
from tools.control_plane import local_control_plane
from tools.e2e_karpenter import ensure_karpenter
from tools.e2e_site import Stage
from tools.localcluster import BuildError, ClusterError, LocalCluster
from tools.localcluster.karpenter import Karpenter


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, __file__, pytest.mark.e2e, pytest.mark.cluster)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """On failure, attach every listener's log and the sites' state to the report."""
    report = yield
    stage = getattr(item, "funcargs", {}).get("stage")
    if not report.failed or not isinstance(stage, Stage):
        return report
    for site in stage.sites:
        report.sections.append((f"site {site.spec.name}", repr(site.view())))
        for listener in site.listeners:
            report.sections.append((f"{listener.name} log", listener.log_tail(120)))
        if site.watch_errors:
            report.sections.append(
                (f"placeholder watch {site.spec.name}", "\n".join(site.watch_errors))
            )
        if site.standin is not None and site.standin.errors:
            report.sections.append((f"stand-in {site.spec.name}", "\n".join(site.standin.errors)))
    return report


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    try:
        with local_control_plane(tmp_path_factory.mktemp("e2e-cluster")) as cluster:
            yield cluster
    except (BuildError, ClusterError) as exc:
        pytest.fail(f"local control plane: {exc}", pytrace=False)


@pytest.fixture
async def stage(local_cluster: LocalCluster, tmp_path: Path) -> AsyncIterator[Stage]:
    """A fresh scenario: fake Actions service (2 s poll hold) and fake HUD, ready for sites."""
    async with Stage(local_cluster, tmp_path / "stage") as scene:
        yield scene


@pytest.fixture(scope="session")
def karpenter(local_cluster: LocalCluster) -> Karpenter:
    """Karpenter on the session's control plane, started the first time a test asks for it
    (runs without such tests neither build nor start it)."""
    try:
        return ensure_karpenter(local_cluster, print)
    except (BuildError, ClusterError, RuntimeError) as exc:
        pytest.fail(f"Karpenter: {exc}", pytrace=False)
