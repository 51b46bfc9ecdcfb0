"""Ports for the processes a run starts (apiserver, Karpenter, listeners, Prometheus).

A port found free by binding port 0 comes from the kernel's ephemeral range, which is also
where every outgoing connection's local port comes from. Between choosing it and the child
binding it, one of the many client connections of a run (watches, polls, scrapes) may take
it, and the child fails with "address already in use". Ports below that range are never
handed to outgoing connections, so they are chosen there, at random (xdist workers choose
independently), each checked by binding it and never handed out twice by one process.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_LOWEST = 10_000
_handed_out: set[int] = set()
_random = random.SystemRandom()


def _ephemeral_low() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default
    return low


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports on 127.0.0.1 that were free a moment ago and that no outgoing
    connection will take; all sockets are held until every port is chosen."""
    high = _ephemeral_low() - 1
    if high - _LOWEST < 100 * count:
        raise RuntimeError(
            f"no room for ports below the ephemeral range (it starts at {high + 1}); "
            "lower net.ipv4.ip_local_port_range's start is not supported"
        )
    held: list[socket.socket] = []
    try:
        for _ in range(1000):
            if len(held) == count:
                break
            port = _random.randint(_LOWEST, high)
            if port in _handed_out:
                continue
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            held.append(sock)
            _handed_out.add(port)
        else:
            raise RuntimeError(f"no {count} free ports found below {high + 1}")
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def free_port() -> int:
    """One port, as :func:`free_ports`."""
    (port,) = free_ports(1)
    return port
