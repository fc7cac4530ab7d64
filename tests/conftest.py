"""Shared test helpers: free ports on 127.0.0.1."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Cluster ports are picked below the kernel's ephemeral range (32768-60999 on Linux): a port
# from there can be taken, between our probe and the node's bind, as the local end of any
# outbound connection on the machine (CI saw "address already in use"). Other ports stay in
# the ephemeral range, so a cluster node reconnecting to a stopped peer's bus port never
# reaches a plain node of another test.
_LOWEST = 10_000
_EPHEMERAL_START = 32_768
_rand = random.Random()


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _EPHEMERAL_START


def _bindable(*ports: int) -> bool:
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in ports]
    try:
        for sock, port in zip(sockets, ports, strict=True):
            sock.bind(("127.0.0.1", port))
    except OSError:
        return False
    finally:
        for sock in sockets:
            sock.close()
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, chosen by the kernel (in its
    ephemeral range, apart from the cluster ports below it; NodeProcess picks again if
    the port is taken before the node binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_cluster_port() -> int:
    """A client port whose cluster bus port (+10000) is free too, both outside the
    ephemeral range when it starts high enough (as Linux's does)."""
    top = max(_ephemeral_start() - 10_000, _LOWEST + 1000)
    for _ in range(200):
        port = _rand.randrange(_LOWEST, top)
        if _bindable(port, port + 10_000):
            return port
    raise RuntimeError("no free port pair for a cluster node")
