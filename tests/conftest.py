"""Shared test helpers: free ports on 127.0.0.1."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_cluster_port() -> int:
    """A client port whose cluster bus port (+10000) is free too, both below 65536."""
    import random

    rand = random.Random()
    for _ in range(200):
        port = rand.randrange(20000, 45000)
        try:
            with socket.socket() as one, socket.socket() as two:
                one.bind(("127.0.0.1", port))
                two.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a cluster node")
