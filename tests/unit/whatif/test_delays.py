"""The simulated nodes' launch delays: seeded and within their bounds."""

from __future__ import annotations

import random

import pytest

from whatif.delays import provisioning_delays


def test_provisioning_delays_are_jittered_within_bounds() -> None:
    delays = provisioning_delays(random.Random(1), 200, 30, 90)
    assert all(30 <= d <= 90 for d in delays)
    assert max(delays) - min(delays) > 40
    assert delays == provisioning_delays(random.Random(1), 200, 30, 90)
    with pytest.raises(ValueError, match="provisioning delay"):
        provisioning_delays(random.Random(1), 1, 90, 30)
