"""A rewrite cancelled (CONFIG SET appendonly no) while another starts, driven in-process.

A `Server` runs in the test's process with a real event loop and real files; only the
new file's fsync in the rewrite's thread waits for the test's go-ahead, so a cancel can
land exactly while the finished rewrite is being synced and renamed into place.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import conveyor.persistence.rewrite
from conveyor.node.aof_rewrite import STARTED
from conveyor.node.config import Config
from conveyor.node.connection import Connection
from conveyor.node.server import Server
from conveyor.persistence.appendfile import AppendFile
from conveyor.persistence.rewrite import SLICE_JOBS
from tests.fake_transport import FakeTransport

GATE_S = 30.0  # a bound, not an expectation
SPIN_ROUNDS = 1000
BODY = b"b" * 64


class GatedFile(AppendFile):
    """A rewrite's file whose fsync in the rewrite's thread waits for `gate`."""

    gate = threading.Event()

    def sync(self) -> None:
        in_rewrite_thread = threading.current_thread().name.startswith("aof-rewrite")
        if in_rewrite_thread and not GatedFile.gate.wait(GATE_S):
            raise AssertionError("the test never let this fsync go")
        super().sync()


class Node:
    def __init__(self, data_dir: Path) -> None:
        config = Config()
        config.apply("dir", [str(data_dir)])
        self.server = Server(config, "a" * 40, b"s" * 20, random.Random(1))
        self.loop = asyncio.new_event_loop()
        self.server.loop = self.loop
        self.driver = self.server.aof
        self.conn = Connection(self.server)
        self.conn.connection_made(FakeTransport())  # type: ignore[arg-type]

    def add_jobs(self, count: int) -> None:
        for _ in range(count):
            self.conn.data_received(b"ADDJOB q %s 0\r\n" % BODY)
        assert len(self.server.core.jobs) == count

    def set_appendonly(self, value: str) -> None:
        self.server.config.set("appendonly", value)

    def one_round(self) -> None:
        self.loop.call_soon(self.loop.stop)
        self.loop.run_forever()

    def spin(self, done: Callable[[], object]) -> bool:
        for _ in range(SPIN_ROUNDS):
            if done():
                return True
            self.loop.run_until_complete(asyncio.sleep(0.005))
        return bool(done())

    def drain_rewrite_thread(self) -> None:
        self.driver._rewrite_executor.submit(lambda: None).result(GATE_S)

    def close(self) -> None:
        """Let any fsync held at the gate go, then stop the AOF and the loop."""
        GatedFile.gate.set()
        self.driver.close()
        self.loop.close()


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Node]:
    GatedFile.gate = threading.Event()
    monkeypatch.setattr(conveyor.persistence.rewrite, "AppendFile", GatedFile)
    node = Node(tmp_path)
    try:
        yield node
    finally:
        node.close()


def test_a_rewrite_cancelled_while_renamed_into_place_leaves_no_partial_file(
    node: Node,
) -> None:
    jobs = 3 * SLICE_JOBS
    node.add_jobs(jobs)
    assert node.driver.bgrewrite() == STARTED
    assert node.spin(lambda: node.driver.rewrite_finishing)  # its fsync waits for the gate
    go = threading.Timer(0.2, GatedFile.gate.set)
    go.start()
    try:
        node.set_appendonly("no")  # cancels it
        node.set_appendonly("yes")  # a new rewrite, into a file of the same name
    finally:
        go.join()
    node.drain_rewrite_thread()
    assert node.spin(lambda: node.driver.live is not None and node.driver.rewrite is None)
    persisted = node.driver.path.read_bytes().count(BODY)
    assert persisted == jobs
    assert sorted(p.name for p in node.driver.path.parent.glob("*.aof")) == ["disque.aof"]


def test_rewrites_started_and_cancelled_in_one_round_leave_one_slice_per_round(
    node: Node,
) -> None:
    node.add_jobs(5 * SLICE_JOBS)
    for _ in range(3):
        node.set_appendonly("yes")
        node.set_appendonly("no")
    node.set_appendonly("yes")
    rewrite = node.driver.rewrite
    assert rewrite is not None
    node.one_round()
    # The cancelled rewrites' steps do not go on with the new one: the loop is held for
    # one slice per round, however often appendonly was switched.
    assert rewrite.position == SLICE_JOBS
    GatedFile.gate.set()
    assert node.spin(lambda: node.driver.live is not None)
    assert node.driver.path.read_bytes().count(BODY) == 5 * SLICE_JOBS
