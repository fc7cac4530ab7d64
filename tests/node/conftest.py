"""Fixtures: a real node per test module (fast) or per test (isolated)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.node.helpers import RawClient, strict_client
from tests.servers import NodeProcess, running_node


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with running_node(tmp_path_factory.mktemp("node")) as process:
        yield process


@pytest.fixture
def r(node: NodeProcess) -> Iterator[redis.Redis]:
    """A client on the module's node, which starts each test empty."""
    client = strict_client(node)
    client.execute_command("DEBUG", "FLUSHALL")
    yield client
    client.close()


@pytest.fixture
def fresh_node(tmp_path: Path) -> Iterator[NodeProcess]:
    with running_node(tmp_path / "node") as process:
        yield process


@pytest.fixture
def raw(node: NodeProcess, r: redis.Redis) -> Iterator[RawClient]:
    """A bare socket on the module's node (flushed through `r` first)."""
    client = RawClient(node.port)
    yield client
    client.close()
