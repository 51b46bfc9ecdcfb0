"""The repository stands on its own: no file refers to anything outside it.

A reader of a fresh clone must be able to follow every reference. So no file may cite a
document that is not in the repository (a sibling directory, numbered sections of design or
reference documents kept elsewhere), name an absolute path of a developer's machine, or link
(Markdown) to a path that escapes the repository or does not exist. This file checks itself
too: it writes the forbidden patterns and its examples in pieces, so no line of it cites
anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Directories that are not the project's own text: tool state, build output, dependencies.
_SKIP_DIRS = frozenset(
    {
        ".git",
        ".venv",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".hypothesis",
        ".import_linter_cache",
        "__pycache__",
        "build",
        "dist",
        "node_modules",
        ".local",
    }
)
# Vendored checksums of Go modules: third-party names only, and huge.
_SKIP_SUFFIXES = frozenset({".sum", ".png", ".jpg", ".gz", ".whl"})

FORBIDDEN: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a sibling directory of the repository", re.compile(r"\.\./" + "shared")),
    ("a design document outside the repository", re.compile(r"\bdesign" + r"(\.md)?\s*§")),
    ("the protocol notes outside the repository", re.compile(r"protocol " + r"reference")),
    ("a reference document outside the repository", re.compile(r"\breference" + r"\s*§")),
    ("an absolute path of a developer's machine", re.compile(r"(?<![\w.])/(work|root|Users)/")),
)

_MD_LINK = re.compile(r"\]\(([^)\s]+)\)")


def project_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in _SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts):
            continue
        if path.is_file() and path.suffix not in _SKIP_SUFFIXES:
            yield path


def outside_references(root: Path) -> list[str]:
    """Every offending line under ``root``, as ``path:line: why: text``."""
    found: list[str] = []
    for path in project_files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary
        rel = path.relative_to(root)
        for number, line in enumerate(text.splitlines(), start=1):
            for why, pattern in FORBIDDEN:
                if pattern.search(line):
                    found.append(f"{rel}:{number}: {why}: {line.strip()[:120]}")
            if path.suffix == ".md":
                found.extend(
                    f"{rel}:{number}: {problem}" for problem in _bad_links(root, path, line)
                )
    return found


def _bad_links(root: Path, source: Path, line: str) -> Iterator[str]:
    for target in _MD_LINK.findall(line):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        file_part = target.split("#", 1)[0]
        resolved = (source.parent / file_part).resolve()
        if not resolved.is_relative_to(root):
            yield f"link leaves the repository: {target}"
        elif not resolved.exists():
            yield f"link to a missing file: {target}"


def test_no_file_refers_outside_the_repository() -> None:
    assert outside_references(ROOT) == []


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("see " + "../" + "shared/notes.md", "notes.py"),
        ("as the design " + "§5.2 says", "notes.py"),
        ("(protocol " + "reference " + "§3.3)", "notes.py"),
        ("(reference " + "§2.5)", "notes.py"),
        ("cache in /" + "root/.cache/x", "notes.py"),
        ("built in /" + "work/main", "notes.py"),
        ("[up](../../" + "elsewhere.md)", "notes.md"),
        ("[gone](missing" + ".md)", "notes.md"),
    ],
)
def test_the_check_finds_each_kind_of_outside_reference(
    tmp_path: Path, text: str, name: str
) -> None:
    (tmp_path / name).write_text(f"ok line\n{text}\n")
    found = outside_references(tmp_path)
    assert found
    assert all(line.startswith(f"{name}:2: ") for line in found)


def test_the_check_accepts_links_and_paths_inside_the_repository(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("[b](../b.md#part) [web](https://example.com)\n")
    (tmp_path / "b.md").write_text("[a](docs/a.md) [here](#top) runner home: /home/runner\n")
    assert outside_references(tmp_path) == []
