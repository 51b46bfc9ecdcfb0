"""The shortened copy of the alert rules the end-to-end tier loads into a real Prometheus
(tests/support/prometheus.py): every duration scaled, nothing else changed."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.support.prometheus import ALERTS, TIME_SCALE, scaled, seconds, shortened_rules


def windowless(expr: str) -> str:
    return re.sub(r"\[[^\]]*\]", "[]", expr)


@pytest.mark.parametrize(
    ("duration", "expected"),
    [("15m", "15s"), ("1m", "1s"), ("1h30m", "90s"), ("10s", "167ms"), ("5m", "5s")],
)
def test_scaled_divides_by_the_time_scale(duration: str, expected: str) -> None:
    assert scaled(duration) == expected


@pytest.mark.parametrize("bad", ["", "15", "m", "15 m", "1.5m"])
def test_seconds_rejects_what_prometheus_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        seconds(bad)


def test_shortened_rules_scale_windows_and_for_only() -> None:
    (doc,) = [d for d in yaml.safe_load_all(ALERTS.read_text(encoding="utf-8")) if d]
    shipped = {r["alert"]: r for g in doc["spec"]["groups"] for r in g["rules"]}
    copy = {r["alert"]: r for g in shortened_rules()["groups"] for r in g["rules"]}
    assert copy.keys() == shipped.keys()
    stranded = copy["StrandedJobs"]
    assert "[15s:1s]" in stranded["expr"]
    assert stranded["for"] == "15s"
    assert "[10s]" in copy["ListenerStall"]["expr"]
    for name, rule in copy.items():
        original = shipped[name]
        assert seconds(rule["for"]) * TIME_SCALE == seconds(original["for"])
        assert rule["labels"] == original["labels"]
        # Only the windows differ: thresholds and the rest of the expression are kept.
        assert windowless(rule["expr"]) == windowless(original["expr"])
        assert "annotations" not in rule
