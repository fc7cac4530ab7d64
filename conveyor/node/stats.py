"""Counters behind INFO's stats section."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(slots=True)
class Stats:
    connections_received: int = 0
    rejected_connections: int = 0
    unknown_commands: int = 0
    net_input_bytes: int = 0
    net_output_bytes: int = 0
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
