"""The bus transport against a real C Disque 1.0-rc1 node (needs env DISQUE_SERVER, the
path of a built disque-server): we MEET it with a codec-built header, it answers PONG on our
link, connects back and PINGs us; once we PONG that, CLUSTER NODES on it lists our name."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from conveyor.cluster.messages import (
    NODE_MYSELF,
    GotJob,
    Header,
    Meet,
    Message,
    Ping,
    Pong,
    ReplJob,
)
from conveyor.cluster.transport import BusLink, BusTransport
from conveyor.core.codec import JobRecord

DISQUE_SERVER = os.environ.get("DISQUE_SERVER", "")
LOCAL = "127.0.0.1"
BUS_PORT_INCR = 10000  # Disque's CLUSTER_PORT_INCR
OUR_NAME = b"c0ffee" + b"0123456789abcdef0123456789abcdef01"
JOB_ID = b"D-c0ffee01-q7+ExLFVVSR7e6Avb/dysiXW-05a1"

pytestmark = pytest.mark.skipif(
    not DISQUE_SERVER,
    reason="interop with C Disque: set DISQUE_SERVER to the path of a built disque-server",
)


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((LOCAL, port))
        except OSError:
            return False
        return True


def client_port_with_free_bus_port() -> int:
    """A client port P <= 55535 (Disque's MEET limit) with P and P + 10000 both free."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 45000)
        if _bindable(port) and _bindable(port + BUS_PORT_INCR):
            return port
    raise RuntimeError("no free port pair on 127.0.0.1")


async def until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    step = 0.01
    for _ in range(int(timeout / step)):
        if predicate():
            return
        await asyncio.sleep(step)
    raise AssertionError(f"gave up waiting for {what}")


async def disque_command(port: int, *args: str) -> bytes:
    """One command over raw RESP; the reply's payload (bulk or status line)."""
    reader, writer = await asyncio.open_connection(LOCAL, port)
    try:
        parts = [f"*{len(args)}\r\n".encode()]
        for arg in args:
            parts.append(f"${len(arg)}\r\n{arg}\r\n".encode())
        writer.write(b"".join(parts))
        line = await reader.readline()
        if line[:1] != b"$" or line.startswith(b"$-"):
            return line.rstrip(b"\r\n")
        return (await reader.readexactly(int(line[1:]) + 2))[:-2]
    finally:
        writer.close()


@pytest.fixture
async def disque(tmp_path: Path) -> AsyncIterator[int]:
    port = client_port_with_free_bus_port()
    log = open(tmp_path / "disque.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [DISQUE_SERVER, "--port", str(port), "--bind", LOCAL, "--dir", str(tmp_path),
         "--cluster-config-file", "nodes.conf", "--loglevel", "verbose"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        for _ in range(500):
            try:
                if await disque_command(port, "PING") == b"+PONG":
                    break
            except OSError:
                pass  # not listening yet
            await asyncio.sleep(0.02)
        else:
            raise RuntimeError((tmp_path / "disque.log").read_text())
        yield port
    finally:
        process.terminate()
        process.wait(10)
        log.close()


class OurNode:
    """Just enough of a node for Disque to accept it: MEET first on our outbound link,
    PONG to every PING/MEET on the link it came on (what membership will do)."""

    def __init__(self) -> None:
        self.client_port = client_port_with_free_bus_port()
        self.header = Header(sender=OUR_NAME, port=self.client_port, flags=NODE_MYSELF)
        self.received: list[tuple[BusLink, Message]] = []
        self.bus = BusTransport(
            self.client_port + BUS_PORT_INCR, self.on_message, on_link_up=self.on_link_up
        )

    def on_message(self, link: BusLink, message: Message) -> None:
        self.received.append((link, message))
        if isinstance(message, Ping | Meet):
            link.send(Pong(self.header))

    def on_link_up(self, link: BusLink) -> None:
        if not link.inbound:
            link.send(Meet(self.header))  # first frame on the link, as clusterCron does

    def first(self, kind: type[Message]) -> tuple[BusLink, Message] | None:
        return next(((link, m) for link, m in self.received if isinstance(m, kind)), None)

    async def meet(self, disque: int) -> bytes:
        """MEET Disque; its name once it answered PONG and PINGed us back."""
        await self.bus.start()
        address = (LOCAL, disque + BUS_PORT_INCR)
        peer = self.bus.connect(address)
        their_name = await disque_command(disque, "CLUSTER", "MYID")
        await until(lambda: self.first(Pong) is not None, "Disque's PONG")
        link, pong = self.first(Pong) or (None, None)
        assert link is peer.link and pong is not None and pong.header.sender == their_name
        assert pong.header.port == disque and pong.header.flags & NODE_MYSELF
        self.bus.rename(address, their_name)  # its name is known now: handshake done
        await until(lambda: self.first(Ping) is not None, "Disque's PING")
        link, ping = self.first(Ping) or (None, None)
        assert link is not None and link.inbound and link.sender == their_name
        assert ping is not None and ping.header.sender == their_name
        return their_name


async def test_disque_meets_our_transport(disque: int) -> None:
    node = OurNode()
    try:
        await node.meet(disque)
        line = b""
        for _ in range(300):  # Disque renames its handshake node when our PONG arrives
            nodes = await disque_command(disque, "CLUSTER", "NODES")
            line = next((row for row in nodes.splitlines() if row.startswith(OUR_NAME)), b"")
            if line and b"handshake" not in line:
                break
            await asyncio.sleep(0.02)
        assert line.startswith(OUR_NAME + f" {LOCAL}:{node.client_port} ".encode()), nodes
        assert b"handshake" not in line and line.endswith(b" connected"), line
    finally:
        await node.bus.close()


async def test_disque_answers_repljob_with_gotjob_on_its_own_link(disque: int) -> None:
    node = OurNode()
    try:
        their_name = await node.meet(disque)
        job = JobRecord(
            JOB_ID, 0, 0, 0, 2, 86401, 1795344799062000000, 0, 300, 0, 0, b"q1", b"hello",
            (OUR_NAME, their_name),
        )  # fmt: skip
        # Disque only takes REPLJOB from a node it knows: resend until it has renamed us.
        for _ in range(300):
            assert node.bus.send(their_name, ReplJob(node.header, (job,)))
            await asyncio.sleep(0.02)
            if node.first(GotJob) is not None:
                break
        link, got = node.first(GotJob) or (None, None)
        assert isinstance(got, GotJob) and got.id == JOB_ID
        assert got.header.sender == their_name
        # Replies other than PONG travel on the replier's own outbound link: our inbound one.
        assert link is not None and link.inbound
        assert await disque_command(disque, "QLEN", "q1") == b":0"  # active, not queued
        shown = await disque_command(disque, "SHOW", JOB_ID.decode())
        assert shown.startswith(b"*") and shown != b"*-1", shown  # Disque holds a copy
    finally:
        await node.bus.close()
