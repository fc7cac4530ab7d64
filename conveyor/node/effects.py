"""Carrying out the core's effects after each batch (a mixin of the Server).

After every read, bus message or timer the server calls `after_io`: the cluster's
messages go out, replies owed to other clients (woken GETJOBs, replicated ADDJOBs) are
written, job events reach their consumers, and the one event-loop timer is armed for the
core's next deadline, so an idle node does not wake up.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from conveyor.core.effects import Reply, WokenGetJob
from conveyor.core.node import NodeCore
from conveyor.core.waiters import Waiter
from conveyor.node.connection import Connection, now_ms
from conveyor.node.context import ClientContext
from conveyor.node.deferred import ReplySlot
from conveyor.node.replies import encode_getjob_reply
from conveyor.protocol.resp import NULL_ARRAY_BYTES, NULL_RESP3_BYTES, error

if TYPE_CHECKING:
    from conveyor.node.cluster import ClusterDriver
    from conveyor.node.event_log import EventLog

log = logging.getLogger("conveyor.node")

# Buffered job events are written at most this long after they happen (event_log.py).
EVENT_LOG_FLUSH_S = 1.0


class CoreEffects:
    """The Server's effect carrying (fields set by Server.__init__)."""

    core: NodeCore
    cluster: ClusterDriver
    loop: asyncio.AbstractEventLoop | None
    now: int
    event_log: EventLog | None
    _event_log_timer: asyncio.TimerHandle | None
    _timer: asyncio.TimerHandle | None
    _timer_deadline: int | None

    if TYPE_CHECKING:  # JobEventConsumers's, beside this mixin in the Server

        def drain_job_events(self) -> None: ...
        def _flush_event_log(self) -> None: ...

    def after_io(self) -> None:
        """Carry out what the core left after a batch: replies owed to other clients, job
        events for their consumers, the timer for the next deadline."""
        core = self.core
        cluster = self.cluster
        membership = cluster.membership
        if (
            membership.actions
            or membership.pending_sends
            or (cluster.bus is not None and cluster.bus.unflushed)
        ):
            cluster.flush()
        if core.replies:
            self.deliver_replies()
        if core.job_events:
            self.drain_job_events()
        if core.messages:
            # No cluster transport yet: a single node has nobody to send to.
            log.warning("dropping %d messages for other nodes", len(core.take_messages()))
        deadline = core.next_deadline()
        if deadline is not None and (
            self._timer_deadline is None or deadline < self._timer_deadline
        ):
            self._arm_timer(deadline)
        # The log flushes itself when its buffer is full; the timer bounds how long an
        # event waits otherwise, and is armed only while something is buffered, so an
        # idle node stays asleep. Checked in the cheapest order: this runs per read.
        if self._event_log_timer is None and self.event_log is not None and self.event_log.parts:
            assert self.loop is not None
            self._event_log_timer = self.loop.call_later(EVENT_LOG_FLUSH_S, self._flush_event_log)

    def deliver_replies(self) -> None:
        """What the core owes other clients (woken GETJOBs, replicated ADDJOBs)."""
        core = self.core
        # Resuming a woken client runs its pipelined requests, which may wake others.
        while core.replies:
            self._deliver_replies(core.take_replies())

    def _deliver_replies(self, replies: list[WokenGetJob | Reply]) -> None:
        # Replies of deferred ADDJOBs, per client: one write each for the whole batch.
        filled: dict[Connection, list[bytes]] = {}
        conn: Connection
        for effect in replies:
            if type(effect) is Reply:  # the usual case: exact types, tested first
                token, value = effect
                data = value if type(value) is bytes else error(value.message)
                if type(token) is ReplySlot:  # an ADDJOB's copies are confirmed
                    conn = token.conn
                    deferred = conn.deferred
                    if deferred is None or conn.closed:
                        continue  # the client left: nobody to answer
                    slots = deferred.slots
                    if len(slots) == 1 and slots[0] is token and token.value is None:
                        # fill's usual case (a client waiting for one reply), one call less
                        slots.clear()
                        ready = data
                    else:
                        ready = deferred.fill(token, data)
                    if ready:
                        filled.setdefault(conn, []).append(ready)
                    continue
                conn = token
                conn.write(data)
            else:
                waiter = effect.waiter
                conn = waiter.token
                if conn.waiter is not waiter:
                    continue
                conn.waiter = None
                jobs = effect.jobs
                if jobs is None:
                    conn.write(NULL_RESP3_BYTES if conn.protocol == 3 else NULL_ARRAY_BYTES)
                else:
                    conn.write(encode_getjob_reply(jobs, waiter.with_counters))
            if conn.pending:
                conn.resume_after_block()
        for conn, parts in filled.items():
            conn.write_filled(b"".join(parts))

    def _arm_timer(self, deadline: int) -> None:
        assert self.loop is not None
        if self._timer is not None:
            self._timer.cancel()
        delay_s = max(deadline - now_ms(), 0) / 1000
        self._timer_deadline = deadline
        self._timer = self.loop.call_later(delay_s, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_deadline = None
        self.now = now_ms()
        self.core.tick(self.now)
        self.after_io()

    def block(self, conn: ClientContext, waiter: Waiter) -> None:
        """The client's GETJOB blocked: hold its later requests until it is answered."""
        conn.waiter = waiter
