"""The release workflow (.github/workflows/release.yml, which cannot run here): it runs on a
tag `v*`, refuses a tag that does not name the version of the image and the chart
(deploy/release_check.py, run here on the committed files), pushes the image and the chart
(an OCI artifact) under that version, and stamps the pushed image into the chart."""

from __future__ import annotations

import re
import tomllib
from typing import Any

import yaml

from tests.support.deploy_files import DEPLOY, ROOT, load_script

WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def _workflow() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    return loaded


def _steps() -> list[dict[str, Any]]:
    (job,) = _workflow()["jobs"].values()
    steps: list[dict[str, Any]] = job["steps"]
    return steps


def _run_text() -> str:
    return "\n".join(step.get("run", "") for step in _steps())


def test_runs_on_a_version_tag_only() -> None:
    workflow = _workflow()
    # YAML 1.1 (PyYAML) reads the bare key `on` as the boolean true.
    trigger = workflow["on"] if "on" in workflow else workflow[True]  # type: ignore[index]
    assert trigger == {"push": {"tags": ["v*"]}}
    assert workflow["permissions"] == {"contents": "write", "packages": "write"}
    assert len(list(WORKFLOW.parent.iterdir())) == 1  # the one release workflow


def test_the_tag_is_checked_before_anything_is_pushed() -> None:
    steps = _steps()
    check = next(i for i, s in enumerate(steps) if "release_check.py" in s.get("run", ""))
    assert 'deploy/release_check.py "${GITHUB_REF_NAME}"' in steps[check]["run"]
    pushes = [
        i
        for i, s in enumerate(steps)
        if "build-push-action" in s.get("uses", "") or "helm -- push" in s.get("run", "")
    ]
    assert len(pushes) == 2
    assert check < min(pushes)


def test_committed_versions_agree_so_their_tag_passes() -> None:
    """The chart's version and appVersion equal the package version: `v<that>` is the tag."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((ROOT / "charts" / "capacity-listener" / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == version
    checker = load_script(DEPLOY / "release_check.py")
    assert checker.mismatches(f"v{version}") == []
    assert checker.main([f"v{version}"]) == 0


def test_a_tag_naming_another_version_is_refused_naming_each_field() -> None:
    checker = load_script(DEPLOY / "release_check.py")
    problems = checker.mismatches("v99.0.0")
    assert [p.split(":")[0] for p in problems] == [
        "pyproject.toml project.version",
        "charts/capacity-listener/Chart.yaml version",
        "charts/capacity-listener/Chart.yaml appVersion",
    ]
    assert checker.mismatches("0.2.0") == [
        "tag '0.2.0': not v<major>.<minor>.<patch>[-<pre-release>]"
    ]
    assert checker.main(["v99.0.0"]) == 1


def test_image_and_chart_are_pushed_under_the_checked_version() -> None:
    (build,) = [s for s in _steps() if "build-push-action" in s.get("uses", "")]
    assert build["with"]["push"] is True
    assert build["with"]["tags"] == (
        "${{ steps.version.outputs.image }}:${{ steps.version.outputs.version }}"
    )
    run = _run_text()
    assert 'push \\\n  "dist/capacity-listener-${VERSION}.tgz" "${CHARTS}"' in run
    assert 'echo "charts=oci://${REGISTRY}/${owner}/charts"' in run
    assert "make venv chart-package" in run


def test_the_released_chart_names_the_pushed_image() -> None:
    """The stamp step rewrites exactly the chart's default repository line."""
    (stamp,) = [s for s in _steps() if "Stamp" in s.get("name", "")]
    values = (ROOT / "charts" / "capacity-listener" / "values.yaml").read_text()
    (line,) = re.findall(r"^  repository: .*$", values, re.MULTILINE)
    assert f"^{line}$" in stamp["run"]
    assert re.search(r"^  registry: ", values, re.MULTILINE)
