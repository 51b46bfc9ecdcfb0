"""README.md's quick start, run as written on the local control plane.

The commands are read from the README's ```sh block when the test runs
(tests/support/quickstart.py) and each one runs with bash in a temporary directory, with the
pinned Helm and kubectl (tools/localcluster/build.py) first on PATH and KUBECONFIG naming the
local cluster. The directory links ``charts`` to the repository's, so the relative chart path
resolves as in a checkout while the files the commands write stay out of the repository.

Skipped by rule, each printed with its reason, and the set is asserted:
- ``docker build`` / ``docker push``: there is no container engine here (the image tier,
  tests/image, builds and runs the Dockerfile);
- ARC's chart by its OCI reference (no registry access). With ``ARC_SRC`` naming a checkout
  of actions/actions-runner-controller (e.g. tag gha-runner-scale-set-0.14.2), the command
  runs with the reference replaced by ``$ARC_SRC/charts/gha-runner-scale-set``; without it,
  nothing of ARC's is rendered and the fetched overlay is checked directly.

The test's stand-ins for ARC's controller (and its chart), created as they would be
(tests/support/arc_stand_ins.py):
- the namespaces ``arc-systems`` (controller) and ``arc-runners`` (runners);
- the GitHub credentials Secret ``my-github-secret`` in ``arc-runners``;
- the controller's Deployment in ``arc-systems`` (0 replicas), labelled as ARC's controller
  chart labels it: ARC's scale-set chart looks it up to name the controller's account;
- after step 4, the listener's ServiceAccount in ``arc-systems`` and ARC's Role and
  RoleBinding for it in ``arc-runners`` (patch its runner set and runners), named as ARC
  names them (listener.rbac.listener_name of the scale set's namespace, runner group and URL);
- the kubelet of `helm test`'s pod: on this control plane no container runs (kwok), so each
  container's command (`kubectl auth can-i ...`) is run with the built kubectl as the pod's
  ServiceAccount (impersonated) and its exit codes are written to the pod's status, which is
  what `helm test` waits for;
- at the end, the removal of the cleanup finalizer ARC's chart puts on what it creates.

Asserted: every command that runs exits 0; the overlay file exists and is YAML; the listener
pod spec (ARC's rendered AutoscalingRunnerSet's ``listenerTemplate`` with ARC_SRC, the
overlay's without) uses the image the quick start builds and mounts only ConfigMaps and
Secrets that exist in ``arc-systems``, where ARC creates the listener pod; the runner pod
template's only in ``arc-runners``; and `helm test` passed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.support.arc_stand_ins import (
    controller_deployment,
    listener_identity,
    release_cleanup_finalizers,
    run_test_pod,
)
from tests.support.deploy_files import ROOT
from tests.support.quickstart import option, readme_commands
from tools.localcluster import LocalCluster
from tools.localcluster.build import BuildError, ensure_helm_built, ensure_kubectl_built

pytestmark = pytest.mark.cluster

CONTROLLER_NS = "arc-systems"
RUNNER_NS = "arc-runners"
SCALE_SET = "arc-cpu"
GITHUB_SECRET = "my-github-secret"
ARC_OCI = "oci://ghcr.io/actions/actions-runner-controller-charts/gha-runner-scale-set"
ARC_CHART = "charts/gha-runner-scale-set"
COMMAND_TIMEOUT = 120.0  # seconds; `helm test` waits for its pod up to 5 minutes by default
LADDER = ("arc-workflow", "placeholder-workflow", "arc-runner", "placeholder-runner")
NO_ENGINE = "no container engine here; the image tier (tests/image) builds and runs the Dockerfile"
NO_REGISTRY = "ARC's chart is an OCI reference (no registry access); set ARC_SRC to install it"


@dataclass(frozen=True)
class Step:
    command: str
    skip: str = ""  # the rule's reason, when the step cannot run here

    @property
    def head(self) -> str:
        return " ".join(self.command.split()[:2])


def plan(commands: list[str], arc_src: str) -> list[Step]:
    """The README's commands with the rule applied: what runs (ARC's chart from ARC_SRC)
    and what is skipped, and why."""
    local = shlex.quote(str(Path(arc_src) / ARC_CHART)) if arc_src else ""
    steps = []
    for command in commands:
        if command.startswith("docker "):
            steps.append(Step(command, NO_ENGINE))
        elif ARC_OCI in command and not local:
            steps.append(Step(command, NO_REGISTRY))
        else:
            steps.append(Step(command.replace(ARC_OCI, local) if local else command))
    return steps


@pytest.fixture(scope="module")
def tools_path() -> str:
    """PATH with the pinned Helm and the built kubectl first."""
    try:
        helm, kubectl = ensure_helm_built().binary, ensure_kubectl_built().binary
    except BuildError as exc:
        pytest.fail(f"Helm/kubectl build failed: {exc}", pytrace=False)
    return os.pathsep.join([str(helm.parent), str(kubectl.parent), os.environ.get("PATH", "")])


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A directory standing in for a checkout: ``charts`` links to the repository's."""
    work = tmp_path / "checkout"
    work.mkdir()
    (work / "charts").symlink_to(ROOT / "charts", target_is_directory=True)
    (work / "home").mkdir()
    return work


async def _stand_ins(cluster: LocalCluster, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    for name in (CONTROLLER_NS, RUNNER_NS):
        # The names are fixed: a cluster kept between runs (LOCALCLUSTER_KUBECONFIG) may
        # still be deleting the last run's namespaces, which the end leaves to finish alone.
        cluster.delete_namespace(name, wait=True)
        await core.create_namespace({"metadata": {"name": name}})
    await core.create_namespaced_secret(
        RUNNER_NS,
        {"metadata": {"name": GITHUB_SECRET}, "stringData": {"github_token": "not-a-token"}},
    )
    await controller_deployment(api, CONTROLLER_NS)
    # Cluster-wide and kept by `helm uninstall`: a ladder another test created outside a
    # release would make the quick start's `helm install` refuse to adopt it.
    scheduling = client.SchedulingV1Api(api)
    for name in LADDER:
        try:
            await scheduling.delete_priority_class(name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise


async def _remove(cluster: LocalCluster, api: client.ApiClient, run: Any) -> None:
    """Uninstall both releases and delete the namespaces. ARC's chart puts its cleanup
    finalizer on what it creates in the runner namespace; its controller removes it, so the
    stand-in does."""
    for release, namespace in ((SCALE_SET, RUNNER_NS), ("capacity-listener", CONTROLLER_NS)):
        await run(f"helm uninstall {release} -n {namespace} --ignore-not-found")
    await release_cleanup_finalizers(api, RUNNER_NS)
    for namespace in (RUNNER_NS, CONTROLLER_NS):
        cluster.delete_namespace(namespace)


def references(spec: dict[str, Any]) -> dict[str, set[str]]:
    """ConfigMaps and Secrets a pod spec needs to start: volumes (projected too), env and
    envFrom of every container, image pull secrets."""
    found: dict[str, set[str]] = {"ConfigMap": set(), "Secret": set()}
    for volume in spec.get("volumes") or []:
        sources = [volume, *(volume.get("projected") or {}).get("sources", [])]
        for source in sources:
            if "configMap" in source:
                found["ConfigMap"].add(source["configMap"]["name"])
            if "secret" in source:
                found["Secret"].add(source["secret"].get("secretName") or source["secret"]["name"])
    for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        for env in container.get("env") or []:
            ref = env.get("valueFrom") or {}
            if "configMapKeyRef" in ref:
                found["ConfigMap"].add(ref["configMapKeyRef"]["name"])
            if "secretKeyRef" in ref:
                found["Secret"].add(ref["secretKeyRef"]["name"])
        for source in container.get("envFrom") or []:
            if "configMapRef" in source:
                found["ConfigMap"].add(source["configMapRef"]["name"])
            if "secretRef" in source:
                found["Secret"].add(source["secretRef"]["name"])
    found["Secret"] |= {s["name"] for s in spec.get("imagePullSecrets") or []}
    return found


async def _missing(api: client.ApiClient, refs: dict[str, set[str]], namespace: str) -> list[str]:
    core = client.CoreV1Api(api)
    reads = {"ConfigMap": core.read_namespaced_config_map, "Secret": core.read_namespaced_secret}
    missing = []
    for kind, names in refs.items():
        for name in sorted(names):
            try:
                await reads[kind](name, namespace)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
                missing.append(f"{kind} {namespace}/{name}")
    return missing


async def _helm_test(
    run: Callable[[str], Coroutine[Any, Any, tuple[int, str]]],
    command: str,
    api: client.ApiClient,
    env: dict[str, str],
    cwd: Path,
) -> tuple[int, str, list[str]]:
    """`helm test` with the kubelet stand-in running its pod; exit code, output, checks."""
    helm_test = asyncio.create_task(run(command))

    def alive() -> None:
        if helm_test.done():
            raise AssertionError(f"helm test ended before its pod ran: {helm_test.result()}")

    try:
        checks = await run_test_pod(api, CONTROLLER_NS, env, cwd, alive, helm_test.done)
    except BaseException:
        helm_test.cancel()
        await asyncio.gather(helm_test, return_exceptions=True)
        raise
    code, output = await helm_test
    return code, output, checks


async def test_quick_start_runs_as_written(
    local_cluster: LocalCluster,
    kube_api: client.ApiClient,
    tools_path: str,
    workdir: Path,
) -> None:
    started = time.monotonic()
    arc_src = os.environ.get("ARC_SRC", "")
    steps = plan(readme_commands(), arc_src)
    skipped = [step for step in steps if step.skip]
    for step in skipped:
        print(f"skipped by rule: {step.head}: {step.skip}")
    expected = ["docker build", "docker push"] + ([] if arc_src else ["helm upgrade"])
    assert [step.head for step in skipped] == expected
    image_tag = option(steps[0].command, "-t")

    env = {
        "PATH": tools_path,
        "HOME": str(workdir / "home"),
        "KUBECONFIG": str(local_cluster.kubeconfig),
    }

    async def run(command: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            "bash", "-euo", "pipefail", "-c", command, cwd=workdir, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        try:
            output, _ = await asyncio.wait_for(proc.communicate(), COMMAND_TIMEOUT)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            pytest.fail(f"no exit within {COMMAND_TIMEOUT:.0f}s: {command}", pytrace=False)
        except asyncio.CancelledError:
            proc.kill()
            await proc.wait()
            raise
        assert proc.returncode is not None
        return proc.returncode, output.decode()

    fetch = next(s.command for s in steps if s.command.startswith("kubectl get configmap"))
    overlay_file = workdir / option(fetch, ">")
    arc_install = next(s.command for s in steps if s.head == "helm upgrade")
    assert option(arc_install, "-f", "--values") == overlay_file.name

    async def scale_set_spec() -> dict[str, Any]:
        """What ARC gets: its chart's rendered AutoscalingRunnerSet (ARC_SRC), or else the
        values overlay that would be rendered into it."""
        overlay = yaml.safe_load(overlay_file.read_text())
        assert isinstance(overlay, dict), f"{overlay_file.name} is not a YAML mapping"
        if not arc_src:
            return overlay
        code, manifest = await run(f"helm get manifest {SCALE_SET} -n {RUNNER_NS}")
        assert code == 0, manifest
        (runner_set,) = [
            d for d in yaml.safe_load_all(manifest) if d and d["kind"] == "AutoscalingRunnerSet"
        ]
        assert runner_set["metadata"]["name"] == SCALE_SET
        spec: dict[str, Any] = runner_set["spec"]
        return spec

    await _stand_ins(local_cluster, kube_api)
    outputs: dict[str, str] = {}
    checks: list[str] = []
    try:
        for step in steps:
            if step.skip:
                continue
            if step.head == "helm test":
                spec = await scale_set_spec()
                await listener_identity(kube_api, SCALE_SET, RUNNER_NS, CONTROLLER_NS, spec)
                code, output, checks = await _helm_test(run, step.command, kube_api, env, workdir)
                print("helm test's checks, as the listener's account:", *checks, sep="\n  ")
            else:
                code, output = await run(step.command)
            print(f"$ {step.command.splitlines()[0]}  -> exit {code}")
            assert code == 0, f"{step.command}\n{output}"
            outputs[step.head] = output

        # `helm test` ran its pod and the pod succeeded: every check answered yes.
        helm_test = outputs["helm test"]
        assert re.search(r"^Phase:\s+Succeeded$", helm_test, re.M), helm_test
        assert checks
        # The account wait first (`wait-<scale set>`), then every permission check said yes.
        waits = [a for a in checks if a.startswith("wait-")]
        assert waits, checks
        assert all(a.endswith("(exit 0)") for a in waits), checks
        assert all(a.endswith("yes (exit 0)") for a in checks if a not in waits), checks

        spec = await scale_set_spec()
        if arc_src:
            assert spec["githubConfigSecret"] == GITHUB_SECRET
        listener = spec["listenerTemplate"]["spec"]
        runner = spec["template"]["spec"]
        (container,) = listener["containers"]
        assert container["image"] == image_tag  # the image step 1 builds and pushes
        listener_refs, runner_refs = references(listener), references(runner)
        print(json.dumps({"listener": listener_refs, "runner": runner_refs}, default=sorted))
        assert listener_refs["ConfigMap"]
        assert runner_refs["ConfigMap"]
        missing = await _missing(kube_api, listener_refs, CONTROLLER_NS)
        missing += await _missing(kube_api, runner_refs, RUNNER_NS)
        assert missing == [], "the pods would not start: missing " + ", ".join(missing)
    finally:
        await _remove(local_cluster, kube_api, run)
    print(json.dumps({"quickstart_wall_s": round(time.monotonic() - started, 1)}))
