"""The companion chart (charts/capacity-listener) installed with the real, pinned Helm on the
local control plane: its RBAC lets exactly the listener account ARC would create make the
listener's calls (an EphemeralRunnerSet named as ARC 0.14 names it), every check of its
`helm test` pod is allowed for that account, an upgrade that changes the runner group rebinds
to the new account, and an uninstall leaves nothing behind but the PriorityClasses, which a
re-install of the same release adopts. Install, upgrade and uninstall
times are printed as JSON (run with -s to see them).

`helm test` itself is not run: on this control plane pods run on kwok's fake nodes, where a
bare pod is reported Running forever and no container ever executes, so its result would
prove nothing. What the pod would ask (`kubectl auth can-i`, one SelfSubjectAccessReview per
container) is asked here instead, as the pod's ServiceAccount, from the rendered hook."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from base.kube import Kube, Resource
from listener.rbac import listener_name
from tests.support.deploy_cluster_kit import (
    SCALE_SET,
    apply,
    arc_listener_role,
    dynamic,
    impersonating,
)
from tests.support.helm_chart import CHART, helm, notes_fetch_command, scale_set, write_values
from tools.capacity_kit import create_runner_set, runner_pod_spec
from tools.localcluster import LocalCluster
from tools.localcluster.build import BuildError, ensure_helm_built
from tools.waits import eventually

pytestmark = pytest.mark.cluster

URL = "https://github.com/acme/"  # with the trailing `/` ARC's chart removes
LABEL = "app.kubernetes.io/instance"
LADDER = ("arc-workflow", "placeholder-workflow", "arc-runner", "placeholder-runner")
KEEP = "helm.sh/resource-policy"


@pytest.fixture(scope="module")
def helm_bin() -> Path:
    try:
        return ensure_helm_built().binary
    except BuildError as exc:
        pytest.fail(f"Helm build failed: {exc}", pytrace=False)


def _can_i(command: list[str]) -> dict[str, Any]:
    """The SelfSubjectAccessReview `kubectl auth can-i VERB RESOURCE[.GROUP][/NAME]
    --namespace NS` sends."""
    assert command[:3] == ["kubectl", "auth", "can-i"], command
    verb, target, flag, namespace = command[3:7]
    assert flag == "--namespace"
    resource, _, name = target.partition("/")
    resource, _, group = resource.partition(".")
    attributes = {"verb": verb, "resource": resource, "group": group, "namespace": namespace}
    if name:
        attributes["name"] = name
    return {"spec": {"resourceAttributes": attributes}}


async def _allowed(
    cluster: LocalCluster, account: str, reviews: list[dict[str, Any]]
) -> list[bool]:
    async with impersonating(cluster, account, "system:authenticated") as api:
        authz = client.AuthorizationV1Api(api)
        return [
            bool((await authz.create_self_subject_access_review(r)).status.allowed) for r in reviews
        ]


async def _fetched_overlay(api: client.ApiClient, command: str) -> dict[str, Any]:
    """What the NOTES' `kubectl get configmap NAME -n NS -o jsonpath='{.data.values\\.yaml}'
    > FILE` writes, read through the API (no kubectl here): the overlay for ARC's chart."""
    words = shlex.split(command)
    assert words[:3] == ["kubectl", "get", "configmap"], command
    assert words[4] == "-n", words
    assert words[6:8] == ["-o", "jsonpath={.data.values\\.yaml}"], words
    assert words[8] == ">", words
    assert words[9].endswith(".yaml"), words
    configmap = await client.CoreV1Api(api).read_namespaced_config_map(words[3], words[5])
    overlay: dict[str, Any] = yaml.safe_load(configmap.data["values.yaml"])
    return overlay


async def _leftovers(api: client.ApiClient, release: str, namespaces: list[str]) -> list[str]:
    selector = f"{LABEL}={release}"
    rbac = client.RbacAuthorizationV1Api(api)
    core = client.CoreV1Api(api)
    policy = client.PolicyV1Api(api)
    scheduling = client.SchedulingV1Api(api)
    found: list[str] = []
    for ns in namespaces:
        for kind, call in (
            ("Role", rbac.list_namespaced_role),
            ("RoleBinding", rbac.list_namespaced_role_binding),
            ("ConfigMap", core.list_namespaced_config_map),
            ("PodDisruptionBudget", policy.list_namespaced_pod_disruption_budget),
        ):
            items = (await call(ns, label_selector=selector)).items
            found += [f"{kind} {ns}/{i.metadata.name}" for i in items]
    for kind, cluster_call in (
        ("ClusterRole", rbac.list_cluster_role),
        ("ClusterRoleBinding", rbac.list_cluster_role_binding),
        ("PriorityClass", scheduling.list_priority_class),
    ):
        items = (await cluster_call(label_selector=selector)).items
        found += [f"{kind} {i.metadata.name}" for i in items]
    return found


async def test_install_upgrade_uninstall_on_the_control_plane(
    local_cluster: LocalCluster,
    kube_api: client.ApiClient,
    namespace: str,
    controller_namespace: str,
    helm_bin: Path,
    tmp_path: Path,
) -> None:
    release = f"cl-{namespace}"[:40]
    scheduling = client.SchedulingV1Api(kube_api)
    existing = {pc.metadata.name for pc in (await scheduling.list_priority_class()).items}
    # The ladder is cluster-wide: another test may have created it outside any release.
    create_classes = "arc-workflow" not in existing
    values: dict[str, Any] = {
        "priorityClasses": {"create": create_classes},
        "scaleSets": {SCALE_SET: scale_set(namespace, URL, node_checks=True)},
    }

    async def run(*args: str) -> tuple[float, str]:
        started = time.monotonic()
        result = await asyncio.to_thread(
            helm, helm_bin, *args, "--namespace", controller_namespace,
            kubeconfig=local_cluster.kubeconfig,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return time.monotonic() - started, result.stdout

    timings = {}
    values_file = write_values(values, tmp_path)
    timings["install_s"], output = await run(
        "install", release, str(CHART), "--values", str(values_file)
    )

    account = listener_name(SCALE_SET, namespace, "", URL)
    # NOTES: the computed account and the one command that fetches the overlay for ARC's
    # chart from the ConfigMap this release wrote; the overlay names this release's
    # ConfigMaps and the URL as given.
    assert f"Listener ServiceAccount, computed as ARC names it: {account}" in output
    overlay = await _fetched_overlay(kube_api, notes_fetch_command(output, SCALE_SET))
    assert overlay["githubConfigUrl"] == URL
    (container,) = overlay["listenerTemplate"]["spec"]["containers"]
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert container["image"] == f"ghcr.io/capacity-listener/capacity-listener:{version}"
    assert "HUD_API_TOKEN" not in {e["name"] for e in container["env"]}  # HUD is off
    (volume,) = overlay["listenerTemplate"]["spec"]["volumes"]
    core = client.CoreV1Api(kube_api)
    settings_map = await core.read_namespaced_config_map(
        volume["configMap"]["name"], controller_namespace
    )
    assert "workflow_resources" in settings_map.data["capacity.yaml"]
    (hooks_volume,) = overlay["template"]["spec"]["volumes"]
    await core.read_namespaced_config_map(hooks_volume["configMap"]["name"], namespace)
    # What ARC creates for the scale set: the runner set (generated name), its listener's
    # ServiceAccount and its own Role for the listener (patch on that runner set).
    ours = await create_runner_set(
        kube_api, namespace, SCALE_SET, runner_pod_spec(namespace, cpu="100m"), generate_name=True
    )
    set_name = ours["metadata"]["name"]
    rbac_api = client.RbacAuthorizationV1Api(kube_api)
    await rbac_api.create_namespaced_role(namespace, {"metadata": {"name": account}, "rules": []})
    async with dynamic(kube_api, tmp_path) as dyn:
        for body in arc_listener_role(set_name, account, controller_namespace):
            await apply(dyn, body, namespace, dry_run=False)

    hooks = await asyncio.to_thread(
        helm, helm_bin, "get", "hooks", release, "--namespace", controller_namespace,
        kubeconfig=local_cluster.kubeconfig,
    )  # fmt: skip
    assert hooks.returncode == 0, hooks.stderr
    pods = [d for d in yaml.safe_load_all(hooks.stdout) if d and d["kind"] == "Pod"]
    # The account wait runs first (weight -1), then one pod of checks per scale set.
    weights = {p["metadata"]["annotations"]["helm.sh/hook-weight"]: p for p in pods}
    assert sorted(weights) == ["-1", "0"], weights.keys()
    assert weights["-1"]["spec"]["containers"][0]["command"][:3] == [
        "kubectl",
        "wait",
        "--for=create",
    ]
    test_pod = weights["0"]
    assert test_pod["spec"]["serviceAccountName"] == account
    checks = [c["command"] for c in test_pod["spec"]["containers"]]
    reviews = [_can_i(command) for command in checks]
    user = f"system:serviceaccount:{controller_namespace}:{account}"

    async def all_allowed() -> list[bool] | None:
        answers = await _allowed(local_cluster, user, reviews)
        return answers if all(answers) else None

    await eventually(all_allowed, "every helm test check allowed for the listener", within=15)
    assert any(c[3:5] == ["get", "nodes"] for c in checks)  # node_checks: the ClusterRole

    # The listener's own reads of its runner set, by the generated name.
    sets = Resource.arc("ephemeralrunnersets", namespace)
    async with impersonating(local_cluster, user, "system:authenticated") as api:
        listed, _ = await Kube(api, request_timeout=15.0).list_objects(
            sets, lambda o: o["metadata"]["uid"], field_selector=f"metadata.name={set_name}"
        )
    assert listed == {set_name: ours["metadata"]["uid"]}
    stranger = f"system:serviceaccount:{controller_namespace}:{SCALE_SET}-00000000-listener"
    assert not any(await _allowed(local_cluster, stranger, reviews[:4]))

    # Upgrade: a runner group changes ARC's account name; the chart rebinds to the new one.
    values["scaleSets"][SCALE_SET]["runnerGroup"] = "gpu-runners"
    timings["upgrade_s"], _ = await run(
        "upgrade", release, str(CHART), "--values", str(write_values(values, tmp_path, "v2.yaml"))
    )
    moved = listener_name(SCALE_SET, namespace, "gpu-runners", URL)
    assert moved != account
    moved_user = f"system:serviceaccount:{controller_namespace}:{moved}"
    create_pods = [_can_i(["kubectl", "auth", "can-i", "create", "pods", "--namespace", namespace])]

    async def rebound() -> bool:
        new = await _allowed(local_cluster, moved_user, create_pods)
        old = await _allowed(local_cluster, user, create_pods)
        return new == [True] and old == [False]

    await eventually(rebound, "the upgrade's binding in effect", within=15)

    timings["uninstall_s"], _ = await run("uninstall", release, "--wait")
    left = await _leftovers(kube_api, release, [namespace, controller_namespace])
    # Only the ladder stays (helm.sh/resource-policy: keep), when this release created it.
    kept = [f"PriorityClass {name}" for name in sorted(LADDER)] if create_classes else []
    assert sorted(left) == kept
    print(
        json.dumps({"chart": "capacity-listener", **{k: round(v, 2) for k, v in timings.items()}})
    )


async def _ladder(api: client.ApiClient) -> dict[str, dict[str, str]]:
    """The ladder's PriorityClasses that exist, with their annotations."""
    items = (await client.SchedulingV1Api(api).list_priority_class()).items
    return {
        pc.metadata.name: dict(pc.metadata.annotations or {})
        for pc in items
        if pc.metadata.name in LADDER
    }


async def test_priority_classes_survive_uninstall_and_a_reinstall_adopts_them(
    local_cluster: LocalCluster,
    kube_api: client.ApiClient,
    namespace: str,
    controller_namespace: str,
    helm_bin: Path,
    tmp_path: Path,
) -> None:
    """`helm uninstall` leaves the ladder (helm.sh/resource-policy: keep), so runner pods
    naming arc-runner are still admitted; installing the same release again adopts the kept
    classes; another release cannot (Helm's ownership check) and sets
    priorityClasses.create=false instead."""
    scheduling = client.SchedulingV1Api(kube_api)
    # The ladder is cluster-wide: start without it (another test may have applied it by hand,
    # which no release could adopt). Kept or re-created, it is there again at the end.
    for name in LADDER:
        try:
            await scheduling.delete_priority_class(name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise

    async def gone() -> bool:
        return await _ladder(kube_api) == {}

    await eventually(gone, "the ladder deleted", within=15)

    async def run(*args: str) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(
            helm, helm_bin, *args, "--namespace", controller_namespace,
            kubeconfig=local_cluster.kubeconfig,
        )  # fmt: skip

    release = f"pc-{namespace}"[:40]
    values: dict[str, Any] = {"scaleSets": {SCALE_SET: scale_set(namespace, URL)}}
    chart = ("install", release, str(CHART))
    installed = await run(*chart, "--values", str(write_values(values, tmp_path)))
    assert installed.returncode == 0, installed.stderr
    assert set(await _ladder(kube_api)) == set(LADDER)
    values["scaleSets"][SCALE_SET]["capacity"]["proactive_capacity"] = 2
    upgraded = await run(
        "upgrade", release, str(CHART), "--values", str(write_values(values, tmp_path, "v2.yaml"))
    )
    assert upgraded.returncode == 0, upgraded.stderr

    uninstalled = await run("uninstall", release, "--wait")
    assert uninstalled.returncode == 0, uninstalled.stderr
    kept = await _ladder(kube_api)
    assert set(kept) == set(LADDER)
    for marks in kept.values():
        assert marks[KEEP] == "keep"
        # Helm's ownership stays on them: what lets the same release adopt them again.
        assert marks["meta.helm.sh/release-name"] == release
        assert marks["meta.helm.sh/release-namespace"] == controller_namespace
    # The point of keeping them: a runner pod naming arc-runner is still admitted.
    pod = {
        "metadata": {"name": "runner"},
        "spec": {
            "priorityClassName": "arc-runner",
            "containers": [{"name": "runner", "image": "ghcr.io/actions/actions-runner"}],
        },
    }
    admitted = await client.CoreV1Api(kube_api).create_namespaced_pod(namespace, pod, dry_run="All")
    assert admitted.spec.priority == 0

    again = await run(*chart, "--values", str(write_values(values, tmp_path, "v3.yaml")))
    assert again.returncode == 0, again.stderr

    other = "pc-other"
    other_values: dict[str, Any] = {
        "runnerPDB": {"create": False},  # the runner namespace's budget is the first release's
        "scaleSets": {"arc-other": scale_set(namespace, URL)},
    }
    refused = await run(
        "install",
        other,
        str(CHART),
        "--values",
        str(write_values(other_values, tmp_path, "o.yaml")),
    )
    assert refused.returncode != 0
    assert "exists and cannot be imported into the current release" in refused.stderr
    other_values["priorityClasses"] = {"create": False}
    accepted = await run(
        "install",
        other,
        str(CHART),
        "--values",
        str(write_values(other_values, tmp_path, "o2.yaml")),
    )
    assert accepted.returncode == 0, accepted.stderr

    for name in (other, release):
        done = await run("uninstall", name, "--wait")
        assert done.returncode == 0, done.stderr
    assert set(await _ladder(kube_api)) == set(LADDER)
