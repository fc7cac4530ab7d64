"""The server's consumers of the core's job events, and the command table they gate.

The job-event log (`event-log`) and the AOF (node/aof.py) both read the core's
`JobEvent` stream; the core records it only while one of them is on. While the AOF
loads or cannot write, the command table in use refuses what must wait (-LOADING,
-MISCONF): a swapped table, so the hot path pays nothing for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from conveyor.node.aof import LOADING_ERROR
from conveyor.node.commands import gated_table
from conveyor.node.connection import now_ms
from conveyor.node.directives import ConfigError
from conveyor.node.event_log import EventLog

if TYPE_CHECKING:
    import asyncio

    from conveyor.core.node import NodeCore
    from conveyor.node.aof import AofDriver
    from conveyor.node.commands import Command
    from conveyor.node.config import Config
    from conveyor.node.event_log import EventLogCounters


class JobEventConsumers:
    """The Server's job-event consumers (fields set by Server.__init__)."""

    config: Config
    core: NodeCore
    data_dir: Path
    node_id: str
    now: int
    aof: AofDriver
    event_log: EventLog | None
    event_log_counters: EventLogCounters
    _event_log_timer: asyncio.TimerHandle | None
    base_commands: dict[bytes, Command]
    commands: dict[bytes, Command]

    def event_log_dir(self) -> Path | None:
        """The event-log directory: `event-log` resolved against the data directory."""
        value = self.config["event-log"]
        return self.data_dir / value if value else None

    def _configure_event_log(self) -> None:
        """Open (or switch, or close) the job-event log; ConfigError if unusable."""
        directory = self.event_log_dir()
        new_log = None
        if directory is not None:
            try:
                new_log = EventLog(directory, self.node_id, self.event_log_counters)
            except OSError as exc:
                raise ConfigError(
                    f"cannot use event-log directory '{directory}': {exc.strerror or exc}"
                ) from None
        self.drain_job_events()
        if self.event_log is not None:
            self.event_log.flush()
        self.event_log = new_log
        self.refresh_event_recording()

    def refresh_event_recording(self) -> None:
        """Have the core record job events while someone consumes them."""
        self.core.record_job_events(self.event_log is not None or self.aof.wants_events)

    def refresh_command_table(self) -> None:
        aof = self.aof
        if aof.loading:
            self.commands = gated_table(
                self.base_commands, lambda command: "l" not in command.flags, LOADING_ERROR
            )
        elif aof.failed:
            self.commands = gated_table(
                self.base_commands,
                lambda command: "w" in command.flags or command.name == b"ping",
                aof.misconf_error(),
            )
        else:
            self.commands = self.base_commands

    def core_clock(self) -> int:
        self.now = now_ms()
        return self.now

    def drain_job_events(self) -> None:
        """Hand the core's job events to their consumers: the event log, the AOF."""
        events = self.core.take_job_events()
        if events:
            if self.event_log is not None:
                self.event_log.record_events(events)
            if self.aof.wants_events:
                self.aof.feed(events)

    def _flush_event_log(self) -> None:
        self._event_log_timer = None
        if self.event_log is not None:
            self.event_log.flush()
