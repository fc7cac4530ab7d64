"""ADDJOBs left for the end of the loop's turn (node/turn_adds.py), in-process.

In a cluster a read holding one ADDJOB does not run it: the turn's ADDJOBs run together
once the loop's reads are done. Whatever comes from the same client after it (a second
read in the same turn, an inline request in the same read, a protocol error, its
disconnection) must find it run, so that the client sees its requests run in order.
Driven with a recording transport, so the turns are stepped, not timed.

The server believes it has a peer (`set_cluster_view`) and is sent REPLICATE 1 jobs,
which need no copies: the real cluster path is tests/cluster/test_turn_adds.py.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from conveyor.node import turn_adds
from conveyor.node.config import Config
from conveyor.node.connection import Connection
from conveyor.node.server import Server
from tests.node.test_turns import RecordingTransport as TurnsTransport
from tests.node.test_turns import end_turn


class RecordingTransport(TurnsTransport):
    def __init__(self) -> None:
        super().__init__()
        self.eof = False

    def write_eof(self) -> None:  # a protocol error closes after the replies
        self.eof = True


def command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


ADD = command(b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"1")


Scenario = Callable[[Server], Coroutine[Any, Any, None]]


def with_server(tmp_path: Path, scenario: Scenario) -> None:
    """Run `scenario` on a fresh in-process server inside a running loop."""
    config = Config()
    config.set("dir", str(tmp_path))
    server = Server(config, "e" * 40, b"e" * 20, random.Random(1))

    async def run() -> None:
        server.loop = asyncio.get_running_loop()
        await scenario(server)

    asyncio.run(run())


def in_cluster(tmp_path: Path, scenario: Scenario) -> None:
    async def clustered(server: Server) -> None:
        server.core.set_cluster_view(2, 2)
        await scenario(server)

    with_server(tmp_path, clustered)


def client(server: Server) -> tuple[Connection, RecordingTransport]:
    conn = Connection(server)
    transport = RecordingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def replies(transport: RecordingTransport) -> list[bytes]:
    return b"".join(transport.written).split(b"\r\n")[:-1]


def test_addjobs_of_one_turn_run_together_at_its_end(tmp_path: Path) -> None:
    async def scenario(server: Server) -> None:
        clients = [client(server) for _ in range(5)]
        for conn, _ in clients:
            conn.data_received(ADD)
        # Nothing ran yet: every job waits for the end of the turn.
        assert server.core.qlen(b"q") == 0
        assert all(not transport.written for _, transport in clients)
        assert len(server.turn_adds.entries) == 5
        await asyncio.sleep(0)
        end_turn(server)
        assert server.core.qlen(b"q") == 5
        ids = [replies(transport) for _, transport in clients]
        assert all(len(one) == 1 and one[0].startswith(b"+D-") for one in ids)
        assert len({one[0] for one in ids}) == 5
        assert server.commands[b"addjob"].calls == 5
        assert not server.turn_adds.entries and not server.turn_adds.scheduled

    in_cluster(tmp_path, scenario)


def test_a_second_read_of_the_client_in_the_same_turn_runs_its_addjob_first(
    tmp_path: Path,
) -> None:
    async def scenario(server: Server) -> None:
        conn, transport = client(server)
        other, other_transport = client(server)
        conn.data_received(ADD)
        other.data_received(ADD)
        conn.data_received(command(b"QLEN", b"q") + command(b"PING"))
        end_turn(server)
        # The turn ran for both clients before the QLEN, which saw both jobs.
        first, qlen, pong = replies(transport)
        assert first.startswith(b"+D-") and qlen == b":2" and pong == b"+PONG"
        assert replies(other_transport)[0].startswith(b"+D-")
        await asyncio.sleep(0)  # the scheduled run finds nothing left
        assert server.core.qlen(b"q") == 2 and len(replies(transport)) == 3

    in_cluster(tmp_path, scenario)


@pytest.mark.parametrize(
    ("after", "answer"),
    [
        (b"QLEN q\r\n", b":1"),  # an inline request: it sees the job
        (b'"unbalanced\r\n', b"-ERR Protocol error: unbalanced quotes in request"),
    ],
)
def test_what_follows_the_addjob_in_its_read_comes_after_its_reply(
    tmp_path: Path, after: bytes, answer: bytes
) -> None:
    async def scenario(server: Server) -> None:
        conn, transport = client(server)
        conn.data_received(ADD + after)
        end_turn(server)
        first, second = replies(transport)
        assert first.startswith(b"+D-") and second == answer
        assert server.core.qlen(b"q") == 1
        # A protocol error closes the connection once the replies are sent.
        assert conn.closed == transport.eof == answer.startswith(b"-")

    in_cluster(tmp_path, scenario)


def test_a_client_gone_right_after_its_addjob_still_adds_it(tmp_path: Path) -> None:
    async def scenario(server: Server) -> None:
        conn, _ = client(server)
        conn.data_received(ADD)
        conn.connection_lost(None)
        # Read before the client left: run, as it would have been at once.
        assert server.core.qlen(b"q") == 1
        assert not server.turn_adds.entries and not conn.in_turn
        await asyncio.sleep(0)
        assert server.core.qlen(b"q") == 1

    in_cluster(tmp_path, scenario)


def test_a_client_with_requests_held_runs_its_addjob_behind_them(tmp_path: Path) -> None:
    async def scenario(server: Server) -> None:
        consumer, consumer_transport = client(server)
        # Blocked in GETJOB: its next request is held, not left for the turn.
        consumer.data_received(command(b"GETJOB", b"TIMEOUT", b"0", b"FROM", b"other"))
        consumer.data_received(ADD)
        assert not server.turn_adds.entries and list(consumer.pending)
        producer, _ = client(server)
        producer.data_received(command(b"ADDJOB", b"other", b"x", b"0", b"REPLICATE", b"1"))
        await asyncio.sleep(0)
        end_turn(server)
        # The producer's job woke the consumer, whose held ADDJOB then ran.
        got, added = replies(consumer_transport)[-2:]
        assert got == b"x" and added.startswith(b"+D-")
        assert server.core.qlen(b"q") == 1

    in_cluster(tmp_path, scenario)


def test_anything_unusual_goes_through_the_command_table(tmp_path: Path) -> None:
    async def scenario(server: Server) -> None:
        cases = [
            command(b"ADDJOB", b"q", b"body"),  # wrong arity
            command(b"addjob", b"q", b"body", b"0", b"REPLICATE", b"0"),  # a bad option
            command(b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"1", b"ASYNC"),
        ]
        clients = [client(server) for _ in cases]
        for (conn, _), request in zip(clients, cases, strict=True):
            conn.data_received(request)
        await asyncio.sleep(0)
        end_turn(server)
        answers = [replies(transport)[0] for _, transport in clients]
        assert answers[0] == b"-ERR wrong number of arguments for 'addjob' command"
        assert answers[1] == b"-ERR REPLICATE must be between 1 and 65535"
        assert answers[2].startswith(b"+D-")

    in_cluster(tmp_path, scenario)


def test_a_planning_bug_runs_the_turn_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(conn: Connection, first: list[bytes]) -> None:
        raise RuntimeError("planted")

    monkeypatch.setattr(turn_adds, "plan_run", broken)

    async def scenario(server: Server) -> None:
        clients = [client(server) for _ in range(3)]
        for conn, _ in clients:
            conn.data_received(ADD)
        await asyncio.sleep(0)
        end_turn(server)
        assert all(replies(transport)[0].startswith(b"+D-") for _, transport in clients)
        assert server.core.qlen(b"q") == 3 and not any(conn.in_turn for conn, _ in clients)

    in_cluster(tmp_path, scenario)
    assert "failed to run together" in caplog.text
