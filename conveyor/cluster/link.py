"""One TCP connection of the cluster bus (Disque's `clusterLink`), as an asyncio Protocol.

A link reads frames through a FrameReader, decodes them and hands each message to its
owner (the BusTransport); it writes encoded frames, coalesced once per loop iteration, into
a send buffer bounded by `max_send_buffer`. Anything wrong on the wire, or a peer that stops
reading, closes the link with one log line; nothing here raises into the event loop.

Which links exist, who sends what on them and when they reconnect: transport.py.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Protocol, cast

from .codec import FrameReader, decode, encode
from .framing import seal
from .layout import BusProtocolError
from .messages import PROTO_VER, Message

if TYPE_CHECKING:
    from .transport import OutboundPeer

__all__ = ["BusLink", "LinkOwner", "PeerKey", "describe_key"]

log = logging.getLogger("conveyor.cluster")

# An outbound peer is keyed by its 40-byte node name, or by its bus address (host, port)
# while the name is not known yet (a CLUSTER MEET target, as in Disque's handshake nodes).
PeerKey = bytes | tuple[str, int]


def describe_key(key: PeerKey | None) -> str:
    if key is None:
        return "?"
    if isinstance(key, bytes):
        return key.decode("latin-1")
    return f"{key[0]}:{key[1]}"


class LinkOwner(Protocol):
    """What a link reports to (BusTransport implements it)."""

    unflushed: set[BusLink]  # links holding frames for their end-of-turn write

    def _link_made(self, link: BusLink) -> None: ...
    def _link_message(self, link: BusLink, message: Message) -> None: ...
    def _link_lost(self, link: BusLink, reason: str) -> None: ...


class BusLink(asyncio.Protocol):
    """One bus connection: inbound (accepted, `peer` None) or outbound (`peer` is its owner).

    `sender` is the node name in the header of the first message read on the link: how a
    receiver learns who is at the other end (Disque has no other handshake). Later messages
    may carry another name; comparing them is membership's business, as is everything the
    name means.
    """

    _next_id = 0

    def __init__(
        self,
        owner: LinkOwner,
        *,
        peer: OutboundPeer | None,
        attempt: int = 0,
        max_frame: int,
        max_send_buffer: int,
        mac_key: bytes | None = None,
    ) -> None:
        BusLink._next_id += 1
        self.id = BusLink._next_id
        self.peer = peer
        self.attempt = attempt  # which of the peer's connects made it
        self.inbound = peer is None
        self.sender: bytes | None = None
        self.remote: tuple[str, int] | None = None  # the socket's peer address
        self.local: tuple[str, int] | None = None
        self.frames_in = 0
        self.bytes_in = 0
        self.frames_out = 0
        self.bytes_out = 0
        self.ignored = 0  # messages with a protocol version Disque ignores too
        self.peak_send_buffer = 0
        self.closed = False
        self.close_reason: str | None = None
        self._owner = owner
        self._max_send_buffer = max_send_buffer
        self._reader = FrameReader(max_frame, mac_key)
        self._mac_key = mac_key  # cluster-password: every frame sealed (framing.seal)
        self._stream_offset = 0  # of the next frame the reader will split off
        self._transport: asyncio.Transport | None = None
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_handle: asyncio.Handle | None = None
        # Kept: asyncio.get_running_loop() makes a getpid() system call in CPython 3.11.
        self._loop = loop = asyncio.get_running_loop()
        self.ctime = loop.time()  # Disque's link->ctime: membership times PONGs against it
        self._lost: asyncio.Future[None] = loop.create_future()

    # ------------------------------------------------------------------ description

    def __repr__(self) -> str:
        return f"<BusLink {self.describe()}>"

    def describe(self) -> str:
        """For log lines: direction, id, who and where."""
        where = f"{self.remote[0]}:{self.remote[1]}" if self.remote else "?"
        if self.peer is None:
            return f"inbound link #{self.id} from {where}"
        return f"outbound link #{self.id} to {describe_key(self.peer.key)} at {where}"

    @property
    def sock(self) -> Any:
        """The connection's socket (asyncio's TransportSocket), for socket options; None
        before it is made and once it is lost."""
        return self._transport.get_extra_info("socket") if self._transport else None

    @property
    def send_buffer(self) -> int:
        """Bytes written but not yet taken by the kernel."""
        queued = self._transport.get_write_buffer_size() if self._transport else 0
        return self._out_bytes + queued

    # ------------------------------------------------------------------ sending

    def send(self, message: Message) -> bool:
        """Encode and queue one message; False if the link is closed (or this closes it).

        A message that does not fit the layout is our bug, not the peer's: BusEncodeError
        propagates to the caller.
        """
        return self.write(encode(message))

    def write(self, frame: bytes) -> bool:
        """Queue one already-encoded frame (a broadcast encodes once, writes many)."""
        if self.closed or self._transport is None:
            return False
        if self._mac_key is not None:
            frame = seal(frame, self._mac_key)
        held = self.send_buffer
        # A peer that stopped reading would make the buffer grow without end. A frame that
        # alone exceeds the limit still goes out on an idle link (large REPLJOB bodies).
        if held and held + len(frame) > self._max_send_buffer:
            self._drop(
                f"send buffer of {held} bytes would pass the limit of "
                f"{self._max_send_buffer} with a {len(frame)}-byte frame: peer not reading"
            )
            return False
        self._out.append(frame)
        self._out_bytes += len(frame)
        self.frames_out += 1
        self.bytes_out += len(frame)
        self.peak_send_buffer = max(self.peak_send_buffer, held + len(frame))
        if self._flush_handle is None:
            # One write per loop iteration however many messages: fewer syscalls under
            # load. The owner may flush sooner (BusTransport.flush).
            self._flush_handle = self._loop.call_soon(self._flush)
            self._owner.unflushed.add(self)
        return True

    def flush_now(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush()

    def _flush(self) -> None:
        self._flush_handle = None
        self._owner.unflushed.discard(self)
        if self.closed or self._transport is None or not self._out:
            return
        data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out.clear()
        self._out_bytes = 0
        self._transport.write(data)

    # ------------------------------------------------------------------ closing

    def close(self, reason: str = "closed locally") -> None:
        """Drop the connection now, discarding what is unsent (as Disque's freeClusterLink).

        Idempotent. The owner hears of it from connection_lost, on a later loop iteration.
        """
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        self._cancel_flush()
        if self._transport is not None:
            # abort, not close: close would wait for a peer that may never read.
            self._transport.abort()
        elif not self._lost.done():
            self._lost.set_result(None)  # never connected: no connection_lost will come

    async def wait_closed(self) -> None:
        await asyncio.shield(self._lost)

    def _cancel_flush(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._owner.unflushed.discard(self)
        self._out.clear()
        self._out_bytes = 0

    def _drop(self, reason: str) -> None:
        log.warning("bus: dropped %s: %s", self.describe(), reason)
        self.close(reason)

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (also uvloop's, which does not subclass asyncio.Transport).
        self._transport = cast(asyncio.Transport, transport)
        self.remote = _address(self._transport.get_extra_info("peername"))
        self.local = _address(self._transport.get_extra_info("sockname"))
        self._owner._link_made(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            self.close_reason = f"connection lost: {exc}" if exc else "closed by peer"
        self._cancel_flush()
        self._transport = None
        if not self._lost.done():
            self._lost.set_result(None)
        self._owner._link_lost(self, self.close_reason or "closed")

    def eof_received(self) -> bool:
        return False  # a half-closed bus link is of no use: let asyncio close it

    def data_received(self, data: bytes) -> None:
        self.bytes_in += len(data)
        try:
            frames = self._reader.feed(data)
        except BusProtocolError as exc:
            # Frames complete before the bad one are good: Disque would have acted on them.
            self._deliver(exc.frames)
            if not self.closed:
                self._drop(str(exc))
            return
        self._deliver(frames)

    def _deliver(self, frames: list[bytes]) -> None:
        for frame in frames:
            if self.closed:  # a callback closed the link: the rest is not for anyone
                return
            offset = self._stream_offset
            self._stream_offset += len(frame)
            try:
                message = decode(frame)
            except BusProtocolError as exc:
                self._drop(f"{exc.reason} (frame at stream offset {offset})")
                return
            except Exception as exc:  # a codec bug must cost one link, not the node
                self._drop(f"undecodable frame at stream offset {offset}: {exc!r}")
                return
            self.frames_in += 1
            if message.header.ver != PROTO_VER:
                self.ignored += 1  # Disque ignores it and keeps the link
                continue
            if self.sender is None:
                self.sender = message.header.sender
            self._owner._link_message(self, message)


def _address(value: object) -> tuple[str, int] | None:
    if isinstance(value, tuple) and len(value) >= 2:
        return str(value[0]), int(value[1])
    return None
