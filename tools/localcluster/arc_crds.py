"""ARC's four CRDs, taken from ARC's own Go module through the Go module proxy.

The proxy serves exactly one version of ``github.com/actions/actions-runner-controller`` with
the scale-set CRDs in it: the tag v0.27.6, whose chart is gha-runner-scale-set-controller
0.6.1. ARC publishes its scale-set releases under non-semver tags
(``gha-runner-scale-set-0.14.2``), which the proxy can only serve as pseudo-versions, and the
proxy reachable here refuses the module's version list and every pseudo-version. So the CRDs
come from v0.27.6 and the fields that the listener writes and 0.6.1 lacks are added to their
schemas (``SCHEMA_DELTA``). The delta is applied only where a field is missing, so pinning a
newer module version that already has the fields makes it a no-op.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ARC_MODULE = "github.com/actions/actions-runner-controller"
ARC_VERSION = "v0.27.6"
# The go.sum-style hash of the module zip; checked after download so a changed upstream zip
# cannot slip in even if checksum verification is switched off in the environment.
ARC_SUM = "h1:Uklv1+6+/BQuhV6HoXIgPZrnAW9/HWo3j9O7IcnzGXU="
CRD_SUBDIR = "charts/gha-runner-scale-set-controller/crds"
CRD_NAMES = (
    "autoscalinglisteners",
    "autoscalingrunnersets",
    "ephemeralrunners",
    "ephemeralrunnersets",
)

# (CRD plural, object path inside openAPIV3Schema, field, field schema, required)
# The fields are those the listener writes in ARC 0.14 (spec.patchID on the runner set,
# status.jobId on the runner); patchID carries no omitempty in ARC's Go type, so the
# generated schema lists it as required.
SCHEMA_DELTA: tuple[tuple[str, tuple[str, ...], str, Mapping[str, Any], bool], ...] = (
    (
        "ephemeralrunnersets",
        ("spec",),
        "patchID",
        {
            "description": "PatchID identifies the listener patch that set replicas.",
            "type": "integer",
        },
        True,
    ),
    ("ephemeralrunners", ("status",), "jobId", {"type": "string"}, False),
)


class CRDError(RuntimeError):
    """The CRDs could not be obtained or did not have the expected shape."""


def download_module(go: str, env: Mapping[str, str], workdir: Path) -> Path:
    """Download ARC's module through the proxy and return its extracted directory."""
    proc = subprocess.run(
        [go, "mod", "download", "-json", f"{ARC_MODULE}@{ARC_VERSION}"],
        cwd=workdir,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    try:
        info = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise CRDError(
            f"go mod download {ARC_MODULE}@{ARC_VERSION} failed: {proc.stderr.strip()}"
        ) from None
    if proc.returncode != 0 or "Error" in info:
        raise CRDError(f"go mod download {ARC_MODULE}@{ARC_VERSION}: {info.get('Error')}")
    if info.get("Sum") != ARC_SUM:
        raise CRDError(
            f"{ARC_MODULE}@{ARC_VERSION}: module hash {info.get('Sum')} != pinned {ARC_SUM}"
        )
    return Path(info["Dir"])


def _schema_object(crd: dict[str, Any], version: dict[str, Any], path: tuple[str, ...]) -> Any:
    node = version["schema"]["openAPIV3Schema"]
    for part in path:
        try:
            node = node["properties"][part]
        except KeyError:
            raise CRDError(
                f"CRD {crd['metadata']['name']}: no schema object at {'.'.join(path)}"
            ) from None
    return node


def apply_delta(plural: str, crd: dict[str, Any]) -> list[str]:
    """Add the missing listener-written fields to one CRD; return what was added."""
    added: list[str] = []
    for target, path, field, schema, required in SCHEMA_DELTA:
        if target != plural:
            continue
        for version in crd["spec"]["versions"]:
            obj = _schema_object(crd, version, path)
            props = obj.setdefault("properties", {})
            if field in props:
                continue
            props[field] = dict(schema)
            if required and field not in obj.setdefault("required", []):
                obj["required"].append(field)
            added.append(f"{plural}/{version['name']}: {'.'.join(path)}.{field}")
    return added


def install_into(module_dir: Path, out_dir: Path) -> list[str]:
    """Write the four CRDs (with the delta) into ``out_dir``; return the delta applied."""
    out_dir.mkdir(parents=True, exist_ok=True)
    applied: list[str] = []
    for plural in CRD_NAMES:
        src = module_dir / CRD_SUBDIR / f"actions.github.com_{plural}.yaml"
        if not src.is_file():
            raise CRDError(f"{ARC_MODULE}@{ARC_VERSION} has no {CRD_SUBDIR}/{src.name}")
        crd = yaml.load(src.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        added = apply_delta(plural, crd)
        applied += added
        dst = out_dir / src.name
        if added:
            dst.write_text(yaml.safe_dump(crd, sort_keys=False))
        else:
            shutil.copyfile(src, dst)
    return applied
