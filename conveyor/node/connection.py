"""One client connection: bytes in, requests through the server's command table, replies out.

A `Connection` parses its bytes, runs each request and writes all replies of one read in
a single `write`, so pipelined clients cost one syscall per batch. While its GETJOB is
blocked, later requests wait in `pending` and run in order once it is answered.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import deque
from typing import TYPE_CHECKING

from conveyor.core.waiters import Waiter
from conveyor.protocol.resp import ProtocolError, RequestParser, error

if TYPE_CHECKING:
    from conveyor.node.server import Server


def now_ms() -> int:
    return int(time.time() * 1000)


class Connection(asyncio.Protocol):
    __slots__ = (
        "addr",
        "authenticated",
        "closed",
        "created_ms",
        "id",
        "laddr",
        "last_io_ms",
        "lib_name",
        "lib_ver",
        "name",
        "parser",
        "pending",
        "protocol",
        "server",
        "transport",
        "waiter",
    )

    def __init__(self, server: Server) -> None:
        self.server = server
        self.parser = RequestParser(server.config["proto-max-bulk-len"])
        self.transport: asyncio.Transport | None = None
        self.authenticated = not server.config["requirepass"]
        self.waiter: Waiter | None = None  # set while blocked in GETJOB
        # Requests pipelined behind a blocked GETJOB, run in order once it is answered.
        self.pending: deque[list[bytes]] = deque()
        self.closed = False
        self.id = 0
        self.name = b""
        self.addr = ""
        self.laddr = ""
        self.protocol = 2  # RESP version, switched by HELLO 3
        self.lib_name = b""
        self.lib_ver = b""
        self.created_ms = now_ms()
        self.last_io_ms = self.created_ms

    # -- asyncio callbacks -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        if isinstance(peer, tuple):
            self.addr = f"{peer[0]}:{peer[1]}"
            if isinstance(local, tuple):
                self.laddr = f"{local[0]}:{local[1]}"
        else:  # a Unix socket, named as Redis does in CLIENT LIST
            self.addr = self.laddr = f"{self.server.config['unixsocket']}:0"
        keepalive_s = self.server.config["tcp-keepalive"]
        sock = transport.get_extra_info("socket")
        if keepalive_s and sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            if hasattr(socket, "TCP_KEEPIDLE"):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, keepalive_s)
        self.server.client_connected(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.client_disconnected(self)
        self.transport = None  # break the protocol <-> transport cycle (see gc_policy)

    def data_received(self, data: bytes) -> None:
        server = self.server
        server.stats.net_input_bytes += len(data)
        server.now = self.last_io_ms = now_ms()
        out: list[bytes] = []
        try:
            for request in self.parser.feed(data):
                if self.waiter is not None or self.pending:
                    self.pending.append(request)
                    continue
                reply = server.execute(self, request)
                if reply is not None:
                    out.append(reply)
                if self.closed:
                    break
        except ProtocolError as exc:
            out.append(error(f"ERR {exc}"))
            self.write(b"".join(out))
            self.close()
        else:
            if out:
                self.write(b"".join(out))
        # Even after a protocol error: the requests before it may have woken others.
        server.after_io()

    # -- helpers ---------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            # A reply is activity too: a consumer just served after a long GETJOB is not idle.
            self.last_io_ms = self.server.now
            self.server.stats.net_output_bytes += len(data)
            self.transport.write(data)

    def close(self) -> None:
        """Close after the replies already written have been sent."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def resume_after_block(self) -> None:
        """The blocked GETJOB was answered: run what was pipelined behind it."""
        out: list[bytes] = []
        while self.pending and self.waiter is None and not self.closed:
            reply = self.server.execute(self, self.pending.popleft())
            if reply is not None:
                out.append(reply)
        if out:
            self.write(b"".join(out))
