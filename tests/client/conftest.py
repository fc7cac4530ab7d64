"""Fixtures: one real node per test module, emptied before each test, and clients on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from conveyor.client import Client
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
