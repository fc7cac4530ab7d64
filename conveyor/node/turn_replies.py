"""Replies written during a turn of the event loop leave together at its end.

Redis writes its clients' replies just before it waits for events again
(`handleClientsWithPendingWrites`); Conveyor used to write each read's replies as soon as
the read had run. With fifty clients that each wait for their reply (redis-benchmark
-P 1), that put a `send` between every two reads, and on a VM a `send` to a client
process that went back to sleep costs the sender the wake-up, 19-40 µs here, against
~5 µs to one that is awake (docs/performance.md, fifteenth and sixteenth looks). Written
back to back at the end of the turn, the first wakes the client and the others find it
awake: a lone node's CPU a job at -P 1 went from ~41 to ~30 µs.

`Connection.send` leaves its bytes in the connection's `unsent` list and names the
connection here; `flush`, scheduled once per turn with the loop's `call_soon`, writes
each connection's list in one `write`, in the order the connections were first written
to this turn. Nothing else changes: a connection's bytes keep their order (a direct
write, `Connection.send_now`, joins the list when one is waiting), a close writes what
waits first, and a turn's output is bounded by what the turn ran (TURN_REQUESTS and
TURN_REPLY_BYTES a read), as the transport's buffer was before.

The replies of synchronous ADDJOBs confirmed by a batch of GOTJOBs do not wait: they are
already written back to back (one write per client in `CoreEffects._deliver_replies`),
and a client answered before the turn's other work sends its next ADDJOB in time for the
next turn, which at -P 1 is the cluster's throughput.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conveyor.node.connection import Connection
    from conveyor.node.server import Server

log = logging.getLogger("conveyor.node")


class TurnReplies:
    """The connections with replies waiting for the end of this turn, in order."""

    __slots__ = ("connections", "server")

    def __init__(self, server: Server) -> None:
        self.server = server
        # Not empty exactly while a flush is scheduled: the first of a turn schedules it.
        self.connections: list[Connection] = []

    @property
    def scheduled(self) -> bool:
        return bool(self.connections)

    def owe(self, conn: Connection) -> None:
        """`conn` has its first unsent bytes of the turn: write them at its end."""
        connections = self.connections
        if not connections:
            # The server's loop: get_running_loop() makes a getpid() system call (3.11).
            (self.server.loop or asyncio.get_running_loop()).call_soon(self.flush)
        connections.append(conn)

    def flush(self) -> None:
        """Write every connection's unsent bytes, one write each."""
        connections = self.connections
        self.connections = []
        for conn in connections:
            try:
                conn.write_unsent()
            except Exception:
                # Not one client's failure may strand the others' replies: a connection
                # left with bytes unsent is never named here again, and would hang.
                log.exception("writing the replies of client %s failed: closing it", conn.id)
                conn.abort()
