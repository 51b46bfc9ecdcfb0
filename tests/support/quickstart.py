"""README.md's quick start as the commands bash would run (test infrastructure): the one
```sh block under ``## Quick start``, split into commands, so the test that runs it runs what
a reader copies and never a copy of it.

A command is a line with its backslash continuations (kept: bash joins them) and, when it
opens a heredoc (``<<'END'``), every line up to the one that closes it. Blank lines and
comment lines separate commands.
"""

from __future__ import annotations

import re
import shlex

from tests.support.deploy_files import ROOT

README = ROOT / "README.md"
SECTION = "## Quick start"
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")


class QuickStartError(ValueError):
    """The README's quick start is not in the shape the test reads; the message says how."""


def quickstart_block(markdown: str) -> str:
    """The text of the single ```sh block of the quick-start section."""
    _, found, rest = markdown.partition(f"\n{SECTION}\n")
    if not found:
        raise QuickStartError(f"README.md has no section {SECTION!r}")
    section = re.split(r"^## ", rest, maxsplit=1, flags=re.M)[0]
    blocks = re.findall(r"^```sh\n(.*?)^```\s*$", section, flags=re.M | re.S)
    if len(blocks) != 1:
        raise QuickStartError(f"{SECTION} has {len(blocks)} ```sh blocks, expected one")
    block: str = blocks[0]
    return block


def split_commands(block: str) -> list[str]:
    """The block's commands in order, each as bash reads it (continuations, heredoc body)."""
    lines = block.splitlines()
    commands: list[str] = []
    i = 0
    while i < len(lines):
        command = lines[i]
        i += 1
        if not command.strip() or command.lstrip().startswith("#"):
            continue
        while command.endswith("\\"):
            if i == len(lines):
                raise QuickStartError(f"continuation at the end of the block: {command!r}")
            command += "\n" + lines[i]
            i += 1
        opened = _HEREDOC.search(command)
        if opened is not None:
            end = opened.group(2)
            body: list[str] = []
            while i < len(lines) and lines[i] != end:
                body.append(lines[i])
                i += 1
            if i == len(lines):
                raise QuickStartError(f"heredoc {end} is never closed: {command!r}")
            i += 1
            command = "\n".join([command, *body, end])
        commands.append(command)
    return commands


def words(command: str) -> list[str]:
    """A command without a heredoc as shell words (continuations joined)."""
    if _HEREDOC.search(command):
        raise QuickStartError(f"a heredoc is not one list of words: {command.splitlines()[0]!r}")
    return shlex.split(command.replace("\\\n", " "))


def option(command: str, *names: str) -> str:
    """The value after the first of ``names`` in ``command`` (``-t X``, ``-f X``)."""
    parts = words(command)
    for index, word in enumerate(parts[:-1]):
        if word in names:
            return parts[index + 1]
    raise QuickStartError(f"no {'/'.join(names)} in {command!r}")


def readme_commands() -> list[str]:
    return split_commands(quickstart_block(README.read_text(encoding="utf-8")))
