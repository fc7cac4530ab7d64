"""Fixtures: one real local Spark session (local[2]) shared by the whole test run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from pyspark.sql import SparkSession

from conveyor.spark import register
from conveyor.spark.session import local_session
from tests.servers import NodeProcess, running_node


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = local_session("local[2]", app_name="conveyor-tests")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    with running_node(tmp_path / "node") as process:
        yield process


@pytest.fixture
def r(node: NodeProcess) -> Iterator[redis.Redis]:
    client = node.client()
    yield client
    client.close()
