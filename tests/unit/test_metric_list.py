"""deploy/metrics.txt lists exactly what the listener and the monitor export (families, types,
labels, fixed label values), and the query checker built on it (tests/support/deploy_files.py)
catches what it is meant to catch."""

from __future__ import annotations

from tests.support.deploy_files import analyse, read_metric_list


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
    assert len(capacity) == 48, sorted(capacity)
    for name in capacity:
        assert {"name", "namespace"} <= families[name].labels, name


def test_metric_list_matches_listener_metrics_module() -> None:
    from listener import metrics

    families = read_metric_list()
    listed = {
        n
        for n in families
        if not n.startswith(("gha_capacity_", "gha_listener_kube_patch_", "gha_listener_runner_"))
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


def test_metric_list_matches_runner_group_metrics() -> None:
    from prometheus_client import CollectorRegistry

    from listener.metrics import RunnerGroupMetrics

    registry = CollectorRegistry()
    RunnerGroupMetrics(registry, name="arc-cpu", namespace="arc-runners").report(False)
    families = read_metric_list()
    exported = {
        f.name: (f.type, {k for s in f.samples for k in s.labels}) for f in registry.collect()
    }
    assert exported == {
        "gha_listener_runner_group_public_repositories": ("gauge", {"name", "namespace"})
    }
    entry = families["gha_listener_runner_group_public_repositories"]
    assert (entry.type, set(entry.labels)) == ("gauge", {"name", "namespace"})


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
