"""Byte layout of Disque's bus messages and the structural checks framing and decoding share.

All header and payload integers are big endian (htonl/htons); only the serialized jobs
inside REPLJOB/YOURJOBS are little endian (the job codec's business).

    header, 144 bytes:
      0 sig "DbuZ" | 4 totlen u32 | 8 ver u16 | 10 notused0 u16 | 12 type u16 | 14 count u16
      16 sender[40] | 56 myip[46] | 102 notused1[34] | 136 port u16 | 138 flags u16
      140 state u8 | 141 mflags[3]
    payload, from offset 144:
      PING/PONG/MEET  count gossip entries of 104 bytes         totlen 144 + 104 * count
      FAIL            nodename[40]                               totlen 184
      REPLJOB/YOURJOBS numjobs u32, datasize u32, jobs           totlen 152 + datasize
      job-ID types    id[40], aux u32                            totlen 188
      job-ID, count>=2 count * (id[40], aux u32), Conveyor only  totlen 144 + 44 * count
      NEEDJOBS/PAUSE  aux u32, qnamelen u32, qname               totlen 152 + qnamelen
    gossip entry: nodename[40] | ping_sent u32 | pong_received u32 | ip[46] | port u16
                  | flags u16 | notused1 u16 | notused2 u32

`check_prefix` validates whatever part of a frame is already available, so a stream
reader refuses a bad frame as soon as the bytes that prove it arrive, before buffering
the rest of what its length announces.
"""

from __future__ import annotations

import struct
from typing import NoReturn

from .messages import GOSSIP_TYPES, JOB_ID_TYPES, JOBS_TYPES, QUEUE_OP_TYPES, MessageType

__all__ = [
    "DEFAULT_MAX_FRAME",
    "GOSSIP_LEN",
    "HEADER_LEN",
    "SIGNATURE",
    "BusProtocolError",
    "check_prefix",
]

SIGNATURE = b"DbuZ"
HEADER_LEN = 144  # CLUSTERMSG_MIN_LEN
GOSSIP_LEN = 104
FAIL_LEN = HEADER_LEN + 40
JOB_ID_ENTRY = 44  # id[40], aux u32
JOB_ID_LEN = HEADER_LEN + JOB_ID_ENTRY
# REPLJOB/YOURJOBS and NEEDJOBS/PAUSE: two u32 before the variable part.
VAR_PAYLOAD_AT = HEADER_LEN + 8
# The smallest serialized job (job codec): length prefix, 68-byte struct, three u32 counts.
MIN_JOB_RECORD = 4 + 68 + 12
DEFAULT_MAX_FRAME = 64 * 1024 * 1024
NAME_LEN = 40

HEADER = struct.Struct(">4sIHHHH40s46s34sHHBBBB")
GOSSIP = struct.Struct(">40sII46sHHHI")
U32_PAIR = struct.Struct(">II")
_TOTLEN = struct.Struct(">I")
_TYPE_COUNT = struct.Struct(">HH")


class BusProtocolError(ValueError):
    """Bytes from a peer that are not a valid Disque bus frame or message.

    `reason` says what is wrong and where; `offset` is the stream offset of the frame's
    first byte when a FrameReader found it (None from `decode`); `frames` holds the complete
    frames a FrameReader split off in the same `feed` call before the bad one, so a caller
    can still act on them before dropping the link.
    """

    def __init__(self, reason: str, offset: int | None = None) -> None:
        super().__init__(
            reason if offset is None else f"{reason} (frame at stream offset {offset})"
        )
        self.reason = reason
        self.offset = offset
        self.frames: list[bytes] = []


# Plain-int views of the type families: the hot path compares ints, not enum members.
_NAMES = {int(kind): kind.name for kind in MessageType}
_GOSSIP = frozenset(int(kind) for kind in GOSSIP_TYPES)
_JOBS = frozenset(int(kind) for kind in JOBS_TYPES)
_JOB_ID = frozenset(int(kind) for kind in JOB_ID_TYPES)
_VARIABLE = _JOBS | frozenset(int(kind) for kind in QUEUE_OP_TYPES)
_FIXED_LEN = {int(MessageType.FAIL): FAIL_LEN} | {int(kind): JOB_ID_LEN for kind in JOB_ID_TYPES}


def check_prefix(
    buf: bytes | bytearray | memoryview, start: int, avail: int, max_frame: int
) -> int | None:
    """Check the first `avail` bytes of the frame at buf[start:]; return its totlen once known.

    Raises BusProtocolError for anything those bytes already prove wrong: the signature,
    a totlen below the header or above `max_frame`, an unknown type, a totlen that is not
    what the type and its counts require. Offsets in reasons are relative to the frame.
    """
    head = bytes(buf[start : start + min(avail, 4)])
    if head != SIGNATURE[: len(head)]:
        _bad_signature(head)
    if avail < 8:
        return None
    (totlen,) = _TOTLEN.unpack_from(buf, start + 4)
    if totlen < HEADER_LEN:
        raise BusProtocolError(f"totlen {totlen} at offset 4 is below the {HEADER_LEN}-byte header")
    if totlen > max_frame:
        raise BusProtocolError(f"totlen {totlen} at offset 4 is above the maximum {max_frame}")
    if avail >= 16:
        kind, count = _TYPE_COUNT.unpack_from(buf, start + 12)
        _check_type_and_count(totlen, kind, count)
        if avail >= VAR_PAYLOAD_AT and kind in _VARIABLE:
            _check_variable_part(buf, start, totlen, kind)
    return int(totlen)


def _bad_signature(head: bytes) -> NoReturn:
    # Name the first wrong byte only, so the reason is the same however the stream was cut.
    at = next(i for i, byte in enumerate(head) if byte != SIGNATURE[i])
    raise BusProtocolError(
        f"bad signature: byte {head[at : at + 1]!r} at offset {at}, expected {SIGNATURE!r}"
    )


def _check_type_and_count(totlen: int, kind: int, count: int) -> None:
    if kind in _GOSSIP:
        if totlen != HEADER_LEN + GOSSIP_LEN * count:
            raise BusProtocolError(
                f"{_NAMES[kind]} with count {count} at offset 14 must be "
                f"{HEADER_LEN + GOSSIP_LEN * count} bytes, totlen is {totlen}"
            )
        return
    if kind not in _NAMES:
        raise BusProtocolError(f"unknown message type {kind} at offset 12")
    if count >= 2 and kind in _JOB_ID:
        # Conveyor's frame of `count` job-ID entries (messages.JobIdBatch); a count of 1
        # would re-encode as 0, so it is refused below like any other.
        if totlen != HEADER_LEN + JOB_ID_ENTRY * count:
            raise BusProtocolError(
                f"{_NAMES[kind]} with count {count} at offset 14 must be "
                f"{HEADER_LEN + JOB_ID_ENTRY * count} bytes, totlen is {totlen}"
            )
        return
    # Disque zeroes count outside PING/PONG/MEET; refusing other values keeps every
    # accepted frame re-encodable byte for byte.
    if count != 0:
        raise BusProtocolError(f"count {count} at offset 14 on {_NAMES[kind]}, must be 0")
    fixed = _FIXED_LEN.get(kind)
    if fixed is None:
        if totlen < VAR_PAYLOAD_AT:
            raise BusProtocolError(
                f"{_NAMES[kind]} totlen {totlen} is below its {VAR_PAYLOAD_AT}-byte minimum"
            )
    elif totlen != fixed:
        raise BusProtocolError(f"{_NAMES[kind]} must be {fixed} bytes, totlen is {totlen}")


def _check_variable_part(
    buf: bytes | bytearray | memoryview, start: int, totlen: int, kind: int
) -> None:
    first, size = U32_PAIR.unpack_from(buf, start + HEADER_LEN)
    if totlen != VAR_PAYLOAD_AT + size:
        field = "datasize" if kind in _JOBS else "qnamelen"
        raise BusProtocolError(
            f"{_NAMES[kind]} {field} {size} at offset 148 needs totlen "
            f"{VAR_PAYLOAD_AT + size}, totlen is {totlen}"
        )
    # numjobs comes off the wire: refuse a count the data cannot hold before anyone
    # loops on it.
    if kind in _JOBS and first * MIN_JOB_RECORD > size:
        raise BusProtocolError(
            f"{_NAMES[kind]} numjobs {first} at offset 144 cannot fit in datasize {size}"
        )
