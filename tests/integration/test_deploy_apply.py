"""deploy/ applied to a real API server: every manifest and the PriorityClasses apply
server-side (dry run), and what the Helm overlays, workflow pod templates and capacity
examples would create passes the API server's own validation and admission (PriorityClass
names resolve, probes name real ports, extended resources have matching limits, the
AutoscalingRunnerSet schema accepts the listener and runner templates). The static checks of
the same files are in tests/unit/test_deploy_*.py."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from base.arc import ARC_GROUP, ARC_VERSION
from capacity.model import Role
from capacity.settings import load_capacity_settings
from capacity.specs import build_template, placeholder_pod
from tests.support.deploy_cluster_kit import apply, as_pod, dynamic
from tests.support.deploy_files import DEPLOY, ROOT, hook_template, overlay, yaml_docs
from tools.capacity_kit import apply_ladder
from tools.localcluster.testkit import PAUSE_IMAGE

pytestmark = pytest.mark.cluster


async def dry_run_create_pod(api: client.ApiClient, namespace: str, pod: dict[str, Any]) -> None:
    await client.CoreV1Api(api).create_namespaced_pod(namespace, pod, dry_run="All")


async def test_manifests_apply_server_side(
    kube_api: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    await apply_ladder(kube_api)  # for real: the pods below name these classes
    applied = []
    async with dynamic(kube_api, tmp_path) as dyn:
        paths = [
            *sorted((ROOT / "priorityclasses").glob("*.yaml")),
            *sorted((DEPLOY / "rbac").glob("*.yaml")),
            DEPLOY / "pdb-runners.yaml",
            *sorted((DEPLOY / "helm").glob("workflow-pod-template-*.yaml")),
        ]
        for path in paths:
            for body in yaml_docs(path):
                if body["kind"] == "Kustomization":  # client-side only (kubectl apply -k)
                    continue
                result = await apply(dyn, body, namespace, dry_run=True)
                assert result.metadata.name == body["metadata"]["name"]
                applied.append((path.name, body["kind"]))
        kinds = {kind for _, kind in applied}
        assert kinds >= {
            "PriorityClass",
            "Role",
            "RoleBinding",
            "ClusterRole",
            "ClusterRoleBinding",
            "PodDisruptionBudget",
            "ConfigMap",
        }

        # The AutoscalingRunnerSet the chart renders from each overlay: ARC's CRD schema must
        # accept our listenerTemplate and runner template.
        for flavour in ("cpu", "gpu"):
            values = overlay(flavour)
            ars = {
                "apiVersion": f"{ARC_GROUP}/{ARC_VERSION}",
                "kind": "AutoscalingRunnerSet",
                "metadata": {"name": f"arc-{flavour}"},
                "spec": {
                    "githubConfigUrl": "https://github.com/acme",
                    "githubConfigSecret": "github-config",
                    "maxRunners": values["maxRunners"],
                    "minRunners": values["minRunners"],
                    "listenerTemplate": values["listenerTemplate"],
                    "template": values["template"],
                },
            }
            result = await apply(dyn, ars, namespace, dry_run=True)
            listener = result.spec.listenerTemplate.spec.containers[0]
            assert listener.name == "listener"


@pytest.mark.parametrize("flavour", ["cpu", "gpu"])
async def test_overlay_pods_pass_api_validation_and_admission(
    kube_api: client.ApiClient, namespace: str, flavour: str
) -> None:
    """Dry-run creates of the pods the overlay, the hook template and the capacity example
    lead to; the API server validates each fully and resolves its PriorityClass."""
    await apply_ladder(kube_api)
    values = overlay(flavour)

    # The listener pod as ARC builds it: one container named `listener` with ours merged in
    # (ARC's own config volume and env are left out: they do not change validity).
    listener_spec = copy.deepcopy(values["listenerTemplate"]["spec"])
    listener_spec["restartPolicy"] = "Never"
    await dry_run_create_pod(kube_api, namespace, as_pod("listener", listener_spec))

    runner_spec = copy.deepcopy(values["template"]["spec"])
    await dry_run_create_pod(kube_api, namespace, as_pod("runner", runner_spec))

    workflow_spec = copy.deepcopy(hook_template(flavour)["spec"])
    for container in workflow_spec["containers"]:
        if container["name"] == "$job":  # the hooks put the job's own container here
            container.update(name="job", image=PAUSE_IMAGE)
    await dry_run_create_pod(kube_api, namespace, as_pod("runner-workflow", workflow_spec))

    # Both placeholder halves built by capacity.specs from the example settings.
    settings = load_capacity_settings(
        {"CAPACITY_CONFIG_FILE": str(DEPLOY / "config" / f"capacity-{flavour}.yaml")}
    )
    template = build_template(
        settings,
        scale_set=f"arc-{flavour}",
        runner_namespace=namespace,
        runner_pod_template=values["template"],
        owner_uid="00000000-0000-0000-0000-000000000000",  # a dry run: no runner set exists
        owner=None,
    )
    for role in Role:
        pod = placeholder_pod(role, "1", template=template, now=time.time())
        await dry_run_create_pod(kube_api, namespace, pod)


async def test_a_missing_priority_class_is_rejected(
    kube_api: client.ApiClient, namespace: str
) -> None:
    """The admission check above can fail: an unknown class name is refused."""
    await apply_ladder(kube_api)
    spec = copy.deepcopy(overlay("cpu")["template"]["spec"])
    spec["priorityClassName"] = "arc-runner-typo"
    with pytest.raises(ApiException) as caught:
        await dry_run_create_pod(kube_api, namespace, as_pod("runner", spec))
    assert caught.value.status == 403
    assert "arc-runner-typo" in str(caught.value.body)
