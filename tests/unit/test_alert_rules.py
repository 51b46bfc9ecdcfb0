"""The Prometheus alert rules (deploy/prometheus/alerts.yaml): the expected alerts, each on
exported series and labels, each documented, each with promtool cases firing and quiet, and
`promtool` itself on the rules as shipped. On a real Prometheus: tests/e2e/test_prometheus.py."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.deploy_files import (
    ALERTS,
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
