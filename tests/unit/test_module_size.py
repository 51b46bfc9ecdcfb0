"""No Python module over ``LIMIT`` lines without a reason at its top.

A long module is either split by role or ends its docstring with a ``Size:`` paragraph saying
why it is one file (CONTRIBUTING.md). The reason sits where a reader opening the file sees it
first, and this check keeps a module from growing past the limit without one.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("listener", "capacity", "base", "deploy", "tools", "tests")
# "About 400 lines": a few lines over are not worth a paragraph.
LIMIT = 420


def size_reason(source: str) -> str | None:
    """The module docstring's last paragraph when it starts with ``Size:``, else None."""
    docstring = ast.get_docstring(ast.parse(source))
    if not docstring:
        return None
    last = docstring.strip().split("\n\n")[-1]
    return last if last.startswith("Size:") else None


def test_size_reason_is_the_last_paragraph_of_the_docstring() -> None:
    """The check can fail: a reason elsewhere, or none, does not count."""
    assert size_reason('"""What it is.\n\nSize: one module of one job.\n"""\n')
    assert size_reason('"""What it is.\n\nSize: why.\n\nMore."""\n') is None
    assert size_reason('"""What it is."""\n') is None
    assert size_reason("# Size: in a comment\nx = 1\n") is None


def test_every_long_module_says_why_it_is_one_file() -> None:
    long_without_reason = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            lines = source.count("\n")
            if lines > LIMIT and size_reason(source) is None:
                long_without_reason.append(f"{path.relative_to(ROOT)} ({lines} lines)")
    assert long_without_reason == [], "split by role, or end the docstring with 'Size: ...'"
