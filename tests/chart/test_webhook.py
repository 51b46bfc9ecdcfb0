"""The chart's webhook receiver (webhook.enabled), rendered by the real, pinned Helm: off by
default; hardened and tokenless when on; only /webhook of the deliveries port behind the
Ingress; and every scale set that names no demand source reads it, with settings the
listener accepts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from capacity.settings import CapacitySettings
from tests.support.helm_chart import CONTROLLER_NAMESPACE, by_kind, scale_set, template

NAME = f"{CONTROLLER_NAMESPACE}/capacity-webhook"


def values(**webhook: Any) -> dict[str, Any]:
    hud = scale_set()
    hud["capacity"] = {"enabled": True, "hud": {"enabled": True}}
    github = scale_set()
    github["capacity"] = {"enabled": True, "demand": {"source": "github"}}
    bare = scale_set()
    bare["capacity"] = {"enabled": True}
    return {
        "webhook": {"enabled": True, **webhook},
        "scaleSets": {"arc-bare": bare, "arc-hud": hud, "arc-github": github},
    }


def settings_of(docs: list[dict[str, Any]], name: str) -> CapacitySettings:
    data = by_kind(docs, "ConfigMap")[f"{CONTROLLER_NAMESPACE}/capacity-listener-{name}"]
    return CapacitySettings.model_validate(yaml.safe_load(data["data"]["capacity.yaml"]))


def test_no_receiver_by_default(helm_bin: Path, tmp_path: Path) -> None:
    docs = template(helm_bin, {"scaleSets": {"arc-cpu": scale_set()}}, tmp_path)
    assert NAME not in by_kind(docs, "Deployment")
    assert NAME not in by_kind(docs, "Service")


def test_scale_sets_naming_no_source_read_the_receiver(helm_bin: Path, tmp_path: Path) -> None:
    docs = template(helm_bin, values(), tmp_path)
    bare = settings_of(docs, "arc-bare")
    assert bare.demand_source == "webhook"
    assert bare.webhook.url == f"http://capacity-webhook.{CONTROLLER_NAMESPACE}.svc:8081"
    assert settings_of(docs, "arc-hud").demand_source == "hud"
    assert settings_of(docs, "arc-github").demand_source == "github"
    service = by_kind(docs, "Service")[NAME]
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "deliveries": 8080,
        "reads": 8081,
    }


def test_without_a_receiver_a_bare_scale_set_reads_github(helm_bin: Path, tmp_path: Path) -> None:
    """A bare install takes jobs: GitHub's REST API with the listener's own credentials, not
    "no source"; a source named in the values (here `none`) is kept."""
    chosen = scale_set()
    chosen["capacity"] = {"enabled": True, "demand": {"source": "none"}}
    off = scale_set(enabled=False)
    docs = template(
        helm_bin,
        {"scaleSets": {"arc-bare": values()["scaleSets"]["arc-bare"], "arc-none": chosen,
                       "arc-off": off}},
        tmp_path,
    )  # fmt: skip
    bare = settings_of(docs, "arc-bare")
    assert bare.demand_source == "github"
    assert bare.github.failure_base_capacity == 1  # a failing read still wants one slot
    assert settings_of(docs, "arc-none").demand_source == "none"
    assert "demand" not in yaml.safe_load(
        by_kind(docs, "ConfigMap")[f"{CONTROLLER_NAMESPACE}/capacity-listener-arc-off"]["data"][
            "capacity.yaml"
        ]
    )  # capacity off: nothing added


def test_the_receiver_runs_hardened_and_without_a_token(helm_bin: Path, tmp_path: Path) -> None:
    docs = template(helm_bin, values(), tmp_path)
    pod = by_kind(docs, "Deployment")[NAME]["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["args"][0] == "webhook-receiver"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
    assert env == {"WEBHOOK_SECRET": {"name": "capacity-webhook", "key": "secret"}}
    assert NAME not in by_kind(docs, "Secret")  # created by the user unless `secret` is set
    assert NAME not in by_kind(docs, "Ingress")


def test_the_ingress_exposes_deliveries_only(helm_bin: Path, tmp_path: Path) -> None:
    hook = {
        "secret": "not-in-the-pod-spec",
        "githubConfigUrl": "https://github.com/acme",
        "githubConfigSecret": "arc-github",
        "ingress": {"enabled": True, "host": "hooks.example.com", "className": "nginx"},
    }
    docs = template(helm_bin, values(**hook), tmp_path)
    (rule,) = by_kind(docs, "Ingress")[NAME]["spec"]["rules"]
    assert rule["host"] == "hooks.example.com"
    (path,) = rule["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/webhook", "Exact")
    assert path["backend"]["service"]["port"] == {"name": "deliveries"}
    assert by_kind(docs, "Secret")[NAME]["stringData"] == {"secret": "not-in-the-pod-spec"}
    deployment = by_kind(docs, "Deployment")[NAME]
    assert "not-in-the-pod-spec" not in yaml.safe_dump(deployment)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--github-config-url=https://github.com/acme" in container["args"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
    assert refs["GITHUB_TOKEN"] == {"name": "arc-github", "key": "github_token", "optional": True}
    assert refs["GITHUB_APP_PRIVATE_KEY"]["key"] == "github_app_private_key"
