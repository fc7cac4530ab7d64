"""Counters behind INFO's stats section."""

from __future__ import annotations

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
