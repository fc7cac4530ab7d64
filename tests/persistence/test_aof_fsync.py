"""Replies held for the fsync under `appendfsync always`, driven in-process.

A `Server` is built in the test's process with a real event loop, real files and the
real fsync thread; only the files' fsync in that thread waits for the test's go-ahead
(`ProbeFile`), so what the node does while an fsync runs is observed step by step
instead of raced against a timer. Loops that wait for the event loop are bounded.
"""

from __future__ import annotations

import asyncio
import errno
import queue
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import conveyor.node.aof
import conveyor.persistence.rewrite
from conveyor.node.aof_rewrite import STARTED
from conveyor.node.config import Config
from conveyor.node.connection import Connection
from conveyor.node.server import Server
from conveyor.persistence.appendfile import AppendFile, SyncThread
from conveyor.persistence.reader import read_records
from tests.fake_transport import FakeTransport

# Bounds, not expectations: a gate or a result that takes this long is a failure.
GATE_S = 30.0
SPIN_ROUNDS = 1000


class ProbeFile(AppendFile):
    """An AppendFile whose fsyncs in the node's fsync thread wait for `go`, and fail
    with `fail` when it is set. Other threads (the rewrite's) sync it at once."""

    made: list[ProbeFile] = []

    def __init__(self, path: Path, *, truncate: bool = False) -> None:
        super().__init__(path, truncate=truncate)
        self.entered = threading.Event()
        self.go = threading.Event()
        self.fail: OSError | None = None
        self.synced = 0
        ProbeFile.made.append(self)

    def sync(self) -> None:
        if threading.current_thread().name != "aof-fsync":
            super().sync()
            return
        self.entered.set()
        if not self.go.wait(GATE_S):
            raise AssertionError("the test never let this fsync go")
        if self.fail is not None:
            raise self.fail
        super().sync()
        self.synced += 1


class Node:
    """An in-process node with `appendonly yes`, `appendfsync always`."""

    def __init__(self, data_dir: Path, *directives: list[str]) -> None:
        config = Config()
        for name, *args in (
            ["dir", str(data_dir)],
            ["appendonly", "yes"],
            ["appendfsync", "always"],
            *directives,
        ):
            config.apply(name, args)
        self.server = Server(config, "a" * 40, b"s" * 20, random.Random(1))
        self.loop = asyncio.new_event_loop()
        self.server.loop = self.loop
        self.driver = self.server.aof
        self.driver.open_live()

    def connect(self) -> tuple[Connection, FakeTransport]:
        conn, transport = Connection(self.server), FakeTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        return conn, transport

    def spin(self, done: Callable[[], object]) -> bool:
        """Run the event loop until `done()` is true (bounded)."""
        for _ in range(SPIN_ROUNDS):
            if done():
                return True
            self.loop.run_until_complete(asyncio.sleep(0.005))
        return bool(done())

    def drain_rewrite_thread(self) -> None:
        """Whatever was handed to the rewrite's worker thread has run."""
        self.driver._rewrite_executor.submit(lambda: None).result(GATE_S)

    def close(self) -> None:
        for file in ProbeFile.made:
            file.go.set()
        self.driver.close()
        self.loop.close()


@pytest.fixture
def directives() -> list[list[str]]:
    return []


@pytest.fixture
def node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, directives: list[list[str]]
) -> Iterator[Node]:
    ProbeFile.made = []
    monkeypatch.setattr(conveyor.node.aof, "AppendFile", ProbeFile)
    monkeypatch.setattr(conveyor.persistence.rewrite, "AppendFile", ProbeFile)
    node = Node(tmp_path, *directives)
    try:
        yield node
    finally:
        node.close()


def live_probe(node: Node) -> ProbeFile:
    live = node.driver.live
    assert isinstance(live, ProbeFile)
    return live


def rewrite_until_live(node: Node) -> None:
    old = node.driver.live
    assert node.driver.bgrewrite() == STARTED
    assert node.spin(lambda: node.driver.live is not old), "the rewrite never finished"


def test_the_fsync_thread_reports_any_error_and_goes_on(tmp_path: Path) -> None:
    results: queue.Queue[tuple[object, BaseException | None]] = queue.Queue()

    class Exploding(AppendFile):
        def sync(self) -> None:
            raise RuntimeError("not an OSError")

    closed = AppendFile(tmp_path / "closed.aof")
    closed.close()
    good = AppendFile(tmp_path / "good.aof")
    thread = SyncThread(lambda token, exc: results.put((token, exc)))
    try:
        thread.submit([Exploding(tmp_path / "bad.aof")], "bad")
        token, exc = results.get(timeout=GATE_S)
        assert token == "bad" and isinstance(exc, RuntimeError)
        thread.submit([closed], "closed")
        token, exc = results.get(timeout=GATE_S)
        assert token == "closed" and isinstance(exc, OSError) and exc.errno == errno.EBADF
        thread.submit([good], "good")
        assert results.get(timeout=GATE_S) == ("good", None)
    finally:
        thread.stop()
        good.close()


def test_a_rewrite_closes_the_old_file_only_after_its_running_fsync(node: Node) -> None:
    conn, transport = node.connect()
    conn.data_received(b"ADDJOB q body 0\r\n")
    old = live_probe(node)
    assert node.spin(old.entered.is_set)
    rewrite_until_live(node)
    node.drain_rewrite_thread()
    # The fsync of the old file still runs: closing it now would fail that fsync (or
    # sync whatever file reuses its descriptor).
    assert old.fd >= 0
    assert transport.out == b""
    old.go.set()
    assert node.spin(lambda: transport.out)
    assert transport.out.startswith(b"+D-")
    assert old.synced == 1
    node.spin(lambda: old.fd < 0)
    node.drain_rewrite_thread()
    assert old.fd < 0  # closed once its fsync was over
    # Still answering, through the new file's fsyncs.
    transport.written.clear()
    conn.data_received(b"ADDJOB q again 0\r\n")
    new = live_probe(node)
    new.go.set()
    assert node.spin(lambda: transport.out)
    assert transport.out.startswith(b"+D-") and new.synced == 1


def test_replies_whose_replaced_file_failed_its_fsync_wait_for_the_new_one(
    node: Node,
) -> None:
    conn, transport = node.connect()
    conn.data_received(b"ADDJOB q body 0\r\n")
    old = live_probe(node)
    old.fail = OSError(errno.EIO, "Input/output error")
    assert node.spin(old.entered.is_set)
    rewrite_until_live(node)
    new = live_probe(node)
    old.go.set()
    # The old file's fsync failed: the reply is not sent until the new file, which
    # holds its record too, has been synced.
    assert node.spin(lambda: new.entered.is_set() or transport.out)
    assert transport.out == b""
    assert new.entered.is_set()
    new.go.set()
    assert node.spin(lambda: transport.out)
    assert new.synced == 1
    job_id = transport.out[1:].split(b"\r\n")[0]
    records = list(read_records(node.driver.path.read_bytes()))
    assert any(job_id in record.argument for record in records)
    assert not node.driver.failed


ECHO_BYTES = 64 * 1024
ECHO = b"*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n" % (ECHO_BYTES, b"e" * ECHO_BYTES)


def held_bytes(node: Node, conn: Connection) -> int:
    lists = (node.driver.waiting, node.driver._inflight, node.driver._stuck)
    return sum(len(data or b"") for held in lists for owner, data in held if owner is conn)


@pytest.mark.parametrize(
    "directives", [[["client-output-buffer-limit", "normal", "1mb", "0", "0"]]]
)
def test_replies_held_for_a_slow_fsync_count_towards_the_output_limit(node: Node) -> None:
    conn, transport = node.connect()
    conn.data_received(b"ADDJOB q body 0\r\n")
    assert node.spin(live_probe(node).entered.is_set)
    # The fsync does not end: a client that pipelines without reading piles up replies.
    sent = 0
    for _ in range(4 * (1 << 20) // ECHO_BYTES):
        if transport.aborted:
            break
        conn.data_received(ECHO)
        sent += 1
    assert transport.aborted, f"{held_bytes(node, conn)} bytes held for the client"
    assert held_bytes(node, conn) <= (1 << 20) + 2 * ECHO_BYTES
    assert sent <= (1 << 20) // ECHO_BYTES + 1
    assert node.server.stats.client_output_buffer_limit_disconnections == 1
    # Another client is served as before once the fsync is done.
    other, other_transport = node.connect()
    other.data_received(b"PING\r\n")
    live_probe(node).go.set()
    assert node.spin(lambda: other_transport.out)
    assert other_transport.out == b"+PONG\r\n"


def test_an_fsync_ending_before_the_rounds_write_does_not_release_its_replies(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fsync thread hands its result to the loop with call_soon_threadsafe: that
    # callback can run after a command buffered its record and held its reply, but
    # before the round's write (_flush, queued with call_soon). The reply answers a
    # record that is not in the file yet: it must wait for that write and its fsync.
    finished: queue.Queue[tuple[object, BaseException | None]] = queue.Queue()
    monkeypatch.setattr(
        node.driver, "_sync_finished", lambda token, exc: finished.put((token, exc))
    )
    first, _ = node.connect()
    first.data_received(b"ADDJOB q one 0\r\n")
    live = live_probe(node)
    assert node.spin(live.entered.is_set)
    live.go.set()
    token, exc = finished.get(timeout=GATE_S)
    assert exc is None
    second, second_transport = node.connect()
    second.data_received(b"ADDJOB q two 0\r\n")  # its record buffered, the write queued
    node.driver._sync_done(token, exc)  # the fsync's callback runs first
    # Released replies leave at the end of the loop's turn (Connection.unsent).
    assert first.unsent is not None and first.unsent[0].startswith(b"+D-")
    assert second.unsent is None, "answered before its record was written"
    # The round's write, then an fsync of its own (its result handed over by hand, as
    # the thread keeps the callback it was made with), then the reply.
    assert node.spin(lambda: not finished.empty())
    node.driver._sync_done(*finished.get_nowait())
    node.spin(lambda: second_transport.out)
    job_id = second_transport.out[1:].split(b"\r\n")[0]
    assert job_id.startswith(b"D-")
    records = list(read_records(node.driver.path.read_bytes()))
    assert any(job_id in record.argument for record in records)
    assert live.synced == 2
