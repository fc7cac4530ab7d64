"""Fixtures: one real node per test module, emptied before each test, and clients on it;
a three-node cluster for the tests that kill nodes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from conveyor.client import AsyncClient, Client
from tests.client.twins import Twin, where
from tests.cluster.test_cluster_nodes import form
from tests.servers import NodeProcess, running_node


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with running_node(tmp_path_factory.mktemp("client-node")) as process:
        yield process


@pytest.fixture
def raw(node: NodeProcess) -> Iterator[redis.Redis]:
    """A plain redis-py client on the module's node, which starts each test empty."""
    client = node.client()
    client.execute_command("CLUSTER", "LEAVING", "no")
    client.execute_command("DEBUG", "FLUSHALL")
    yield client
    client.close()


@pytest.fixture
def client(node: NodeProcess, raw: redis.Redis) -> Iterator[Client]:
    with Client([f"127.0.0.1:{node.port}"], socket_timeout=5) as conveyor_client:
        yield conveyor_client


def formed(tmp_path: Path, count: int) -> Iterator[list[NodeProcess]]:
    """A real cluster of `count` nodes, every node knowing the others, stopped after."""
    nodes: list[NodeProcess] = []
    try:
        form(tmp_path, nodes, count)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[list[NodeProcess]]:
    yield from formed(tmp_path, 2)


@pytest.fixture
def trio(tmp_path: Path) -> Iterator[list[NodeProcess]]:
    """Three nodes; a test may stop and restart them (`start(tmp_path, index, port)`
    brings node `index` back, same ID)."""
    yield from formed(tmp_path, 3)


@pytest.fixture(params=[Client, AsyncClient], ids=["sync", "async"])
def twin(request: pytest.FixtureRequest, trio: list[NodeProcess]) -> Iterator[Twin]:
    """A client of each kind in turn on `trio`, given the first node only: the others it
    learns from HELLO."""
    client = Twin(request.param, [where(trio[0])])
    yield client
    client.close()
