"""charts/capacity-listener/files/ holds exact copies of the alert rules and the dashboard
(deploy/gen_chart_files.py), so the chart's PrometheusRule and dashboard ConfigMap are the
files under deploy/ (what the chart renders from them: tests/chart/test_monitoring.py)."""

from __future__ import annotations

import pytest

from tests.support.deploy_files import DEPLOY, load_script


def test_the_chart_copies_equal_deploy_files() -> None:
    generator = load_script(DEPLOY / "gen_chart_files.py")
    assert len(generator.COPIES) == 2
    for source, copy in generator.COPIES.items():
        assert copy.read_bytes() == source.read_bytes(), (
            f"{copy.name} is stale: run `python deploy/gen_chart_files.py`"
        )


@pytest.mark.parametrize("name", ["alerts.yaml", "capacity-listener.json"])
def test_the_copies_are_where_the_templates_read_them(name: str) -> None:
    generator = load_script(DEPLOY / "gen_chart_files.py")
    monitoring = (generator.FILES.parent / "templates" / "monitoring.yaml").read_text()
    assert f'.Files.Get "files/{name}"' in monitoring
