"""The Kubernetes control plane an end-to-end run, the demo or a benchmark uses (test
infrastructure), and what every scenario needs on it.

* ``local_control_plane``: an external disposable cluster (``LOCALCLUSTER_KUBECONFIG``), one
  already started with ``python -m tools.localcluster up``, or a fresh one started
  here (built from the Go module proxy on first use) and stopped on exit.
* ``install_priority_classes``: the shipped PriorityClasses (priorityclasses/*.yaml).
* ``kube_client``: a kubernetes-asyncio client for a kubeconfig.
* ``new_workdir``: a fresh directory for one run's files (cluster data, listener logs).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path

import yaml
from kubernetes_asyncio import client, config

from tools.localcluster import LocalCluster, ensure_built
from tools.localcluster.build import cache_root
from tools.localcluster.harness import pid_runs
from tools.localcluster.rest import KubeError

REPO_ROOT = Path(__file__).resolve().parents[1]
LADDER = ("arc-workflow", "placeholder-workflow", "arc-runner", "placeholder-runner")


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def detached_kubeconfig() -> Path | None:
    """The kubeconfig of a cluster started with `python -m tools.localcluster up`,
    if all of its processes still run."""
    state_file = cache_root() / "run" / "state.json"
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return None
    pids: Mapping[str, int] = state.get("pids") or {}
    binaries: Mapping[str, str] = state.get("binaries") or {}
    if not pids or not all(pid_runs(pid, binaries.get(name, "")) for name, pid in pids.items()):
        return None
    return Path(state["kubeconfig"])


@contextlib.contextmanager
def local_control_plane(
    workdir: Path, progress: Callable[[str], None] = _say
) -> Iterator[LocalCluster]:
    """A control plane for one run; a cluster started here is stopped on exit."""
    external = os.environ.get("LOCALCLUSTER_KUBECONFIG") or detached_kubeconfig()
    if external:
        artifacts = ensure_built(progress)
        progress(f"using the running control plane ({external})")
        cluster = LocalCluster.attach(Path(external))
        cluster.install_crds(artifacts.crd_dir)
        try:
            yield cluster
        finally:
            cluster.rest.close()
        return
    with start_control_plane(workdir, progress) as cluster:
        yield cluster


@contextlib.contextmanager
def start_control_plane(
    workdir: Path, progress: Callable[[str], None] = _say
) -> Iterator[LocalCluster]:
    """A new control plane in ``workdir`` (never one already running), stopped on exit."""
    artifacts = ensure_built(progress)
    progress("starting a local control plane (etcd, kube-apiserver, scheduler, KCM, kwok)")
    cluster = LocalCluster(artifacts, workdir)
    cluster.start()
    progress(f"control plane up in {cluster.start_seconds:.1f}s at {cluster.server}")
    try:
        yield cluster
    finally:
        cluster.stop()


def install_priority_classes(cluster: LocalCluster) -> list[str]:
    """Create the shipped PriorityClasses (priorityclasses/*.yaml); existing ones are kept."""
    names = []
    for path in sorted((REPO_ROOT / "priorityclasses").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "PriorityClass":
                continue
            names.append(doc["metadata"]["name"])
            try:
                cluster.rest.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", doc)
            except KubeError as exc:
                if exc.status != 409:
                    raise
    missing = [
        name
        for name in LADDER
        if not cluster.rest.exists(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
    ]
    if missing:
        raise RuntimeError(f"PriorityClasses missing (not in priorityclasses/): {missing}")
    return names


@contextlib.asynccontextmanager
async def kube_client(kubeconfig: Path) -> AsyncIterator[client.ApiClient]:
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        yield api


def new_workdir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
