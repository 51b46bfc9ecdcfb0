"""`promtool` on the alert rules as shipped (deploy/prometheus/alerts.yaml) and on their firing
cases. What the rules say: the unit test of the same name; on a real Prometheus:
tests/e2e/test_prometheus.py."""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path

import pytest
import yaml

from tests.support.deploy_files import (
    ALERTS,
    yaml_docs,
)
from tests.support.prometheus import promtool
from tests.unit.test_alert_rules import ALERT_TESTS, EXPECTED_ALERTS

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
    check = promtool(PROMTOOL, "check", "rules", str(full))
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"{len(EXPECTED_ALERTS)} rules found" in check.stdout

    spec = copy.deepcopy(doc["spec"])
    for group in spec["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "capacity-listener.rules.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    shutil.copy(ALERT_TESTS, tmp_path / ALERT_TESTS.name)
    run = promtool(PROMTOOL, "test", "rules", ALERT_TESTS.name, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
