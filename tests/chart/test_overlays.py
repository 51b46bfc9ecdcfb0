"""The ARC values overlay, rendered by the real, pinned Helm from the chart's one template
(templates/_overlay.tpl): it mounts exactly the ConfigMaps the chart creates, in the
namespaces where the pods run; deploy/helm/values-capacity-*.yaml are that template's output
for the example values (deploy/gen_overlays.py); image, pull secrets, the work volume and the
HUD token follow the values. Skipped without the Helm build on a developer machine, failing
in CI (tests/support/helm_chart.py).

The overlay merged into a team's own values (``ghalistener overlay``, listener/overlay.py)
keeps the team's runner and still mounts the chart's ConfigMaps; with ``ARC_SRC`` naming an
actions-runner-controller tree, ARC's own gha-runner-scale-set chart renders the merged file
(Helm also checks it against that chart's values.schema.json when the tree has one; 0.14.2
has none). Without ``ARC_SRC`` that test is skipped, saying so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from listener.overlay import find_overlay, merge
from tests.support import arc_controller
from tests.support.deploy_files import DEPLOY, load_script
from tests.support.helm_chart import (
    CHART,
    CONTROLLER_NAMESPACE,
    by_kind,
    example_values,
    helm,
    overlay,
    scale_set,
    template,
    write_values,
)


def _named(items: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (item,) = [i for i in items if i["name"] == name]
    return item


def test_committed_overlays_are_the_chart_template_output(helm_bin: Path) -> None:
    generator = load_script(DEPLOY / "gen_overlays.py")
    rendered = generator.render(helm_bin)
    assert sorted(p.name for p in rendered) == [
        "values-capacity-cpu.yaml",
        "values-capacity-gpu.yaml",
    ]
    for path, text in rendered.items():
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.name} is stale: run `python deploy/gen_overlays.py`"
        )


def test_overlay_mounts_the_configmaps_the_chart_creates(helm_bin: Path, tmp_path: Path) -> None:
    """The listener pod (controller namespace) mounts the settings ConfigMap, the runner pod
    (runner namespace) the workflow pod template: both exist there under those names."""
    values = example_values()
    docs = template(helm_bin, values, tmp_path)
    configmaps = by_kind(docs, "ConfigMap")
    for name, entry in values["scaleSets"].items():
        arc = overlay(docs, name)
        listener_spec = arc["listenerTemplate"]["spec"]
        (volume,) = listener_spec["volumes"]
        assert f"{CONTROLLER_NAMESPACE}/{volume['configMap']['name']}" in configmaps
        runner_spec = arc["template"]["spec"]
        (hooks,) = runner_spec["volumes"]
        workflow = configmaps[f"{entry['namespace']}/{hooks['configMap']['name']}"]
        (runner,) = runner_spec["containers"]
        env = {e["name"]: e["value"] for e in runner["env"]}
        mount = _named(runner["volumeMounts"], hooks["name"])
        hook_path = Path(env["ACTIONS_RUNNER_CONTAINER_HOOK_TEMPLATE"])
        assert Path(mount["mountPath"]) == hook_path.parent
        assert hook_path.name in workflow["data"]
        assert arc["githubConfigUrl"] == entry["githubConfigUrl"]
        assert arc.get("runnerGroup") == entry.get("runnerGroup")
        assert arc["maxRunners"] == entry["maxRunners"]
        assert runner["resources"] == entry["runnerPod"]["resources"]
        assert runner_spec.get("nodeSelector") == entry["runnerPod"].get("nodeSelector")


def test_overlay_has_no_hidden_storage_class(helm_bin: Path, tmp_path: Path) -> None:
    docs = template(helm_bin, {"scaleSets": {"arc-cpu": scale_set()}}, tmp_path)
    claim = overlay(docs, "arc-cpu")["containerMode"]["kubernetesModeWorkVolumeClaim"]
    assert claim == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "10Gi"}},
    }
    chosen = {
        "storageClassName": "fast-ssd",
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "50Gi"}},
    }
    entry = scale_set() | {"workVolumeClaim": chosen}
    docs = template(helm_bin, {"scaleSets": {"arc-cpu": entry}}, tmp_path)
    assert overlay(docs, "arc-cpu")["containerMode"]["kubernetesModeWorkVolumeClaim"] == chosen


def test_runner_pods_ask_for_their_placeholders_room(helm_bin: Path, tmp_path: Path) -> None:
    """A runner pod that asks for less than its placeholder holds fits beside it instead of
    taking its room: without runnerPod.resources it asks for the placeholders' default."""

    def runner_resources(entry: dict[str, Any]) -> Any:
        docs = template(helm_bin, {"scaleSets": {"arc-cpu": entry}}, tmp_path)
        (container,) = overlay(docs, "arc-cpu")["template"]["spec"]["containers"]
        return container["resources"]

    assert runner_resources(scale_set()) == {
        "requests": {"cpu": "750m", "memory": "512Mi"},
        "limits": {"memory": "512Mi"},
    }
    bigger = {"requests": {"cpu": "2", "memory": "4Gi"}}
    assert runner_resources(scale_set() | {"runnerPod": {"resources": bigger}}) == bigger


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ({}, "ghcr.io/capacity-listener/capacity-listener:{version}"),
        (
            {"registry": "registry.corp:5000", "tag": "0.2.0-rc1"},
            "registry.corp:5000/capacity-listener/capacity-listener:0.2.0-rc1",
        ),
        ({"registry": "", "repository": "mirror/listener"}, "mirror/listener:{version}"),
    ],
)  # fmt: skip
def test_image_registry_repository_and_tag(
    helm_bin: Path, tmp_path: Path, image: dict[str, str], expected: str
) -> None:
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    values = {"image": image, "scaleSets": {"arc-cpu": scale_set()}}
    arc = overlay(template(helm_bin, values, tmp_path), "arc-cpu")
    (container,) = arc["listenerTemplate"]["spec"]["containers"]
    assert container["image"] == expected.format(version=version)
    assert "imagePullSecrets" not in arc["listenerTemplate"]["spec"]


def test_pull_secrets_and_arc_version_reach_the_listener_pod(
    helm_bin: Path, tmp_path: Path
) -> None:
    values = {
        "imagePullSecrets": [{"name": "ghcr-pull"}],
        "arcVersion": "0.14.1",
        "scaleSets": {"arc-cpu": scale_set()},
    }
    spec = overlay(template(helm_bin, values, tmp_path), "arc-cpu")["listenerTemplate"]["spec"]
    assert spec["imagePullSecrets"] == [{"name": "ghcr-pull"}]
    (container,) = spec["containers"]
    assert _named(container["env"], "LISTENER_ARC_VERSION")["value"] == "0.14.1"


def test_hud_token_only_for_scale_sets_that_use_hud(helm_bin: Path, tmp_path: Path) -> None:
    values = {
        "hud": {"secretName": "hud", "secretKey": "api-token"},
        "scaleSets": {
            "arc-hud": scale_set(hud={"enabled": True, "parameters": {"orgs": ["acme"]}}),
            "arc-plain": scale_set(),
        },
    }
    docs = template(helm_bin, values, tmp_path)
    (with_hud,) = overlay(docs, "arc-hud")["listenerTemplate"]["spec"]["containers"]
    token = _named(with_hud["env"], "HUD_API_TOKEN")
    assert token["valueFrom"] == {"secretKeyRef": {"name": "hud", "key": "api-token"}}
    (plain,) = overlay(docs, "arc-plain")["listenerTemplate"]["spec"]["containers"]
    assert "HUD_API_TOKEN" not in {e["name"] for e in plain["env"]}


def _team_values(url: str) -> dict[str, Any]:
    """A team's own ARC values: its runner image, env and mounts, a sidecar, an init container."""
    shared = {"name": "shared", "mountPath": "/opt/tools"}
    return {
        "githubConfigUrl": url,
        "githubConfigSecret": "my-github-secret",
        "template": {
            "spec": {
                "initContainers": [
                    {"name": "fetch-tools", "image": "busybox:1.36", "volumeMounts": [shared]}
                ],
                "containers": [
                    {
                        "name": "runner",
                        "image": "registry.corp/web-runner:2.321.0",
                        "command": ["/home/runner/run.sh"],
                        "env": [{"name": "HTTPS_PROXY", "value": "http://proxy.corp:3128"}],
                        "volumeMounts": [shared],
                    },
                    {"name": "proxy", "image": "envoyproxy/envoy:v1.30.1"},
                ],
                "volumes": [{"name": "shared", "emptyDir": {}}],
            }
        },
    }


def _merged(helm_bin: Path, tmp_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """arc-cpu's overlay, taken from `helm template` output as `ghalistener overlay --overlay -`
    takes it, merged into the team's values; and the chart's documents."""
    values = example_values()
    docs = template(helm_bin, values, tmp_path)
    ours = find_overlay(docs, "arc-cpu", yaml.safe_load)
    assert ours == overlay(docs, "arc-cpu")
    team = _team_values(values["scaleSets"]["arc-cpu"]["githubConfigUrl"])
    return merge(team, ours).values, docs


def test_merged_values_keep_the_teams_runner_and_mount_the_charts_configmaps(
    helm_bin: Path, tmp_path: Path
) -> None:
    """A structural check of the merged file (no ARC chart needed): the team's containers,
    ours, and every mount naming a volume of the pod (or ARC's own `work`)."""
    merged, docs = _merged(helm_bin, tmp_path)
    configmaps = by_kind(docs, "ConfigMap")
    namespace = example_values()["scaleSets"]["arc-cpu"]["namespace"]
    spec = merged["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["runner", "proxy"]
    assert [c["name"] for c in spec["initContainers"]] == ["fetch-tools"]
    runner = _named(spec["containers"], "runner")
    assert runner["image"] == "registry.corp/web-runner:2.321.0"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert set(volumes) == {"shared", "workflow-pod-template"}
    for container in [*spec["containers"], *spec["initContainers"]]:
        names = [m["name"] for m in container.get("volumeMounts", [])]
        assert len(names) == len(set(names)), container["name"]
        assert set(names) <= set(volumes) | {"work"}, container["name"]
    env = {e["name"]: e.get("value") for e in runner["env"]}
    assert list(env) == ["HTTPS_PROXY", "ACTIONS_RUNNER_CONTAINER_HOOK_TEMPLATE"]
    hook_path = Path(env["ACTIONS_RUNNER_CONTAINER_HOOK_TEMPLATE"])
    mount = _named(runner["volumeMounts"], "workflow-pod-template")
    assert Path(mount["mountPath"]) == hook_path.parent
    hooks = configmaps[f"{namespace}/{volumes['workflow-pod-template']['configMap']['name']}"]
    assert hook_path.name in hooks["data"]
    assert spec["priorityClassName"] == "arc-runner"
    (settings,) = merged["listenerTemplate"]["spec"]["volumes"]
    assert f"{CONTROLLER_NAMESPACE}/{settings['configMap']['name']}" in configmaps
    assert merged["containerMode"]["type"] == "kubernetes"


def test_arcs_chart_renders_the_merged_values(helm_bin: Path, tmp_path: Path) -> None:
    """ARC's gha-runner-scale-set chart (ARC_SRC) renders the merged file into a runner pod
    with the team's image, env, mounts, sidecar and init container, plus ours and ARC's."""
    src = arc_controller.source_dir()
    if src is None:
        pytest.skip("ARC's chart is not here: set ARC_SRC to an actions-runner-controller tree")
    merged, _ = _merged(helm_bin, tmp_path)
    # `helm template` has no cluster to look ARC's controller up in: name it.
    merged["controllerServiceAccount"] = {"namespace": CONTROLLER_NAMESPACE, "name": "arc"}
    result = helm(
        helm_bin, "template", "arc-cpu", str(src / arc_controller.SCALE_SET_CHART),
        "--namespace", "arc-runners", "--values", str(write_values(merged, tmp_path, "arc.json")),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (ars,) = [
        d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "AutoscalingRunnerSet"
    ]
    pod = ars["spec"]["template"]
    spec = pod["spec"]
    assert spec["priorityClassName"] == "arc-runner"
    assert pod["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    assert [c["name"] for c in spec["containers"]] == ["runner", "proxy"]
    assert [c["name"] for c in spec["initContainers"]] == ["fetch-tools"]
    runner = _named(spec["containers"], "runner")
    assert runner["image"] == "registry.corp/web-runner:2.321.0"
    env = [e["name"] for e in runner["env"]]
    assert env[:2] == ["HTTPS_PROXY", "ACTIONS_RUNNER_CONTAINER_HOOK_TEMPLATE"]
    assert "ACTIONS_RUNNER_CONTAINER_HOOKS" in env  # ARC's kubernetes mode, still added
    mounts = [m["name"] for m in runner["volumeMounts"]]
    assert mounts == ["shared", "workflow-pod-template", "work"]
    assert {v["name"] for v in spec["volumes"]} == {"work", "shared", "workflow-pod-template"}
    (listener,) = ars["spec"]["listenerTemplate"]["spec"]["containers"]
    assert (
        listener["image"]
        == _named(merged["listenerTemplate"]["spec"]["containers"], "listener")["image"]
    )
