"""A real node against a peer that speaks the bus but sends values no Disque or Conveyor
node makes: the node keeps serving, CLUSTER NODES and nodes.conf stay readable, and its
links to that peer do not get stuck. The peer is a socket of this test on 127.0.0.1."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from conveyor.cluster.codec import FrameReader, decode, encode
from conveyor.cluster.messages import NODE_MYSELF, Header, Meet, Ping, Pong
from conveyor.cluster.nodes import parse_nodes_conf
from tests.cluster.test_cluster_nodes import start, wait_for
from tests.servers import NodeProcess

BAD_NAME = b"\xff" * 39 + b" "  # neither hex nor text: not a node name


def listener() -> tuple[socket.socket, int]:
    """A listening socket whose port is a bus port (client port + 10000)."""
    for _ in range(100):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        if port > 10000:
            sock.listen()
            return sock, port
        sock.close()
    raise RuntimeError("no bus-like port")


def read_message(sock: socket.socket) -> object:
    reader = FrameReader()
    while True:
        data = sock.recv(65536)
        assert data, "the node closed the link"
        frames = reader.feed(data)
        if frames:
            return decode(frames[0])


def meet_as(node: NodeProcess, header: Header) -> socket.socket:
    """MEET the node from `header`; it answers PONG on the same link."""
    link = socket.create_connection(("127.0.0.1", node.port + 10000), timeout=10)
    link.sendall(encode(Meet(header)))
    assert isinstance(read_message(link), Pong)
    return link


def test_a_peer_answering_with_a_name_that_is_not_hex_is_dropped(tmp_path: Path) -> None:
    node = start(tmp_path, 0)
    try:
        server, bus_port = listener()
        with server:
            header = Header(BAD_NAME, bus_port - 10000, NODE_MYSELF)
            link = meet_as(node, header)
            # The node connects back to the sender's bus port and PINGs it first there.
            server.settimeout(10)
            back, _ = server.accept()
            with link, back:
                back.settimeout(10)
                assert isinstance(read_message(back), Ping)
                back.sendall(encode(Pong(header)))

                def gone() -> bool:
                    text = node.client().execute_command("CLUSTER", "NODES").decode()
                    return len(text.splitlines()) == 1

                wait_for(gone, "the handshake with a bad name dropped")
                client = node.client()
                assert client.execute_command("CLUSTER", "SAVECONFIG") == b"OK"
                conf = (node.data_dir / "nodes.conf").read_text()
                assert len(parse_nodes_conf(conf, int(time.time() * 1000))) == 1
                assert client.ping()
    finally:
        node.stop()
