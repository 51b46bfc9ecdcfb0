"""The simulated nodes' launch delays: seeded, uniform in a range (a node is not a constant).

Apart from the simulator because it draws random numbers (the simulator is pure: it is
handed the delays).
"""

from __future__ import annotations

import random


def provisioning_delays(rng: random.Random, count: int, low: float, high: float) -> list[float]:
    """Per-node launch + registration delays, uniform in [low, high]."""
    if not 0 <= low <= high:
        raise ValueError(f"provisioning delay: need 0 <= low <= high, got {low}..{high}")
    return [round(rng.uniform(low, high), 3) for _ in range(count)]
