"""Copies the alert rules (deploy/prometheus/alerts.yaml) and the Grafana dashboard
(deploy/grafana/capacity-listener.json) into charts/capacity-listener/files/, where the chart's
monitoring templates read them (Helm reads only files inside the chart). deploy/ stays the one
place they are edited: run ``python deploy/gen_chart_files.py`` after changing either (after
``deploy/grafana/gen_dashboard.py`` for the dashboard). tests/unit/test_chart_files.py fails
when a copy differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ROOT / "charts" / "capacity-listener" / "files"
COPIES = {
    ROOT / "deploy" / "prometheus" / "alerts.yaml": FILES / "alerts.yaml",
    ROOT / "deploy" / "grafana" / "capacity-listener.json": FILES / "capacity-listener.json",
}


def main() -> int:
    for source, copy in COPIES.items():
        copy.write_bytes(source.read_bytes())
        print(f"wrote {copy.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
