"""A node of a real three-node cluster killed mid-use and restarted: both twins route
around it and come back to it, with the same exceptions and the same results (the
`twin` fixture runs each test on `Client` and on `AsyncClient`)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from conveyor.client import ConnectionError
from tests.client.twins import Twin, where
from tests.cluster.test_cluster_nodes import all_healthy, start, wait_for
from tests.servers import NodeProcess


def calls_on(node: NodeProcess, command: str) -> int:
    stats = node.client().info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def restart(base: Path, trio: list[NodeProcess], index: int) -> None:
    trio[index] = start(base, index, trio[index].port)
    wait_for(lambda: all_healthy(trio), f"node {index} back in the cluster")


def test_a_killed_node_is_routed_around_and_used_again_once_back(
    tmp_path: Path, trio: list[NodeProcess], twin: Twin
) -> None:
    first = trio[0]
    assert twin.connect() == where(first)
    assert sorted(node.port for node in twin.nodes) == sorted(node.port for node in trio)
    made_on_first = twin.add_job("q", b"x", replicate=3)

    # Killed while a GETJOB waits on it: that GETJOB fails, naming the node; it is not
    # sent again on its own.
    killer = threading.Timer(0.5, first.process.kill)
    killer.start()
    with pytest.raises(ConnectionError) as failed:
        twin.get_jobs("empty", timeout_ms=60_000)
    killer.join()
    assert failed.value.address == where(first)
    # The next one goes to a node HELLO reported, which has a copy of the job.
    assert twin.qlen("q") == 0
    assert twin.address in (where(trio[1]), where(trio[2]))
    # SHOW goes to the job's maker, dead: it is answered where the client is.
    shown = twin.show(made_on_first)
    assert shown is not None and shown["id"] == made_on_first

    restart(tmp_path, trio, 0)
    first = trio[0]
    # Routed to the maker again once its skip is over and HELLO no longer flags it
    # (a bounded wait: each SHOW is answered, by the maker or where the client is).
    for _ in range(200):
        twin.show(made_on_first)
        if calls_on(first, "show"):
            break
        asyncio.run(asyncio.sleep(0.1))
    assert calls_on(first, "show") >= 1

    # The nodes it moved to die: it comes back to the configured one.
    for node in trio[1:]:
        node.stop()
    with pytest.raises(ConnectionError):
        twin.qlen("q")
    assert twin.qlen("q") == 0
    assert twin.address == where(first)
    assert twin.ping() is True
