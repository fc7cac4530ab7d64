"""Inbound bus links carry TCP keepalive: a node writes on an inbound link only to answer
a PING, so one whose peer vanished without a FIN (a crash, a partition) would otherwise
stay open for ever, each holding one of the transport's max_inbound slots until peers are
refused. In-process node, real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import random
import socket
from pathlib import Path

from conveyor.node.config import Config
from conveyor.node.server import Server
from tests.conftest import free_cluster_port

BUS_PORT_OFFSET = 10_000


async def test_an_inbound_bus_link_has_tcp_keepalive(tmp_path: Path) -> None:
    port = free_cluster_port()
    config = Config()
    config.set("dir", str(tmp_path))
    config.apply("port", [str(port)])
    config.apply("cluster-node-timeout", ["4000"])
    server = Server(config, "0" * 40, b"0" * 20, random.Random(1))
    await server.cluster.start()
    bus = server.cluster.bus
    assert bus is not None
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port + BUS_PORT_OFFSET)
        try:
            async with asyncio.timeout(10):
                while not bus.inbound:
                    await asyncio.sleep(0.01)
            (link,) = bus.inbound
            sock = link.sock
            assert sock is not None
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            # Twice the node timeout, as a dead peer is not noticed sooner by PINGs either.
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 8
        finally:
            writer.close()
    finally:
        await server.cluster.stop()
