"""charts/capacity-listener/README.md: its values table is what deploy/gen_chart_readme.py
writes from values.schema.json and values.yaml, and the table lists every key of both."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.support.deploy_files import DEPLOY, load_script
from tests.support.helm_chart import CHART

README = CHART / "README.md"


def test_chart_readme_matches_generator() -> None:
    generator = load_script(DEPLOY / "gen_chart_readme.py")
    committed = README.read_text(encoding="utf-8")
    assert committed == generator.render(committed), (
        "charts/capacity-listener/README.md is stale: run `python deploy/gen_chart_readme.py`"
    )


def _leaves(values: Any, prefix: str = "") -> set[str]:
    if isinstance(values, dict) and values:
        return {leaf for k, v in values.items() for leaf in _leaves(v, f"{prefix}{k}.")}
    return {prefix.rstrip(".")}


def test_every_default_in_values_yaml_has_a_row() -> None:
    defaults = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    rows = {
        line.split("`")[1] for line in README.read_text(encoding="utf-8").splitlines()
        if line.startswith("| `")
    }  # fmt: skip
    # An object default (labels, resources) is one row; its members are not keys of their own.
    objects = {"monitoring.dashboard.labels", "webhook.resources"}
    expected = {
        leaf for leaf in _leaves(defaults) if not any(leaf.startswith(f"{o}.") for o in objects)
    }
    assert expected <= rows, sorted(expected - rows)


def test_the_table_fails_on_a_key_without_text() -> None:
    generator = load_script(DEPLOY / "gen_chart_readme.py")
    bare = {"type": "object", "properties": {"knob": {"type": "boolean"}}}
    with pytest.raises(SystemExit, match="no description for knob"):
        generator._rows(bare, {"knob": True}, {}, "")
    described = {"type": "object", "properties": {"knob": {"type": "boolean"}}}
    (row,) = generator._rows(described, {"knob": True}, {"knob": "Turns it on. More."}, "")
    assert row == "| `knob` | boolean | `true` | Turns it on. |"
