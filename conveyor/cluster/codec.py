"""Encode and decode Disque 1.0-rc1 cluster bus messages, byte for byte (sans-IO).

    frame = encode(message)          # bytes, totlen exact
    message = decode(frame)          # one complete frame -> Ping | Pong | ... | Pause
    reader = FrameReader()           # split a byte stream into frames
    for frame in reader.feed(data): ...

`decode` refuses (BusProtocolError) a wrong signature, a totlen that is not the frame's
length or not what the type and its counts require, an unknown type, a job area that does
not hold exactly `numjobs` serialized jobs. It does not refuse `ver` != 1: Disque ignores
such a message without dropping the link, so that is the receiver's decision
(`message.header.ver`). Every frame `decode` accepts encodes back to the same bytes.

`encode` raises BusEncodeError for a value that does not fit the layout (a node name or job
ID that is not 40 bytes, an integer out of its field's range, text wider than its field):
that is a bug on our side, not a peer's, hence a separate class.

Layout: layout.py; values: messages.py.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from conveyor.core.codec import CodecError, JobRecord, decode_jobs, encode_job

from .framing import FrameReader
from .layout import (
    DEFAULT_MAX_FRAME,
    GOSSIP,
    HEADER,
    HEADER_LEN,
    NAME_LEN,
    SIGNATURE,
    U32_PAIR,
    VAR_PAYLOAD_AT,
    BusProtocolError,
    check_prefix,
)
from .messages import (
    CLASS_OF_TYPE,
    GOSSIP_CLASSES,
    GOSSIP_TYPES,
    JOB_ID_CLASSES,
    JOB_ID_TYPES,
    JOBS_CLASSES,
    JOBS_TYPES,
    TYPE_OF_CLASS,
    Fail,
    GossipEntry,
    Header,
    JobIdBatch,
    Message,
    MessageType,
)

__all__ = [
    "DEFAULT_MAX_FRAME",
    "BusEncodeError",
    "BusProtocolError",
    "FrameReader",
    "decode",
    "encode",
    "encode_jobs_frame",
]

_JOB_ID = struct.Struct(">40sI")
_U32 = struct.Struct(">I")
_ZERO_U32 = bytes(4)
_MYIP_LEN = 46
_NOTUSED1_LEN = 34
_U32_MAX = 0xFFFFFFFF
# Plain-int lookups for decode's dispatch (check_prefix has vetted the type already).
_CLASS_OF_INT = {int(kind): cls for kind, cls in CLASS_OF_TYPE.items()}
_TYPE_OF_INT = {int(kind): kind for kind in CLASS_OF_TYPE}
_tuple_new = tuple.__new__
_GOSSIP_KINDS = frozenset(int(kind) for kind in GOSSIP_TYPES)
_JOB_ID_KINDS = frozenset(int(kind) for kind in JOB_ID_TYPES)
_JOBS_KINDS = frozenset(int(kind) for kind in JOBS_TYPES)


class BusEncodeError(ValueError):
    """A message value that does not fit Disque's bus layout."""


# ---------------------------------------------------------------------------- decoding


def decode(frame: bytes | bytearray | memoryview) -> Message:
    """The message in one complete frame (exactly totlen bytes)."""
    size = len(frame)
    if size < HEADER_LEN:
        check_prefix(frame, 0, size, _U32_MAX)  # a precise reason when the start is wrong
        raise BusProtocolError(
            f"frame of {size} bytes is shorter than the {HEADER_LEN}-byte header"
        )
    totlen = check_prefix(frame, 0, size, _U32_MAX)
    if totlen != size:
        raise BusProtocolError(f"totlen {totlen} at offset 4 but the frame has {size} bytes")
    (_, _, ver, notused0, kind, count, sender, myip, notused1, port, flags, state, *mflags) = (
        HEADER.unpack_from(frame, 0)
    )
    # tuple.__new__ with every field, in Header's order: a named tuple's own __new__ is a
    # Python call, and this runs for every frame on the bus (the messages below alike).
    header: Header = _tuple_new(
        Header,
        (
            sender,
            port,
            flags,
            state,
            mflags[0],
            ver,
            myip.rstrip(b"\0"),
            notused0,
            notused1.rstrip(b"\0"),
            mflags[1],
            mflags[2],
        ),
    )
    cls: Callable[..., Message] = _CLASS_OF_INT[kind]
    if kind in _JOB_ID_KINDS:
        if count:  # several entries (check_prefix saw to count >= 2 and totlen)
            entries = tuple(_JOB_ID.iter_unpack(memoryview(frame)[HEADER_LEN:]))
            # The member itself: calling the enum is a Python call too.
            return _tuple_new(JobIdBatch, (header, _TYPE_OF_INT[kind], entries))  # type: ignore[no-any-return]
        return _tuple_new(cls, (header, *_JOB_ID.unpack_from(frame, HEADER_LEN)))  # type: ignore[no-any-return]
    if kind in _GOSSIP_KINDS:
        return cls(header, _decode_gossip(frame))
    if kind == MessageType.FAIL:
        return cls(header, bytes(frame[HEADER_LEN : HEADER_LEN + NAME_LEN]))
    first, _size = U32_PAIR.unpack_from(frame, HEADER_LEN)
    if kind in _JOBS_KINDS:
        return _tuple_new(cls, (header, _decode_job_area(frame, first)))  # type: ignore[no-any-return]
    # NEEDJOBS / PAUSE: first is aux, the queue name fills the rest (check_prefix saw to it).
    return cls(header, bytes(frame[VAR_PAYLOAD_AT:]), first)


def _decode_gossip(frame: bytes | bytearray | memoryview) -> tuple[GossipEntry, ...]:
    area = memoryview(frame)[HEADER_LEN:]
    return tuple(
        GossipEntry(name, ping_sent, pong_received, ip.rstrip(b"\0"), port, flags, nu1, nu2)
        for name, ping_sent, pong_received, ip, port, flags, nu1, nu2 in GOSSIP.iter_unpack(area)
    )


def _decode_job_area(frame: bytes | bytearray | memoryview, numjobs: int) -> tuple[JobRecord, ...]:
    try:
        # In place: a slice of the area would make every field a slice before its bytes.
        return tuple(decode_jobs(frame, numjobs, VAR_PAYLOAD_AT))
    except CodecError:
        pass  # decoded again from the area alone, so that the offsets count from it
    try:
        return tuple(decode_jobs(memoryview(frame)[VAR_PAYLOAD_AT:], numjobs))
    except CodecError as exc:
        # The job codec's offsets count from the start of the job area.
        raise BusProtocolError(
            f"job area at offset {VAR_PAYLOAD_AT} (numjobs {numjobs}): {exc}"
        ) from None


# ---------------------------------------------------------------------------- encoding


def encode(message: Message) -> bytes:
    """The frame for a message value."""
    kind = message.kind if type(message) is JobIdBatch else TYPE_OF_CLASS.get(type(message))
    if kind is None:
        raise BusEncodeError(f"{type(message).__name__} is not a bus message class")
    header = message.header
    if not isinstance(header, Header):
        raise BusEncodeError(f"header must be a Header, not {type(header).__name__}")
    if isinstance(message, JobIdBatch):
        return _encode_batch(message)
    if isinstance(message, JOB_ID_CLASSES):
        _check_name("id", message.id)
        payload = _pack_u(_JOB_ID, "aux", message.id, message.aux)
        return _pack_header(header, kind, 0, HEADER_LEN + len(payload)) + payload
    if isinstance(message, GOSSIP_CLASSES):
        entries = message.gossip
        body = b"".join([_pack_gossip(i, entry) for i, entry in enumerate(entries)])
        return _pack_header(header, kind, len(entries), HEADER_LEN + len(body)) + body
    if isinstance(message, Fail):
        _check_name("nodename", message.nodename)
        return _pack_header(header, kind, 0, HEADER_LEN + NAME_LEN) + message.nodename
    if isinstance(message, JOBS_CLASSES):
        if not all(isinstance(record, JobRecord) for record in message.jobs):
            raise BusEncodeError(f"{kind.name} jobs must be JobRecords")
        try:
            data = b"".join([encode_job(record) for record in message.jobs])
        except CodecError as exc:
            raise BusEncodeError(f"{kind.name} job: {exc}") from None
        head = _pack_u(U32_PAIR, "numjobs/datasize", len(message.jobs), len(data))
        return _pack_header(header, kind, 0, VAR_PAYLOAD_AT + len(data)) + head + data
    qname = message.qname
    if not isinstance(qname, bytes):
        raise BusEncodeError(f"qname must be bytes, not {type(qname).__name__}")
    head = _pack_u(U32_PAIR, "aux/qnamelen", message.aux, len(qname))
    return _pack_header(header, kind, 0, VAR_PAYLOAD_AT + len(qname)) + head + qname


def _encode_batch(message: JobIdBatch) -> bytes:
    kind, entries = message.kind, message.entries
    if kind not in JOB_ID_TYPES or len(entries) < 2:
        raise BusEncodeError(f"a JobIdBatch is of a job-ID type with 2 entries or more, not "
                             f"{kind!r} with {len(entries)}")  # fmt: skip
    # Each entry is its ID and a u32 aux, which GOTJOBs and most others leave at 0: the
    # parts joined once, rather than a struct call and a check call per entry.
    parts = []
    for job_id, aux in entries:
        if type(job_id) is not bytes or len(job_id) != NAME_LEN:
            _check_name("id", job_id)  # a bytes subclass passes; anything else raises
        parts.append(job_id)
        parts.append(_ZERO_U32 if aux == 0 and type(aux) is int else _pack_u(_U32, "aux", aux))
    body = b"".join(parts)
    return _pack_header(message.header, kind, len(entries), HEADER_LEN + len(body)) + body


def encode_jobs_frame(header: Header, kind: MessageType, jobs: list[bytes]) -> bytes:
    """A REPLJOB/YOURJOBS frame of jobs already serialized (encode_job): a job sent to
    several nodes in frames of different jobs is serialized once."""
    data = b"".join(jobs)
    head = _pack_u(U32_PAIR, "numjobs/datasize", len(jobs), len(data))
    return _pack_header(header, kind, 0, VAR_PAYLOAD_AT + len(data)) + head + data


def _pack_header(header: Header, kind: MessageType, count: int, totlen: int) -> bytes:
    _check_name("sender", header.sender)
    _check_text("myip", header.myip, _MYIP_LEN)
    _check_text("notused1", header.notused1, _NOTUSED1_LEN)
    if totlen > _U32_MAX or count > 0xFFFF:
        raise BusEncodeError(f"{kind.name} of {totlen} bytes / {count} entries does not fit")
    values = (
        SIGNATURE,
        totlen,
        header.ver,
        header.notused0,
        kind,
        count,
        header.sender,
        header.myip,
        header.notused1,
        header.port,
        header.flags,
        header.state,
        header.mflags,
        header.mflags1,
        header.mflags2,
    )
    try:
        return HEADER.pack(*values)
    except struct.error:
        raise _int_error(header, _HEADER_INTS) from None


def _pack_gossip(index: int, entry: GossipEntry) -> bytes:
    if not isinstance(entry, GossipEntry):
        raise BusEncodeError(f"gossip[{index}] is a {type(entry).__name__}, not a GossipEntry")
    _check_name(f"gossip[{index}].nodename", entry.nodename)
    _check_text(f"gossip[{index}].ip", entry.ip, _MYIP_LEN)
    try:
        return GOSSIP.pack(*entry)
    except struct.error:
        raise _int_error(entry, _GOSSIP_INTS, f"gossip[{index}].") from None


def _pack_u(layout: struct.Struct, what: str, *values: object) -> bytes:
    try:
        return layout.pack(*values)
    except struct.error as exc:
        raise BusEncodeError(f"{what} {values[-2:]!r} does not fit u32: {exc}") from None


def _check_name(what: str, value: object) -> None:
    # struct's "40s" would silently pad or cut; Disque compares names as 40 raw bytes.
    if not isinstance(value, bytes) or len(value) != NAME_LEN:
        raise BusEncodeError(f"{what} must be {NAME_LEN} bytes, got {value!r}")


def _check_text(what: str, value: object, width: int) -> None:
    if not isinstance(value, bytes) or len(value) > width:
        raise BusEncodeError(f"{what} must be bytes of at most {width}, got {value!r}")
    # Trailing NULs would vanish into the padding, so decode could not give them back.
    if value.endswith(b"\0"):
        raise BusEncodeError(f"{what} {value!r} must not end with NUL (that is padding)")


# (field, bit width) of the integers in each packed value, for encode diagnostics.
_HEADER_INTS = (
    ("ver", 16),
    ("notused0", 16),
    ("port", 16),
    ("flags", 16),
    ("state", 8),
    ("mflags", 8),
    ("mflags1", 8),
    ("mflags2", 8),
)
_GOSSIP_INTS = (
    ("ping_sent", 32),
    ("pong_received", 32),
    ("port", 16),
    ("flags", 16),
    ("notused1", 16),
    ("notused2", 32),
)


def _int_error(
    value: Header | GossipEntry, fields: tuple[tuple[str, int], ...], prefix: str = ""
) -> BusEncodeError:
    for name, bits in fields:
        number = getattr(value, name)
        if not isinstance(number, int):
            return BusEncodeError(f"{prefix}{name} {number!r} is not an int")
        if not 0 <= number < 1 << bits:
            return BusEncodeError(f"{prefix}{name} {number} does not fit u{bits}")
    return BusEncodeError(f"{type(value).__name__} does not fit the bus layout")
