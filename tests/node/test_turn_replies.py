"""Replies leave at the end of the loop's turn (node/turn_replies.py), in-process.

Every reply written during a turn waits in its connection's `unsent` list; the turn's end
writes each connection's list in one write, connections in the order they were first
written to. A connection's bytes never change order, a close writes what waits first, an
abort or a lost connection drops it, and nothing is kept once the turn is over. Driven
with recording transports and the turn's end called by hand, so turns are stepped, not
timed; the real loop runs it with call_soon (every other node test).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from conveyor.node.connection import Connection
from conveyor.node.server import Server
from tests.node.test_turn_adds import RecordingTransport, with_server


def client(server: Server, log: list[tuple[str, bytes]], name: str) -> Connection:
    transport = RecordingTransport()

    def write(data: bytes) -> None:
        if transport.eof:  # as uvloop's transports do
            raise RuntimeError("Cannot call write() after write_eof()")
        log.append((name, data))

    transport.write = write  # type: ignore[method-assign]
    transport.abort = lambda: None  # type: ignore[attr-defined]
    transport.closed = False  # type: ignore[attr-defined]

    def close() -> None:
        transport.closed = True  # type: ignore[attr-defined]

    transport.close = close  # type: ignore[method-assign]
    conn = Connection(server)
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn


def nothing_kept(server: Server, *conns: Connection) -> bool:
    return not server.turn_replies.connections and all(c.unsent is None for c in conns)


def test_the_replies_of_a_turn_leave_at_its_end_one_write_a_client(tmp_path: Path) -> None:
    async def scenario(server: Server) -> None:
        log: list[tuple[str, bytes]] = []
        first, second = client(server, log, "first"), client(server, log, "second")
        second.data_received(b"PING a\r\n")
        first.data_received(b"PING b\r\n")
        second.data_received(b"PING c\r\nPING d\r\n")
        assert log == [] and server.turn_replies.scheduled
        await asyncio.sleep(0)  # the loop's turn ends: its scheduled flush runs
        assert log == [("second", b"$1\r\na\r\n$1\r\nc\r\n$1\r\nd\r\n"), ("first", b"$1\r\nb\r\n")]
        assert nothing_kept(server, first, second) and not server.turn_replies.scheduled
        first.data_received(b"PING e\r\n")  # the next turn schedules its own
        await asyncio.sleep(0)
        assert log[-1] == ("first", b"$1\r\ne\r\n")

    with_server(tmp_path, scenario)


def test_a_write_now_goes_at_once_or_behind_what_waits(tmp_path: Path) -> None:
    async def scenario(server: Server) -> None:
        log: list[tuple[str, bytes]] = []
        conn = client(server, log, "c")
        conn.send_now(b"+one\r\n")
        assert log == [("c", b"+one\r\n")]  # nothing waited: written at once
        conn.send(b"+two\r\n")
        conn.send_now(b"+three\r\n")  # must not overtake +two
        assert log == [("c", b"+one\r\n")]
        server.turn_replies.flush()
        assert log == [("c", b"+one\r\n"), ("c", b"+two\r\n+three\r\n")]
        assert nothing_kept(server, conn)

    with_server(tmp_path, scenario)


def test_a_close_writes_what_waits_first_and_an_abort_drops_it(tmp_path: Path) -> None:
    async def scenario(server: Server) -> None:
        log: list[tuple[str, bytes]] = []
        closing, aborted = client(server, log, "closing"), client(server, log, "aborted")
        closing.data_received(b"PING x\r\nQUIT\r\nPING z\r\n")
        aborted.data_received(b"PING y\r\n")
        aborted.abort()
        assert closing.closed and log == []  # QUIT ran nothing after it
        await asyncio.sleep(0)  # its close runs, after the read: +OK behind the PING's reply
        assert log == [("closing", b"$1\r\nx\r\n+OK\r\n")]
        assert closing.transport.closed  # type: ignore[union-attr]
        assert nothing_kept(server, closing, aborted)

    with_server(tmp_path, scenario)


def test_a_protocol_error_writes_the_replies_before_the_eof(tmp_path: Path) -> None:
    async def scenario(server: Server) -> None:
        log: list[tuple[str, bytes]] = []
        conn = client(server, log, "c")
        transport = conn.transport
        conn.data_received(b'PING a\r\n"unbalanced\r\n')
        assert log == [("c", b"$1\r\na\r\n-ERR Protocol error: unbalanced quotes in request\r\n")]
        assert transport.eof and conn.closed  # type: ignore[union-attr]
        conn.send(b"+late\r\n")  # nothing may be written after the EOF: dropped, no error
        server.turn_replies.flush()
        assert len(log) == 1 and nothing_kept(server, conn)

    with_server(tmp_path, scenario)


def test_a_client_gone_before_the_turn_ends_costs_nothing(tmp_path: Path) -> None:
    async def scenario(server: Server) -> None:
        log: list[tuple[str, bytes]] = []
        conns = [client(server, log, str(i)) for i in range(50)]
        for conn in conns:
            conn.data_received(b"PING\r\n")
            conn.connection_lost(None)
        assert len(server.turn_replies.connections) == 50
        await asyncio.sleep(0)
        assert log == [] and nothing_kept(server, *conns)
        assert server.clients == {} and server.client_buffer_bytes() == 0

    with_server(tmp_path, scenario)


def test_a_write_that_fails_closes_that_client_and_strands_no_other(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(server: Server) -> None:
        log: list[tuple[str, bytes]] = []
        broken, fine = client(server, log, "broken"), client(server, log, "fine")

        def fail(data: bytes) -> None:
            raise OSError("planted")

        broken.transport.write = fail  # type: ignore[union-attr]
        broken.data_received(b"PING\r\n")
        fine.data_received(b"PING\r\n")
        await asyncio.sleep(0)
        assert log == [("fine", b"+PONG\r\n")] and broken.closed
        assert nothing_kept(server, broken, fine)
        fine.data_received(b"PING again\r\n")  # the next turn still writes
        await asyncio.sleep(0)
        assert log[-1] == ("fine", b"$5\r\nagain\r\n")

    with_server(tmp_path, scenario)
    assert "writing the replies of client" in caplog.text and "planted" in caplog.text
