"""The ARC values overlay, rendered by the real, pinned Helm from the chart's one template
(templates/_overlay.tpl): it mounts exactly the ConfigMaps the chart creates, in the
namespaces where the pods run; deploy/helm/values-capacity-*.yaml are that template's output
for the example values (deploy/gen_overlays.py); image, pull secrets, the work volume and the
HUD token follow the values. Skipped without the Helm build on a developer machine, failing
in CI (tests/support/helm_chart.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.deploy_files import DEPLOY, load_script
from tests.support.helm_chart import (
    CHART,
    CONTROLLER_NAMESPACE,
    by_kind,
    example_values,
    overlay,
    scale_set,
    template,
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
