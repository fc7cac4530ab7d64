"""Node discovery via HELLO, failover to other nodes, and node address parsing."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
import redis

from conveyor.client import AsyncClient, Client, ConnectionError, NodeInfo, ReplyError
from conveyor.client._address import parse_address, parse_nodes, parse_url
from conveyor.protocol.requests import RequestParser
from conveyor.protocol.resp import encode
from tests.client.test_peer_routing import hung_node
from tests.conftest import free_port
from tests.servers import NodeProcess, running_node

C = TypeVar("C", Client, AsyncClient)


class FakeNode:
    """A tiny RESP server whose HELLO reports extra nodes; `stop()` kills it.

    Like Disque, its HELLO takes no argument: redis-py's `HELLO 3` handshake gets an
    arity error. With `hello_error` every HELLO gets that error reply instead. Every
    request is kept in `requests`; `open_connections()` counts those clients keep open.
    """

    def __init__(self, hello_nodes: list[list[bytes]], hello_error: bytes | None = None) -> None:
        self.node_id = b"f" * 40
        self.hello_nodes = hello_nodes
        self.hello_error = hello_error
        self.serving: list[threading.Thread] = []  # one per connection, ends when it closes
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.port = self.listener.getsockname()[1]
        self.connections: list[socket.socket] = []
        self.requests: list[list[bytes]] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.serving.append(thread)
            thread.start()

    def open_connections(self) -> int:
        return sum(thread.is_alive() for thread in self.serving)

    def _serve(self, conn: socket.socket) -> None:
        parser = RequestParser()
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                for request in parser.feed(data):
                    self.requests.append(request)
                    if request[0].upper() == b"HELLO" and self.hello_error is not None:
                        reply = self.hello_error
                    elif request[0].upper() == b"HELLO" and len(request) > 1:
                        reply = b"-ERR wrong number of arguments for 'hello' command\r\n"
                    elif request[0].upper() == b"HELLO":
                        reply = encode([1, self.node_id, *self.hello_nodes])
                    else:
                        reply = b"-ERR fake node\r\n"
                    conn.sendall(reply)

    def stop(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
        except OSError:
            pass
        self.listener.close()
        self.thread.join(5)
        for conn in self.connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


def test_hello_with_empty_ip_uses_the_connected_address(client: Client, node: NodeProcess) -> None:
    client.connect()
    (me,) = client.nodes
    assert me == NodeInfo(client.node_id or "", "127.0.0.1", node.port, 1)


def test_first_reachable_node_is_used(node: NodeProcess, raw: redis.Redis) -> None:
    dead = free_port()
    with Client([f"127.0.0.1:{dead}", f"127.0.0.1:{node.port}"], socket_timeout=2) as client:
        assert client.connect() == f"127.0.0.1:{node.port}"
        assert client.node_id == raw.execute_command("CLUSTER", "MYID").decode()


def test_no_reachable_node_lists_what_was_tried() -> None:
    ports = [free_port(), free_port()]
    client = Client([f"127.0.0.1:{p}" for p in ports], socket_timeout=2)
    with client, pytest.raises(ConnectionError) as caught:
        client.ping()
    for port in ports:
        assert f"127.0.0.1:{port}" in str(caught.value)


def test_nodes_reported_by_hello_are_remembered_and_used(
    node: NodeProcess, raw: redis.Redis
) -> None:
    real_id = raw.execute_command("CLUSTER", "MYID")
    fake = FakeNode([[real_id, b"127.0.0.1", str(node.port).encode(), b"1"]])
    fake.hello_nodes.insert(0, [fake.node_id, b"", str(fake.port).encode(), b"1"])
    try:
        with Client([f"127.0.0.1:{fake.port}"], socket_timeout=2) as client:
            assert client.connect() == f"127.0.0.1:{fake.port}"
            assert client.node_id == "f" * 40
            assert [n.address for n in client.nodes] == [
                f"127.0.0.1:{fake.port}",
                f"127.0.0.1:{node.port}",
            ]
            fake.stop()
            # The command in flight fails (it is not retried: it might not be idempotent)...
            with pytest.raises(ConnectionError):
                client.qlen("q")
            # ...and the next one goes to the node HELLO told us about.
            assert client.qlen("q") == 0
            assert client.address == f"127.0.0.1:{node.port}"
            assert client.node_id == real_id.decode()
    finally:
        fake.stop()


async def test_async_client_discovers_too(node: NodeProcess, raw: redis.Redis) -> None:
    real_id = raw.execute_command("CLUSTER", "MYID")
    fake = FakeNode([[real_id, b"127.0.0.1", str(node.port).encode(), b"1"]])
    try:
        async with AsyncClient([f"127.0.0.1:{fake.port}"], socket_timeout=2) as client:
            assert await client.connect() == f"127.0.0.1:{fake.port}"
            fake.stop()
            with pytest.raises(ConnectionError):
                await client.qlen("q")
            assert await client.qlen("q") == 0
            assert client.node_id == real_id.decode()
    finally:
        fake.stop()


def test_a_disque_node_is_spoken_to_in_resp2(node: NodeProcess) -> None:
    # redis-py 8 opens connections with `HELLO 3`; Disque refuses it, so the client
    # connects again in RESP2 (no HELLO 3) and remembers it for that node only.
    fake = FakeNode([[b"r" * 40, b"127.0.0.1", str(node.port).encode(), b"1"]])
    try:
        with Client([f"127.0.0.1:{fake.port}"], socket_timeout=2) as client:
            client.connect()
            assert fake.requests == [[b"HELLO", b"3"], [b"HELLO"]]
            assert client.redis.connection_pool.connection_kwargs["protocol"] == 2
    finally:
        fake.stop()
    with Client([f"127.0.0.1:{node.port}"], socket_timeout=2) as client:
        # a Conveyor node speaks RESP3, the redis-py default
        assert "resp=3" in client.execute_command("CLIENT", "INFO").decode()


def test_failover_between_configured_nodes(tmp_path: Path) -> None:
    with running_node(tmp_path / "a") as first, running_node(tmp_path / "b") as second:
        nodes = [f"127.0.0.1:{first.port}", f"127.0.0.1:{second.port}"]
        with Client(nodes, socket_timeout=2) as client:
            client.add_job("q", b"on the node reached first")
            # The configured nodes are tried in random order (clients spread).
            used = nodes.index(client.address)  # type: ignore[arg-type]
            (first, second)[used].stop()
            with pytest.raises(ConnectionError):
                client.qlen("q")
            assert client.qlen("q") == 0  # the other node, which has no jobs
            assert client.address == nodes[1 - used]


@pytest.mark.parametrize(
    ("spec", "address"),
    [
        ("10.0.0.1:7712", ("10.0.0.1", 7712)),
        ("example.org", ("example.org", 7711)),
        (":7713", ("127.0.0.1", 7713)),
        ("[::1]:7714", ("::1", 7714)),
        ("::1", ("::1", 7711)),
        (("h", 1), ("h", 1)),
    ],
)
def test_parse_address(spec: str | tuple[str, int], address: tuple[str, int]) -> None:
    assert parse_address(spec) == address


@pytest.mark.parametrize("spec", ["", "h:port", "h:0", "h:70000", "[::1"])
def test_bad_addresses(spec: str) -> None:
    with pytest.raises(ValueError):
        parse_address(spec)


def test_parse_nodes_and_urls() -> None:
    assert parse_nodes(None) == [("127.0.0.1", 7711)]
    assert parse_nodes("a:1,b:2,a:1") == [("a", 1), ("b", 2)]
    assert parse_url("disque://:s%40cret@a:1,b:2/?socket_timeout=1.5") == (
        [("a", 1), ("b", 2)],
        {"password": "s@cret", "socket_timeout": 1.5},
    )
    assert parse_url("disque://") == ([("127.0.0.1", 7711)], {})
    with pytest.raises(ValueError):
        parse_url("http://a:1")
    with pytest.raises(ValueError):
        parse_url("disque://a:1?color=red")


def wait_until(check: Callable[[], bool], what: str, deadline_s: float = 10.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {deadline_s} s: {what}")
        time.sleep(0.02)


def first_tried(cls: type[C], nodes: list[str], first: str) -> C:
    """A client on `nodes` that tries `first` first (the order is random: draw again)."""
    while True:
        client = cls(nodes, socket_timeout=2)
        if client.configured_nodes[0] == first:
            return client


@pytest.mark.parametrize(
    "error",
    [
        b"-LOADING Conveyor is loading the dataset in memory\r\n",
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
    ],
)
async def test_a_node_answering_hello_with_an_error_is_passed_over(
    node: NodeProcess, raw: redis.Redis, error: bytes
) -> None:
    fake = FakeNode([], hello_error=error)
    try:
        nodes = [f"127.0.0.1:{fake.port}", f"127.0.0.1:{node.port}"]
        with first_tried(Client, nodes, nodes[0]) as client:
            assert client.connect() == nodes[1]
            assert fake.requests  # it was asked first
        fake.requests.clear()
        async with first_tried(AsyncClient, nodes, nodes[0]) as aclient:
            assert await aclient.connect() == nodes[1]
            assert fake.requests
        with pytest.raises(ReplyError, match=error[1:8].decode()):  # none other: its error
            Client(nodes[:1], socket_timeout=2).connect()
    finally:
        fake.stop()


async def test_async_move_to_a_better_node_closes_the_first_connection(
    node: NodeProcess, raw: redis.Redis
) -> None:
    real_id = raw.execute_command("CLUSTER", "MYID")
    fake = FakeNode([[real_id, b"127.0.0.1", str(node.port).encode(), b"1"]])
    fake.hello_nodes.insert(0, [fake.node_id, b"", str(fake.port).encode(), b"5"])
    try:
        async with AsyncClient([f"127.0.0.1:{fake.port}"], socket_timeout=2) as client:
            assert await client.connect() == f"127.0.0.1:{node.port}"
            wait_until(lambda: fake.open_connections() == 0, "the first connection closed")
    finally:
        fake.stop()


async def test_a_connect_cancelled_on_its_way_to_a_better_node_closes_the_first_connection() -> (
    None
):
    """The node answering HELLO ranks another better; the client asks that one, which
    hangs, and the connect is cancelled: the first connection was left open (found by the
    garbage collector at best, kept off here so its closing is the client's doing)."""
    better_port = free_port()
    fake = FakeNode([[b"b" * 40, b"127.0.0.1", str(better_port).encode(), b"1"]])
    fake.hello_nodes.insert(0, [fake.node_id, b"", str(fake.port).encode(), b"5"])
    gc.disable()
    try:
        with hung_node(better_port) as accepted:
            client = AsyncClient([f"127.0.0.1:{fake.port}"], socket_timeout=5)
            connecting = asyncio.create_task(client.connect())
            while not accepted:  # the better node's HELLO is being waited for
                assert not connecting.done(), connecting
                await asyncio.sleep(0.02)
            assert fake.open_connections() == 1
            connecting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await connecting
            wait_until(lambda: fake.open_connections() == 0, "the first connection closed", 2)
            await client.close()
    finally:
        gc.enable()
        fake.stop()
