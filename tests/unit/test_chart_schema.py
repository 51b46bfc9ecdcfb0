"""charts/capacity-listener/values.schema.json is what deploy/gen_chart_schema.py writes from
the settings model (no Helm needed)."""

from __future__ import annotations

import json

from tests.support.deploy_files import DEPLOY, ROOT, load_script

SCHEMA = ROOT / "charts" / "capacity-listener" / "values.schema.json"


def test_chart_schema_matches_generator() -> None:
    generator = load_script(DEPLOY / "gen_chart_schema.py")
    assert SCHEMA.read_text(encoding="utf-8") == generator.render(), (
        "values.schema.json is stale: run `python deploy/gen_reference.py`"
    )


def test_every_setting_of_the_reference_is_in_the_schema() -> None:
    reference = load_script(DEPLOY / "gen_reference.py")
    generator = load_script(DEPLOY / "gen_chart_schema.py")
    capacity = json.loads(SCHEMA.read_text())["properties"]["scaleSets"]["additionalProperties"][
        "properties"
    ]["capacity"]
    for path in reference.DESCRIPTIONS:
        if path in generator.DERIVED:
            assert path.split(".")[0] not in capacity["properties"]
            continue
        node = capacity
        for part in path.split("."):
            node = node["properties"][part]
        assert node["description"] == reference.DESCRIPTIONS[path]
