"""When a node's bus messages leave (conveyor/node/send_policy.py), on an in-process server:
at the end of the loop's turn, sooner once they pass a bound (FLUSH_ACTIONS), and mid-read
once one read's copies are many (MID_READ_ACTIONS), and at the end of a read once many
synchronous ADDJOBs wait for theirs (EARLY_SYNC_JOBS). The bound is what keeps a frame
bounded when thousands of clients add jobs in the same turn."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from conveyor.cluster.nodes import ClusterNode
from conveyor.node import send_policy as node_cluster
from conveyor.node.cmd_jobs import parse_addjob
from conveyor.node.config import Config
from conveyor.node.connection import Connection
from conveyor.node.server import Server

OTHERS = [b"%040x" % (0xBEEF + index) for index in range(2)]


def clustered_server(tmp_path: Path) -> Server:
    config = Config()
    config.set("dir", str(tmp_path))
    server = Server(config, "a" * 40, b"s" * 20, random.Random(1))
    driver = server.cluster
    others = [
        ClusterNode(name, "127.0.0.1", 7712, 0, link_up=True, batches=True) for name in OTHERS
    ]
    driver.state.load_nodes(others)
    driver.membership.take_actions()
    driver.state.update_view()
    return server


def add_async(server: Server, count: int) -> None:
    for _ in range(count):
        args = parse_addjob([b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"3", b"ASYNC"])
        server.cluster.replication.add_job(args, None, server.now)


def test_messages_wait_for_the_turn_until_they_pass_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_cluster, "FLUSH_ACTIONS", 8)
    server = clustered_server(tmp_path)
    driver = server.cluster

    async def run() -> None:
        add_async(server, 3)
        assert driver.pending_actions() == 6  # 3 jobs to 2 nodes
        driver.flush()  # the end of a read: below the bound, it waits for the turn
        assert driver.pending_actions() == 6
        add_async(server, 1)
        driver.flush()  # 8: sent now (no bus here: taken and dropped)
        assert driver.pending_actions() == 0
        add_async(server, 2)
        driver.flush()
        await asyncio.sleep(0)  # the end of the turn
        assert driver.pending_actions() == 0

    asyncio.run(run())


def test_a_read_sends_mid_read_only_when_its_own_copies_are_many(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_cluster, "MID_READ_ACTIONS", 6)
    server = clustered_server(tmp_path)
    add_async(server, 2)  # earlier reads of this turn: 4 copies
    at_start = server.cluster.pending_actions()
    add_async(server, 2)  # this read: 4 copies, 8 in all
    assert server.cluster.send_if_many(at_start) == at_start
    assert server.cluster.pending_actions() == 8
    add_async(server, 1)  # this read: 6 copies, sent now (no bus here: taken and dropped)
    assert server.cluster.send_if_many(at_start) == 0 == server.cluster.pending_actions()


def test_synchronous_copies_leave_at_the_end_of_a_read_once_many_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_cluster, "EARLY_SYNC_JOBS", 3)
    server = clustered_server(tmp_path)
    driver = server.cluster
    conn = Connection(server)
    sync_add = [b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"3"]

    async def run() -> None:
        add_async(server, 5)  # ASYNC copies answer nobody: they never count
        for _ in range(2):
            assert driver.add_job(conn, parse_addjob(sync_add)) is None  # answered later
        driver.flush()  # two clients wait: below the bound, their copies wait for the turn
        assert driver.pending_actions() == 14 and driver.sync_unsent == 2
        assert driver.add_job(conn, parse_addjob(sync_add)) is None
        driver.flush()  # the third: sent now (no bus here: taken and dropped)
        assert driver.pending_actions() == 0 and driver.sync_unsent == 0
        driver.add_job(conn, parse_addjob(sync_add))
        driver.flush()
        assert driver.pending_actions() == 2 and driver.sync_unsent == 1
        await asyncio.sleep(0)  # the end of the turn sends the rest and starts the count again
        assert driver.pending_actions() == 0 and driver.sync_unsent == 0

    asyncio.run(run())
