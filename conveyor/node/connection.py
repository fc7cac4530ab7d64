"""One client connection: bytes in, requests through the server's command table, replies out.

A `Connection` parses its bytes, runs each request and leaves the replies for the end of
the loop's turn, which writes each client's in a single `write` (node/turn_replies.py,
node/output.py), so pipelined clients cost one syscall per batch and the clients of one
turn are written to back to back. While its GETJOB is
blocked, or its ADDJOBs' replies wait for their copies, later requests wait in `pending`
and run in order once it is answered (node/held.py).

Client buffers are bounded and counted (server.py keeps the totals): the output the
client has not read yet (`obuf`, tracked only while the transport holds more than its
high-water mark, i.e. between `pause_writing` and `resume_writing`, so a client that
reads its replies costs one attribute test per write) and the bytes of requests it has
not finished sending or that wait behind a blocked GETJOB (`qbuf`, looked at once per
read).

Nothing per connection is made before it is needed: the parser (a hiredis reader with its
ctypes views) on the first read, the `pending` deque on the first request held. Idle
connections then cost half as much memory, and a burst of them spreads fewer objects over
Python's small-object arenas, fewer of which stay pinned by the few objects that outlive
the burst (see docs/operations.md, Connections). Neither costs the hot path a test.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import deque
from collections.abc import Iterator
from functools import partial
from itertools import chain
from typing import TYPE_CHECKING

from conveyor.core.waiters import Waiter
from conveyor.node.addjob_runs import AddJobRun, gather_runs, plan_run, run_addjobs
from conveyor.node.deferred import DeferredReplies
from conveyor.node.held import NOTHING_HELD, HeldWork
from conveyor.node.keepalive import set_keepalive
from conveyor.node.output import Output
from conveyor.node.reading import NO_PARSER_YET, FirstRead, raising
from conveyor.protocol.requests import ProtocolError, RequestParser
from conveyor.protocol.resp import error

if TYPE_CHECKING:
    from conveyor.node.server import Server

log = logging.getLogger("conveyor.node")

# Replies of one read are written together, or as soon as they pass this size.
# One turn of a client's pipelined requests (see Connection._run).
TURN_REQUESTS = 1000
TURN_REPLY_BYTES = 1 << 20
# A read's copies are counted for the mid-read send (SendPolicy.send_if_many) after
# this many ADDJOBs that wait for them: a long pipeline's still go every MID_READ_ACTIONS.
MID_READ_CHECK_JOBS = 8


def now_ms() -> int:
    # A float factor: float * int is not specialised by the interpreter, float * float is.
    return int(time.time() * 1000.0)


class Connection(HeldWork, Output, asyncio.Protocol):
    __slots__ = (
        "addr",
        "auth_failures",
        "authenticated",
        "closed",
        "created_ms",
        "deferred",
        "deferred_spare",
        "id",
        "in_turn",
        "laddr",
        "last_io_ms",
        "lib_name",
        "lib_ver",
        "name",
        "next_turn",
        "obuf",
        "obuf_soft_since_ms",
        "output_backlogged",
        "parser",
        "partial_bytes",
        "pending",
        "pending_bytes",
        "protocol",
        "qbuf",
        "reading_held",
        "server",
        "transport",
        "unsent",
        "waiter",
    )

    def __init__(self, server: Server) -> None:
        self.server = server
        self.authenticated = not server.config["requirepass"]
        # Made on the first read (see _NoParserYet): an idle connection has none.
        self.parser: RequestParser = NO_PARSER_YET
        self.auth_failures = 0  # failed AUTH / HELLO AUTH (cut off at a limit)
        self.transport: asyncio.Transport | None = None
        self.waiter: Waiter | None = None  # set while blocked in GETJOB
        # Replies owed to ADDJOBs waiting for their copies (node/deferred.py).
        self.deferred: DeferredReplies | None = None
        # The last one, emptied: kept for the next (at -P 1 every ADDJOB defers its reply).
        self.deferred_spare: DeferredReplies | None = None
        # Requests pipelined behind a blocked GETJOB, run in order once it is answered
        # (the shared empty NOTHING_HELD until the first one: most connections hold none).
        self.pending: deque[list[bytes]] = NOTHING_HELD
        self.pending_bytes = 0  # their size, part of qbuf
        self.closed = False
        # The rest of a read, see _run.
        self.next_turn: Iterator[list[bytes] | AddJobRun] | None = None
        # An ADDJOB of this client waits for the end of the loop's turn (node/turn_adds.py).
        self.in_turn = False
        self.id = 0
        self.name = b""
        self.addr = ""
        self.laddr = ""
        self.protocol = 2  # RESP version, switched by HELLO 3
        self.lib_name = b""
        self.lib_ver = b""
        self.created_ms = now_ms()
        self.last_io_ms = self.created_ms
        # Buffers, as counted in the server's totals (see the module docstring).
        self.partial_bytes = 0  # the request the client has not finished sending
        self.qbuf = 0  # partial_bytes + pending_bytes, as counted in the server's total
        self.obuf = 0  # unsent output, counted while output_backlogged
        self.output_backlogged = False  # between pause_writing and resume_writing
        # Replies left for the end of the loop's turn (node/turn_replies.py).
        self.unsent: list[bytes] | None = None
        self.obuf_soft_since_ms = 0  # when obuf went over the soft limit (0: it is not)
        # Not read while replies it is owed wait for a failing disk (node/aof.py).
        self.reading_held = False

    # -- asyncio callbacks -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        try:
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
            if (
                keepalive_s
                and sock is not None
                and sock.family in (socket.AF_INET, socket.AF_INET6)
            ):
                set_keepalive(sock, keepalive_s)
        except OSError as exc:  # e.g. the peer is already gone: the connection still counts
            log.debug("connection set-up: %s", exc)
        self.server.client_connected(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.client_disconnected(self)
        self.transport = None  # break the protocol <-> transport cycle (see gc_policy)

    def pause_writing(self) -> None:
        # The transport holds more unsent output than its high-water mark: count it.
        self.output_backlogged = True

    def resume_writing(self) -> None:
        self.output_backlogged = False
        if self.obuf:
            self.server.output_drained(self)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return  # closing after a protocol error: what follows is dropped unread
        server = self.server
        if self.in_turn:  # its ADDJOB left for the end of the turn runs before this read
            server.turn_adds.run()
        server.stats.net_input_bytes += len(data)
        server.now = self.last_io_ms = now_ms()
        # find(), not `in`: bytes' `in` tries its argument as an int first and formats
        # the TypeError that fails (~2k instructions a read).
        clustered = server.core.cluster_size > 1 and self.authenticated
        single = clustered and data.find(b"\r\n*") < 0
        if single:  # one request at most (one array header): an ADDJOB runs with the turn's
            request = self.parser.feed_one(data)  # None for anything unusual, or a first read
            if request is not None:
                if not server.turn_adds.offer(self, request):
                    self._run(iter((request,)))
                return
        try:
            requests = self.parser.feed(data)
        except FirstRead:  # raised before any request ran: nothing to undo
            # Until the client authenticates, Redis 7's tighter request limits apply.
            self.parser = RequestParser(
                server.config["proto-max-bulk-len"], authenticated=self.authenticated
            )
            requests = self.parser.feed(data)
        if single:
            self._run_single(requests)
            return
        if clustered:
            # A producer's pipelined ADDJOBs run a few dozen at a time (node/addjob_runs.py).
            # Only for a read that seems to hold several requests (a second array header):
            # gathering costs a read of one request more than it saves.
            requests = gather_runs(requests, partial(plan_run, self))
        self._run(requests)

    def _run_single(self, requests: Iterator[list[bytes]]) -> None:
        """A read that seems to hold one request at most (one array header): an ADDJOB
        that would run now waits for the end of the turn, to run with the others of
        this turn (node/turn_adds.py); anything else runs as `_run` runs it."""
        server = self.server
        try:
            for request in requests:
                if server.turn_adds.offer(self, request):
                    continue
                if self.in_turn:  # a request after the ADDJOB left (inline): it runs first
                    server.turn_adds.run()
                self._run(chain((request,), requests))
                return
        except ProtocolError as exc:
            if self.in_turn:  # its ADDJOB is answered before the error
                server.turn_adds.run()
            self._run(raising(exc))
            return
        # Nothing ran: no effects to carry out (after_io) before the turn's run.
        partial = self.parser.buffered_bytes()
        if partial != self.partial_bytes:
            self.partial_bytes = partial
            server.query_buffer_changed(self)

    def _run(self, requests: Iterator[list[bytes] | AddJobRun]) -> None:
        """Run the requests of one read, at most one turn's worth (TURN_REQUESTS, or
        TURN_REPLY_BYTES of replies) at a time: a client pipelining thousands of costly
        requests in one read yields to the others between turns instead of stalling
        them, and meets its output-buffer limit a turn at a time."""
        server = self.server
        out: list[bytes] = []
        out_bytes = 0
        budget = TURN_REQUESTS
        cluster = server.cluster
        sent_at = cluster.pending_actions()  # this read's copies are counted from here
        owed = 0  # this read's ADDJOBs waiting for their copies, since the last check
        try:
            for request in requests:
                deferred = self.deferred
                if type(request) is AddJobRun:
                    waiting, out_bytes = run_addjobs(self, request, out, out_bytes)
                    owed += waiting
                    if owed >= MID_READ_CHECK_JOBS:
                        owed = 0
                        sent_at = cluster.send_if_many(sent_at)
                    budget -= len(request)
                elif (
                    self.waiter is not None
                    or self.pending
                    or (deferred is not None and not deferred.admits(request))
                ):
                    self.hold(request)
                else:
                    reply = server.execute(self, request)
                    if reply is not None:
                        if deferred is not None:
                            deferred.add_ready(self, reply)  # behind the replies still owed
                        else:
                            out.append(reply)
                            out_bytes += len(reply)
                    else:
                        if deferred is None and self.deferred is not None and out:
                            # This ADDJOB's reply comes later: what came before it goes now.
                            self.write(b"".join(out))
                            out.clear()
                            out_bytes = 0
                        owed += 1
                        if owed == MID_READ_CHECK_JOBS:  # checked every few: two calls less a job
                            owed = 0
                            sent_at = cluster.send_if_many(sent_at)
                    budget -= 1
                if self.closed:
                    break
                if budget <= 0 or out_bytes > TURN_REPLY_BYTES:
                    # The rest of this read runs on a later turn of the event loop; no
                    # new bytes are read before it has (the parser is mid-stream).
                    self.write(b"".join(out))
                    self._yield_turn(requests)
                    server.after_io()
                    return
        except ProtocolError as exc:
            out.append(error(f"ERR {exc}"))
            self.write(b"".join(out))
            self.close_after_error()
        else:
            if server.core.replies:
                # Clients this read woke (a consumer blocked in GETJOB) are answered before
                # this one: each write wakes its reader, and the woken one is the waiter.
                server.deliver_replies()
            if out:
                self.write(b"".join(out))
            # Once per read: does the parser hold the start of a request?
            partial = self.parser.buffered_bytes()
            if partial != self.partial_bytes:
                self.partial_bytes = partial
                server.query_buffer_changed(self)
        # Even after a protocol error: the requests before it may have woken others.
        server.after_io()

    def run_requests(self, requests: tuple[list[bytes], ...]) -> None:
        """Run requests of this client left for later, as its read would have run them."""
        self._run(iter(requests))

    def _yield_turn(self, requests: Iterator[list[bytes] | AddJobRun]) -> None:
        transport = self.transport
        if transport is None or self.closed or transport.is_closing():
            return
        if transport.is_reading():
            transport.pause_reading()
        self.next_turn = requests
        asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        requests = self.next_turn
        self.next_turn = None
        transport = self.transport
        if requests is None or transport is None or self.closed:
            return
        self.server.now = now_ms()
        self._run(requests)
        # Reading resumes after the read's last turn (a new turn set next_turn again).
        if (
            self.next_turn is None
            and not self.reading_held
            and not self.closed
            and not transport.is_closing()
        ):
            transport.resume_reading()

    def hold_reading(self, held: bool) -> None:
        """Stop (or go back to) reading this client: its replies wait for the disk, and
        what it would send meanwhile must not pile up behind them."""
        self.reading_held = held
        transport = self.transport
        if transport is None or self.closed or transport.is_closing():
            return
        if held and transport.is_reading():
            transport.pause_reading()
        elif not held and self.next_turn is None and not transport.is_reading():
            transport.resume_reading()

    # -- helpers ---------------------------------------------------------------------------
    def set_authenticated(self, authenticated: bool) -> None:
        self.authenticated = authenticated
        self.parser.authenticated = authenticated
