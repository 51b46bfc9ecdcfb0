"""Checks that a release tag names the version of every released artefact: the image (the
package version in pyproject.toml) and the chart (charts/capacity-listener/Chart.yaml
`version` and `appVersion`, the image tag the chart's overlay names by default).
The release workflow (.github/workflows/release.yml) runs it first:
``python3 deploy/release_check.py v0.3.0`` prints the version, or one line per mismatch naming
the file and field and exits 1. Standard library only (the workflow runs it before any
install).
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
CHART = ROOT / "charts" / "capacity-listener" / "Chart.yaml"
# Chart.yaml's top-level scalars (`version: 0.3.0`, `appVersion: "0.3.0"`); no YAML parser
# needed for two plain keys.
_CHART_FIELD = re.compile(r'^(version|appVersion):\s*"?([^"\s#]+)"?\s*(#.*)?$', re.MULTILINE)


def versions() -> dict[str, str]:
    """Every place a release version is written, by `file field`."""
    found = {
        "pyproject.toml project.version": tomllib.loads(PYPROJECT.read_text())["project"]["version"]
    }
    for field, value, _ in _CHART_FIELD.findall(CHART.read_text()):
        found[f"charts/capacity-listener/Chart.yaml {field}"] = value
    return found


def mismatches(tag: str) -> list[str]:
    """One line per version that the tag `v<version>` does not name (empty: all agree)."""
    if not re.fullmatch(r"v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?", tag):
        return [f"tag {tag!r}: not v<major>.<minor>.<patch>[-<pre-release>]"]
    want = tag.removeprefix("v")
    found = versions()
    problems = [
        f"{where}: {value}, but the tag is {tag}" for where, value in found.items() if value != want
    ]
    if len(found) != 3:
        problems.append(f"{CHART.name}: version and appVersion must both be set")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: release_check.py v<version>", file=sys.stderr)
        return 2
    problems = mismatches(argv[0])
    for line in problems:
        print(f"release_check: {line}", file=sys.stderr)
    if problems:
        return 1
    print(argv[0].removeprefix("v"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
