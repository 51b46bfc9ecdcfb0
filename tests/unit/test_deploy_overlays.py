"""The Helm overlays (deploy/helm), their workflow pod templates and the capacity examples
(deploy/config) agree with each other and with what the listener expects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.deploy_files import DEPLOY, hook_template, overlay, yaml_docs


@pytest.mark.parametrize("flavour", ["cpu", "gpu"])
def test_overlay_grace_period_matches_the_listener_shutdown_grace(flavour: str) -> None:
    """ARC leaves the listener pod at 30 s unless the template sets it; the listener sizes
    its shutdown to LISTENER_SHUTDOWN_GRACE, so the two must agree."""
    values = overlay(flavour)
    spec = values["listenerTemplate"]["spec"]
    (container,) = spec["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert spec["terminationGracePeriodSeconds"] == 60
    assert float(env["LISTENER_SHUTDOWN_GRACE"]) == spec["terminationGracePeriodSeconds"]


def named(items: list[dict[str, Any]], name: str) -> dict[str, Any]:
    matches = [item for item in items if item.get("name") == name]
    assert len(matches) == 1, (name, [item.get("name") for item in items])
    return matches[0]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


@pytest.mark.parametrize("flavour", ["cpu", "gpu"])
def test_listener_template(flavour: str) -> None:
    values = overlay(flavour)
    spec = values["listenerTemplate"]["spec"]
    listener = named(spec["containers"], "listener")
    assert listener["image"]
    assert listener.get("command", ["/ghalistener"]) == ["/ghalistener"]
    env = env_of(listener)
    # The HUD token only ever comes from a Secret.
    assert "value" not in env["HUD_API_TOKEN"]
    assert env["HUD_API_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hud-api-token"
    # Probes hit the port LISTENER_PROBE_ADDR listens on.
    probe_port = int(env["LISTENER_PROBE_ADDR"]["value"].rsplit(":", 1)[1])
    ports = {p["name"]: p["containerPort"] for p in listener["ports"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        port = listener[probe]["httpGet"]["port"]
        assert ports.get(port, port) == probe_port, probe
    assert listener["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert listener["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # Startup tolerates the whole 409 session-conflict retry window.
    startup = listener["startupProbe"]
    conflict = int(env["LISTENER_SESSION_CONFLICT_TIMEOUT"]["value"])
    assert startup["periodSeconds"] * startup["failureThreshold"] > conflict
    assert listener["resources"]["requests"]["memory"] == "128Mi"
    security = listener["securityContext"]
    assert security["runAsUser"] == 65532
    assert security["readOnlyRootFilesystem"] is True
    # The capacity file is mounted where CAPACITY_CONFIG_FILE points, from a ConfigMap.
    config_file = Path(env["CAPACITY_CONFIG_FILE"]["value"])
    mount = next(m for m in listener["volumeMounts"] if Path(m["mountPath"]) == config_file.parent)
    volume = named(spec["volumes"], mount["name"])
    assert volume["configMap"]["name"] == f"capacity-listener-arc-{flavour}"
    assert values["containerMode"]["type"] == "kubernetes"
    assert "listenerMetrics" not in values


@pytest.mark.parametrize("flavour", ["cpu", "gpu"])
def test_runner_and_workflow_templates(flavour: str) -> None:
    values = overlay(flavour)
    runner_spec = values["template"]["spec"]
    assert runner_spec["priorityClassName"] == "arc-runner"
    runner = named(runner_spec["containers"], "runner")
    hook_path = Path(env_of(runner)["ACTIONS_RUNNER_CONTAINER_HOOK_TEMPLATE"]["value"])
    mount = next(m for m in runner["volumeMounts"] if Path(m["mountPath"]) == hook_path.parent)
    configmap_name = named(runner_spec["volumes"], mount["name"])["configMap"]["name"]

    (configmap,) = yaml_docs(DEPLOY / "helm" / f"workflow-pod-template-{flavour}.yaml")
    assert configmap["kind"] == "ConfigMap"
    assert configmap["metadata"]["name"] == configmap_name
    template = yaml.safe_load(configmap["data"][hook_path.name])
    assert template["spec"]["priorityClassName"] == "arc-workflow"
    job = named(template["spec"]["containers"], "$job")
    assert job["resources"]["requests"]


@pytest.mark.parametrize("flavour", ["cpu", "gpu"])
def test_jobs_are_not_disrupted_by_karpenter(flavour: str) -> None:
    """Consolidation evicts a running pod it can move (test_karpenter.py shows it for a
    runner pod): runner and workflow pods carry karpenter.sh/do-not-disrupt."""
    values = overlay(flavour)
    assert values["template"]["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    workflow = hook_template(flavour)
    assert workflow["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"


@pytest.mark.parametrize("flavour", ["cpu", "gpu"])
def test_capacity_examples_load_and_match_the_pod_templates(flavour: str) -> None:
    from capacity.settings import load_capacity_settings

    path = DEPLOY / "config" / f"capacity-{flavour}.yaml"
    settings = load_capacity_settings({"CAPACITY_CONFIG_FILE": str(path)})
    assert settings.enabled
    assert settings.hud.enabled

    workflow = hook_template(flavour)["spec"]
    job = named(workflow["containers"], "$job")
    assert settings.workflow_resources is not None
    assert settings.workflow_resources.requests == {
        k: str(v) for k, v in job["resources"]["requests"].items()
    }
    # Workflow placeholders go where workflow pods go.
    if "nodeSelector" in workflow:
        assert settings.workflow_node_selector == workflow["nodeSelector"]
    if "tolerations" in workflow:
        assert settings.workflow_tolerations is not None
        assert [t.to_k8s() for t in settings.workflow_tolerations] == workflow["tolerations"]

    values = overlay(flavour)
    runner_spec = values["template"]["spec"]
    runner = named(runner_spec["containers"], "runner")
    if settings.runner_resources is not None:
        assert settings.runner_resources.requests == runner["resources"]["requests"]
    if settings.node_selector is not None:
        assert settings.node_selector == runner_spec.get("nodeSelector")
