"""A burst of idle connections: what each one holds, and that nothing is left once they close.

An idle connection (opened, never sent a byte) has no request parser and no queue of held
requests: those are made when first needed, so thousands of idle connections spread fewer
objects over Python's small-object arenas (docs/operations.md, Connections). These tests
drive `Connection` in-process through a fake transport, without sockets or timing.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from conveyor.node import reading as reading_module
from conveyor.node.config import Config
from conveyor.node.connection import Connection
from conveyor.node.held import NOTHING_HELD
from conveyor.node.server import Server
from conveyor.protocol.requests import RequestParser
from tests.fake_transport import FakeTransport

PING = b"*1\r\n$4\r\nPING\r\n"
# What every connection shares until it needs its own.
NO_PARSER = reading_module.NO_PARSER_YET


def make_server(tmp_path: Path, **directives: str) -> Server:
    config = Config()
    config.set("dir", str(tmp_path))
    for name, value in directives.items():
        config.set(name, value)
    return Server(config, "e" * 40, b"e" * 20, random.Random(1))


def connect(server: Server, port: int) -> tuple[Connection, FakeTransport]:
    conn = Connection(server)
    transport = FakeTransport(port)
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def test_idle_connections_hold_no_parser_nor_queue_and_leave_nothing(tmp_path: Path) -> None:
    server = make_server(tmp_path)
    conns = [connect(server, 10_000 + i)[0] for i in range(300)]
    assert len(server.clients) == 300
    assert all(conn.parser is NO_PARSER and conn.pending is NOTHING_HELD for conn in conns)
    for conn in conns:
        conn.connection_lost(None)
    assert server.clients == {}
    assert server._query_holders == {} and server._output_backlog == {}
    assert server.client_buffer_bytes() == 0
    assert all(conn.transport is None for conn in conns)


def test_the_first_read_makes_the_parser_with_the_settings_of_that_moment(
    tmp_path: Path,
) -> None:
    server = make_server(tmp_path, requirepass="secret")
    server.loop = asyncio.new_event_loop()  # never run: its turn's end is called below
    conn, transport = connect(server, 10_000)
    assert conn.parser is NO_PARSER
    # Both change (CONFIG SET) before the client's first byte: its parser has the new values.
    server.config.set("proto-max-bulk-len", "2mb")
    server.config.set("requirepass", "")
    conn.data_received(PING)
    server.turn_replies.flush()  # what the loop does at the end of the turn
    assert transport.written == [b"+PONG\r\n"]
    assert type(conn.parser) is RequestParser
    assert conn.parser.authenticated
    assert conn.parser.max_bulk_bytes == 2 * 1024 * 1024
    conn.connection_lost(None)
    assert server.clients == {}
    server.loop.close()


def test_a_request_held_behind_a_blocked_getjob_makes_the_queue_then_runs(
    tmp_path: Path,
) -> None:
    server = make_server(tmp_path)

    async def scenario() -> None:
        server.loop = asyncio.get_running_loop()
        consumer, consumer_transport = connect(server, 10_000)
        getjob = b"*5\r\n$6\r\nGETJOB\r\n$7\r\nTIMEOUT\r\n$1\r\n0\r\n$4\r\nFROM\r\n$1\r\nq\r\n"
        consumer.data_received(getjob + PING)
        assert consumer.waiter is not None
        assert consumer.pending is not NOTHING_HELD and len(consumer.pending) == 1
        assert consumer.qbuf > 0
        producer, producer_transport = connect(server, 10_001)
        producer.data_received(b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$4\r\nbody\r\n$1\r\n0\r\n")
        server.turn_replies.flush()  # the end of the turn
        assert producer_transport.written[0].startswith(b"+D-")
        replies = b"".join(consumer_transport.written)
        assert b"body" in replies and replies.endswith(b"+PONG\r\n")
        assert not consumer.pending and consumer.qbuf == 0
        assert producer.pending is NOTHING_HELD  # it never held a request
        assert not NOTHING_HELD  # the shared one is never appended to
        consumer.connection_lost(None)
        producer.connection_lost(None)
        assert server.clients == {} and server.client_buffer_bytes() == 0

    asyncio.run(scenario())
