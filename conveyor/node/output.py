"""How a connection's bytes leave it: replies, and the ways it closes (a Connection mixin).

A reply is written at the end of the loop's turn (`send`, node/turn_replies.py), or at
once behind anything still waiting (`send_now`); with `appendfsync always`, `write`
hands it to the AOF, which sends it once what came before it is on disk (node/aof.py).
Every way of closing writes what waits for the end of the turn first, except `abort`,
which drops it with the rest of the unsent output.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conveyor.node.server import Server

# How long a connection closing after a protocol error waits for its client to close.
LINGER_S = 2.0


class Output:
    """Writing and closing (fields set by Connection)."""

    __slots__ = ()

    if TYPE_CHECKING:
        server: Server
        closed: bool
        transport: asyncio.Transport | None
        unsent: list[bytes] | None
        last_io_ms: int
        output_backlogged: bool

    def write(self, data: bytes) -> None:
        server = self.server
        if server.reply_gate is not None:
            # appendfsync always: sent once what came before it is on disk (node/aof.py).
            server.aof.hold(self, data)  # type: ignore[arg-type]
            return
        self.send(data)

    def send(self, data: bytes) -> None:
        """Write `data` at the end of the loop's turn (node/turn_replies.py)."""
        transport = self.transport
        if transport is not None and not transport.is_closing():
            server = self.server
            # A reply is activity too: a consumer just served after a long GETJOB is not idle.
            self.last_io_ms = server.now
            server.stats.net_output_bytes += len(data)
            unsent = self.unsent
            if unsent is None:
                self.unsent = [data]
                server.turn_replies.owe(self)  # type: ignore[arg-type]
            else:
                unsent.append(data)

    def send_now(self, data: bytes) -> None:
        """Write `data` now, or behind what waits for the end of the turn if anything does."""
        transport = self.transport
        if self.unsent is not None or transport is None or transport.is_closing():
            self.send(data)
            return
        self.last_io_ms = self.server.now
        self.server.stats.net_output_bytes += len(data)
        transport.write(data)
        if self.output_backlogged:
            self.server.output_grew(self)  # type: ignore[arg-type]

    def write_unsent(self) -> None:
        """Write what waited for the end of the turn, in one write."""
        unsent = self.unsent
        if unsent is None:
            return
        self.unsent = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        try:
            transport.write(unsent[0] if len(unsent) == 1 else b"".join(unsent))
        except RuntimeError:  # written after write_eof (close_after_error): nobody reads it
            return
        if self.output_backlogged:
            self.server.output_grew(self)  # type: ignore[arg-type]

    def close(self) -> None:
        """Close after the replies already written have been sent."""
        self.closed = True
        if self.server.reply_gate is not None:
            self.server.aof.hold(self, None)  # type: ignore[arg-type] # after those held before
            return
        self.close_now()

    def close_after_replies(self) -> None:
        """Run nothing more of this client, and close once the replies of the requests
        run so far are written (QUIT): on the loop's next callback, after this read."""
        self.closed = True
        (self.server.loop or asyncio.get_running_loop()).call_soon(self.close)

    def close_after_error(self) -> None:
        """Close after a protocol error, so that the client reads the error.

        A plain close with the client's next requests still unread makes the kernel send
        RST, and a client that pipelined can then lose the replies before the error.
        Instead: FIN after the replies, drop what still arrives, close when the client
        does (or LINGER_S later).
        """
        self.closed = True
        transport = self.transport
        if self.server.reply_gate is not None or transport is None:
            self.close()
            return
        self.write_unsent()
        try:
            transport.write_eof()
        except (OSError, RuntimeError, NotImplementedError):
            self.close_now()
            return
        asyncio.get_running_loop().call_later(LINGER_S, self.close_now)

    def close_now(self) -> None:
        if self.transport is not None:
            self.write_unsent()
            self.transport.close()

    def abort(self) -> None:
        """Close at once, dropping unsent output (a client over a buffer limit)."""
        self.closed = True
        self.unsent = None
        if self.transport is not None:
            self.transport.abort()
