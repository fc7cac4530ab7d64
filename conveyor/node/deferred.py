"""Replies that come later, in request order: pipelined synchronous ADDJOBs in a cluster.

Disque blocks a client whose ADDJOB waits for its copies, so a client pipelining ADDJOBs
gets one replicated at a time. Here each such ADDJOB leaves a `ReplySlot` in its
connection's `DeferredReplies` and the client's next ADDJOBs run at once: their copies
travel together (one bus write per peer for the whole pipeline). Replies leave in request
order: a slot filled early waits for the ones before it.

While slots are outstanding only ADDJOBs run; any other command waits (with the
connection's other pipelined requests) until every slot has been answered, so that no
reply can overtake one still owed. At most MAX_OUTSTANDING slots per connection: past
that, requests wait too.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conveyor.node.connection import Connection

MAX_OUTSTANDING = 1024
# How clients spell it: found without lowering a copy of the name.
ADDJOB_SPELLINGS = frozenset((b"ADDJOB", b"addjob"))


class ReplySlot:
    """One reply owed to `conn`; `value` is None until it is known."""

    __slots__ = ("conn", "job_id", "value")

    def __init__(self, conn: Connection, job_id: bytes = b"", value: bytes | None = None) -> None:
        self.conn = conn
        self.job_id = job_id  # the job waiting for its copies (b"" for a ready reply)
        self.value = value


class DeferredReplies:
    __slots__ = ("slots",)

    def __init__(self) -> None:
        self.slots: deque[ReplySlot] = deque()

    def admits(self, request: list[bytes]) -> bool:
        """May this request run now, behind the replies still owed?"""
        # Ready replies count too: behind one slot still owed, a flood of ASYNC ADDJOBs
        # would otherwise pile up replies outside the output-buffer accounting.
        name = request[0]
        return len(self.slots) < MAX_OUTSTANDING and (
            name in ADDJOB_SPELLINGS or (len(name) == 6 and name.lower() == b"addjob")
        )

    def add_waiting(self, slot: ReplySlot) -> None:
        self.slots.append(slot)

    def add_ready(self, conn: Connection, value: bytes) -> None:
        self.slots.append(ReplySlot(conn, b"", value))

    def fill(self, slot: ReplySlot, value: bytes) -> bytes:
        """Give `slot` its value; returns the replies now ready to go, in order."""
        if slot.value is None:
            slot.value = value
        slots = self.slots
        if not slots or slots[0].value is None:
            return b""
        first: bytes = slots.popleft().value  # type: ignore[assignment]
        if not slots or slots[0].value is None:
            return first  # the usual case: copies are confirmed in request order
        ready = [first]
        while slots and slots[0].value is not None:
            ready.append(slots.popleft().value)  # type: ignore[arg-type]
        return b"".join(ready)

    def waiting_jobs(self) -> list[bytes]:
        return [slot.job_id for slot in self.slots if slot.value is None]
