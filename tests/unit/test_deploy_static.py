"""Static checks of everything under deploy/ plus the Dockerfile.

- every YAML file parses, and the Kubernetes manifests are well-formed and namespace-free;
- every metric (and label) a dashboard panel or an alert rule queries is in deploy/metrics.txt;
- generated files (dashboard JSON, settings reference) match their generators;
- the Helm overlays, workflow pod templates and capacity examples agree with each other;
- the dependency lock covers pyproject.toml and installs, wheels only, on the image's Python;
- the Dockerfile's builder steps, run in a fresh directory, give a working /ghalistener.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import promql_parser
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "capacity-listener.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yaml"
LOCK = DEPLOY / "requirements.lock"

# Labels Prometheus adds to every scraped series.
TARGET_LABELS = frozenset({"instance", "job"})


def load_script(path: Path) -> ModuleType:
    """Import a script under deploy/ (not a package) by path."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def yaml_docs(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


# --- the metric list -------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    name: str
    type: str
    labels: frozenset[str]
    # label -> allowed values, for labels whose values are a fixed set
    values: dict[str, frozenset[str]] = field(default_factory=dict, hash=False)


def read_metric_list(path: Path = DEPLOY / "metrics.txt") -> dict[str, Family]:
    families: dict[str, Family] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, kind, labels, *rest = line.split()
        assert kind in {"gauge", "counter", "histogram"}, f"metrics.txt:{number}: type {kind}"
        assert re.fullmatch(r"gha_[a-z0-9_]+", name), f"metrics.txt:{number}: name {name}"
        assert kind != "counter" or name.endswith("_total"), f"metrics.txt:{number}: {name}"
        assert name not in families, f"metrics.txt:{number}: {name} listed twice"
        values: dict[str, frozenset[str]] = {}
        for spec in rest:
            label, _, allowed = spec.partition("=")
            values[label] = frozenset(allowed.split("|"))
        label_set = frozenset(labels.split(","))
        assert set(values) <= label_set, f"metrics.txt:{number}: values for unknown labels"
        families[name] = Family(name, kind, label_set, values)
    return families


def series_family(series: str, families: dict[str, Family]) -> tuple[Family, frozenset[str]]:
    """The family a queried series name belongs to, and the extra labels the series has."""
    family = families.get(series)
    if family is not None and family.type != "histogram":
        return family, frozenset()
    for suffix, extra in (("_bucket", {"le"}), ("_sum", set()), ("_count", set())):
        base = series.removesuffix(suffix)
        if base != series and base in families and families[base].type == "histogram":
            return families[base], frozenset(extra)
    raise AssertionError(f"{series} is not an exported series (deploy/metrics.txt)")


# --- PromQL analysis ---------------------------------------------------------------------------


@dataclass
class QueryUse:
    """What one PromQL expression reads: series names and the label names it depends on."""

    series: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)


def _children(node: Any) -> list[Any]:
    out = []
    for attr in ("lhs", "rhs", "expr", "vector_selector", "param"):
        child = getattr(node, attr, None)
        if isinstance(child, promql_parser.Expr):
            out.append(child)
    out.extend(arg for arg in getattr(node, "args", None) or [] if arg is not None)
    return out


def _labels(node: Any, families: dict[str, Family], use: QueryUse) -> frozenset[str] | None:
    """Labels of the expression's result (None: a scalar or string), recording problems."""
    if isinstance(node, promql_parser.VectorSelector):
        if node.name is None:
            use.problems.append(f"selector without a metric name: {node}")
            return frozenset()
        use.series.add(node.name)
        try:
            family, extra = series_family(node.name, families)
        except AssertionError as exc:
            use.problems.append(str(exc))
            return frozenset()
        available = family.labels | extra | TARGET_LABELS
        for matcher in node.matchers.matchers:
            if matcher.name not in available:
                use.problems.append(f"{node.name} has no label {matcher.name!r}")
            allowed = family.values.get(matcher.name)
            if allowed and str(matcher.op) in {"MatchOp.Equal", "MatchOp.NotEqual"}:
                if matcher.value not in allowed:
                    use.problems.append(
                        f"{node.name}{{{matcher.name}={matcher.value!r}}}: "
                        f"not one of {sorted(allowed)}"
                    )
            elif allowed:
                for alternative in matcher.value.split("|"):
                    if alternative not in allowed:
                        use.problems.append(
                            f"{node.name}{{{matcher.name}=~...{alternative!r}}}: "
                            f"not one of {sorted(allowed)}"
                        )
        return available
    if isinstance(node, promql_parser.MatrixSelector):
        return _labels(node.vector_selector, families, use)
    if isinstance(node, promql_parser.NumberLiteral | promql_parser.StringLiteral):
        return None
    if isinstance(node, promql_parser.AggregateExpr):
        inner = _labels(node.expr, families, use)
        if node.param is not None:
            _labels(node.param, families, use)
        grouping = frozenset(node.modifier.labels) if node.modifier else frozenset()
        for label in grouping - (inner or frozenset()):
            use.problems.append(f"aggregation groups by {label!r}, absent below: {node}")
        if node.modifier is None:
            return frozenset()
        if "Without" in str(node.modifier.type):
            return (inner or frozenset()) - grouping
        return grouping
    if isinstance(node, promql_parser.BinaryExpr):
        lhs = _labels(node.lhs, families, use)
        rhs = _labels(node.rhs, families, use)
        matching = node.modifier.matching if node.modifier else None
        if matching is not None and lhs is not None and rhs is not None:
            for label in frozenset(matching.labels):
                if label not in lhs or label not in rhs:
                    use.problems.append(f"matching on {label!r}, absent on one side: {node}")
        return lhs if lhs is not None else rhs
    if isinstance(node, promql_parser.Call):
        results = [_labels(arg, families, use) for arg in node.args if arg is not None]
        vectors = [r for r in results if r is not None]
        if node.func.name == "time":
            return None
        result = vectors[0] if vectors else None
        if node.func.name == "histogram_quantile" and result is not None:
            if "le" not in result:
                use.problems.append(f"histogram_quantile without 'le': {node}")
            result = result - {"le"}
        return result
    # ParenExpr, UnaryExpr, SubqueryExpr
    results = [_labels(child, families, use) for child in _children(node)]
    return next((r for r in results if r is not None), None)


def analyse(expr: str, families: dict[str, Family]) -> tuple[QueryUse, frozenset[str]]:
    use = QueryUse()
    tree = promql_parser.parse(expr)
    labels = _labels(tree, families, use)
    return use, labels or frozenset()


GRAFANA_VARIABLE = re.compile(r"\$\{?(__rate_interval|__interval|namespace|scale_set)\}?")
VARIABLE_VALUES = {
    "__rate_interval": "5m",
    "__interval": "1m",
    "namespace": "arc-runners",
    "scale_set": "arc-cpu",
}


def grafana_to_promql(expr: str) -> str:
    return GRAFANA_VARIABLE.sub(lambda m: VARIABLE_VALUES[m.group(1)], expr)


def dashboard_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # collapsed rows nest their panels


def dashboard_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every panel target, Grafana variables substituted."""
    return [
        (panel["title"], grafana_to_promql(t["expr"]))
        for panel in dashboard_panels(dashboard)
        for t in panel.get("targets", [])
    ]


def alert_rules() -> list[dict[str, Any]]:
    (doc,) = yaml_docs(ALERTS)
    assert doc["kind"] == "PrometheusRule"
    return [rule for group in doc["spec"]["groups"] for rule in group["rules"]]


# --- every YAML parses; manifests are well-formed --------------------------------------------

YAML_FILES = sorted(DEPLOY.rglob("*.yaml"))
MANIFESTS = [
    *sorted((DEPLOY / "rbac").glob("*.yaml")),
    DEPLOY / "pdb-runners.yaml",
    *sorted((DEPLOY / "helm").glob("workflow-pod-template-*.yaml")),
    ALERTS,
]


def test_deploy_has_yaml_files() -> None:
    names = {p.relative_to(DEPLOY).as_posix() for p in YAML_FILES}
    assert names >= {
        "helm/values-capacity-cpu.yaml",
        "helm/values-capacity-gpu.yaml",
        "helm/workflow-pod-template-cpu.yaml",
        "helm/workflow-pod-template-gpu.yaml",
        "rbac/role.yaml",
        "rbac/rolebinding.yaml",
        "rbac/clusterrole-node-checks.yaml",
        "rbac/clusterrole-nodepools.yaml",
        "pdb-runners.yaml",
        "prometheus/alerts.yaml",
    }


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_yaml_parses(path: Path) -> None:
    docs = yaml_docs(path)
    assert docs, f"{path} is empty"
    for doc in docs:
        assert isinstance(doc, dict)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_manifests_are_namespace_free_kubernetes_objects(path: Path) -> None:
    for doc in yaml_docs(path):
        assert {"apiVersion", "kind", "metadata"} <= doc.keys(), path
        assert doc["metadata"].get("name"), path
        # No hard-coded namespace: `kubectl apply -n <namespace>` must choose it.
        assert "namespace" not in doc["metadata"], f"{path}: {doc['metadata']}"


def test_rbac_rules_are_each_explained() -> None:
    """Every rule is preceded by a comment naming the operation that needs it."""
    for path in sorted((DEPLOY / "rbac").glob("*.yaml")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for index, line in enumerate(lines):
            if line.strip().startswith("- apiGroups:"):
                above = lines[index - 1].strip()
                assert above.startswith("#"), f"{path.name}:{index + 1}: rule without a comment"


@pytest.mark.parametrize("flavour", ["cpu", "gpu"])
def test_overlay_grace_period_matches_the_listener_shutdown_grace(flavour: str) -> None:
    """ARC leaves the listener pod at 30 s unless the template sets it; the listener sizes
    its shutdown to LISTENER_SHUTDOWN_GRACE, so the two must agree."""
    (values,) = yaml_docs(DEPLOY / "helm" / f"values-capacity-{flavour}.yaml")
    spec = values["listenerTemplate"]["spec"]
    (container,) = spec["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert spec["terminationGracePeriodSeconds"] == 60
    assert float(env["LISTENER_SHUTDOWN_GRACE"]) == spec["terminationGracePeriodSeconds"]


def test_rbac_grants_exactly_the_listed_operations() -> None:
    def rules(name: str) -> set[tuple[str, str, str]]:
        (doc, *_) = yaml_docs(DEPLOY / "rbac" / name)
        return {
            (group, resource, verb)
            for rule in doc["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }

    arc = "actions.github.com"
    # Exactly the calls base/kube.py makes for the view and the reconciler (proven
    # sufficient on a real API server in tests/integration/test_deploy_cluster.py).
    assert rules("role.yaml") == {
        *(("", "pods", v) for v in ("list", "watch", "create", "delete")),
        *((arc, "ephemeralrunners", v) for v in ("list", "watch")),
        *((arc, "ephemeralrunnersets", v) for v in ("list", "watch")),
        ("rbac.authorization.k8s.io", "roles", "get"),
    }
    assert rules("clusterrole-node-checks.yaml") == {("", "nodes", "get")}
    # capacity/nodepool_watch.py: one list+watch of NodePools (test_nodepool_rbac.py).
    assert rules("clusterrole-nodepools.yaml") == {
        ("karpenter.sh", "nodepools", v) for v in ("get", "list", "watch")
    }


# --- metrics: every query reads exported series ------------------------------------------------


def test_metric_list_has_arc_series_and_capacity_family() -> None:
    families = read_metric_list()
    arc = {
        "gha_assigned_jobs", "gha_running_jobs", "gha_registered_runners", "gha_busy_runners",
        "gha_idle_runners", "gha_min_runners", "gha_max_runners", "gha_desired_runners",
        "gha_started_jobs_total", "gha_completed_jobs_total",
        "gha_job_startup_duration_seconds", "gha_job_execution_duration_seconds",
    }  # fmt: skip
    assert arc <= families.keys()
    assert {"gha_available_jobs", "gha_acquired_jobs"} <= families.keys()
    capacity = {name for name in families if name.startswith("gha_capacity_")}
    assert len(capacity) == 27, sorted(capacity)
    for name in capacity:
        assert {"name", "namespace"} <= families[name].labels, name


def test_metric_list_matches_listener_metrics_module() -> None:
    from listener import metrics

    families = read_metric_list()
    listed = {
        n for n in families if not n.startswith(("gha_capacity_", "gha_listener_kube_patch_"))
    }
    code = {
        *metrics.GAUGE_HELP,
        *metrics.COUNTER_HELP,
        *metrics.HISTOGRAM_HELP,
        *metrics.EXTRA_GAUGE_HELP,
    }
    assert listed == code
    for kind, names in (
        ("gauge", [*metrics.GAUGE_HELP, *metrics.EXTRA_GAUGE_HELP]),
        ("counter", metrics.COUNTER_HELP),
        ("histogram", metrics.HISTOGRAM_HELP),
    ):
        for name in names:
            assert families[name].type == kind, name
    for kind, specs in (
        ("gauge", metrics.DEFAULT_METRICS.gauges),
        ("counter", metrics.DEFAULT_METRICS.counters),
        ("histogram", metrics.DEFAULT_METRICS.histograms),
    ):
        for name, spec in specs.items():
            assert families[name].labels == frozenset(spec.labels), (kind, name)


def test_metric_list_matches_patch_metrics() -> None:
    from prometheus_client import CollectorRegistry

    from listener.metrics import PatchMetrics

    registry = CollectorRegistry()
    PatchMetrics(registry, name="arc-cpu", namespace="arc-runners")
    families = read_metric_list()
    exported = {
        (f.name + "_total" if f.type == "counter" else f.name): (
            f.type,
            {k for s in f.samples for k in s.labels},
        )
        for f in registry.collect()
    }
    listed = {n for n in families if n.startswith("gha_listener_kube_patch_")}
    assert listed == set(exported)
    for name, (kind, labels) in exported.items():
        assert (families[name].type, set(families[name].labels)) == (kind, labels), name


def test_metric_list_matches_capacity_metrics_module() -> None:
    """Families, types, labels and primed label values as capacity/metrics.py exports them."""
    from prometheus_client import CollectorRegistry

    from capacity.metrics import CapacityMetrics
    from capacity.model import DeleteReason

    registry = CollectorRegistry()
    metrics = CapacityMetrics(registry, name="arc-cpu-x2v9k", namespace="arc-runners")
    families = read_metric_list()
    exported: dict[str, tuple[str, set[str], dict[str, set[str]]]] = {}
    # A vector with no child yet is not on the page (as in Go) but is registered.
    for family in metrics._collector.describe():
        name = family.name + "_total" if family.type == "counter" else family.name
        exported[name] = (family.type, set(), {})
    for family in registry.collect():
        name = family.name + "_total" if family.type == "counter" else family.name
        labels: set[str] = set()
        values: dict[str, set[str]] = {}
        for sample in family.samples:
            for key, value in sample.labels.items():
                if key != "le":
                    labels.add(key)
                    values.setdefault(key, set()).add(value)
        exported[name] = (family.type, labels, values)
    listed = {n for n in families if n.startswith("gha_capacity_")}
    assert listed == set(exported)
    for name, (kind, labels, values) in exported.items():
        listed_family = families[name]
        assert listed_family.type == kind, name
        # A family the monitor does not prime has no samples yet: its labels are unknown here.
        assert not labels or listed_family.labels == labels, (name, labels)
        for label, allowed in listed_family.values.items():
            if label in values:
                assert allowed == values[label], (name, label)
    assert families["gha_capacity_pair_deletes_total"].values["reason"] == {
        reason.value for reason in DeleteReason
    }


def test_dashboard_queries_use_only_exported_metrics() -> None:
    families = read_metric_list()
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = dashboard_queries(dashboard)
    assert len(queries) >= 20
    read: set[str] = set()
    for title, expr in queries:
        use, _ = analyse(expr, families)
        assert not use.problems, (title, expr, use.problems)
        read |= {series_family(s, families)[0].name for s in use.series}
    # Every capacity family is on the dashboard somewhere.
    missing = {n for n in families if n.startswith("gha_capacity_")} - read
    assert not missing, f"not shown on the dashboard: {sorted(missing)}"


def test_dashboard_variables_use_exported_labels() -> None:
    families = read_metric_list()
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert {"namespace", "scale_set"} <= variables.keys()
    for name in ("namespace", "scale_set"):
        query = variables[name]["query"]
        definition = query["query"] if isinstance(query, dict) else query
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", definition)
        assert match, definition
        selector, label = grafana_to_promql(match.group(1)), match.group(2)
        use, labels = analyse(selector, families)
        assert not use.problems, use.problems
        assert label in labels, (name, label)


def test_dashboard_layout_is_valid() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    panels = list(dashboard_panels(dashboard))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    boxes: list[dict[str, int]] = []
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] >= 0, panel["title"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for other in boxes:
            overlap_x = pos["x"] < other["x"] + other["w"] and other["x"] < pos["x"] + pos["w"]
            overlap_y = pos["y"] < other["y"] + other["h"] and other["y"] < pos["y"] + pos["h"]
            assert not (overlap_x and overlap_y), f"{panel['title']} overlaps another panel"
        boxes.append(pos)
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["description"], panel["title"]
            assert panel["targets"], panel["title"]
    assert {p["type"] for p in panels} >= {"row", "timeseries", "stat", "heatmap"}


def test_dashboard_matches_generator() -> None:
    generator = load_script(DEPLOY / "grafana" / "gen_dashboard.py")
    assert DASHBOARD.read_text(encoding="utf-8") == generator.render(), (
        "deploy/grafana/capacity-listener.json is stale: "
        "run `python deploy/grafana/gen_dashboard.py`"
    )


EXPECTED_ALERTS = {
    "StrandedJobs",
    "WorkflowPodsUnscheduled",
    "ListenerStall",
    "PlaceholdersStuckPending",
    "HUDFailing",
    "ReconcileStale",
    "RunnerSetPatchPending",
}


def test_alerts_use_only_exported_metrics_and_labels() -> None:
    families = read_metric_list()
    rules = alert_rules()
    assert {r["alert"] for r in rules} == EXPECTED_ALERTS
    assert len(rules) == len(EXPECTED_ALERTS)
    for rule in rules:
        use, labels = analyse(rule["expr"], families)
        assert not use.problems, (rule["alert"], use.problems)
        assert use.series, rule["alert"]
        # Templates may only name labels the alert's series still carry.
        for text in rule["annotations"].values():
            for label in re.findall(r"\$labels\.(\w+)", text):
                assert label in labels, (rule["alert"], label, sorted(labels))


def test_alerts_have_summary_description_runbook_and_severity() -> None:
    for rule in alert_rules():
        assert set(rule["annotations"]) >= {"summary", "description", "runbook"}, rule["alert"]
        for key in ("summary", "description", "runbook"):
            assert len(rule["annotations"][key].split()) >= 5, (rule["alert"], key)
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]


ALERT_TESTS = DEPLOY / "prometheus" / "alerts.test.yaml"


def test_every_alert_has_promtool_cases_both_ways() -> None:
    """alerts.test.yaml checks each alert firing and, earlier or elsewhere, not firing."""
    (suite,) = yaml_docs(ALERT_TESTS)
    assert suite["rule_files"] == ["capacity-listener.rules.yaml"]
    cases = [case for test in suite["tests"] for case in test["alert_rule_test"]]
    for alert in EXPECTED_ALERTS:
        outcomes = [bool(c["exp_alerts"]) for c in cases if c["alertname"] == alert]
        assert True in outcomes, f"{alert}: no case where it fires"
        assert False in outcomes, f"{alert}: no case where it stays quiet"


PROMTOOL = shutil.which("promtool")


# Skipped only on a developer machine without promtool; CI installs it (.ci/run), and there a
# missing promtool fails the test instead of hiding it.
@pytest.mark.skipif(
    PROMTOOL is None and not os.environ.get("CI"),
    reason="promtool not on PATH (Debian: apt-get install prometheus)",
)
def test_alert_rules_pass_promtool(tmp_path: Path) -> None:
    """`promtool check rules` on the rules as shipped, `promtool test rules` on the firing
    behaviour (annotations stripped: promtool compares them word for word)."""
    assert PROMTOOL is not None, "promtool is required in CI (apt-get install prometheus)"
    (doc,) = yaml_docs(ALERTS)
    full = tmp_path / "full.rules.yaml"
    full.write_text(yaml.safe_dump(doc["spec"]), encoding="utf-8")
    check = subprocess.run(
        [PROMTOOL, "check", "rules", str(full)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"{len(EXPECTED_ALERTS)} rules found" in check.stdout

    spec = copy.deepcopy(doc["spec"])
    for group in spec["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "capacity-listener.rules.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    shutil.copy(ALERT_TESTS, tmp_path / ALERT_TESTS.name)
    run = subprocess.run(
        [PROMTOOL, "test", "rules", ALERT_TESTS.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_query_checker_rejects_unknown_metrics_labels_and_values() -> None:
    """The checks above can fail: feed them broken queries."""
    families = read_metric_list()
    bad = {
        "gha_capacity_no_such_metric": "not an exported series",
        'gha_capacity_pairs{role="x"}': "has no label 'role'",
        "sum by (state) (gha_capacity_advertised)": "groups by 'state'",
        "gha_job_startup_duration_seconds": "not an exported series",
        "histogram_quantile(0.9, sum by (name) (rate(gha_capacity_hud_requests_total[5m])))": (
            "without 'le'"
        ),
        "gha_started_jobs_total and on (name) gha_max_runners": "matching on 'name'",
    }
    for expr, problem in bad.items():
        use, _ = analyse(expr, families)
        assert any(problem in p for p in use.problems), (expr, use.problems)


# --- Helm overlays, workflow templates and capacity examples agree ------------------------------


def named(items: list[dict[str, Any]], name: str) -> dict[str, Any]:
    matches = [item for item in items if item.get("name") == name]
    assert len(matches) == 1, (name, [item.get("name") for item in items])
    return matches[0]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


@pytest.mark.parametrize("flavour", ["cpu", "gpu"])
def test_listener_template(flavour: str) -> None:
    (values,) = yaml_docs(DEPLOY / "helm" / f"values-capacity-{flavour}.yaml")
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
    assert volume["configMap"]["name"] == f"capacity-listener-{flavour}"
    assert values["containerMode"]["type"] == "kubernetes"
    assert "listenerMetrics" not in values


@pytest.mark.parametrize("flavour", ["cpu", "gpu"])
def test_runner_and_workflow_templates(flavour: str) -> None:
    (values,) = yaml_docs(DEPLOY / "helm" / f"values-capacity-{flavour}.yaml")
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
    (values,) = yaml_docs(DEPLOY / "helm" / f"values-capacity-{flavour}.yaml")
    assert values["template"]["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    workflow = hook_template(flavour)
    assert workflow["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"


def hook_template(flavour: str) -> dict[str, Any]:
    (configmap,) = yaml_docs(DEPLOY / "helm" / f"workflow-pod-template-{flavour}.yaml")
    template: dict[str, Any] = yaml.safe_load(configmap["data"]["workflow.yaml"])
    return template


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

    (values,) = yaml_docs(DEPLOY / "helm" / f"values-capacity-{flavour}.yaml")
    runner_spec = values["template"]["spec"]
    runner = named(runner_spec["containers"], "runner")
    if settings.runner_resources is not None:
        assert settings.runner_resources.requests == runner["resources"]["requests"]
    if settings.node_selector is not None:
        assert settings.node_selector == runner_spec.get("nodeSelector")


def test_settings_reference_matches_generator() -> None:
    generator = load_script(DEPLOY / "gen_reference.py")
    assert (DEPLOY / "config" / "REFERENCE.md").read_text(encoding="utf-8") == generator.render(), (
        "deploy/config/REFERENCE.md is stale: run `python deploy/gen_reference.py`"
    )


REFERENCE_SAMPLES: dict[str, tuple[str, Any]] = {
    # reference type column (start) -> (environment value, expected setting value)
    "boolean": ("true", True),
    "integer": ("3", 3),
    "duration": ("1h30m", 5400.0),
    "map of string": ('{"pool": "ci"}', {"pool": "ci"}),
    "list of string": ('["my-org"]', ["my-org"]),
}
STRING_SAMPLES = {
    "placeholder_namespace": "ci-placeholders",
    "listener_role": "arc-cpu-7b5c8d9f-listener",
    "placeholder_image": "registry.example.com/pause:3",
    "hud.url": "https://hud.example.com/api/queued",
    "hud.parameters.repo": "my-org/my-repo",
}


# Settings that only hold together with another one (cluster_index < cluster_count; sharding
# needs a demand source).
REFERENCE_CONTEXT: dict[str, dict[str, str]] = {
    "demand.cluster_index": {
        "CAPACITY_DEMAND__CLUSTER_COUNT": "4",
        "CAPACITY_DEMAND__SOURCE": "github",
    },
    "demand.cluster_count": {"CAPACITY_DEMAND__SOURCE": "github"},
    "nodepools.runner": {"CAPACITY_NODEPOOLS__ENABLED": "true"},
    "nodepools.workflow": {"CAPACITY_NODEPOOLS__ENABLED": "true"},
}


def test_reference_environment_variables_set_their_setting() -> None:
    """Each documented CAPACITY_* variable, set alone, changes the setting it names."""
    from capacity.settings import load_capacity_settings

    text = (DEPLOY / "config" / "REFERENCE.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z_.]+)` \| `(CAPACITY_[A-Z_]+)` \| ([^|]+?) \|", text, re.M)
    assert len(rows) >= 25
    checked = 0
    for path, variable, kind in rows:
        base = kind.split(" (")[0]
        raw: str
        expected: object
        if base == "string":
            raw, expected = STRING_SAMPLES[path], STRING_SAMPLES[path]
        elif path == "renew_before":  # must stay below placeholder_ttl (15m)
            raw, expected = "90s", 90.0
        elif base in REFERENCE_SAMPLES:
            raw, expected = REFERENCE_SAMPLES[base]
        else:
            continue  # sections, resources and tolerations: covered by the examples above
        # enabled=true needs workflow_resources; give it, unless it is the variable under test.
        env = {"CAPACITY_WORKFLOW_RESOURCES": '{"requests": {"cpu": "1"}}', variable: raw}
        env = {**env, **REFERENCE_CONTEXT.get(path, {})}
        settings: Any = load_capacity_settings(env)
        for part in path.split("."):
            settings = getattr(settings, part)
        assert settings == expected, (variable, raw, settings)
        checked += 1
    assert checked >= 20


# --- the dependency lock -------------------------------------------------------------------


def locked_versions() -> dict[str, str]:
    text = LOCK.read_text(encoding="utf-8")
    pins = dict(re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)", text, flags=re.MULTILINE))
    return {canonicalize_name(name): version for name, version in pins.items()}


def test_lock_pins_every_dependency_with_hashes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = locked_versions()
    for line in project["dependencies"]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in deploy/requirements.lock: run sh deploy/lock.sh"
        assert requirement.specifier.contains(pins[name]), (name, pins[name], line)
    # Every pinned requirement carries at least one sha256.
    entries = re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text(encoding="utf-8").split("\n", 2)[2])
    for entry in entries:
        assert "--hash=sha256:" in entry, entry.splitlines()[0]
    assert "capacity-listener" not in pins  # the project itself is installed from source


# --- the image: Dockerfile steps in a fresh directory ------------------------------------------


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]]


def parse_dockerfile(path: Path = ROOT / "Dockerfile") -> tuple[dict[str, str], list[Stage]]:
    """ARGs before the first FROM, and the stages with their (INSTRUCTION, arguments)."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        if raw.lstrip().startswith("#") or not raw.strip():
            continue
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        logical.append(pending + raw.strip())
        pending = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif keyword == "FROM":
            parts = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], parts[0])
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else ""
            stages.append(Stage(base, name, []))
        else:
            stages[-1].instructions.append((keyword, rest))
    return args, stages


def parse_env(rest: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in shlex.split(rest))


def _docker_pattern(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regex: `**` spans directories, `*` and `?` do not."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out.append(pattern[i : end + 1])
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def dockerignored(relative: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parents wins."""
    parts = relative.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = _docker_pattern(pattern.lstrip("!").strip("/"))
        if any(regex.fullmatch(candidate) for candidate in candidates):
            ignored = not negate
    return ignored


def copy_into(sources: list[str], target: str, workdir: Path, patterns: list[str]) -> None:
    """COPY <sources> <target>: files into a directory target (trailing / or several
    sources) or onto a file path; a directory source copies its contents."""
    dest = workdir / target
    into_dir = target.endswith("/") or len(sources) > 1
    for source in sources:
        origin = ROOT / source
        assert origin.exists(), f"COPY {source}: not in the repository"
        if origin.is_file():
            assert not dockerignored(source, patterns), f"COPY {source}: excluded by .dockerignore"
            pairs = [(origin, dest / origin.name if into_dir else dest)]
        else:
            pairs = [
                (file, dest / file.relative_to(origin))
                for file in sorted(origin.rglob("*"))
                if file.is_file() and not dockerignored(file.relative_to(ROOT).as_posix(), patterns)
            ]
        for file, copied in pairs:
            copied.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, copied)


def run_builder_stage(stage: Stage, root: Path) -> dict[str, str]:
    """Run a builder stage with `root` standing in for the image's /; returns its ENV."""
    patterns = dockerignore_patterns()
    env: dict[str, str] = {}
    workdir = root
    for keyword, rest in stage.instructions:
        if keyword == "ENV":
            for key, value in parse_env(rest).items():
                env[key] = str(root) + value if value.startswith("/") else value
        elif keyword == "WORKDIR":
            workdir = root / rest.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif keyword == "COPY":
            *sources, target = shlex.split(rest)
            assert not any(s.startswith("--") for s in sources), rest
            copy_into(sources, target, workdir, patterns)
        elif keyword == "RUN":
            process_env = {
                "PATH": os.environ["PATH"],
                "HOME": str(root / "home"),
                "PYTHON": sys.executable,
                **env,
            }
            # A docker build has no pip cache; locally the cache only saves downloads and
            # hash checking still applies to every file.
            process_env.pop("PIP_NO_CACHE_DIR", None)
            process_env["PIP_CACHE_DIR"] = str(Path.home() / ".cache" / "pip")
            proc = subprocess.run(
                ["sh", "-c", rest],
                cwd=workdir,
                env=process_env,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            assert proc.returncode == 0, f"RUN {rest}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        else:
            raise AssertionError(f"builder stage: {keyword} is not reproduced by this test")
    return env


def test_dockerfile_shape() -> None:
    args, stages = parse_dockerfile()
    assert len(stages) == 2
    builder, runtime = stages
    assert builder.name == "builder"
    assert "slim" in builder.base
    assert builder.base == runtime.base
    assert re.fullmatch(r"python:3\.1[1-9]-slim", args["PYTHON_IMAGE"])
    steps = dict(runtime.instructions[::-1])  # first occurrence wins
    assert steps["COPY"] == "--from=builder /venv /venv"
    assert steps["USER"] == "65532:65532"
    assert json.loads(steps["ENTRYPOINT"]) == ["/ghalistener"]
    assert "ln -s /venv/bin/ghalistener /ghalistener" in steps["RUN"]
    env = parse_env(steps["ENV"])
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PATH"].startswith("/venv/bin:")
    # Nothing in the runtime stage installs or compiles anything.
    assert not re.search(r"\b(apt-get|apk|gcc|pip install)\b", steps["RUN"])


def test_dockerignore_keeps_the_context_small() -> None:
    patterns = dockerignore_patterns()
    assert not dockerignored("listener/cli.py", patterns)
    assert not dockerignored("base/kube.py", patterns)
    assert not dockerignored("deploy/requirements.lock", patterns)
    assert dockerignored("listener/__pycache__/cli.cpython-311.pyc", patterns)
    assert dockerignored(".venv/bin/python", patterns)
    assert dockerignored("tests/unit/test_deploy_static.py", patterns)
    assert dockerignored("deploy/grafana/capacity-listener.json", patterns)


@pytest.mark.network  # pip installs the lock from PyPI
def test_image_install_steps_give_a_working_ghalistener(tmp_path: Path) -> None:
    """The builder stage, step by step, in a fresh directory; then the runtime symlink."""
    _, (builder, _runtime) = parse_dockerfile()
    root = tmp_path / "root"
    env = run_builder_stage(builder, root)
    venv = Path(env["VENV"])
    assert venv == root / "venv"
    # The virtualenv has no pip (nothing to install with at run time) and is readable by the
    # non-root user the image runs as.
    assert not list((venv / "lib").glob("python3*/site-packages/pip"))
    for path in venv.rglob("*"):
        if not path.is_symlink():
            mode = path.stat().st_mode
            assert mode & 0o004, f"{path} is not world-readable"
            assert not path.is_dir() or mode & 0o001, f"{path} is not world-searchable"
    (root / "ghalistener").symlink_to(venv / "bin" / "ghalistener")

    clean_env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [str(root / "ghalistener")],
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr == "Error: LISTENER_CONFIG_PATH environment variable is not set\n"
    assert proc.stdout == ""

    # `python -m listener` is the same program.
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "listener"],
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr == "Error: LISTENER_CONFIG_PATH environment variable is not set\n"


@pytest.mark.network  # pip downloads every locked wheel from PyPI
@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_lock_installs_from_wheels_on_the_image_python(tmp_path: Path, arch: str) -> None:
    """The image's interpreter (python:3.13) is not on this machine, so resolve the lock for
    it: every package must have a wheel for CPython 3.13 on glibc Linux, with a listed hash."""
    args, _ = parse_dockerfile()
    version = re.fullmatch(r"python:(3\.\d+)-slim", args["PYTHON_IMAGE"])
    assert version
    abi = "cp" + version.group(1).replace(".", "")
    platforms = [f"manylinux_2_{minor}_{arch}" for minor in (17, 28, 34, 36)]
    platforms += [f"manylinux2014_{arch}"]
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
        "--python-version", version.group(1), "--implementation", "cp", "--abi", abi,
        *(arg for p in platforms for arg in ("--platform", p)),
        "--require-hashes", "--requirement", str(LOCK), "--dest", str(tmp_path),
    ]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    wheels = {canonicalize_name(p.name.split("-")[0]) for p in tmp_path.glob("*.whl")}
    assert wheels == set(locked_versions())
