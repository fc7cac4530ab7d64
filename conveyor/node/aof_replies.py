"""Replies held back by the AOF until what they answer is on disk (a mixin of AofDriver).

While replies are gated (node/aof.py sets `server.reply_gate`), `Connection.write`
hands every reply, and every close, to `hold`; `release` sends them in order. A reply
is in one of three lists, oldest first:

- `_inflight`: covered by the fsync running now (`always`);
- `_stuck`: it may answer a command whose records a failed write still holds. Its
  client is not read until the disk takes them again or replies are no longer gated
  (appendonly no), so what it pipelines meanwhile waits in its socket, not in the node;
- `waiting`: for the end of the round's write, and with `always` for the next fsync.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conveyor.node.connection import Connection
    from conveyor.node.server import Server

Held = tuple["Connection", "bytes | None"]  # a reply, or None: close after the replies


class HeldReplies:
    server: Server

    def _init_held(self) -> None:
        self.waiting: list[Held] = []
        self._inflight: list[Held] = []
        self._stuck: list[Held] = []
        self._stuck_conns: set[int] = set()

    def hold(self, conn: Connection, data: bytes | None) -> None:
        """A reply (or a close) to send once what came before it is on disk."""
        if not self.waiting:
            self._schedule_flush()
        self.waiting.append((conn, data))

    def release(self, held: list[Held]) -> None:
        if not held:
            return
        items = list(held)
        held[:] = []
        for conn, data in items:
            if data is None:
                conn.close_now()
            else:
                conn.send(data)

    def release_all(self) -> None:
        """Send everything held, oldest first (one client may have replies in all three
        lists), and read the stuck clients again: replies are no longer gated."""
        self.release(self._inflight)
        self.release(self._unstick())
        self.release(self.waiting)

    def _hold_back_for_failure(self) -> None:
        # Held replies may answer commands whose records did not reach the file: they
        # wait for the retry. Replies of other clients held since do not depend on it
        # (write commands are refused with MISCONF meanwhile).
        if not self._stuck:
            self._hold_stuck(self.waiting)
            self.waiting[:] = []
        else:
            free = [item for item in self.waiting if id(item[0]) not in self._stuck_conns]
            self._stuck.extend(item for item in self.waiting if id(item[0]) in self._stuck_conns)
            self.waiting[:] = []
            self.release(free)
        self._arm_retry()

    def _hold_stuck(self, held: list[Held]) -> None:
        # Their clients are not read until the disk takes the records again: what they
        # pipeline meanwhile would otherwise queue behind these replies without bound.
        self._stuck.extend(held)
        for conn, _ in held:
            if id(conn) not in self._stuck_conns:
                self._stuck_conns.add(id(conn))
                conn.hold_reading(True)

    def _unstick(self) -> list[Held]:
        """The stuck replies, taken out; their clients are read again."""
        stuck = self._stuck
        for conn in {id(conn): conn for conn, _ in stuck}.values():
            conn.hold_reading(False)
        self._stuck = []
        self._stuck_conns = set()
        return stuck

    def _schedule_flush(self) -> None:
        raise NotImplementedError

    def _arm_retry(self) -> None:
        raise NotImplementedError
