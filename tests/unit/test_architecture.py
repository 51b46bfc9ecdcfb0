"""ARCHITECTURE.md's import rules and the import-linter contracts that enforce them say the
same thing: every module a contract names is named in the rules, and the reverse for the
pure modules. (`make lint` runs the contracts themselves.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def contracts() -> list[dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    found: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return found


def rules_text() -> str:
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    return text.split("## Rules", 1)[1]


def mentioned(module: str, text: str) -> bool:
    """`listener.http` is mentioned as `listener.http` or `listener/http.py`."""
    as_path = module.replace(".", "/") + ".py"
    return f"`{module}`" in text or f"`{as_path}`" in text


def test_every_module_a_contract_names_is_in_the_rules() -> None:
    text = rules_text()
    missing = []
    for contract in contracts():
        for module in contract.get("allowed_importers", []):
            if not mentioned(module, text):
                missing.append((contract["name"], module))
        for ignored in contract.get("ignore_imports", []):
            importer = ignored.split(" -> ")[0]
            if not mentioned(importer, text):
                missing.append((contract["name"], importer))
    assert missing == []


def test_pure_modules_are_the_same_in_both() -> None:
    (pure,) = [c for c in contracts() if c["name"].startswith("pure modules")]
    line = next(p for p in rules_text().split("\n- ") if p.startswith("Pure modules"))
    listed = set(re.findall(r"`([a-z_]+(?:\.[a-z_]+)+)`", line.split(")", 1)[0]))
    assert listed == set(pure["source_modules"])


def test_every_rule_marked_as_a_contract_has_one() -> None:
    marked = rules_text().count("*(contract)*") + rules_text().count("*(contracts)*")
    assert marked >= 4
    assert len(contracts()) >= marked


def test_no_product_module_declares_all() -> None:
    """The rule in ARCHITECTURE.md: no `__all__` (a leading underscore marks what is private;
    mypy's strict mode forbids implicit re-exports), so no list can drift from the module."""
    declaring = [
        str(path.relative_to(ROOT))
        for package in ("listener", "capacity", "base")
        for path in sorted((ROOT / package).glob("*.py"))
        if re.search(r"^__all__\s*[:=]", path.read_text(encoding="utf-8"), re.MULTILINE)
    ]
    assert declaring == []
