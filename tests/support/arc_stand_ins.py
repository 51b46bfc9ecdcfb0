"""What ARC's controller does that a test without it must do itself (test infrastructure),
for the quick-start test (tests/integration/test_quickstart.py):

- ``controller_deployment``: the controller's Deployment (0 replicas), labelled as ARC's
  controller chart labels it: ARC's scale-set chart looks it up to name the controller's
  ServiceAccount and fails without it;
- ``listener_identity``: the listener's ServiceAccount and ARC's Role and RoleBinding for
  it, named as ARC names them, once a scale set exists;
- ``release_cleanup_finalizers``: ARC's chart puts its cleanup finalizer on what it creates
  in the runner namespace, and only the controller removes it;
- ``run_test_pod``: the kubelet of `helm test`'s pod (on kwok no container runs).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from listener.rbac import listener_name
from tests.support.deploy_cluster_kit import arc_listener_role
from tools.waits import eventually

CLEANUP_FINALIZER = "actions.github.com/cleanup-protection"
MERGE_PATCH = "application/merge-patch+json"


async def controller_deployment(api: client.ApiClient, namespace: str) -> None:
    labels = {
        "app.kubernetes.io/part-of": "gha-rs-controller",
        "app.kubernetes.io/name": "gha-rs-controller",
        "actions.github.com/controller-service-account-name": "arc-gha-rs-controller",
        "actions.github.com/controller-service-account-namespace": namespace,
    }
    selector = {"app.kubernetes.io/name": "gha-rs-controller"}
    await client.AppsV1Api(api).create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "arc-gha-rs-controller", "labels": labels},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": selector},
                    "spec": {"containers": [{"name": "manager", "image": "arc-controller"}]},
                },
            },
        },
    )


async def listener_identity(
    api: client.ApiClient,
    scale_set: str,
    runner_ns: str,
    controller_ns: str,
    spec: dict[str, Any],
) -> str:
    """Create the listener's ServiceAccount (controller namespace) and ARC's Role and
    RoleBinding of the same name in the runner namespace (resourcebuilder.go
    rulesForListenerRole), the name computed from the scale set's namespace, runner group and
    URL as ARC's chart got them (``spec``: the AutoscalingRunnerSet's, or ARC's values).
    Returns the name."""
    name = listener_name(
        scale_set, runner_ns, spec.get("runnerGroup") or "", spec["githubConfigUrl"]
    )
    await client.CoreV1Api(api).create_namespaced_service_account(
        controller_ns, {"metadata": {"name": name}}
    )
    # ARC generates the runner set's name; no check patches it.
    role, binding = arc_listener_role(f"{scale_set}-x7k2p", name, controller_ns)
    role["metadata"]["name"] = binding["metadata"]["name"] = binding["roleRef"]["name"] = name
    rbac = client.RbacAuthorizationV1Api(api)
    await rbac.create_namespaced_role(runner_ns, role)
    await rbac.create_namespaced_role_binding(runner_ns, binding)
    return name


async def release_cleanup_finalizers(api: client.ApiClient, namespace: str) -> None:
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    kinds = (
        (core.list_namespaced_service_account, core.patch_namespaced_service_account),
        (core.list_namespaced_secret, core.patch_namespaced_secret),
        (rbac.list_namespaced_role, rbac.patch_namespaced_role),
        (rbac.list_namespaced_role_binding, rbac.patch_namespaced_role_binding),
    )
    for list_call, patch_call in kinds:
        for item in (await list_call(namespace)).items:
            finalizers = item.metadata.finalizers or []
            if CLEANUP_FINALIZER in finalizers:
                kept = [f for f in finalizers if f != CLEANUP_FINALIZER]
                # A merge patch: finalizers merge under a strategic merge patch, so one
                # cannot drop an entry.
                body = {"metadata": {"finalizers": kept}}
                await patch_call(item.metadata.name, namespace, body, _content_type=MERGE_PATCH)


async def run_test_pod(
    api: client.ApiClient,
    namespace: str,
    kubectl_env: dict[str, str],
    cwd: Path,
    alive: Callable[[], None],
    ended: Callable[[], bool],
) -> list[str]:
    """Stand in for the kubelet of `helm test`'s pods in ``namespace``, in the order Helm
    creates them (by hook weight, each after the last one ended): run each container's
    command (`kubectl auth can-i ...` or `kubectl wait ...`, kubectl from ``kubectl_env``'s
    PATH) as the pod's ServiceAccount, impersonated, and write the exit codes to the pod's
    status, which is what `helm test` waits for. Returns each command with its answer once
    ``ended()`` (`helm test` has finished). ``alive`` raises once `helm test` has ended
    before its first pod came."""
    core = client.CoreV1Api(api)
    ran: set[str] = set()
    answers: list[str] = []

    async def next_pod() -> Any:
        """The next pod to run, or ENDED once `helm test` finished after running some."""
        if ran and ended():
            return ENDED
        pods = (await core.list_namespaced_pod(namespace)).items
        hooks = [
            p
            for p in pods
            if (p.metadata.annotations or {}).get("helm.sh/hook") == "test"
            and p.metadata.name not in ran
        ]
        return hooks[0] if hooks else None

    def first_pod_comes() -> None:
        if not ran:
            alive()

    while (
        pod := await eventually(next_pod, "helm test's next pod", 60, alive=first_pod_comes)
    ) is not ENDED:
        ran.add(pod.metadata.name)
        answers += await _run_pod(core, pod, namespace, kubectl_env, cwd)
    return answers


ENDED = object()


async def _run_pod(
    core: client.CoreV1Api, pod: Any, namespace: str, kubectl_env: dict[str, str], cwd: Path
) -> list[str]:
    account = f"system:serviceaccount:{namespace}:{pod.spec.service_account_name}"
    groups = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}")
    as_pod = ["--as", account, *(arg for g in groups for arg in ("--as-group", g))]
    statuses, answers = [], []
    for container in pod.spec.containers:
        assert container.command[:2] in (["kubectl", "auth"], ["kubectl", "wait"]), (
            container.command
        )
        proc = await asyncio.create_subprocess_exec(
            *container.command, *as_pod, cwd=cwd, env=kubectl_env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        output, _ = await proc.communicate()
        code = proc.returncode
        answers.append(f"{container.name}: {output.decode().strip()} (exit {code})")
        statuses.append(
            {
                "name": container.name,
                "image": container.image,
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {
                    "terminated": {
                        "exitCode": code,
                        "reason": "Completed" if code == 0 else "Error",
                    }
                },
            }
        )
    failed = any(s["state"]["terminated"]["exitCode"] != 0 for s in statuses)
    status = {"phase": "Failed" if failed else "Succeeded", "containerStatuses": statuses}
    await core.patch_namespaced_pod_status(pod.metadata.name, namespace, {"status": status})
    return answers
