"""ADDJOBs that many clients sent in one turn of the event loop, run together.

Fifty producers each waiting for their reply (redis-benchmark -P 1) send one ADDJOB a
read. Run as each read comes, every job pays the command table, the option parsing, the
cluster's checks (`Replication.plan_adds`: TTL and RETRY, REPLICATE, the copies' targets
and header) and the end-of-read work (`Server.after_io`) alone. In a cluster those were
half of the origin's Python calls a job, which bounded -P 1 throughput
(docs/performance.md, 2026-11-28).

So a read that holds just one ADDJOB, from a client that waits for nothing else, leaves
it here instead of running it. The loop's next callback (`run`, scheduled once per
turn) runs every ADDJOB left this turn, in arrival order; consecutive ones with the
same options share one plan, as a pipelined run does (node/addjob_runs.py), and each
job gets exactly the reply, copies and counters it would have had alone.

What keeps this exact: a connection has at most one ADDJOB here (its next read, or its
disconnection, runs what waits first), so its requests still run in the order it sent
them. Requests of other clients may run before it; they were sent concurrently with it,
and nothing was answered yet.
"""

from __future__ import annotations

import asyncio
import logging
from time import perf_counter_ns
from typing import TYPE_CHECKING

from conveyor.node.addjob_runs import add_jobs, plan_run
from conveyor.node.connection import now_ms
from conveyor.node.deferred import ADDJOB_SPELLINGS, MAX_OUTSTANDING

if TYPE_CHECKING:
    from conveyor.node.connection import Connection
    from conveyor.node.server import Server

log = logging.getLogger("conveyor.node")


class TurnAdds:
    """The ADDJOBs waiting for the end of this turn (one per connection at most)."""

    __slots__ = ("entries", "scheduled", "server")

    def __init__(self, server: Server) -> None:
        self.server = server
        self.entries: list[tuple[Connection, list[bytes]]] = []
        self.scheduled = False

    def offer(self, conn: Connection, request: list[bytes]) -> bool:
        """Leave `conn`'s request for this turn's run if it is an ADDJOB that would run
        now (nothing of this client waits); whether it was left. The read held nothing
        before it, and the connection runs what comes after it (if anything) first."""
        deferred = conn.deferred
        if (
            conn.in_turn
            or request[0] not in ADDJOB_SPELLINGS
            or len(request) < 4  # the command table's arity error
            or conn.waiter is not None
            or conn.pending
            or (deferred is not None and len(deferred.slots) >= MAX_OUTSTANDING)
        ):
            return False
        self.entries.append((conn, request))
        conn.in_turn = True
        if not self.scheduled:
            self.scheduled = True
            # The server's loop: get_running_loop() makes a getpid() system call (3.11).
            (self.server.loop or asyncio.get_running_loop()).call_soon(self.run)
        return True

    def run(self) -> None:
        """Run the ADDJOBs left this turn, then carry out their effects once."""
        self.scheduled = False
        entries = self.entries
        if not entries:
            return  # run early, by a connection's next read or its disconnection
        self.entries = []
        server = self.server
        server.now = now_ms()
        index, count = 0, len(entries)
        while index < count:
            first = entries[index][1]
            tail = first[3:]
            end = index + 1
            while end < count and entries[end][1][3:] == tail:
                end += 1
            try:
                self._run_alike(entries, index, end)
            except Exception:  # a bug must not cost the other clients their replies
                log.exception("ADDJOBs of a turn failed to run together: one by one instead")
                _one_by_one(entries[index:end])
            index = end
        server.after_io()
        # The copies leave now: the clients of this turn wait for them, and another turn
        # of the loop would read more requests before they did.
        server.cluster.send_pending()

    def _run_alike(
        self, entries: list[tuple[Connection, list[bytes]]], start: int, end: int
    ) -> None:
        """entries[start:end], ADDJOBs with the same options: planned once."""
        conn, first = entries[start]
        found = plan_run(conn, first)
        if found is None:  # anything unusual: each goes through the command table
            _one_by_one(entries[start:end])
            return
        command, args = found
        plan = self.server.cluster.replication.plan_adds(args)
        out: list[bytes] = []
        started = perf_counter_ns()
        ran = add_jobs(self.server, entries[start:end], command, args, plan, out, 0)[2]
        if out:  # the last client's reply (the others' were written as the next came)
            entries[end - 1][0].write(b"".join(out))
        command.calls += ran
        command.nanoseconds += perf_counter_ns() - started


def _one_by_one(entries: list[tuple[Connection, list[bytes]]]) -> None:
    """Each ADDJOB still waiting through the command table, as its read would have run it."""
    for conn, request in entries:
        if conn.in_turn:
            conn.in_turn = False
            conn.run_requests((request,))
