"""The error of an `add_job` that failed, both twins alike (each test runs on `Client`
and on `AsyncClient`, through `Twin`): when the ADDJOB was certainly not sent (no node
could be reached, a connect refused) the error says so and nothing about the job maybe
existing; once it may have reached the node, the error says the job may or may not have
been added."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from conveyor.client import AsyncClient, Client, ConnectionError
from tests.client.test_peer_closed import dead_addresses, wait_until
from tests.client.twins import Twin, where
from tests.servers import NodeProcess, running_node

TWINS = pytest.mark.parametrize("kind", [Client, AsyncClient], ids=["sync", "async"])
MAYBE = "may or may not have been added"
NOT_SENT = "(the ADDJOB was not sent)"


def add_job_failure(client: Twin) -> ConnectionError:
    with pytest.raises(ConnectionError) as caught:
        client.add_job("q", b"x")
    return caught.value


@TWINS
def test_no_reachable_node_is_not_sent(kind: type[Client]) -> None:
    (dead,) = dead_addresses(1)
    client = Twin(kind, [dead])
    try:
        error = add_job_failure(client)
    finally:
        client.close()
    assert str(error) == f"{dead}: no reachable node (Connection refused) {NOT_SENT}"
    assert error.address == dead


@TWINS
def test_several_dead_nodes_are_not_sent(kind: type[Client]) -> None:
    dead = dead_addresses(2)
    client = Twin(kind, dead)
    try:
        error = add_job_failure(client)
    finally:
        client.close()
    message = str(error)
    assert message.startswith("no reachable node of 2 tried: ")
    assert message.endswith(NOT_SENT) and MAYBE not in message
    assert error.address is None


@TWINS
def test_a_refused_reconnect_is_not_sent(kind: type[Client], tmp_path: Path) -> None:
    with running_node(tmp_path / "node") as node:
        client = Twin(kind, [where(node)])
        try:
            assert client.ping()
            node.stop()  # the pooled connection is closed; connecting again is refused
            error = add_job_failure(client)
        finally:
            client.close()
    message = str(error)
    assert message.startswith(f"{where(node)}: ")
    assert message.endswith(NOT_SENT) and MAYBE not in message


def unread_bytes_at(port: int) -> bool:
    """True when a connection accepted on `port` holds bytes its server has not read."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        lines = Path(table).read_text().splitlines()[1:] if Path(table).exists() else []
        for line in lines:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            established = fields[3] == "01"
            rx_queue = int(fields[4].split(":")[1], 16)
            if local_port == port and established and rx_queue > 0:
                return True
    return False


def kill_after_the_send(node: NodeProcess) -> None:
    """The node, stopped, holds the ADDJOB unread in its socket: it is killed then, so the
    command certainly reached it and was never answered."""
    wait_until(lambda: unread_bytes_at(node.port), "the ADDJOB sent")
    node.process.kill()


@TWINS
def test_a_node_killed_after_the_send_may_have_added(kind: type[Client], tmp_path: Path) -> None:
    with running_node(tmp_path / "node") as node:
        client = Twin(kind, [where(node)])
        killer = threading.Thread(target=kill_after_the_send, args=(node,))
        try:
            assert client.ping()  # connected: the ADDJOB goes on a pooled connection
            os.kill(node.process.pid, signal.SIGSTOP)
            killer.start()
            error = add_job_failure(client)
        finally:
            node.process.kill()  # done already, unless the add_job failed before sending
            if killer.ident is not None:
                killer.join(10)
            client.close()
    message = str(error)
    assert message.startswith(f"{where(node)}: ")
    assert message.endswith(f"(the ADDJOB {MAYBE}: it is not sent again)")
    assert NOT_SENT not in message
