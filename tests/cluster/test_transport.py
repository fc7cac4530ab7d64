"""The bus transport on real sockets (127.0.0.1, ports picked by the kernel): messages of
every type both ways, reconnecting with backoff, bad frames and non-reading peers dropped
link by link, and nothing left running after close. No timing assertions: every wait is
for an event or a counter, with a generous bound."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections.abc import Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from conveyor.cluster.codec import decode, encode
from conveyor.cluster.messages import (
    NODE_MYSELF,
    Fail,
    GotJob,
    Header,
    Message,
    Ping,
    Pong,
    ReplJob,
)
from conveyor.cluster.transport import Backoff, BusLink, BusTransport, OutboundPeer
from conveyor.core.codec import JobRecord

from .recording import recorded_messages

NAME_A = b"a" * 40
NAME_B = b"b" * 40
JOB_ID = b"D-46823169-q7+ExLFVVSR7e6Avb/dysiXW-05a1"
HEADER_A = Header(sender=NAME_A, port=7711, flags=NODE_MYSELF)
HEADER_B = Header(sender=NAME_B, port=7712, flags=NODE_MYSELF)
FAST = Backoff(initial=0.01, maximum=0.08, jitter=0.2)
LOCAL = "127.0.0.1"


def job(body_size: int) -> JobRecord:
    return JobRecord(JOB_ID, 0, 0, 0, 3, 86401, 1, 0, 300, 0, 0, b"q", bytes(body_size), ())


async def until(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Wait for a condition; the bound is generous, so failing it means it never happened."""
    step = 0.005
    for _ in range(int(timeout / step)):
        if predicate():
            return
        await asyncio.sleep(step)
    raise AssertionError(f"gave up waiting for {what}")


class Node:
    """A transport plus what its callbacks saw. `answer` replies PONG to PING/MEET on the
    link they came on, as Disque does (and what resets a peer's failure count)."""

    def __init__(
        self,
        header: Header,
        *,
        port: int = 0,
        answer: bool = True,
        echo: bool = False,
        **options: Any,
    ) -> None:
        self.header = header
        self.answer = answer
        self.echo = echo  # send every message back on the link it came on
        self.received: list[tuple[BusLink, Message]] = []
        self.up: list[BusLink] = []
        self.down: list[tuple[BusLink, str]] = []
        self.greeting: Message | None = None  # sent first on every outbound link
        self.bus = BusTransport(
            port,
            self.on_message,
            on_link_up=self.on_up,
            on_link_down=lambda link, reason: self.down.append((link, reason)),
            **options,
        )

    def on_message(self, link: BusLink, message: Message) -> None:
        self.received.append((link, message))
        if self.echo:
            assert link.send(message)
        elif self.answer and isinstance(message, Ping):
            link.send(Pong(self.header))

    def on_up(self, link: BusLink) -> None:
        self.up.append(link)
        if not link.inbound and self.greeting is not None:
            link.send(self.greeting)

    def messages(self) -> list[Message]:
        return [message for _, message in self.received]


@asynccontextmanager
async def nodes(*headers: Header, **options: Any) -> Any:
    started = [Node(header, **options) for header in headers]
    try:
        for node in started:
            await node.bus.start()
        yield started
    finally:
        for node in started:
            await node.bus.close()


def remaining_timers() -> list[asyncio.TimerHandle]:
    scheduled = getattr(asyncio.get_running_loop(), "_scheduled", [])
    return [handle for handle in scheduled if not handle.cancelled()]


# ------------------------------------------------------------------------ messages


async def test_every_recorded_message_type_goes_both_ways() -> None:
    recorded = [decode(m.raw) for m in recorded_messages()]
    assert len({type(m) for m in recorded}) == 16 and len(recorded) == 238
    async with nodes(HEADER_A, HEADER_B, echo=True, answer=False) as (a, b):
        a.echo = False  # A only collects what B sends back
        a.greeting = Ping(HEADER_A)
        key = (LOCAL, b.bus.port)
        peer = a.bus.connect(key)
        # Sent at once: held while connecting, then flushed after the greeting.
        assert all(a.bus.send(key, message) for message in recorded)
        await until(lambda: len(a.received) == 239, "the echoes")
        link = peer.link
    assert b.messages() == [Ping(HEADER_A), *recorded]
    assert [encode(m) for m in b.messages()[1:]] == [m.raw for m in recorded_messages()]
    assert a.messages() == b.messages()
    (inbound,) = {link for link, _ in b.received}
    assert inbound.inbound and inbound.sender == NAME_A and inbound.frames_in == 239
    (outbound,) = {link for link, _ in a.received}
    assert outbound is link and not outbound.inbound
    assert outbound.sender == NAME_A  # the echoed greeting
    assert inbound.remote == outbound.local  # what Disque records as our address


async def test_broadcast_encodes_once_and_counts_the_peers_that_took_it() -> None:
    async with nodes(HEADER_A, HEADER_B, HEADER_B._replace(sender=b"c" * 40)) as (a, b, c):
        a.bus.connect(NAME_B, (LOCAL, b.bus.port))
        a.bus.connect(b"c" * 40, (LOCAL, c.bus.port))
        fail = Fail(HEADER_A, b"d" * 40)
        assert a.bus.broadcast([NAME_B, b"c" * 40, b"e" * 40], fail) == 2
        await until(lambda: bool(b.received and c.received), "both copies")
        assert b.messages() == c.messages() == [fail]
        assert not a.bus.send(b"e" * 40, fail)  # no such peer: nothing to send on


async def test_rename_move_and_forget() -> None:
    async with nodes(HEADER_A, HEADER_B, HEADER_B) as (a, b, b2):
        address = (LOCAL, b.bus.port)
        peer = a.bus.connect(address)
        await until(lambda: peer.state == "connected", "the MEET link")
        assert a.bus.rename(address, NAME_B) is peer and a.bus.peer(address) is None
        assert a.bus.send(NAME_B, GotJob(HEADER_A, JOB_ID))
        await until(lambda: bool(b.received), "GOTJOB")
        with pytest.raises(ValueError, match="already exists"):
            a.bus.rename(NAME_B, NAME_B)
        first = peer.link
        a.bus.move(NAME_B, (LOCAL, b2.bus.port))  # nodeUpdateAddressIfNeeded
        await until(lambda: peer.link is not None and peer.link is not first, "the new link")
        assert first is not None and first.closed
        assert a.bus.send(NAME_B, GotJob(HEADER_A, JOB_ID))
        await until(lambda: bool(b2.received), "GOTJOB at the new address")
        link = peer.link
        a.bus.forget(NAME_B)
        await until(lambda: link is not None and link in {d for d, _ in a.down}, "link down")
        assert peer.state == "closed" and a.bus.peer(NAME_B) is None
        assert not a.bus.send(NAME_B, GotJob(HEADER_A, JOB_ID))


async def test_a_failing_callback_is_logged_and_the_link_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with nodes(HEADER_A, HEADER_B) as (a, b):
        seen: list[Message] = []

        def fragile(link: BusLink, message: Message) -> None:
            seen.append(message)
            if len(seen) == 1:
                raise RuntimeError("membership bug")

        b.bus._on_message = fragile
        a.bus.connect(NAME_B, (LOCAL, b.bus.port))
        a.bus.send(NAME_B, Fail(HEADER_A, NAME_A))
        a.bus.send(NAME_B, Fail(HEADER_A, NAME_B))
        await until(lambda: len(seen) == 2, "both messages")
        assert b.bus.stats.callback_errors == 1
        assert "membership bug" in caplog.text
        assert a.bus.peers[NAME_B].state == "connected"


# ------------------------------------------------------------------------ reconnecting


async def test_reconnect_after_the_peer_restarts_with_growing_backoff() -> None:
    async with nodes(HEADER_A, backoff=FAST) as (a,):
        b = Node(HEADER_B)
        await b.bus.start()
        port = b.bus.port
        a.greeting = Ping(HEADER_A)
        peer = a.bus.connect(NAME_B, (LOCAL, port))
        await until(lambda: Pong(HEADER_B) in a.messages(), "PONG")
        assert peer.failures == 0 and peer.connects == 1 and not peer.delays
        await b.bus.close()
        await until(lambda: peer.failures >= 6, "six failures in a row")
        # Each wait doubles from the initial delay up to the maximum, minus jitter.
        for failures, delay in enumerate(list(peer.delays)[:6], start=1):
            base = FAST.base(failures)
            assert base * (1 - FAST.jitter) <= delay <= base
        assert [FAST.base(n) for n in range(1, 7)] == [0.01, 0.02, 0.04, 0.08, 0.08, 0.08]
        restarted = Node(HEADER_B, port=port)
        await restarted.bus.start()
        try:
            await until(lambda: peer.connects == 2, "the reconnect")
            await until(lambda: bool(restarted.received), "the greeting on the new link")
            await until(lambda: peer.failures == 0, "a PONG on the new link")
            assert restarted.messages()[0] == Ping(HEADER_A)
            assert peer.attempts == 1 + len(peer.delays)  # every retry waited its delay
        finally:
            await restarted.bus.close()


SLOW = Backoff(initial=3600.0, maximum=3600.0, jitter=0.0)


async def waiting_for_restarted(a: Node, b: Node) -> OutboundPeer:
    """A's link to B, which failed while B's bus was down, B's bus back up on its port:
    an hour of backoff left to wait."""
    port = b.bus.port
    await b.bus.close()
    peer = a.bus.connect(NAME_B, (LOCAL, port))
    await until(lambda: peer.state == "waiting", "the first failure")
    b.bus = BusTransport(port, b.on_message, backoff=SLOW)
    await b.bus.start()
    return peer


async def test_wake_skips_the_rest_of_a_backoff() -> None:
    async with nodes(HEADER_A, HEADER_B, backoff=SLOW) as (a, b):
        peer = await waiting_for_restarted(a, b)
        assert peer.state == "waiting"
        peer.wake()  # e.g. membership just heard from the node on an inbound link
        await until(lambda: peer.state == "connected", "the early reconnect")
        assert peer.failures == 1 and list(peer.delays) == [3600.0]


async def test_a_message_from_the_node_cuts_our_backoff_to_it_short() -> None:
    # A restarted node is heard from on its own link before ours to it reconnects: ours
    # connects then, not an hour later (or, with the defaults, up to 5 s later).
    async with nodes(HEADER_A, HEADER_B, backoff=SLOW) as (a, b):
        peer = await waiting_for_restarted(a, b)
        back = b.bus.connect(NAME_A, (LOCAL, a.bus.port))
        await until(lambda: back.state == "connected", "B's link to A")
        for _ in range(2000):  # B pings A, as a node does its peers
            if peer.state == "connected":
                break
            b.bus.send(NAME_A, Ping(HEADER_B))
            await asyncio.sleep(0.01)
        assert peer.state == "connected"
        assert peer.failures == 1 and list(peer.delays) == [3600.0]


async def test_messages_from_a_node_we_cannot_reach_wake_our_link_at_most_every_100_ms() -> None:
    # Our link to B cannot connect (its address is a port bound but not listening: refused,
    # and no other test can take it meanwhile, as one merely closed could be) while B
    # floods us with frames: each frame may cut the backoff short, but connects stay
    # rate-limited.
    with socket.socket() as refusing:
        refusing.bind((LOCAL, 0))
        dead_port = refusing.getsockname()[1]
        async with nodes(HEADER_A, HEADER_B, backoff=SLOW) as (a, b):
            peer = a.bus.connect(NAME_B, (LOCAL, dead_port))
            await until(lambda: peer.state == "waiting", "the first failure")
            back = b.bus.connect(NAME_A, (LOCAL, a.bus.port))
            await until(lambda: back.state == "connected", "B's link to A")
            loop = asyncio.get_running_loop()
            started = loop.time()
            heard = len(a.received)
            for _ in range(100):
                for _ in range(20):
                    b.bus.send(NAME_A, Ping(HEADER_B))
                await asyncio.sleep(0.005)
            await until(lambda: len(a.received) >= heard + 2000, "B's 2,000 pings")
            elapsed = loop.time() - started
            assert peer.attempts >= 2  # woken at least once
            assert peer.attempts <= 2 + elapsed / 0.1
            assert peer.state in ("waiting", "connecting")


async def test_reset_drops_the_link_and_reconnects() -> None:
    async with nodes(HEADER_A, HEADER_B, backoff=FAST) as (a, b):
        peer = a.bus.connect(NAME_B, (LOCAL, b.bus.port))
        await until(lambda: peer.state == "connected", "the link")
        first = peer.link
        a.bus.reset(NAME_B, "PONG overdue")  # membership's PONG timeout
        await until(lambda: peer.connects == 2 and peer.state == "connected", "a new link")
        assert first is not None and first.close_reason == "PONG overdue"
        assert [link for link, _ in a.down] == [first]


async def test_inbound_links_beyond_the_maximum_are_refused() -> None:
    async with nodes(HEADER_A, max_inbound=1) as (a,):
        first = await asyncio.open_connection(LOCAL, a.bus.port)
        await until(lambda: len(a.bus.inbound) == 1, "the first link")
        second = await asyncio.open_connection(LOCAL, a.bus.port)
        assert await asyncio.wait_for(closed_by_peer(second[0]), 20)
        assert a.bus.stats.refused == 1 and a.bus.stats.accepted == 1
        assert len(a.bus.inbound) == 1 and len(a.up) == 1
        for _, writer in (first, second):
            writer.close()


# ------------------------------------------------------------------------ bad peers


async def test_an_inbound_link_without_a_frame_is_closed_at_the_deadline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A connection that speaks no bus would otherwise hold an inbound slot for as long as
    # it stays open; one that sent a frame in time is kept past the deadline.
    caplog.set_level(logging.WARNING, logger="conveyor.cluster")
    async with nodes(HEADER_A, first_frame_s=0.2) as (a,):
        silent_reader, silent = await asyncio.open_connection(LOCAL, a.bus.port)
        talker_reader, talker = await asyncio.open_connection(LOCAL, a.bus.port)
        talker.write(encode(Fail(HEADER_B, NAME_A)))
        assert await asyncio.wait_for(closed_by_peer(silent_reader), 20)
        await until(lambda: len(a.bus.inbound) == 1, "the silent link gone")
        (kept,) = a.bus.inbound
        assert kept.frames_in == 1 and not kept.closed
        port = silent.get_extra_info("sockname")[1]
        assert any(
            f":{port}:" in r.getMessage() and "no frame within 0.2 s" in r.getMessage()
            for r in caplog.records
        )
        assert not a.bus._first_frame_due  # no timer left for either link
        for writer in (silent, talker):
            writer.close()
        assert not talker_reader.at_eof()


def raw_frame(kind: int, payload: bytes, *, ver: int = 1, totlen: int | None = None) -> bytes:
    size = 144 + len(payload) if totlen is None else totlen
    head = b"DbuZ" + struct.pack(">IHHHH", size, ver, 0, kind, 0) + NAME_B + bytes(80)
    return head + struct.pack(">HHBBBB", 7712, 4, 0, 0, 0, 0) + payload


def bad_streams() -> Iterator[tuple[str, bytes, str]]:
    fail = encode(Fail(HEADER_B, NAME_A))
    yield "garbage", b"hello, world", "bad signature: byte b'h' at offset 0"
    yield "oversized", raw_frame(0, b"", totlen=1 << 20), "totlen 1048576 at offset 4 is above"
    late = f"offset 3, expected b'DbuZ' (frame at stream offset {len(fail)})"
    yield "late bad signature", fail + b"DbuX" + bytes(200), late
    corrupt = bytearray(encode(ReplJob(HEADER_B, (job(200),))))
    corrupt[152] ^= 0xFF  # the job's own length prefix: framing is fine, decoding is not
    yield "bad job area", fail + bytes(corrupt), "job area at offset 152 (numjobs 1): "


async def closed_by_peer(reader: asyncio.StreamReader) -> bool:
    try:
        return await reader.read() == b""
    except ConnectionResetError:  # abort with bytes still unread sends RST
        return True


async def test_bad_frames_drop_only_their_link(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="conveyor.cluster")
    async with nodes(HEADER_A, HEADER_B, max_frame=64 * 1024) as (a, b):
        b.bus.connect(NAME_A, (LOCAL, a.bus.port))
        b.bus.send(NAME_A, GotJob(HEADER_B, JOB_ID))
        await until(lambda: len(a.received) == 1, "the good peer's first message")
        cases = list(bad_streams())
        clients = [await asyncio.open_connection(LOCAL, a.bus.port) for _ in cases]
        for (_, data, _), (_, writer) in zip(cases, clients, strict=True):
            writer.write(data)
        for reader, _ in clients:  # each bad link is closed by the transport
            assert await asyncio.wait_for(closed_by_peer(reader), 20)
        for (name, _, reason), (_, writer) in zip(cases, clients, strict=True):
            port = writer.get_extra_info("sockname")[1]
            lines = [r.getMessage() for r in caplog.records if f":{port}:" in r.getMessage()]
            assert len(lines) == 1, name
            assert "dropped inbound link #" in lines[0] and f"from 127.0.0.1:{port}" in lines[0]
            assert reason in lines[0], (name, lines[0])
            writer.close()
        # The good link is untouched and still served; frames before a bad one were used.
        b.bus.send(NAME_A, GotJob(HEADER_B, JOB_ID))
        await until(lambda: len(a.received) == 4, "the good peer's second message")
        assert a.messages().count(Fail(HEADER_B, NAME_A)) == 2
        assert b.bus.peers[NAME_A].state == "connected" and b.bus.peers[NAME_A].connects == 1


async def test_another_protocol_version_is_ignored_and_the_link_kept() -> None:
    async with nodes(HEADER_A) as (a,):
        _, writer = await asyncio.open_connection(LOCAL, a.bus.port)
        fail = encode(Fail(HEADER_B, NAME_A))
        writer.write(fail[:8] + b"\x00\x02" + fail[10:] + fail)
        await until(lambda: bool(a.received), "the version-1 message")
        (link,) = a.bus.inbound
        assert a.messages() == [Fail(HEADER_B, NAME_A)] and link.ignored == 1
        assert not link.closed
        writer.close()


async def test_a_peer_that_never_reads_is_dropped_at_the_buffer_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="conveyor.cluster")
    limit = 256 * 1024
    accepted: list[asyncio.StreamWriter] = []

    async def deaf(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # keeps the socket open and never reads from it

    server = await asyncio.start_server(deaf, LOCAL, 0)
    try:
        async with nodes(HEADER_A, backoff=FAST, max_send_buffer=limit) as (a,):
            address = (LOCAL, server.sockets[0].getsockname()[1])
            peer = a.bus.connect(address)
            await until(lambda: peer.state == "connected", "the link")
            link = peer.link
            assert link is not None
            big = ReplJob(HEADER_A, (job(60_000),))
            sent = 0
            for _ in range(20_000):  # ~1.2 GB at most; loopback buffers hold a few MB
                if not a.bus.send(address, big):
                    break
                sent += 1
                await asyncio.sleep(0)  # let the coalesced write reach the socket
            assert link.closed and "peer not reading" in (link.close_reason or "")
            assert sent > limit // 60_000 and link.peak_send_buffer <= limit
            drops = [r for r in caplog.records if "peer not reading" in r.getMessage()]
            assert len(drops) == 1 and f"to {address[0]}:{address[1]}" in drops[0].getMessage()
            await until(lambda: peer.connects == 2, "the reconnect after the drop")
    finally:
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()


# ------------------------------------------------------------------------ closing


async def test_closing_leaves_no_task_timer_or_link() -> None:
    a, b = Node(HEADER_A, backoff=Backoff(initial=3600.0, maximum=3600.0)), Node(HEADER_B)
    await a.bus.start()
    await b.bus.start()
    dead = BusTransport(0, b.on_message)
    await dead.start()
    dead_port = dead.port
    await dead.close()
    connected = a.bus.connect(NAME_B, (LOCAL, b.bus.port))
    waiting = a.bus.connect((LOCAL, dead_port))
    b.bus.connect(NAME_A, (LOCAL, a.bus.port))
    await until(lambda: connected.state == "connected", "A -> B")
    await until(lambda: waiting.state == "waiting", "A -> nowhere, waiting out its backoff")
    await until(lambda: len(a.bus.inbound) == 1 and len(b.bus.inbound) == 1, "B -> A")
    connecting = a.bus.connect((LOCAL, b.bus.port))  # closed before its connect can finish
    assert connecting.state == "connecting" and waiting.state == "waiting"
    if hasattr(asyncio.get_running_loop(), "_scheduled"):  # asyncio's loop, not uvloop
        assert remaining_timers()  # the waiting peer's backoff timer, among others
    links = [*a.bus.inbound, *b.bus.inbound, connected.link]
    await a.bus.close()
    await b.bus.close()
    assert asyncio.all_tasks() == {asyncio.current_task()}
    assert remaining_timers() == []
    assert all(link is not None and link.closed for link in links)
    assert {p.state for p in (connected, waiting, connecting)} == {"closed"}
    assert not a.bus.peers and not a.bus.inbound
    with pytest.raises(RuntimeError, match="closed"):
        a.bus.connect(NAME_B, (LOCAL, b.bus.port))
