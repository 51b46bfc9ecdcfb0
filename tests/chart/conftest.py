"""The chart tier's shared fixture: the pinned Helm (built by `make cluster-build`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.helm_chart import helm_binary


@pytest.fixture(scope="module")
def helm_bin() -> Path:
    return helm_binary()
