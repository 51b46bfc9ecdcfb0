"""deploy/config/REFERENCE.md: what its generator writes, and every CAPACITY_* variable it
documents sets the setting it names."""

from __future__ import annotations

import re
from typing import Any

from tests.support.deploy_files import DEPLOY, load_script


def test_settings_reference_matches_generator() -> None:
    generator = load_script(DEPLOY / "gen_reference.py")
    assert (DEPLOY / "config" / "REFERENCE.md").read_text(encoding="utf-8") == generator.render(), (
        "deploy/config/REFERENCE.md is stale: run `python deploy/gen_reference.py`"
    )


REFERENCE_SAMPLES: dict[str, tuple[str, Any]] = {
    # reference type column (start) -> (environment value, expected setting value)
    "boolean": ("true", True),
    "integer": ("3", 3),
    "duration": ("1h30m", 5400.0),
    "map of string": ('{"pool": "ci"}', {"pool": "ci"}),
    "list of string": ('["my-org"]', ["my-org"]),
}
STRING_SAMPLES = {
    "placeholder_namespace": "ci-placeholders",
    "listener_role": "arc-cpu-7b5c8d9f-listener",
    "placeholder_image": "registry.example.com/pause:3",
    "hud.url": "https://hud.example.com/api/queued",
    "webhook.url": "http://receiver.example:8081",
    "hud.parameters.repo": "my-org/my-repo",
    "cluster_autoscaler.status_namespace": "autoscaling",
    "cluster_autoscaler.status_configmap": "ca-status",
    "nodepools.events_namespace": "karpenter-events",
}


# Settings that only hold together with another one (cluster_index < cluster_count; sharding
# needs a demand source; the predictive pool needs GitHub's source).
REFERENCE_CONTEXT: dict[str, dict[str, str]] = {
    "demand.cluster_index": {
        "CAPACITY_DEMAND__CLUSTER_COUNT": "4",
        "CAPACITY_DEMAND__SOURCE": "github",
    },
    "demand.cluster_count": {"CAPACITY_DEMAND__SOURCE": "github"},
    "nodepools.runner": {"CAPACITY_NODEPOOLS__ENABLED": "true"},
    "nodepools.workflow": {"CAPACITY_NODEPOOLS__ENABLED": "true"},
    "nodepools.events_namespace": {"CAPACITY_NODEPOOLS__ENABLED": "true"},
    "cluster_autoscaler.runner": {"CAPACITY_CLUSTER_AUTOSCALER__ENABLED": "true"},
    "cluster_autoscaler.workflow": {"CAPACITY_CLUSTER_AUTOSCALER__ENABLED": "true"},
    # The predictive pool needs the one source that reports running jobs; its knobs need it on.
    "warm_pool.predictive.enabled": {"CAPACITY_DEMAND__SOURCE": "github"},
    **{
        f"warm_pool.predictive.{name}": {
            "CAPACITY_DEMAND__SOURCE": "github",
            "CAPACITY_WARM_POOL__PREDICTIVE__ENABLED": "true",
        }
        for name in ("horizon", "hold", "count_quantile")
    },
}


def test_reference_environment_variables_set_their_setting() -> None:
    """Each documented CAPACITY_* variable, set alone, changes the setting it names."""
    from capacity.settings import load_capacity_settings

    text = (DEPLOY / "config" / "REFERENCE.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z_.]+)` \| `(CAPACITY_[A-Z_]+)` \| ([^|]+?) \|", text, re.M)
    assert len(rows) >= 25
    checked = 0
    for path, variable, kind in rows:
        base = kind.split(" (")[0]
        raw: str
        expected: object
        if base == "string":
            raw, expected = STRING_SAMPLES[path], STRING_SAMPLES[path]
        elif path == "renew_before":  # must stay below placeholder_ttl (15m)
            raw, expected = "90s", 90.0
        elif base in REFERENCE_SAMPLES:
            raw, expected = REFERENCE_SAMPLES[base]
        else:
            continue  # sections, resources and tolerations: covered by the examples above
        # enabled=true needs workflow_resources; give it, unless it is the variable under test.
        env = {"CAPACITY_WORKFLOW_RESOURCES": '{"requests": {"cpu": "1"}}', variable: raw}
        env = {**env, **REFERENCE_CONTEXT.get(path, {})}
        settings: Any = load_capacity_settings(env)
        for part in path.split("."):
            settings = getattr(settings, part)
        assert settings == expected, (variable, raw, settings)
        checked += 1
    assert checked >= 20
