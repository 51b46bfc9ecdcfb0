"""The files under deploy/ as the tests read them (test infrastructure).

Paths, YAML documents, the Helm overlays and their workflow pod templates, the metric list
(deploy/metrics.txt: every family the listener exports, its type, labels and fixed label
values), and a checker of the PromQL the dashboard and the alert rules query: ``analyse``
walks a parsed expression and reports every series or label it reads that the list does not
have (aggregations, vector matching and ``histogram_quantile`` included). The static checks
of deploy/ (tests/unit/test_deploy_*.py, test_metric_list.py, test_dashboard.py,
test_alert_rules.py), the live metrics page on a real cluster and the alert rules on a real
Prometheus all use the same reading.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import promql_parser
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "capacity-listener.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yaml"
LOCK = DEPLOY / "requirements.lock"


def load_script(path: Path) -> ModuleType:
    """Import a script under deploy/ (not a package) by path."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def yaml_docs(path: Path) -> list[dict[str, Any]]:
    """The non-empty documents of a YAML file (mappings, under deploy/: test_yaml_parses)."""
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def overlay(flavour: str) -> dict[str, Any]:
    """deploy/helm/values-capacity-<flavour>.yaml: the chart values of one scale set."""
    (values,) = yaml_docs(DEPLOY / "helm" / f"values-capacity-{flavour}.yaml")
    result: dict[str, Any] = values
    return result


def hook_template(flavour: str) -> dict[str, Any]:
    """The workflow pod template the container hooks read (from its ConfigMap)."""
    (configmap,) = yaml_docs(DEPLOY / "helm" / f"workflow-pod-template-{flavour}.yaml")
    template: dict[str, Any] = yaml.safe_load(configmap["data"]["workflow.yaml"])
    return template


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
    family = families.get(series) or SCRAPE_SERIES.get(series)
    if family is not None and family.type != "histogram":
        return family, frozenset()
    for suffix, extra in (("_bucket", {"le"}), ("_sum", set()), ("_count", set())):
        base = series.removesuffix(suffix)
        if base != series and base in families and families[base].type == "histogram":
            return families[base], frozenset(extra)
    raise AssertionError(f"{series} is not an exported series (deploy/metrics.txt)")


# --- PromQL analysis ---------------------------------------------------------------------------

# Labels Prometheus adds to every scraped series: its own two, and the listener's scale set
# and namespace the scrape config sets from the pod's labels (the chart's PodMonitor).
TARGET_LABELS = frozenset({"instance", "job", "scale_set", "namespace"})
# Prometheus' own series per target (the only one queried: whether the scrape succeeded).
SCRAPE_SERIES = {"up": Family("up", "gauge", frozenset(), {})}


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
