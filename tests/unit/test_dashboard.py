"""The Grafana dashboard (deploy/grafana): every query and variable reads exported series and
labels, every capacity family is shown, the layout is valid, and the JSON is what its
generator writes."""

from __future__ import annotations

import json
import re

from tests.support.deploy_files import (
    DASHBOARD,
    DEPLOY,
    analyse,
    dashboard_panels,
    dashboard_queries,
    grafana_to_promql,
    load_script,
    read_metric_list,
    series_family,
)


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
