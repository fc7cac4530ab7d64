"""conveyor.spark.link.NodeLink on a real node: what a failed AUTH leaves behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from conveyor.spark.link import NodeError, NodeLink
from tests.servers import running_node


def test_a_refused_password_leaves_no_unauthenticated_connection(tmp_path: Path) -> None:
    """The connection AUTH failed on is closed: every later call connects and says AUTH
    failed again, instead of running on that connection and getting -NOAUTH."""
    with running_node(tmp_path / "node", "--requirepass", "secret") as node:
        link = NodeLink(("127.0.0.1", node.port), "wrong", 5.0)
        for _ in range(2):
            with pytest.raises(NodeError, match=r"^AUTH: ") as refused:
                link.call("PING")
            assert "invalid password" in str(refused.value)
            assert not link.connected
        good = NodeLink(("127.0.0.1", node.port), "secret", 5.0)
        assert good.call("PING") == b"PONG"
        good.close()
