"""Tier markers: each tier's conftest marks the tests below its folder."""

from __future__ import annotations

from pathlib import Path

import pytest


def mark_tier(items: list[pytest.Item], conftest: str, *marks: pytest.MarkDecorator) -> None:
    """Add ``marks`` to every collected test below the folder of ``conftest`` (the calling
    conftest's ``__file__``): the hook sees the whole session's items, not only its tier's."""
    here = Path(conftest).parent
    for item in items:
        if here in item.path.parents:
            for mark in marks:
                item.add_marker(mark)
