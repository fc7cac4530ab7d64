"""Split a cluster-bus byte stream into frames, using each header's totlen (sans-IO).

Disque's reader only checks the signature and totlen >= 144 before reading totlen bytes,
with no upper bound. This one also refuses a totlen above a maximum and, as soon as the
bytes are there, an unknown type or a totlen that contradicts the type's counts (see
layout.check_prefix): nothing is buffered on the word of a header already known to lie,
and what is buffered never exceeds what was fed.

With `cluster-password` (beyond Disque, Conveyor nodes only) every frame is followed by
an HMAC-SHA256 of its bytes under a key made from the password (`seal`); the reader
refuses a frame whose MAC is missing or wrong, so a node without the password can
neither join nor inject anything.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import NoReturn

from .layout import DEFAULT_MAX_FRAME, HEADER_LEN, BusProtocolError, check_prefix

__all__ = ["MAC_LEN", "FrameReader", "mac_key", "seal"]

MAC_LEN = 32
_BAD_MAC = "bad MAC: the sender has another cluster-password, or none"


def mac_key(password: str) -> bytes:
    """The HMAC key of a cluster password (one SHA-256, so any length works)."""
    return hashlib.sha256(b"conveyor cluster-password\0" + password.encode()).digest()


def seal(frame: bytes, key: bytes) -> bytes:
    """The frame followed by its MAC, as it goes on the wire with a cluster password."""
    return frame + hmac.new(key, frame, hashlib.sha256).digest()


class FrameReader:
    """Feed bytes as they arrive; get back every frame they complete.

    After a BusProtocolError the stream has no trustworthy frame boundary left, so the
    reader stays failed: every later `feed` raises again. Drop the link.
    """

    __slots__ = ("_buf", "_consumed", "_failed", "_key", "max_frame")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME, key: bytes | None = None) -> None:
        if max_frame < HEADER_LEN:
            raise ValueError(f"max_frame {max_frame} is below the {HEADER_LEN}-byte header")
        self.max_frame = max_frame
        self._key = key  # frames are sealed (followed by their MAC) when set
        self._buf = bytearray()
        self._consumed = 0  # stream offset of _buf[0], for error messages
        self._failed: BusProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for the frame not yet complete."""
        return len(self._buf)

    @property
    def failed(self) -> BusProtocolError | None:
        return self._failed

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """The frames `data` completes, in order.

        Raises BusProtocolError when the stream is not a valid frame sequence; its
        `frames` are the frames completed by this call before the bad one.
        """
        if self._failed is not None:
            raise BusProtocolError(self._failed.reason, self._failed.offset)
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = 0
        size = len(buf)
        while pos < size:
            try:
                totlen = check_prefix(buf, pos, size - pos, self.max_frame)
            except BusProtocolError as exc:
                self._fail(exc.reason, pos, frames)
            if totlen is None:
                break
            end = totlen + (MAC_LEN if self._key is not None else 0)
            if size - pos < end:
                break
            frame = bytes(buf[pos : pos + totlen])
            if self._key is not None:
                mac = hmac.new(self._key, frame, hashlib.sha256).digest()
                if not hmac.compare_digest(mac, bytes(buf[pos + totlen : pos + end])):
                    self._fail(_BAD_MAC, pos, frames)
            frames.append(frame)
            pos += end
        if pos:
            del buf[:pos]
            self._consumed += pos
        return frames

    def _fail(self, reason: str, pos: int, frames: list[bytes]) -> NoReturn:
        error = BusProtocolError(reason, self._consumed + pos)
        error.frames = frames
        self._failed = error
        # Nothing after a bad frame can be parsed: release it all now.
        self._consumed += len(self._buf)
        self._buf = bytearray()
        raise error
