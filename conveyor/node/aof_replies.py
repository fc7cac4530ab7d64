"""Replies held back by the AOF until what they answer is on disk (a mixin of AofDriver).

While replies are gated (node/aof.py sets `server.reply_gate`), `Connection.write`
hands every reply, and every close, to `hold`; `release` sends them in order. A reply
is in one of three lists, oldest first:

- `_inflight`: covered by the fsync running now (`always`);
- `_stuck`: it may answer a command whose records a failed write still holds. Its
  client is not read until the disk takes them again or replies are no longer gated
  (appendonly no), so what it pipelines meanwhile waits in its socket, not in the node;
- `waiting`: for the end of the round's write, and with `always` for the next fsync.

With `always` a client that pipelines without reading could pile up held replies for
as long as an fsync takes: they are its output as much as what waits in its socket's
buffer, so they count towards its `client-output-buffer-limit` (per client, only while
a limit is set), and a client over it is dropped as for unread output.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conveyor.node.connection import Connection
    from conveyor.node.server import Server

log = logging.getLogger("conveyor.node")

Held = tuple["Connection", "bytes | None"]  # a reply, or None: close after the replies


class HeldReplies:
    server: Server

    def _init_held(self) -> None:
        self.waiting: list[Held] = []
        self._inflight: list[Held] = []
        self._stuck: list[Held] = []
        self._stuck_conns: set[int] = set()
        # Replies may wait for more than the round's write (`always`): count them.
        self.held_across_fsyncs = False
        self._held_bytes: dict[int, int] = {}  # per client (id of its connection)

    def hold(self, conn: Connection, data: bytes | None) -> None:
        """A reply (or a close) to send once what came before it is on disk."""
        if not self.waiting:
            self._schedule_flush()
        self.waiting.append((conn, data))
        if data is not None and self.held_across_fsyncs:
            limits = self.server.output_limits
            if limits[0] or limits[1]:
                self._count_held(conn, len(data))

    def _count_held(self, conn: Connection, size: int) -> None:
        key = id(conn)
        held = self._held_bytes.get(key, 0) + size
        self._held_bytes[key] = held
        output = conn.obuf + held  # obuf: what its socket's buffer holds beyond the mark
        # The limit's own test (hard, or soft for its seconds) on all of its output.
        if not conn.closed and self.server.output_over_limit(conn, output):
            log.warning(
                "Client id=%d addr=%s omem=%d (replies waiting for the AOF fsync) scheduled "
                "to be closed ASAP for overcoming of output buffer limits.",
                conn.id,
                conn.addr,
                output,
            )
            self.server.stats.client_output_buffer_limit_disconnections += 1
            conn.abort()  # it is not run any more; its held replies go nowhere

    def release(self, held: list[Held]) -> None:
        if not held:
            return
        items = list(held)
        held[:] = []
        counted = self._held_bytes
        for conn, data in items:
            if data is None:
                conn.close_now()
                continue
            conn.send(data)
            if counted:
                key = id(conn)
                left = counted.get(key, 0) - len(data)
                if left > 0:
                    counted[key] = left
                else:  # all sent (or held before the count began): its entry goes
                    counted.pop(key, None)

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
