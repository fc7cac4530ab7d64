"""What waits on a connection: requests held back, and replies owed (a Connection mixin).

Two things make a client's later requests wait, in order, in its `pending` deque: a
GETJOB blocked until a job comes, and ADDJOBs whose replies are owed until their copies
are confirmed (node/deferred.py), behind which only more ADDJOBs may run. Held requests
count towards the client's query buffer (`pending_bytes`). Once the block is answered or
the last owed reply written, `resume_after_block` runs what waited.

Nothing here is made before it is needed: `pending` is the one shared empty deque until a
request is held, and a connection keeps the `DeferredReplies` it emptied for its next
deferred reply (at -P 1 every ADDJOB defers one), so it never holds more than one.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from conveyor.node.deferred import DeferredReplies, ReplySlot

if TYPE_CHECKING:
    from conveyor.core.waiters import Waiter
    from conveyor.node.server import Server

# Per-request overhead of a multi-bulk request, counted for requests held in `pending`.
_PENDING_OVERHEAD = 16
# `pending` of every connection that never held a request (hold() gives it its own).
NOTHING_HELD: deque[list[bytes]] = deque()


def _held_size(request: list[bytes]) -> int:
    """What a held request counts towards the query buffer."""
    size = _PENDING_OVERHEAD * len(request)
    for arg in request:
        size += len(arg)
    return size


class HeldWork:
    """Requests held behind a block and replies owed (fields set by Connection)."""

    __slots__ = ()

    if TYPE_CHECKING:
        server: Server
        closed: bool
        waiter: Waiter | None
        pending: deque[list[bytes]]
        pending_bytes: int
        deferred: DeferredReplies | None
        deferred_spare: DeferredReplies | None

        def write(self, data: bytes) -> None: ...
        def send(self, data: bytes) -> None: ...
        def send_now(self, data: bytes) -> None: ...

    # -- requests held back ----------------------------------------------------------------
    def hold(self, request: list[bytes]) -> None:
        """Keep a request pipelined behind a blocked GETJOB; its bytes count as qbuf."""
        if self.pending is NOTHING_HELD:  # never appended to: it is every idle client's
            self.pending = deque()
        self.pending.append(request)
        self.pending_bytes += _held_size(request)
        self.server.query_buffer_changed(self)  # type: ignore[arg-type]

    def resume_after_block(self) -> None:
        """The blocked GETJOB was answered: run what was pipelined behind it."""
        out: list[bytes] = []
        pending = self.pending
        while pending and self.waiter is None and not self.closed:
            deferred = self.deferred
            if deferred is not None and not deferred.admits(pending[0]):
                break
            request = pending.popleft()
            self.pending_bytes -= _held_size(request)
            reply = self.server.execute(self, request)  # type: ignore[arg-type]
            if reply is None:
                if deferred is None and self.deferred is not None and out:
                    self.write(b"".join(out))
                    out.clear()
            elif deferred is not None:
                deferred.add_ready(self, reply)  # type: ignore[arg-type]
            else:
                out.append(reply)
        if not pending:
            self.pending_bytes = 0
        self.server.query_buffer_changed(self)  # type: ignore[arg-type]
        if out:
            self.write(b"".join(out))

    # -- replies owed to ADDJOBs waiting for their copies ------------------------------------
    def defer(self, slot: ReplySlot) -> None:
        """The request being run answers later, into `slot`."""
        deferred = self.deferred
        if deferred is None:
            deferred = self.deferred = self.deferred_spare or DeferredReplies()
        deferred.slots.append(slot)  # add_waiting's body: one call less a job

    def defer_all(self, slots: list[ReplySlot]) -> None:
        """defer for each of `slots`, in their order (a run of one client's ADDJOBs)."""
        deferred = self.deferred
        if deferred is None:
            deferred = self.deferred = self.deferred_spare or DeferredReplies()
        deferred.slots.extend(slots)

    def write_filled(self, data: bytes) -> None:
        """Write the replies a batch filled (DeferredReplies.fill, from
        CoreEffects._deliver_replies); once nothing is owed, run what waited. One call
        for both: every confirmed ADDJOB comes here."""
        if self.server.reply_gate is None:
            # Now, not at the end of the turn: a batch's replies already leave back to
            # back, and a client answered early is back in time for the turn's next run.
            self.send_now(data)
        else:
            self.write(data)
        deferred = self.deferred
        if deferred is not None and not deferred.slots:
            self.deferred = None
            self.deferred_spare = deferred
            if self.pending:
                self.resume_after_block()
