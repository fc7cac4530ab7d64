"""The cluster bus transport: links to and from peers on the bus port, nothing more (asyncio).

    bus = BusTransport(port, on_message, on_link_up=..., on_link_down=...)
    await bus.start()                          # listen; inbound links appear by themselves
    bus.connect(("127.0.0.1", 17711))          # a MEET target: keyed by address
    bus.rename(("127.0.0.1", 17711), name)     # ... once its PONG told its name
    bus.connect(name, ("127.0.0.1", 17712))    # a node learned by name (gossip, nodes.conf)
    bus.send(name, message)                    # on our outbound link to that peer
    link.send(Pong(...))                       # in on_message: reply on the request's link
    await bus.close()                          # nothing left running

Membership (who is in the cluster, what a PING means) lives above; this package part only
moves frames: link.py is one connection (framing, decoding, the bounded send buffer),
peer.py one outbound peer (connect, backoff), this module the listener, the peer keys and
the callbacks. How C Disque 1.0-rc1 uses links (cluster.c), and what is done here for each:

1. A `clusterLink` is one TCP connection: ctime, fd, an unbounded sndbuf and rcvbuf, and
   `node`, which is NULL on every inbound link (accepted links are never tied to a node).
   Each known node has at most one outbound link (`node->link`). clusterCron, 10 times a
   second, opens one for every node other than myself / NOADDR that has none, to ip:port +
   10000, and queues a MEET on it (node flagged MEET, i.e. added by CLUSTER MEET) or else a
   PING before anything else. A failed connect is simply retried on the next tick, ~10 SYNs
   a second with no backoff. -- Here: one `OutboundPeer` per key, connected at once by
   `connect()` and after a loss reconnected with exponential backoff and jitter (`Backoff`,
   100 ms doubling to 5 s), cut short when the node's own messages arrive on an inbound
   link (it is up: at most one early connect per 100 ms). `on_link_up(link)` runs as
   soon as the connection is made and before the frames queued while connecting:
   membership sends its MEET or PING there, so it is the first frame on the link, as in
   Disque.
2. Who sends what on which link: PONG is the only message written on the link its request
   (PING or MEET) arrived on. Everything a node originates -- PING, MEET, FAIL, REPLJOB, and
   also answers such as GOTJOB, GOTACK, QUEUED, YOURJOBS -- goes on its own outbound link to
   the destination; with no link it is not sent at all (best effort; broadcasts skip
   link-less and HANDSHAKE nodes). Two nodes thus share two connections, each carrying one
   node's requests one way and the other's PONGs back. -- Here: `send(key, message)` writes
   on the peer's outbound link; frames sent while it is connecting are held (bounded) and
   flushed once it is up; while it waits to reconnect, `send` refuses (False) as Disque
   would. on_message gets the link a message came on, so a PONG goes back by `link.send`.
3. Names: every message is attributed by its header's `sender` (clusterLookupNode), never
   by its link; a message from an unknown sender is ignored, except MEET. A MEET from an
   unknown sender adds a HANDSHAKE node with a random name, the inbound socket's peer IP and
   the header's (client) port; it is answered with PONG, and the cron then connects to that
   node and PINGs it. A HANDSHAKE node (also what CLUSTER MEET creates, flagged MEET too)
   learns its real name from the header of the first PING/PONG/MEET read on its *outbound*
   link, the PONG: it is renamed and loses HANDSHAKE, or, if that name is already known,
   deleted with its link while the known node's address is updated. Handshake nodes that
   never answer are deleted after max(node timeout, 1 s). -- Here: an inbound link is never
   keyed; `link.sender` holds the first header's sender on any link, and `link.remote` the
   socket's peer address (what Disque records as the node's IP). The transport ignores no
   sender and renames nothing by itself: membership calls `rename(address, name)` (or
   `forget(address)` when the name is already known) and `connect(name, address)`.
4. A PING/PONG on an outbound link whose sender is not the (non-handshake) node it belongs
   to frees the link and flags the node NOADDR. -- Here: membership's `link.close()` /
   `forget()`.
5. A PING on an inbound link from a known node whose socket IP or header port differ from
   the recorded address updates the address and frees node->link, so the cron reconnects
   there (nodeUpdateAddressIfNeeded); a MEET sets the node's own IP from the inbound
   socket's local address. -- Here: `move(key, address)`; outbound links are opened from
   the listening host (not a wildcard), so that the address peers see is ours.
6. An outbound link older than the node timeout whose PING has waited more than half of it
   for a PONG is freed and reconnected. -- Here: `reset(key)`, membership's decision.
7. Reading: the first 8 bytes must be "DbuZ" and totlen >= 144, or the link is dropped with
   "Bad message length or signature received from Cluster bus"; no upper bound on totlen.
   A complete message with ver != 1, or whose totlen does not match its type's layout, is
   ignored and the link kept; EOF or a read error frees the link. -- Here: a FrameReader
   with a maximum (`max_frame`) refuses a bad signature, a totlen out of bounds, an unknown
   type or a totlen its type contradicts, and `decode` a bad job area: the link is dropped
   with one log line (reason, peer, stream offset), never the node. Stricter than Disque
   on lengths (a lying totlen leaves no trustworthy boundary). ver != 1 is ignored with the
   link kept, as in Disque (`link.ignored` counts it).
8. Writing: sndbuf grows without limit; a write error frees the link, discarding both
   buffers (freeClusterLink). -- Here: a send buffer bounded by `max_send_buffer`; a peer
   that stops reading gets its link dropped (logged), an outbound one reconnects after
   backoff. Closing aborts: unsent bytes are discarded, as Disque does.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from .codec import DEFAULT_MAX_FRAME, encode
from .link import BusLink, PeerKey, describe_key
from .messages import Message
from .peer import Backoff, OutboundPeer

__all__ = [
    "DEFAULT_MAX_SEND_BUFFER",
    "Backoff",
    "BusLink",
    "BusTransport",
    "OutboundPeer",
    "PeerKey",
    "TransportStats",
]

log = logging.getLogger("conveyor.cluster")

DEFAULT_MAX_SEND_BUFFER = 16 * 1024 * 1024
DEFAULT_MAX_INBOUND = 1024
# An inbound link that has not brought one whole frame by then is closed. A node sends its
# PING or MEET as soon as its link is up (Disque's cron does too), so only a connection
# that speaks no bus (or not our cluster-password) waits that long: without a deadline it
# would hold one of the max_inbound slots for as long as it stays open.
DEFAULT_FIRST_FRAME_S = 10.0
# Disque's cron tries a missing link this often; hearing from a peer wakes ours no sooner.
WAKE_INTERVAL_S = 0.1

OnMessage = Callable[[BusLink, Message], None]
OnLinkUp = Callable[[BusLink], None]
OnLinkDown = Callable[[BusLink, str], None]


@dataclass
class TransportStats:
    accepted: int = 0  # inbound links accepted
    refused: int = 0  # inbound links closed at once: over max_inbound, or closing
    messages_in: int = 0  # messages handed to on_message
    callback_errors: int = 0  # exceptions raised by our callbacks (logged, swallowed)


class BusTransport:
    """Listens on the bus port, keeps one outbound link per peer, hands messages up.

    Callbacks are plain functions called on the event loop: `on_message(link, message)`
    for every message read on any link, `on_link_up(link)` when a link is made (inbound or
    outbound; for an outbound one, before queued frames go out), `on_link_down(link,
    reason)` when one is lost. An exception from a callback is logged and swallowed; no
    callback runs once `close()` has begun.
    """

    def __init__(
        self,
        port: int,
        on_message: OnMessage,
        *,
        host: str = "127.0.0.1",
        on_link_up: OnLinkUp | None = None,
        on_link_down: OnLinkDown | None = None,
        max_frame: int = DEFAULT_MAX_FRAME,
        max_send_buffer: int = DEFAULT_MAX_SEND_BUFFER,
        max_inbound: int = DEFAULT_MAX_INBOUND,
        first_frame_s: float = DEFAULT_FIRST_FRAME_S,
        mac_key: bytes | None = None,
        tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None,
        backoff: Backoff | None = None,
        connect_timeout: float = 5.0,
        rng: random.Random | None = None,
    ) -> None:
        self.host = host
        self.max_frame = max_frame
        self.max_send_buffer = max_send_buffer
        self.max_inbound = max_inbound
        self.first_frame_s = first_frame_s
        self.mac_key = mac_key  # cluster-password: frames sealed both ways (framing.py)
        # tls-cluster: (listening, connecting) contexts; every link is TLS both ways.
        self.tls_listen, self.tls_connect = tls if tls is not None else (None, None)
        self.backoff = backoff or Backoff()
        self.connect_timeout = connect_timeout
        self.rng = rng or random.Random()
        self.stats = TransportStats()
        self._port = port
        self._on_message = on_message
        self._on_link_up = on_link_up
        self._on_link_down = on_link_down
        self._server: asyncio.Server | None = None
        self._peers: dict[PeerKey, OutboundPeer] = {}
        self._inbound: set[BusLink] = set()
        self._first_frame_due: dict[BusLink, asyncio.TimerHandle] = {}
        self._dying: set[asyncio.Task[None]] = set()
        self._closing = False
        self.unflushed: set[BusLink] = set()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Listen on (host, port); port 0 picks a free one (see `port`)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: self._new_link(None),
            self.host,
            self._port,
            reuse_address=True,
            backlog=511,
            ssl=self.tls_listen,
        )
        self._port = self._server.sockets[0].getsockname()[1]

    @property
    def port(self) -> int:
        """The bus port listened on (the real one once started with 0)."""
        return self._port

    async def close(self) -> None:
        """Stop listening, drop every link, cancel every timer and task; wait for all that."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        peers = list(self._peers.values())
        self._peers.clear()
        tasks = [task for peer in peers if (task := peer._close()) is not None]
        links = [peer.link for peer in peers if peer.link is not None] + list(self._inbound)
        for timer in self._first_frame_due.values():
            timer.cancel()
        self._first_frame_due.clear()
        for link in links:
            link.close("transport closed")
        await asyncio.gather(*tasks, *self._dying, return_exceptions=True)
        # Aborted transports report connection_lost on a later iteration: wait for it, so
        # that no callback of ours is left scheduled once close() returns.
        async with asyncio.timeout(10):
            await asyncio.gather(*(link.wait_closed() for link in links))
            if self._server is not None:
                await self._server.wait_closed()

    # ------------------------------------------------------------------ peers

    @property
    def peers(self) -> Mapping[PeerKey, OutboundPeer]:
        return MappingProxyType(self._peers)

    @property
    def inbound(self) -> frozenset[BusLink]:
        return frozenset(self._inbound)

    def peer(self, key: PeerKey) -> OutboundPeer | None:
        return self._peers.get(key)

    def connect(self, key: PeerKey, address: tuple[str, int] | None = None) -> OutboundPeer:
        """The outbound peer for `key`, created and connecting now if new.

        `address` is the peer's bus address (host, client port + 10000); it defaults to
        the key when the key is an address. A known key given a new address moves there.
        """
        if address is None:
            if not isinstance(key, tuple):
                raise ValueError(f"connect({describe_key(key)}) needs an address")
            address = key
        peer = self._peers.get(key)
        if peer is not None:
            if peer.address != address:
                self.move(key, address)
            return peer
        if self._closing:
            raise RuntimeError("the bus transport is closed")
        peer = OutboundPeer(self, key, address)
        self._peers[key] = peer
        peer._start()
        return peer

    def rename(self, old: PeerKey, new: PeerKey) -> OutboundPeer:
        """Re-key a peer (a MEET target keyed by address, once its name is known).

        KeyError if `old` is unknown; ValueError if `new` is taken: then Disque deletes the
        handshake node, here `forget(old)`.
        """
        if new in self._peers:
            raise ValueError(f"bus peer {describe_key(new)} already exists")
        peer = self._peers.pop(old)
        peer.key = new
        self._peers[new] = peer
        return peer

    def move(self, key: PeerKey, address: tuple[str, int]) -> None:
        """Connect to a peer at a new address: its current link is dropped."""
        peer = self._peers[key]
        peer.address = address
        peer.failures = 0
        peer._restart()

    def reset(self, key: PeerKey, reason: str = "reset") -> None:
        """Drop the peer's link; it reconnects after the usual backoff."""
        peer = self._peers[key]
        if peer.link is not None:
            log.info("bus: resetting %s: %s", peer.link.describe(), reason)
            peer.link.close(reason)

    def forget(self, key: PeerKey) -> None:
        """Drop the peer and its link for good (no reconnect). Unknown keys are ignored."""
        peer = self._peers.pop(key, None)
        if peer is not None and (task := peer._close()) is not None:
            self._abandon(task)

    def _abandon(self, task: asyncio.Task[None]) -> None:
        # A cancelled connect ends on a later iteration: close() waits for it.
        task.cancel()
        self._dying.add(task)
        task.add_done_callback(self._dying.discard)

    # ------------------------------------------------------------------ sending

    def send(self, key: PeerKey, message: Message) -> bool:
        """Queue a message on the peer's outbound link; False if it cannot go (no such
        peer, no link now, or the link just got dropped). Bus messages are best effort."""
        peer = self._peers.get(key)
        if peer is None:
            return False
        return peer.write(encode(message))

    def flush(self) -> None:
        """Write what the links hold now rather than at the end of the loop's turn: the
        copies of one client's synchronous ADDJOBs leave while the node goes on with the
        next client's requests, so the other nodes work in parallel with it."""
        for link in list(self.unflushed):
            link.flush_now()

    def broadcast(self, keys: Iterable[PeerKey], message: Message) -> int:
        """Send one message to several peers, encoded once; how many took it."""
        frame = encode(message)
        sent = 0
        for key in keys:
            peer = self._peers.get(key)
            if peer is not None and peer.write(frame):
                sent += 1
        return sent

    # ------------------------------------------------------------------ links report here

    def _source_address(self) -> tuple[str, int] | None:
        # Disque records a node's IP from the peer address of the node's connections.
        if self.host in ("", "0.0.0.0", "::"):
            return None
        return (self.host, 0)

    def _new_link(self, peer: OutboundPeer | None, attempt: int = 0) -> BusLink:
        return BusLink(
            self,
            peer=peer,
            attempt=attempt,
            max_frame=self.max_frame,
            max_send_buffer=self.max_send_buffer,
            mac_key=self.mac_key,
        )

    def _link_made(self, link: BusLink) -> None:
        if link.peer is None:
            if self._closing or len(self._inbound) >= self.max_inbound:
                self.stats.refused += 1
                log.warning(
                    "bus: refused %s: %d inbound links", link.describe(), len(self._inbound)
                )
                link.close("refused")
                return
            self._inbound.add(link)
            self.stats.accepted += 1
            self._first_frame_due[link] = asyncio.get_running_loop().call_later(
                self.first_frame_s, self._first_frame_missing, link
            )
            self._call(self._on_link_up, link)
            return
        if not link.peer._linked(link):
            link.close("not wanted any more")
            return
        self._call(self._on_link_up, link)
        link.peer._flush_pending()

    def _link_message(self, link: BusLink, message: Message) -> None:
        if link.peer is not None:
            link.peer.failures = 0
        else:
            # The sender is up and talks to us: our own link to it need not wait out the
            # rest of a backoff (a restarted node would otherwise stay FAIL here for up to
            # 5 s, where Disque reconnects within 100 ms). At most one early connect per
            # WAKE_INTERVAL_S, however many frames it sends while our connects fail.
            waiting = self._peers.get(message.header.sender)
            if waiting is not None and waiting.state == "waiting":
                waiting.wake(WAKE_INTERVAL_S)
        self.stats.messages_in += 1
        self._call(self._on_message, link, message)

    def _first_frame_missing(self, link: BusLink) -> None:
        self._first_frame_due.pop(link, None)
        if link.frames_in == 0 and not link.closed:
            log.warning("bus: closed %s: no frame within %g s", link.describe(), self.first_frame_s)
            link.close(f"no frame within {self.first_frame_s:g} s")

    def _link_lost(self, link: BusLink, reason: str) -> None:
        if link.peer is None:
            if link not in self._inbound:
                return  # refused: never announced
            self._inbound.discard(link)
            if (timer := self._first_frame_due.pop(link, None)) is not None:
                timer.cancel()
        elif not link.peer._unlinked(link):
            return
        self._call(self._on_link_down, link, reason)

    def _call(self, callback: Callable[..., None] | None, *args: object) -> None:
        if callback is None or self._closing:
            return
        try:
            callback(*args)
        except Exception:
            self.stats.callback_errors += 1
            log.exception("bus: callback %s failed", getattr(callback, "__name__", callback))
