"""Servers built in-process, without sockets: what belongs to one server is its own.

`Server.__init__` does no I/O (the node ID and seeds are passed in), so two servers can
live in one process, as a simulator or an embedding application would have them.
"""

from __future__ import annotations

import random
from pathlib import Path

from conveyor.node.commands import build_table
from conveyor.node.config import Config
from conveyor.node.connection import Connection
from conveyor.node.server import Server


class FakeClient:
    """Just what the command table and these handlers look at."""

    def __init__(self) -> None:
        self.authenticated = True
        self.protocol = 2
        self.waiter = None
        self.pending: list[list[bytes]] = []


def make_server(tmp_path: Path, node_id: str) -> Server:
    config = Config()
    config.set("dir", str(tmp_path))
    return Server(config, node_id, node_id[:20].encode(), random.Random(1))


def test_two_servers_in_one_process_count_their_own_commands(tmp_path: Path) -> None:
    first = make_server(tmp_path, "a" * 40)
    second = make_server(tmp_path, "b" * 40)
    client = FakeClient()
    assert first.execute(client, [b"PING"]) == b"+PONG\r\n"  # type: ignore[arg-type]
    assert first.execute(client, [b"ADDJOB", b"q", b"x", b"0"]).startswith(b"+D-aaaaaaaa-")  # type: ignore[arg-type,union-attr]
    assert first.commands_processed() == 2
    assert second.commands_processed() == 0
    assert second.core.qlen(b"q") == 0 and first.core.qlen(b"q") == 1
    assert not list(tmp_path.iterdir())  # nothing written: no node ID file, no data


def test_a_table_is_built_per_server() -> None:
    first, second = build_table({}), build_table({})
    assert first[b"ping"] is first[b"PING"]
    assert first[b"ping"] is not second[b"ping"]
    renamed = build_table({"debug": "", "config": "cfg"})
    assert b"debug" not in renamed and b"config" not in renamed and b"cfg" in renamed


class RecordingTransport:
    """Writes go to one list shared by every connection: the order they left the node."""

    def __init__(self, name: str, sent: list[tuple[str, bytes]]) -> None:
        self.name, self.sent = name, sent

    def write(self, data: bytes) -> None:
        self.sent.append((self.name, data))

    def get_extra_info(self, key: str) -> object:
        return None

    def is_closing(self) -> bool:
        return False

    def is_reading(self) -> bool:
        return True


class NoTimers:
    def call_later(self, delay: float, callback: object, *args: object) -> Handle:
        return Handle()

    def call_soon(self, callback: object, *args: object) -> Handle:
        return Handle()


class Handle:
    def cancel(self) -> None:
        pass


def test_a_woken_consumer_is_answered_before_the_producer(tmp_path: Path) -> None:
    """Each write wakes its reader; the consumer blocked in GETJOB is the one waiting for
    the job, so its reply leaves first (the add-to-receive latency)."""
    server = make_server(tmp_path, "a" * 40)
    server.loop = NoTimers()  # type: ignore[assignment]
    sent: list[tuple[str, bytes]] = []
    consumer, producer = Connection(server), Connection(server)
    for name, conn in (("consumer", consumer), ("producer", producer)):
        conn.connection_made(RecordingTransport(name, sent))  # type: ignore[arg-type]
    consumer.data_received(b"GETJOB TIMEOUT 0 FROM q\r\n")
    assert sent == [] and consumer.waiter is not None
    producer.data_received(b"ADDJOB q body 0\r\nPING\r\n")
    assert sent == []  # replies leave at the end of the loop's turn, in one pass
    server.turn_replies.flush()
    assert [name for name, _ in sent] == ["consumer", "producer"]
    job_id = sent[1][1].split(b"\r\n")[0][1:]
    assert job_id in sent[0][1] and sent[1][1].endswith(b"+PONG\r\n")
