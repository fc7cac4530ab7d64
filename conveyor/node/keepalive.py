"""TCP keepalive on client sockets, as Redis sets it (anetKeepAlive).

Owns the socket options and the once-per-value warning when the kernel refuses them;
it must not touch the connection itself: a refused option costs the keepalive only.
"""

from __future__ import annotations

import logging
import socket

log = logging.getLogger("conveyor.node")

# Linux refuses TCP_KEEPIDLE / TCP_KEEPINTVL above this (MAX_TCP_KEEPIDLE, net/tcp.h).
MAX_TCP_KEEPIDLE = 32767
# Probes before the connection is dropped, as Redis' anetKeepAlive.
TCP_KEEPCNT = 3
_keepalive_warned: set[int] = set()  # tcp-keepalive values already logged as refused


def set_keepalive(sock: socket.socket, seconds: int) -> None:
    """TCP keepalive as Redis' anetKeepAlive: first probe after `seconds` idle (capped at
    what Linux accepts), then every seconds/3, dropped after 3 unanswered probes.

    Never raises: a socket option the kernel refuses costs the keepalive, not the
    connection (logged once per value)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        idle = min(seconds, MAX_TCP_KEEPIDLE)
        if hasattr(socket, "TCP_KEEPIDLE"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
        if hasattr(socket, "TCP_KEEPINTVL"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(idle // 3, 1))
        if hasattr(socket, "TCP_KEEPCNT"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, TCP_KEEPCNT)
    except (OSError, OverflowError, TypeError, ValueError) as exc:
        if seconds not in _keepalive_warned:
            _keepalive_warned.add(seconds)
            log.warning("Unable to set TCP keepalive (tcp-keepalive %d): %s", seconds, exc)
