"""The bus opens after the AOF is loaded: what nodes.conf asked for must still happen.

A node answers clients while it loads its AOF (LOADING errors, PING), before its bus
listens. Serving a command then carries out the cluster's pending actions, and the
Connects that nodes.conf left went nowhere without a bus: a restarted node never linked
out, though the other nodes linked to it. It received, and could send nothing (an ack
that never completed, CI runs that waited minutes for one).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from conveyor.node.config import Config
from conveyor.node.server import Server
from tests.conftest import free_cluster_port

BUS_PORT_OFFSET = 10_000
NAMES = ["1" * 40, "2" * 40]


async def test_nodes_conf_peers_are_linked_after_a_command_served_before_the_bus(
    tmp_path: Path,
) -> None:
    linked: set[int] = set()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        linked.add(writer.get_extra_info("sockname")[1])
        await reader.read()  # until the node goes
        writer.close()

    peer_ports = [free_cluster_port() for _ in NAMES]
    listeners = [
        await asyncio.start_server(accept, "127.0.0.1", port + BUS_PORT_OFFSET)
        for port in peer_ports
    ]
    port = free_cluster_port()
    (tmp_path / "nodes.conf").write_text(
        f"{'0' * 40} 127.0.0.1:{port} myself 0 0 connected\n"
        + "".join(
            f"{name} 127.0.0.1:{peer} noflags 0 0 connected\n"
            for name, peer in zip(NAMES, peer_ports, strict=True)
        )
    )
    config = Config()
    config.set("dir", str(tmp_path))
    config.apply("port", [str(port)])
    server = Server(config, "0" * 40, b"0" * 20, random.Random(1))
    server.cluster.load_config()
    server.after_io()  # what serving a client's PING during the AOF load does
    await server.cluster.start()
    try:
        async with asyncio.timeout(10):
            while len(linked) < len(NAMES):
                await asyncio.sleep(0.01)
        assert linked == {peer + BUS_PORT_OFFSET for peer in peer_ports}
    finally:
        await server.cluster.stop()
        for listener in listeners:
            listener.close()
