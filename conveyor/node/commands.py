"""The command table: name -> arity, flags and handler, as in Disque's.

Arity counts the command name; a negative arity is a minimum. Flags: w write, r read,
m deny-oom, a admin, l ok while loading, F fast. `COMMANDS` holds the specs; each server
builds its own table (`build_table`), so its call counters are its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from conveyor.node import cmd_admin, cmd_client, cmd_jobs, cmd_queues
from conveyor.protocol.resp import error

if TYPE_CHECKING:
    from conveyor.node.context import ClientContext, NodeContext

log = logging.getLogger("conveyor.node")

Handler = Callable[["NodeContext", "ClientContext", list[bytes]], "bytes | None"]


@dataclass(slots=True)
class Command:
    name: bytes
    arity: int
    flags: str
    handler: Handler
    deny_oom: bool = field(init=False)
    calls: int = 0
    nanoseconds: int = 0

    def __post_init__(self) -> None:
        self.deny_oom = "m" in self.flags

    def failed(self, request: list[bytes], exc: Exception) -> bytes:
        """The reply for a handler that raised something other than CommandError: a bug,
        which must cost one reply, not the connection or the node."""
        log.exception("error running %r", request[:3])
        return error(f"ERR internal error running '{self.name.decode()}': {exc}")


def _c(name: str, arity: int, flags: str, handler: Handler) -> Command:
    return Command(name.encode(), arity, flags, handler)


COMMANDS: list[Command] = [
    # jobs
    _c("addjob", -4, "wmF", cmd_jobs.addjob),
    _c("getjob", -2, "wF", cmd_jobs.getjob),
    _c("ackjob", -1, "wF", cmd_jobs.ackjob),
    _c("fastack", -1, "wF", cmd_jobs.fastack),
    _c("working", 2, "wF", cmd_jobs.working),
    _c("nack", -1, "mwF", cmd_jobs.nack),
    _c("enqueue", -1, "mwF", cmd_jobs.enqueue),
    _c("dequeue", -1, "wF", cmd_jobs.dequeue),
    _c("deljob", -1, "wF", cmd_jobs.deljob),
    _c("show", 2, "rF", cmd_jobs.show),
    _c("loadjob", 2, "w", cmd_jobs.loadjob),
    _c("jscan", -1, "r", cmd_jobs.jscan),
    # queues
    _c("qlen", 2, "rF", cmd_queues.qlen),
    _c("qpeek", 3, "r", cmd_queues.qpeek),
    _c("qstat", 2, "rF", cmd_queues.qstat),
    _c("qscan", -1, "r", cmd_queues.qscan),
    _c("pause", -3, "rF", cmd_queues.pause),
    # server
    _c("auth", 2, "rlF", cmd_admin.auth),
    _c("ping", -1, "rF", cmd_admin.ping),
    _c("echo", 2, "rF", cmd_admin.echo),
    _c("quit", -1, "rlF", cmd_admin.quit),
    _c("time", 1, "rF", cmd_admin.time_),
    _c("info", -1, "rl", cmd_admin.info),
    _c("hello", -1, "rlF", cmd_client.hello),
    _c("config", -2, "ar", cmd_admin.config),
    _c("cluster", -2, "ar", cmd_admin.cluster),
    _c("debug", -2, "a", cmd_admin.debug),
    _c("shutdown", -1, "arl", cmd_admin.shutdown),
    _c("command", 0, "rl", cmd_admin.command),
    _c("client", -2, "ar", cmd_client.client),
    _c("bgrewriteaof", 1, "ar", cmd_admin.bgrewriteaof),
]


def build_table(renamed: dict[str, str]) -> dict[bytes, Command]:
    """A server's own table, under lower- and upper-case names (the common spellings,
    found without lower()). rename-command: a command answers to its new name only, and
    "" hides it."""
    table: dict[bytes, Command] = {}
    for spec in COMMANDS:
        command = replace(spec, calls=0, nanoseconds=0)
        name = renamed.get(spec.name.decode(), spec.name.decode())
        if name:
            table[name.lower().encode()] = command
            table[name.upper().encode()] = command
    return table


def gated_table(
    table: dict[bytes, Command], applies: Callable[[Command], bool], reply: bytes
) -> dict[bytes, Command]:
    """A copy of a command table where the commands `applies` picks answer `reply`."""

    def refuse(*_args: object) -> bytes:
        return reply

    gated: dict[bytes, Command] = {}
    for name, command in table.items():
        gated[name] = replace(command, handler=refuse) if applies(command) else command
    return gated
