"""Ports for child processes come from below the ephemeral range (tools/localcluster/ports.py):
an outgoing connection can never take one between its choice and the child's bind."""

from __future__ import annotations

import socket

import pytest

from tools.localcluster import ports


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    chosen = ports.free_ports(5) + [ports.free_port() for _ in range(5)]
    assert len(set(chosen)) == len(chosen)
    low = ports._ephemeral_low()
    assert all(ports._LOWEST <= port < low for port in chosen), (chosen, low)
    for port in chosen:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_in_use_is_not_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        nearby = [*range(busy + 1, 65_000), *range(busy - 1, 1024, -1)]
        other = next(port for port in nearby if _bindable(port))
        # The random choice meets the busy port first, then another one.
        picks = iter([busy, other])
        monkeypatch.setattr(ports, "_ephemeral_low", lambda: 65_000)
        monkeypatch.setattr(ports._random, "randint", lambda a, b: next(picks))
        assert ports.free_ports(1) == [other]


def _bindable(port: int) -> bool:
    """The neighbour of the busy port may be in use too on a busy machine: take one that is
    free now, so the test checks the skip and not the machine."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
