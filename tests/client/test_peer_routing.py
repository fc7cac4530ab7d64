"""Job commands sent to the job's maker (conveyor/client/_routing.py) when that maker dies
or hangs: it is skipped for a while instead of costing every ack a connect or a timeout,
and HELLO is asked again. Real nodes in a real two-node cluster; the hung maker is a
listener that accepts and never answers, counting the connections made to it."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from conveyor.client import AsyncClient, Client, Hello, NodeInfo
from conveyor.client._routing import PEER_DOWN_MAX_S, PEER_DOWN_S, PeerHealth
from tests.cluster.test_cluster_nodes import wait_for
from tests.servers import NodeProcess


def where(node: NodeProcess) -> str:
    return f"127.0.0.1:{node.port}"


@contextmanager
def hung_node(port: int) -> Iterator[list[socket.socket]]:
    """A listener on `port` that accepts connections and never answers; the list holds
    every connection accepted so far."""
    accepted: list[socket.socket] = []
    listener = socket.create_server(("127.0.0.1", port))

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield accepted
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(5)
        for conn in accepted:
            conn.close()


def priority_seen_by(node: NodeProcess, port: int) -> int:
    hello = node.client().execute_command("HELLO")
    return {int(entry[2]): int(entry[3]) for entry in hello[2:]}[port]


def priority_known_to(client: Client | AsyncClient, port: int) -> int:
    return {node.port: node.priority for node in client.nodes}[port]


async def test_a_hung_job_maker_costs_one_timeout_not_one_per_ack(
    pair: list[NodeProcess],
) -> None:
    maker, other = pair
    ids = [
        maker.client().execute_command("ADDJOB", "q", f"j{n}", 0, "REPLICATE", 2).decode()
        for n in range(6)
    ]
    client = Client([where(other)], socket_timeout=0.5)
    aclient = AsyncClient([where(other)], socket_timeout=0.5)
    try:
        client.connect()
        await aclient.connect()
        assert priority_known_to(client, maker.port) == 1  # acks go to the maker
        maker.process.kill()
        maker.stop()
        wait_for(lambda: priority_seen_by(other, maker.port) > 1, "the link seen down")
        with hung_node(maker.port) as accepted:
            # Each still reaches its job: on the other node, which holds a copy.
            assert [client.ack(job_id) for job_id in ids[:3]] == [1, 1, 1]
            assert len(accepted) == 1  # the first ack's timeout; the next ones skip it
            # HELLO was asked again: the client knows what the cluster knows.
            assert priority_known_to(client, maker.port) > 1
            assert [await aclient.ack(job_id) for job_id in ids[3:]] == [1, 1, 1]
            assert len(accepted) == 2
            assert priority_known_to(aclient, maker.port) > 1
    finally:
        client.close()
        await aclient.close()


def test_a_failed_peer_is_skipped_for_a_while_doubling_up_to_a_cap() -> None:
    health = PeerHealth()
    a, b = ("10.0.0.1", 7711), ("10.0.0.2", 7711)
    listed = [a, b]
    assert not health.is_down(a, 0.0)
    assert health.failed(a, 100.0, listed) == PEER_DOWN_S
    assert health.is_down(a, 100.0 + PEER_DOWN_S - 0.01)
    assert not health.is_down(a, 100.0 + PEER_DOWN_S)  # tried again once its time is up
    assert not health.is_down(b, 100.0)
    assert health.failed(a, 103.0, listed) == 2 * PEER_DOWN_S  # failed again: longer
    skips = [health.failed(a, 200.0 + n, listed) for n in range(40)]
    assert skips[-1] == PEER_DOWN_MAX_S and max(skips) == PEER_DOWN_MAX_S
    health.answered(a)  # it answered: forgotten, the next failure starts over
    assert not health.is_down(a, 240.0)
    assert health.failed(a, 300.0, listed) == PEER_DOWN_S


def test_peer_health_keeps_only_the_nodes_hello_lists() -> None:
    health = PeerHealth()
    for n in range(100):  # nodes that come and go: one entry per node listed now
        address = (f"10.0.0.{n}", 7711)
        health.failed(address, float(n), [address, ("10.0.0.200", 7711)])
    assert len(health) == 1


def clients_on(node: NodeProcess) -> int:
    """Client connections open on `node`, not counting the one asking."""
    raw = node.client()
    try:
        return len(raw.execute_command("CLIENT", "LIST").splitlines()) - 1
    finally:
        raw.close()


def node_id(node: NodeProcess) -> str:
    return node.client().execute_command("CLUSTER", "MYID").decode()


async def test_peers_hello_no_longer_lists_are_closed_and_forgotten(
    pair: list[NodeProcess],
) -> None:
    maker, other = pair
    ids = [
        maker.client().execute_command("ADDJOB", "q", f"j{n}", 0, "REPLICATE", 2).decode()
        for n in range(2)
    ]
    peer = ("127.0.0.1", maker.port)
    client = Client([where(other)], socket_timeout=5)
    aclient = AsyncClient([where(other)], socket_timeout=5)
    try:
        client.connect()
        await aclient.connect()
        before = clients_on(maker)
        assert client.ack(ids[0]) == 1 and await aclient.ack(ids[1]) == 1  # on the maker
        assert peer in client._peers and peer in aclient._peers
        assert clients_on(maker) == before + 2
        for each in (client, aclient):  # as after an ack to the maker had failed
            each._peer_health.failed(peer, time.monotonic(), [peer])
        # The maker leaves the cluster: each node forgets the other.
        other.client().execute_command("CLUSTER", "FORGET", node_id(maker))
        maker.client().execute_command("CLUSTER", "FORGET", node_id(other))
        client.hello()
        await aclient.hello()
        assert [node.port for node in client.nodes] == [other.port]
        assert [node.port for node in aclient.nodes] == [other.port]
        assert client._peers == {} and aclient._peers == {}
        assert len(client._peer_health) == 0 and len(aclient._peer_health) == 0
        wait_for(lambda: clients_on(maker) == before, "the peer connections closed")
    finally:
        client.close()
        await aclient.close()


def test_what_is_kept_per_node_is_forgotten_once_hello_no_longer_lists_it() -> None:
    configured, listed, gone = ("10.0.0.1", 7711), ("10.0.0.2", 7711), ("10.0.0.3", 7711)
    client = Client(["10.0.0.1:7711"])  # never connects: no I/O here
    client._avoid |= {configured, listed, gone}  # answered -LEAVING once
    client._resp2_nodes |= {configured, listed, gone}  # refused RESP3 once
    hello = Hello(2, "b" * 40, [NodeInfo("b" * 40, *listed, 1)])
    assert client._learn_nodes(hello) == {listed}
    # Configured nodes are tried again whatever HELLO says: what is known of them stays.
    assert client._avoid == client._resp2_nodes == {configured, listed}
