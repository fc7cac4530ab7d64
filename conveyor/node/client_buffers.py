"""Client buffers: what connections hold for clients, counted, limited and given back.

Connections report their unfinished requests (query buffer) and unsent replies (output
buffer) here. The running totals are part of `used_memory`, and so of maxmemory's check,
through `core.set_client_memory`; `client-output-buffer-limit` and
`client-query-buffer-limit` close a client that goes over, as in Redis. Nothing here runs
for a client that reads its replies and sends whole requests. A mixin of `Server`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from conveyor.node.connection import Connection, now_ms
from conveyor.node.stats import release_free_memory

if TYPE_CHECKING:
    from conveyor.core.node import NodeCore
    from conveyor.node.config import Config
    from conveyor.node.stats import Stats

log = logging.getLogger("conveyor.node")

# Unfinished requests of all clients together may hold this share of maxmemory.
QUERY_TOTAL_PERCENT = 25
# After a client holding this much buffer leaves, free pages go back to the OS (at most
# once per TRIM_DELAY_S).
TRIM_AFTER_BYTES = 1 << 20
TRIM_AFTER_DISCONNECTS = 256
TRIM_DELAY_S = 0.5


class ClientBuffers:
    """The Server's client-buffer accounting (the fields are set by _init_client_buffers)."""

    config: Config
    core: NodeCore
    stats: Stats
    clients: dict[int, Connection]
    loop: asyncio.AbstractEventLoop | None
    now: int

    def _init_client_buffers(self) -> None:
        self.client_query_bytes = 0
        self.client_output_bytes = 0
        self._query_holders: dict[int, Connection] = {}  # qbuf > 0
        self._output_backlog: dict[int, Connection] = {}  # output over the high-water mark
        self._output_timer: asyncio.TimerHandle | None = None
        self._trim_timer: asyncio.TimerHandle | None = None
        self._disconnects = 0  # since the last trim they asked for
        self._freed_since_trim = 0  # buffer bytes of clients gone since the last trim
        self.output_limits = (0, 0, 0)  # normal class: hard bytes, soft bytes, soft ms
        self.query_limit = 0  # client-query-buffer-limit
        self.query_total_limit = 0  # all clients' query buffers together
        self._update_client_limits()

    def _update_client_limits(self) -> None:
        hard, soft, seconds = self.config.output_buffer_limit("normal")
        self.output_limits = (hard, soft, seconds * 1000)
        self.query_limit = self.config["client-query-buffer-limit"]
        self.query_total_limit = self.config["maxmemory"] * QUERY_TOTAL_PERCENT // 100

    def _forget_buffers(self, conn: Connection) -> None:
        """A client is gone: its buffers leave the totals."""
        self._disconnects += 1
        if self._disconnects >= TRIM_AFTER_DISCONNECTS:
            # A burst of connections gone (thousands of idle ones): their objects and
            # buffers are freed, so hand the pages back as after one big client.
            self._disconnects = 0
            self._schedule_trim()
        if conn.qbuf or conn.obuf:
            # Counted across clients: 200 clients leaving with 1 MiB - 1 each free as
            # much as one with 200 MiB.
            self._freed_since_trim += conn.qbuf + conn.obuf
            big = self._freed_since_trim >= TRIM_AFTER_BYTES
            self.client_query_bytes -= conn.qbuf
            self.client_output_bytes -= conn.obuf
            conn.qbuf = conn.obuf = conn.partial_bytes = conn.pending_bytes = 0
            self._query_holders.pop(conn.id, None)
            self._output_backlog.pop(conn.id, None)
            self.core.set_client_memory(self.client_query_bytes + self.client_output_bytes)
            if big:
                # Its buffers are freed once the transport goes: then hand the pages back.
                self._schedule_trim()

    def client_buffer_bytes(self) -> int:
        return self.client_query_bytes + self.client_output_bytes

    def client_buffer_peaks(self) -> tuple[int, int]:
        """The largest query buffer and the largest pending output of any client now."""
        if self._output_backlog:
            self._refresh_output_buffers()
        biggest_in = max((conn.qbuf for conn in self._query_holders.values()), default=0)
        biggest_out = max((conn.obuf for conn in self._output_backlog.values()), default=0)
        return biggest_in, biggest_out

    def query_buffer_changed(self, conn: Connection) -> None:
        """conn's unfinished request or held requests changed size: count, then enforce
        client-query-buffer-limit and the total cap."""
        qbuf = conn.partial_bytes + conn.pending_bytes
        grown = qbuf - conn.qbuf
        if not grown or conn.id not in self.clients:
            return
        conn.qbuf = qbuf
        self.client_query_bytes += grown
        if qbuf:
            self._query_holders[conn.id] = conn
        else:
            self._query_holders.pop(conn.id, None)
        self.core.set_client_memory(self.client_query_bytes + self.client_output_bytes)
        if grown > 0 and not conn.closed:
            if self.query_limit and qbuf > self.query_limit:
                reason = "max query buffer length"
            elif (
                self.query_total_limit
                and self.client_query_bytes > self.query_total_limit
                # One request alone is the per-client limit's business: it may be
                # received whole (and refused with -OOM if it does not fit).
                and len(self._query_holders) > 1
            ):
                reason = "the query buffers' total limit"
            else:
                return
            log.warning(
                "Closing client that reached %s: %s qbuf=%d (all clients: %d)",
                reason,
                self._describe(conn),
                qbuf,
                self.client_query_bytes,
            )
            self.stats.client_query_buffer_limit_disconnections += 1
            conn.abort()

    def output_grew(self, conn: Connection) -> None:
        """A write left conn's output over the transport's high-water mark: count it and
        enforce client-output-buffer-limit."""
        transport = conn.transport
        if transport is None or conn.id not in self.clients:
            return
        self._set_output_size(conn, transport.get_write_buffer_size())
        if self._output_timer is None and self.loop is not None:
            self._output_timer = self.loop.call_later(1.0, self._check_output_buffers)

    def output_drained(self, conn: Connection) -> None:
        """conn's output fell below the transport's low-water mark: no longer counted."""
        self._output_backlog.pop(conn.id, None)
        self.client_output_bytes -= conn.obuf
        conn.obuf = 0
        conn.obuf_soft_since_ms = 0
        self.core.set_client_memory(self.client_query_bytes + self.client_output_bytes)

    def _set_output_size(self, conn: Connection, size: int) -> None:
        self.client_output_bytes += size - conn.obuf
        conn.obuf = size
        self._output_backlog[conn.id] = conn
        self.core.set_client_memory(self.client_query_bytes + self.client_output_bytes)
        if not conn.closed and self.output_over_limit(conn, size):
            log.warning(
                "Client %s omem=%d scheduled to be closed ASAP for overcoming of output "
                "buffer limits.",
                self._describe(conn),
                size,
            )
            self.stats.client_output_buffer_limit_disconnections += 1
            conn.abort()  # drops the unsent output; connection_lost uncounts it

    def _describe(self, conn: Connection) -> str:
        """The client as CLIENT LIST shows it, for the log."""
        from conveyor.node.cmd_client import client_line

        try:
            return client_line(self, conn)  # type: ignore[arg-type]  # the Server it mixes into
        except Exception:  # a log line must not cost the limit
            return f"id={conn.id} addr={conn.addr}"

    def output_over_limit(self, conn: Connection, size: int) -> bool:
        """Redis' checkClientOutputBufferLimits: over the hard limit, or over the soft
        limit continuously for longer than its seconds (0 = that limit is off)."""
        hard, soft, soft_ms = self.output_limits
        if hard and size > hard:
            return True
        if soft and size > soft:
            if not conn.obuf_soft_since_ms:
                conn.obuf_soft_since_ms = self.now or 1
                return False
            return self.now - conn.obuf_soft_since_ms > soft_ms
        conn.obuf_soft_since_ms = 0
        return False

    def _refresh_output_buffers(self) -> None:
        """Re-read the pending output of the clients counted (it shrinks as they read)."""
        for conn in list(self._output_backlog.values()):
            transport = conn.transport
            if transport is None or transport.is_closing():
                continue
            self._set_output_size(conn, transport.get_write_buffer_size())

    def _schedule_trim(self) -> None:
        if self._trim_timer is None and self.loop is not None:
            self._trim_timer = self.loop.call_later(TRIM_DELAY_S, self._release_memory)

    def _release_memory(self) -> None:
        self._trim_timer = None
        self._freed_since_trim = 0
        release_free_memory()

    def _check_output_buffers(self) -> None:
        """Once a second while some client has output backlogged: the soft limit's clock
        runs without new writes too (Redis checks in clientsCron)."""
        self._output_timer = None
        self.now = now_ms()
        self._refresh_output_buffers()
        if self._output_backlog and self.loop is not None:
            self._output_timer = self.loop.call_later(1.0, self._check_output_buffers)
