"""``ghalistener overlay`` (listener/overlay.py): a team's own gha-runner-scale-set values with
the committed overlay (deploy/helm/values-capacity-cpu.yaml, the chart template's output)
merged in: every field of the team's is kept, every field of ours is there, and a field both
set differently is one line naming it."""

from __future__ import annotations

import copy
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from listener.cli import overlay_command
from listener.overlay import TEAM_WINS, OverlayError, find_overlay, merge
from tests.support.deploy_files import DEPLOY, overlay

OVERLAY_FILE = DEPLOY / "helm" / "values-capacity-cpu.yaml"
HOOK_ENV = "ACTIONS_RUNNER_CONTAINER_HOOK_TEMPLATE"


def team_values() -> dict[str, Any]:
    """A team's own values: its runner image, env, volumes, a sidecar, an init container."""
    return {
        "githubConfigUrl": "https://github.com/my-org/",  # the trailing / ARC's chart trims
        "githubConfigSecret": "my-github-secret",
        "runnerScaleSetName": "arc-cpu",
        "maxRunners": 20,
        "template": {
            "metadata": {"labels": {"team": "web"}, "annotations": {"team/owner": "web"}},
            "spec": {
                "serviceAccountName": "web-runner",
                "securityContext": {"fsGroup": 1001},
                "nodeSelector": {"pool": "runners"},
                "initContainers": [
                    {
                        "name": "fetch-tools",
                        "image": "busybox:1.36",
                        "command": ["sh", "-c", "cp -r /tools /shared"],
                        "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
                    }
                ],
                "containers": [
                    {
                        "name": "runner",
                        "image": "registry.corp/web-runner:2.321.0",
                        "command": ["/home/runner/run.sh", "--once"],
                        "env": [
                            {"name": "NODE_OPTIONS", "value": "--max-old-space-size=4096"},
                            {"name": "HTTPS_PROXY", "value": "http://proxy.corp:3128"},
                        ],
                        "volumeMounts": [
                            {"name": "shared", "mountPath": "/opt/tools"},
                            {"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": True},
                        ],
                        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
                        "securityContext": {"runAsUser": 1001},
                    },
                    {"name": "proxy", "image": "envoyproxy/envoy:v1.30.1", "args": ["-c", "x"]},
                ],
                "volumes": [
                    {"name": "shared", "emptyDir": {}},
                    {"name": "ca", "configMap": {"name": "corp-ca"}},
                ],
            },
        },
    }


def leaves(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every leaf of a values tree by path; items of a list of named maps go by their name."""
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            yield from leaves(inner, (*path, str(key)))
    elif (
        isinstance(value, list)
        and value
        and all(isinstance(i, dict) and "name" in i for i in value)
    ):
        for item in value:
            yield from leaves(item, (*path, f"[{item['name']}]"))
    else:
        yield path, value


def dotted(path: tuple[str, ...]) -> str:
    return ".".join(path).replace(".[", "[")


def at(values: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if part.startswith("["):
            (values,) = [i for i in values if i["name"] == part[1:-1]]
        else:
            values = values[part]
    return values


def named(items: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (item,) = [i for i in items if i["name"] == name]
    return item


def test_every_field_of_the_teams_is_kept_and_every_one_of_ours_is_there() -> None:
    team, ours = team_values(), overlay("cpu")
    merged = merge(team, ours)
    for path, value in leaves(team):
        assert at(merged.values, path) == value, dotted(path)
    team_paths = {dotted(p) for p, _ in leaves(team)}
    for path, value in leaves(ours):
        name = dotted(path)
        if any(name.startswith(w) and any(t.startswith(w) for t in team_paths) for w in TEAM_WINS):
            continue  # a default of ours the team's value replaced (asserted above)
        got = at(merged.values, path)
        if name == "githubConfigUrl":  # equal once ARC's chart trims the trailing /
            got, value = got.removesuffix("/"), value.removesuffix("/")
        assert got == value, name
    assert merged.replaced == ()
    assert team == team_values(), "the inputs are not changed"


def test_the_runner_container_keeps_the_teams_image_and_gets_our_env_and_mount() -> None:
    merged = merge(team_values(), overlay("cpu")).values
    spec = merged["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["runner", "proxy"]
    runner = named(spec["containers"], "runner")
    assert runner["image"] == "registry.corp/web-runner:2.321.0"
    assert runner["command"] == ["/home/runner/run.sh", "--once"]
    assert runner["resources"] == {"requests": {"cpu": "1", "memory": "2Gi"}}
    assert [e["name"] for e in runner["env"]] == ["NODE_OPTIONS", "HTTPS_PROXY", HOOK_ENV]
    assert [m["name"] for m in runner["volumeMounts"]] == ["shared", "ca", "workflow-pod-template"]
    assert [v["name"] for v in spec["volumes"]] == ["shared", "ca", "workflow-pod-template"]
    assert [c["name"] for c in spec["initContainers"]] == ["fetch-tools"]
    assert spec["priorityClassName"] == "arc-runner"
    assert spec["nodeSelector"] == {"pool": "runners"}
    assert merged["template"]["metadata"]["annotations"] == {
        "team/owner": "web",
        "karpenter.sh/do-not-disrupt": "true",
    }
    assert merged["githubConfigUrl"] == "https://github.com/my-org/"
    assert merged["listenerTemplate"] == overlay("cpu")["listenerTemplate"]
    assert merged["containerMode"] == overlay("cpu")["containerMode"]


def test_without_values_of_its_own_a_team_gets_the_overlay_as_it_is() -> None:
    assert merge({}, overlay("cpu")).values == overlay("cpu")


def test_a_runner_container_is_added_beside_sidecars_only() -> None:
    """ARC's kubernetes mode renders the container named runner: a team's list naming only
    sidecars gets ours (ARC's stock image), the sidecar stays first."""
    team = {"template": {"spec": {"containers": [{"name": "proxy", "image": "envoy"}]}}}
    containers = merge(team, overlay("cpu")).values["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["proxy", "runner"]
    assert named(containers, "runner")["image"] == "ghcr.io/actions/actions-runner:latest"


def test_a_team_entry_of_the_same_name_is_replaced_and_reported() -> None:
    team = team_values()
    runner = team["template"]["spec"]["containers"][0]
    runner["env"].append({"name": HOOK_ENV, "value": "/mine/workflow.yaml"})
    runner["env"].append({"name": "LAST", "value": "x"})
    merged = merge(team, overlay("cpu"))
    env = named(merged.values["template"]["spec"]["containers"], "runner")["env"]
    assert [e["name"] for e in env] == ["NODE_OPTIONS", "HTTPS_PROXY", HOOK_ENV, "LAST"]
    assert named(env, HOOK_ENV)["value"] == "/home/runner/pod-templates/workflow.yaml"
    assert merged.replaced == (f"template.spec.containers[runner].env[{HOOK_ENV}]",)


def _with(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    team = team_values()
    target: Any = team
    for part in path[:-1]:
        target = target.setdefault(part, {})
    target[path[-1]] = value
    return team


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("template", "spec", "priorityClassName"), "high", "template.spec.priorityClassName"),
        (("containerMode",), {"type": "dind"}, "containerMode.type"),
        (("githubConfigUrl",), "https://github.com/other", "githubConfigUrl"),
        (
            ("template", "metadata", "annotations", "karpenter.sh/do-not-disrupt"),
            "false",
            "template.metadata.annotations.karpenter.sh/do-not-disrupt",
        ),
        (
            ("listenerTemplate", "spec", "containers"),
            [{"name": "listener", "image": "ghcr.io/actions/gha-runner-scale-set-controller"}],
            "listenerTemplate.spec.containers[listener].image",
        ),
        (("template", "spec", "volumes"), "none", "template.spec.volumes"),
    ],
)  # fmt: skip
def test_a_conflicting_value_is_one_line_naming_the_field(
    path: tuple[str, ...], value: Any, field: str
) -> None:
    with pytest.raises(OverlayError) as caught:
        merge(_with(path, value), overlay("cpu"))
    message = str(caught.value)
    assert message.startswith(f"{field}: your values say ")
    assert "\n" not in message


def test_a_runner_group_the_overlay_does_not_name_is_refused() -> None:
    """The companion chart computes the listener account it binds from the runner group: a
    group only the team's values name means the binding is for another account."""
    with pytest.raises(OverlayError, match=r'^runnerGroup: your values say "web", .* has none'):
        merge(_with(("runnerGroup",), "web"), overlay("cpu"))
    assert merge(_with(("runnerGroup",), ""), overlay("cpu")).values["runnerGroup"] == ""
    gpu = overlay("gpu")
    team = _with(("maxRunners",), gpu["maxRunners"])
    assert (
        merge(team | {"runnerGroup": gpu["runnerGroup"]}, gpu).values["runnerGroup"]
        == "gpu-runners"
    )
    with pytest.raises(OverlayError, match=r"^runnerGroup: .*computed from it"):
        merge(team | {"runnerGroup": "web"}, gpu)


def test_the_priority_class_error_says_what_to_do() -> None:
    with pytest.raises(OverlayError, match=r'needs "arc-runner" .*priority ladder.*remove it'):
        merge(_with(("template", "spec", "priorityClassName"), "high"), overlay("cpu"))


def test_an_equal_value_of_a_field_we_own_is_no_conflict() -> None:
    team = _with(("template", "spec", "priorityClassName"), "arc-runner")
    team["containerMode"] = {"type": "kubernetes"}
    assert merge(team, overlay("cpu")).values["template"]["spec"]["priorityClassName"] == (
        "arc-runner"
    )


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([{"name": "a"}, {"name": "a"}], "template.spec.volumes: two items named 'a'"),
        ([{"emptyDir": {}}], r"template.spec.volumes\[0\]: an item without a name"),
    ],
)
def test_unnamed_or_duplicate_items_are_refused(items: list[Any], message: str) -> None:
    with pytest.raises(OverlayError, match=message):
        merge(_with(("template", "spec", "volumes"), items), overlay("cpu"))


def _configmaps(*names: str) -> list[dict[str, Any]]:
    text = OVERLAY_FILE.read_text()
    data = {"values.yaml": text}
    return [
        {"kind": "ConfigMap", "metadata": {"name": f"{n}-arc-values"}, "data": data} for n in names
    ]


def test_find_overlay_takes_the_scale_sets_configmap_or_a_values_document() -> None:
    assert find_overlay(_configmaps("arc-cpu"), "arc-cpu", yaml.safe_load) == overlay("cpu")
    as_list = [{"kind": "List", "items": _configmaps("arc-cpu")}]
    assert find_overlay(as_list, "arc-cpu", yaml.safe_load) == overlay("cpu")
    assert find_overlay([None, overlay("cpu")], "arc-cpu", yaml.safe_load) == overlay("cpu")
    with pytest.raises(OverlayError, match=r"no ConfigMap arc-gpu-arc-values .*: arc-cpu-arc"):
        find_overlay(_configmaps("arc-cpu"), "arc-gpu", yaml.safe_load)
    with pytest.raises(OverlayError, match=r"--scale-set arc-gpu: .*for scale set arc-cpu"):
        find_overlay([overlay("cpu")], "arc-gpu", yaml.safe_load)
    with pytest.raises(OverlayError, match="no listenerTemplate"):
        find_overlay([team_values()], "arc-cpu", yaml.safe_load)


def _write(tmp_path: Path, values: Any) -> str:
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return str(path)


def test_the_command_prints_the_merged_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    team = _write(tmp_path, team_values())
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump_all(_configmaps("arc-cpu"))))
    argv = ["--values", team, "--scale-set", "arc-cpu", "--overlay", "-"]
    assert overlay_command(argv) == 0
    out, err = capsys.readouterr()
    assert out.startswith("# Values for ARC's gha-runner-scale-set chart, scale set arc-cpu")
    assert yaml.safe_load(out) == merge(team_values(), overlay("cpu")).values
    assert err == ""


@pytest.mark.parametrize(
    ("team", "overlay_path", "message"),
    [
        (
            _with(("template", "spec", "priorityClassName"), "high"),
            str(OVERLAY_FILE),
            "Error: template.spec.priorityClassName: your values say \"high\"",
        ),
        (
            _with(("runnerScaleSetName",), "arc-gpu"),
            str(OVERLAY_FILE),
            "Error: runnerScaleSetName: your values say \"arc-gpu\"",
        ),
        (["not", "a", "map"], str(OVERLAY_FILE), "expected one map of chart values"),
        (team_values(), "/nonexistent/overlay.yaml", "Error: --overlay /nonexistent/overlay.yaml"),
    ],
)  # fmt: skip
def test_the_command_fails_with_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    team: Any,
    overlay_path: str,
    message: str,
) -> None:
    argv = ["--values", _write(tmp_path, copy.deepcopy(team)), "--scale-set", "arc-cpu"]
    assert overlay_command([*argv, "--overlay", overlay_path]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert message in line
