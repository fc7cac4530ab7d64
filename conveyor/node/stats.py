"""Counters behind INFO's stats section."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class Stats:
    connections_received: int = 0
    rejected_connections: int = 0
    unknown_commands: int = 0
    net_input_bytes: int = 0
    net_output_bytes: int = 0
    # Clients closed for going over client-output-buffer-limit / client-query-buffer-limit.
    client_output_buffer_limit_disconnections: int = 0
    client_query_buffer_limit_disconnections: int = 0
    acl_access_denied_auth: int = 0  # failed AUTH and HELLO ... AUTH, as Redis 7 names it
    # Last sample for the instantaneous rates, taken when INFO asks (no cron needed).
    sample_ms: int = 0
    sample_commands: int = 0
    sample_input: int = 0
    sample_output: int = 0

    def reset(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)


def rss_bytes() -> int:
    """Resident memory of this process (0 where /proc is not available)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


_malloc_trim: Callable[[int], int] | bool | None = False  # False: not looked up yet


def release_free_memory() -> None:
    """Give the allocator's free pages back to the OS (glibc's malloc_trim), so RSS falls
    after a client with big buffers is gone. A no-op where there is no glibc."""
    global _malloc_trim
    if _malloc_trim is False:
        try:
            # The process's own symbols (dlopen(NULL)) include libc's. find_library("c")
            # would run `/sbin/ldconfig -p` in a subprocess from inside a running node.
            _malloc_trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = None
    if _malloc_trim:
        _malloc_trim(0)  # type: ignore[operator]
