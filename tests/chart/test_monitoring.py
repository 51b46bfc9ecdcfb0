"""The chart's monitoring objects, rendered by the real, pinned Helm: all off by default; the
PodMonitor scrapes exactly the chart's listener pods and gives their series the scale set's
name; the PrometheusRule is deploy/prometheus/alerts.yaml plus one absent() ListenerDown rule
per scale set, which promtool shows firing for a listener that never came up; the dashboard
ConfigMap is deploy/grafana's JSON under Grafana's sidecar label. Skipped without the Helm
build on a developer machine, failing in CI (tests/support/helm_chart.py); the promtool case
likewise without promtool."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.deploy_files import ALERTS, DASHBOARD, yaml_docs
from tests.support.helm_chart import (
    CONTROLLER_NAMESPACE,
    RELEASE,
    by_kind,
    scale_set,
    template,
)
from tests.support.prometheus import promtool

PROMTOOL = shutil.which("promtool")
ALL_ON = {
    "podMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "dashboard": {"enabled": True},
}
SETS = {"arc-cpu": scale_set(), "arc-gpu": scale_set(namespace="gpu-runners")}


def _rendered(helm_bin: Path, tmp_path: Path, **monitoring: Any) -> list[dict[str, Any]]:
    return template(helm_bin, {"monitoring": monitoring, "scaleSets": SETS}, tmp_path)


def test_monitoring_is_off_by_default(helm_bin: Path, tmp_path: Path) -> None:
    docs = template(helm_bin, {"scaleSets": SETS}, tmp_path)
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"PodMonitor", "PrometheusRule"}
    assert f"{CONTROLLER_NAMESPACE}/{RELEASE}-dashboard" not in by_kind(docs, "ConfigMap")


def test_pod_monitor_selects_the_listeners_and_labels_the_scale_set(
    helm_bin: Path, tmp_path: Path
) -> None:
    (monitor,) = by_kind(_rendered(helm_bin, tmp_path, **ALL_ON), "PodMonitor").values()
    assert monitor["metadata"]["namespace"] == CONTROLLER_NAMESPACE
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    spec = monitor["spec"]
    assert spec["namespaceSelector"] == {"matchNames": [CONTROLLER_NAMESPACE]}
    # ARC's labels on every listener pod (resourcebuilder.go), limited to this chart's sets.
    assert spec["selector"]["matchLabels"] == {
        "app.kubernetes.io/component": "runner-scale-set-listener"
    }
    assert spec["selector"]["matchExpressions"] == [
        {"key": "actions.github.com/scale-set-name", "operator": "In", "values": sorted(SETS)}
    ]
    (endpoint,) = spec["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics"  # the port ARC adds for metrics.listenerAddr
    assert endpoint["honorLabels"] is True
    targets = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
    assert targets == {
        "scale_set": ["__meta_kubernetes_pod_label_actions_github_com_scale_set_name"],
        "namespace": ["__meta_kubernetes_pod_label_actions_github_com_scale_set_namespace"],
    }


def _rule_groups(helm_bin: Path, tmp_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    (rule,) = by_kind(_rendered(helm_bin, tmp_path, **ALL_ON), "PrometheusRule").values()
    return rule, rule["spec"]["groups"]


def test_prometheus_rule_is_the_shipped_rules_plus_listener_down_per_scale_set(
    helm_bin: Path, tmp_path: Path
) -> None:
    rule, groups = _rule_groups(helm_bin, tmp_path)
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (shipped,) = yaml_docs(ALERTS)
    *same, per_set = groups
    assert same == shipped["spec"]["groups"]
    (generic,) = [r for g in same for r in g["rules"] if r["alert"] == "ListenerDown"]
    assert [r["expr"] for r in per_set["rules"]] == [
        'absent(up{scale_set="arc-cpu", namespace="arc-runners"})',
        'absent(up{scale_set="arc-gpu", namespace="gpu-runners"})',
    ]
    for added in per_set["rules"]:
        assert {k: v for k, v in added.items() if k != "expr"} == {
            k: v for k, v in generic.items() if k != "expr"
        }


@pytest.mark.skipif(
    PROMTOOL is None and not os.environ.get("CI"),
    reason="promtool not on PATH (Debian: apt-get install prometheus)",
)
def test_per_scale_set_rule_fires_for_a_listener_that_never_came_up(
    helm_bin: Path, tmp_path: Path
) -> None:
    """arc-cpu's listener is scraped and up; arc-gpu's never had a target (stuck in
    ContainerCreating from the start): only the absent() rule can see it."""
    assert PROMTOOL is not None, "promtool is required in CI (apt-get install prometheus)"
    _, groups = _rule_groups(helm_bin, tmp_path)
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}), encoding="utf-8")
    up = 'up{job="arc-systems/capacity-listener", scale_set="arc-cpu", namespace="arc-runners"}'
    cases = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": up, "values": "1x20"}],
                "alert_rule_test": [
                    {"eval_time": "3m", "alertname": "ListenerDown", "exp_alerts": []},
                    {
                        "eval_time": "10m",
                        "alertname": "ListenerDown",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "critical",
                                    "scale_set": "arc-gpu",
                                    "namespace": "gpu-runners",
                                }
                            }
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "cases.yaml").write_text(yaml.safe_dump(cases), encoding="utf-8")
    run = promtool(PROMTOOL, "test", "rules", "cases.yaml", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr


def test_dashboard_configmap_carries_the_sidecar_label_and_the_shipped_json(
    helm_bin: Path, tmp_path: Path
) -> None:
    docs = _rendered(helm_bin, tmp_path, **ALL_ON)
    configmap = by_kind(docs, "ConfigMap")[f"{CONTROLLER_NAMESPACE}/{RELEASE}-dashboard"]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert json.loads(configmap["data"]["capacity-listener.json"]) == shipped
    custom = _rendered(helm_bin, tmp_path, dashboard={"enabled": True, "labels": {"dash": "x"}})
    labels = by_kind(custom, "ConfigMap")[f"{CONTROLLER_NAMESPACE}/{RELEASE}-dashboard"]
    # Helm merges maps with the defaults: `grafana_dashboard: null` removes the default one.
    assert labels["metadata"]["labels"]["dash"] == "x"
