"""The Prometheus alert rules (deploy/prometheus/alerts.yaml): the expected alerts, each on
exported series and labels, each documented, each with promtool cases firing and quiet.
`promtool` itself on the rules as shipped: tests/integration/test_alert_rules.py; on a real
Prometheus: tests/e2e/test_prometheus.py."""

from __future__ import annotations

import re

from tests.support.deploy_files import (
    DEPLOY,
    alert_rules,
    analyse,
    read_metric_list,
    yaml_docs,
)

EXPECTED_ALERTS = {
    "StrandedJobs",
    "WorkflowPodsUnscheduled",
    "ListenerStall",
    "PlaceholdersStuckPending",
    "HUDFailing",
    "ReconcileStale",
    "RunnerSetPatchPending",
    "ListenerDown",
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
