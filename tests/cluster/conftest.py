"""Fixtures of the cluster tests: real nodes, stopped after the test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import NodeProcess


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[NodeProcess]]:
    """The nodes a test starts (see test_cluster_nodes.form); all stopped at the end."""
    nodes: list[NodeProcess] = []
    yield nodes
    for node in nodes:
        node.stop()
