"""protected-mode, as Redis: a node listening beyond loopback with no password serves only
clients from 127.0.0.1 (or ::1, or its Unix socket).

Traffic stays on the loopback interface: the "outside" client connects to 127.0.0.1 from
the source address 127.0.0.2, which Redis' rule (exactly 127.0.0.1 or ::1) does not count
as local. The node listens on 0.0.0.0 but is only reached through 127.0.0.1.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.servers import NodeProcess


def ask_from(port: int, source: str, request: bytes = b"PING\r\n") -> bytes:
    """What the node says on a connection from `source`: its refusal, sent unprompted
    before it closes, or else its reply to `request`."""
    address = ("127.0.0.1", port)
    with socket.create_connection(address, timeout=5, source_address=(source, 0)) as sock:
        sock.settimeout(0.3)
        try:
            unprompted = sock.recv(65536)
        except TimeoutError:
            unprompted = b""
        if unprompted:
            return unprompted
        sock.settimeout(5)
        sock.sendall(request)
        return sock.recv(65536)


@pytest.fixture
def exposed(tmp_path: Path) -> NodeProcess:
    node = NodeProcess(tmp_path / "node", "--bind", "0.0.0.0")
    yield node  # type: ignore[misc]
    node.stop()


def test_an_exposed_node_without_password_serves_only_loopback(exposed: NodeProcess) -> None:
    reply = ask_from(exposed.port, "127.0.0.2")
    assert reply.startswith(b"-DENIED Conveyor is running in protected mode")
    assert b"CONFIG SET protected-mode no" in reply
    assert ask_from(exposed.port, "127.0.0.1") == b"+PONG\r\n"
    info = exposed.client().info("stats")
    assert info["rejected_connections"] == 1
    # A password lifts it: the outsider connects, and must AUTH like everybody.
    local = exposed.client()
    local.config_set("requirepass", "s3cret")
    local.execute_command("AUTH", "s3cret")
    assert ask_from(exposed.port, "127.0.0.2").startswith(b"-NOAUTH")
    local.config_set("requirepass", "")
    assert ask_from(exposed.port, "127.0.0.2").startswith(b"-DENIED")
    # Or turning it off.
    local.config_set("protected-mode", "no")
    assert ask_from(exposed.port, "127.0.0.2") == b"+PONG\r\n"


def test_a_node_bound_to_loopback_is_not_protected(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "node")  # bind 127.0.0.1, the default
    try:
        assert node.client().config_get("protected-mode") == {"protected-mode": "yes"}
        assert ask_from(node.port, "127.0.0.2") == b"+PONG\r\n"
    finally:
        node.stop()
