# cython: annotation_typing=False
"""Disque's serialized job (job.c serializeJob / deserializeJob), byte for byte.

The same bytes are the LOADJOB argument in the AOF and the job area of REPLJOB/YOURJOBS
on the cluster bus. Layout, all integers little endian (Disque copies its x86-64 struct):

    u32 length of what follows
    id[40]; u8 state (low nibble) | gc_retry (high nibble); u8 flags; u16 repl;
    u32 etime; u64 ctime; u32 delay; u32 retry; u16 nacks; u16 additional deliveries
    u32 queue length + queue; u32 body length + body; u32 node count + 40-byte node names

Fields are kept raw: what etime means (absolute seconds in the AOF, TTL left + 1 on the
bus) and which flags a bus copy clears are the caller's business, so a record decoded
from either source re-encodes to the same bytes.

Compiled (`make compile`, with codec.pxd), encode_job writes a record of exact bytes and
ints in place (`_write_record`); otherwise, and in pure Python, it packs with struct. A
test holds both to the same layout, packed field by field on its own.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

try:
    import cython

    COMPILED: bool = cython.compiled
except ImportError:  # pure Python without Cython installed
    COMPILED = False

__all__ = [
    "DISQUE_BCAST_QUEUED",
    "DISQUE_BCAST_WILLQUEUE",
    "DISQUE_DELIVERED",
    "NODE_NAME_LEN",
    "CodecError",
    "JobRecord",
    "decode_job",
    "decode_jobs",
    "encode_job",
]

# Job flags as persisted (job.h).
DISQUE_BCAST_QUEUED = 1
DISQUE_BCAST_WILLQUEUE = 2
DISQUE_DELIVERED = 4

NODE_NAME_LEN = 40

# Length prefix + the 68-byte struct part + the queue length, which always follows it:
# one unpack covers everything before the first variable-length field.
_HEAD = struct.Struct("<I40sBBHIQIIHHI")
_U32 = struct.Struct("<I")
_unpack_u32 = _U32.unpack_from
_pack_head = _HEAD.pack
_tuple_new = tuple.__new__
_pack_u32 = _U32.pack

_STRUCT_LEN = 68
# The smallest value the length prefix can hold: struct part + three empty u32 counts.
_MIN_JOBLEN = _STRUCT_LEN + 12
_MIN_RECORD = 4 + _MIN_JOBLEN
_U32_MAX = 0xFFFFFFFF
# The node list of the last job decoded, as its bytes and as the tuple (decode_job).
_last_nodes: tuple[bytes, tuple[bytes, ...]] = (b"", ())
# The last node tuple encode_job serialized, and its bytes (count and names).
_last_nodes_area: tuple[tuple[bytes, ...], bytes] = ((), b"\x00\x00\x00\x00")

# (field, struct offset counted from the length prefix, maximum), for encode diagnostics.
_INT_FIELDS = (
    ("flags", 45, 0xFF),
    ("repl", 46, 0xFFFF),
    ("etime", 48, _U32_MAX),
    ("ctime", 52, 0xFFFFFFFFFFFFFFFF),
    ("delay", 60, _U32_MAX),
    ("retry", 64, _U32_MAX),
    ("nacks", 68, 0xFFFF),
    ("additional_deliveries", 70, 0xFFFF),
)


class CodecError(ValueError):
    """A serialized job that cannot be decoded, or a record that cannot be encoded."""


class JobRecord(NamedTuple):
    id: bytes
    state: int  # Disque numbering: 0 wait-repl, 1 active, 2 queued, 3 acked
    gc_retry: int
    flags: int
    repl: int
    etime: int  # absolute unix seconds in the AOF, seconds remaining + 1 on the bus
    ctime: int  # unix_ms * 1_000_000 + counter
    delay: int
    retry: int
    nacks: int
    additional_deliveries: int
    queue: bytes
    body: bytes
    nodes: tuple[bytes, ...]


def encode_job(record: JobRecord) -> bytes:
    """The serialized job, length prefix included."""
    # One unpack: a named field read is an attribute lookup each, even compiled. Compiled,
    # a record (a tuple subclass) unpacks in place rather than through an iterator.
    if COMPILED:
        fields = cython.cast(tuple, record) if isinstance(record, tuple) else tuple(record)
    else:
        fields = record
    (job_id, state, gc_retry, flags, repl, etime, ctime, delay, retry, nacks, deliveries,
     queue, body, nodes) = fields  # fmt: skip
    # struct's "40s" would silently pad or cut, and Disque's readers trust the shape.
    # is_valid_id's check, inline (a Python call costs more than the check).
    if (
        len(job_id) != NODE_NAME_LEN
        or job_id[0] != 68
        or job_id[1] != 45
        or job_id[10] != 45
        or job_id[35] != 45
    ):
        raise CodecError(f"id at job offset 4: {job_id!r} is not a 40-byte Disque job ID")
    # Both share byte 40, so a wide state would silently bleed into gc_retry.
    if not (0 <= state <= 15 and 0 <= gc_retry <= 15):
        raise CodecError(
            f"state {state} / gc_retry {gc_retry} at job offset 44: each must fit 4 bits"
        )
    global _last_nodes_area
    if nodes is _last_nodes_area[0]:
        nodes_area = _last_nodes_area[1]  # the copies of a run share one node tuple
    else:
        nodes_area = _nodes_area(nodes)
        if _immutable_names(nodes):
            _last_nodes_area = (nodes, nodes_area)
    qlen, blen = len(queue), len(body)
    joblen = _MIN_JOBLEN - 4 + qlen + blen + len(nodes_area)
    if joblen > _U32_MAX:
        raise CodecError(f"length prefix at job offset 0: {joblen} does not fit u32")
    # Exact types only: a C conversion would take a float where struct refuses it.
    if (
        COMPILED
        and type(queue) is bytes
        and type(body) is bytes
        and type(flags) is int
        and type(repl) is int
        and type(etime) is int
        and type(ctime) is int
        and type(delay) is int
        and type(retry) is int
        and type(nacks) is int
        and type(deliveries) is int
    ):
        try:
            return _write_record(
                joblen,
                job_id,
                state | gc_retry << 4,
                flags,
                repl,
                etime,
                ctime,
                delay,
                retry,
                nacks,
                deliveries,
                queue,
                body,
                nodes_area,
            )
        except OverflowError:
            pass  # a field out of its range: the pack below says which
    try:
        # flags .. additional deliveries, in the record's order and the struct's.
        head = _pack_head(joblen, job_id, state | gc_retry << 4, *record[3:11], qlen)
    except struct.error as exc:
        # Diagnose only on failure, to keep the common path a single pack call.
        raise _int_field_error(record) from exc
    return b"".join((head, queue, _pack_u32(blen), body, nodes_area))


def _write_record(
    joblen: int,
    job_id: bytes,
    state_byte: int,
    flags: int,
    repl: int,
    etime: int,
    ctime: int,
    delay: int,
    retry: int,
    nacks: int,
    deliveries: int,
    queue: bytes,
    body: bytes,
    nodes_area: bytes,
) -> bytes:
    """encode_job's bytes, written in place into a bytes object made at its final size:
    compiled only (codec.pxd types every argument, so a value out of its field's range
    raises OverflowError at the call, and the C API names come from there). Against the
    struct pack and join: 280 -> 184 ns an encode_job (docs/performance.md)."""
    qlen = len(queue)
    blen = len(body)
    out = PyBytes_FromStringAndSize(cython.NULL, 4 + joblen)  # noqa: F821
    p = cython.cast(cython.p_uchar, PyBytes_AS_STRING(out))  # noqa: F821
    _put_u32(p, joblen)
    memcpy(p + 4, PyBytes_AS_STRING(job_id), 40)  # noqa: F821  (NODE_NAME_LEN, checked)
    p[44] = state_byte
    p[45] = flags
    _put_u16(p + 46, repl)
    _put_u32(p + 48, etime)
    _put_u64(p + 52, ctime)
    _put_u32(p + 60, delay)
    _put_u32(p + 64, retry)
    _put_u16(p + 68, nacks)
    _put_u16(p + 70, deliveries)
    _put_u32(p + 72, qlen)
    memcpy(p + 76, PyBytes_AS_STRING(queue), qlen)  # noqa: F821
    p += 76 + qlen
    _put_u32(p, blen)
    memcpy(p + 4, PyBytes_AS_STRING(body), blen)  # noqa: F821
    memcpy(p + 4 + blen, PyBytes_AS_STRING(nodes_area), len(nodes_area))  # noqa: F821
    return out


# Little-endian stores for _write_record (compiled only: `p` is a C pointer there).
def _put_u16(p: Any, value: int) -> None:
    p[0] = value & 0xFF
    p[1] = value >> 8


def _put_u32(p: Any, value: int) -> None:
    p[0] = value & 0xFF
    p[1] = (value >> 8) & 0xFF
    p[2] = (value >> 16) & 0xFF
    p[3] = value >> 24


def _put_u64(p: Any, value: int) -> None:
    _put_u32(p, cython.cast(cython.uint, value))  # the low half (a cast: no big literal)
    _put_u32(p + 4, value >> 32)


def _immutable_names(nodes: Sequence[bytes]) -> bool:
    """Immutable all the way down: its serialized names may be reused by identity."""
    return type(nodes) is tuple and all(type(node) is bytes for node in nodes)


def _nodes_area(nodes: Sequence[bytes]) -> bytes:
    """The node count and names, as they end a serialized job."""
    for i, node in enumerate(nodes):
        if len(node) != NODE_NAME_LEN:
            raise CodecError(f"node name {i} is {len(node)} bytes, not {NODE_NAME_LEN}")
    return _pack_u32(len(nodes)) + b"".join(nodes)


def _int_field_error(record: JobRecord) -> CodecError:
    for name, offset, maximum in _INT_FIELDS:
        value = getattr(record, name)
        if not isinstance(value, int):
            return CodecError(f"{name} at job offset {offset}: {value!r} is not an int")
        if not 0 <= value <= maximum:
            return CodecError(f"{name} at job offset {offset}: {value} not in 0..{maximum}")
    return CodecError("job record does not fit Disque's layout")


def decode_job(data: bytes | bytearray | memoryview, offset: int = 0) -> tuple[JobRecord, int]:
    """Decode the serialized job at data[offset:]; return it and the offset just past it.

    Error messages give absolute offsets into `data`.
    """
    if type(data) is bytes:
        size = len(data)
        if not 0 <= offset <= size:
            raise CodecError(f"offset {offset} is outside the {size}-byte input")
        return _decode_bytes(data, offset, 0)
    view = memoryview(data).cast("B")
    size = len(view)
    if not 0 <= offset <= size:
        raise CodecError(f"offset {offset} is outside the {size}-byte input")
    # Any other buffer: this record's bytes are copied once (as far as its length prefix
    # says, and no less than the smallest record, within the input), and its fields are
    # slices of that copy. The errors are those the whole input would give.
    end = size
    if size - offset >= 4:
        (joblen,) = _unpack_u32(view, offset)
        end = min(offset + 4 + max(joblen, _MIN_JOBLEN), size)
    record, used = _decode_bytes(bytes(view[offset:end]), 0, offset)
    return record, offset + used


def _u16_at(chars: bytes, pos: int) -> int:
    # Little endian, as Disque's x86-64 struct. Compiled (codec.pxd), `chars` is the
    # bytes' own buffer, these reads are inline C, and the value is widened before each
    # shift: shifted as a C int, a u32's top byte could overflow it.
    value = chars[pos + 1]
    return value << 8 | chars[pos]


def _u32_at(chars: bytes, pos: int) -> int:
    value = chars[pos + 3]
    value = value << 8 | chars[pos + 2]
    value = value << 8 | chars[pos + 1]
    return value << 8 | chars[pos]


def _u64_at(chars: bytes, pos: int) -> int:
    high = _u32_at(chars, pos + 4)
    return high << 32 | _u32_at(chars, pos)


def _decode_bytes(data: bytes, offset: int, base: int) -> tuple[JobRecord, int]:
    """decode_job on bytes; `base` is what to add to an offset in `data` in errors.

    Compiled, `chars` is the buffer of `data` and the offsets, lengths and fixed-width
    fields are C integers (codec.pxd): each field is read with C arithmetic and each
    string sliced straight into bytes, where a struct unpack or a slice of `data` is a
    Python call each. In Python, `chars` is `data` itself: the same code, the same values."""
    size = len(data)
    # Disque's own minimum: it refuses anything shorter before looking at the prefix.
    if size - offset < _MIN_RECORD:
        raise CodecError(
            f"truncated job at offset {base + offset}: {size - offset} bytes, "
            f"need at least {_MIN_RECORD}"
        )
    chars = data
    joblen = _u32_at(chars, offset)
    if joblen < _MIN_JOBLEN:
        raise CodecError(
            f"length prefix {joblen} at offset {base + offset} is below the minimum {_MIN_JOBLEN}"
        )
    # Every later bound is checked against the record's own end, not the buffer's, so a
    # lying length can neither read into the next job nor make us allocate past the input.
    end = offset + 4 + joblen
    if end > size:
        raise CodecError(
            f"length prefix {joblen} at offset {base + offset} runs past the end of input "
            f"({size - offset - 4} bytes follow it)"
        )
    job_id = chars[offset + 4 : offset + 44]
    # is_valid_id's check, inline (a Python call per job costs as much as the rest of
    # this line): the ID is 40 bytes, so only the fixed characters are left.
    if (
        chars[offset + 4] != 68
        or chars[offset + 5] != 45
        or chars[offset + 14] != 45
        or chars[offset + 39] != 45
    ):
        raise CodecError(f"id at offset {base + offset + 4}: {job_id!r} is not a Disque job ID")
    byte40 = chars[offset + 44]
    qlen = _u32_at(chars, offset + 72)
    pos = offset + 4 + _STRUCT_LEN + 4
    # The 8 reserved bytes are the body length and node count still to come.
    if qlen > end - pos - 8:
        raise CodecError(
            f"queue name length {qlen} at offset {base + pos - 4} runs past the job's end "
            f"at {base + end}"
        )
    queue = chars[pos : pos + qlen]
    pos += qlen
    blen = _u32_at(chars, pos)
    pos += 4
    if blen > end - pos - 4:
        raise CodecError(
            f"body length {blen} at offset {base + pos - 4} runs past the job's end at {base + end}"
        )
    body = chars[pos : pos + blen]
    pos += blen
    count = _u32_at(chars, pos)
    pos += 4
    # One equality covers a short node list, a ragged one and trailing garbage alike.
    if count * NODE_NAME_LEN != end - pos:
        raise CodecError(
            f"node count {count} at offset {base + pos - 4} needs {count * NODE_NAME_LEN} "
            f"bytes, but the length prefix leaves {end - pos}"
        )
    nodes: tuple[bytes, ...]
    global _last_nodes
    # The jobs of one REPLJOB, and most of an AOF, name the same nodes: the last list is
    # reused (tuples of bytes are immutable), which saves splitting it again and, on a
    # node holding many copies, ~280 bytes per job. Compared in place, not sliced first.
    last_names = _last_nodes[0]
    if len(last_names) == end - pos and data.startswith(last_names, pos):
        nodes = _last_nodes[1]
    else:
        names = chars[pos:end]
        if count == 1:
            nodes = (names,)
        else:
            nodes = tuple(
                [names[i : i + NODE_NAME_LEN] for i in range(0, len(names), NODE_NAME_LEN)]
            )
        _last_nodes = (names, nodes)
    # The fixed fields from offset + 45: flags u8, repl u16, etime u32, ctime u64, delay
    # u32, retry u32, nacks u16, additional deliveries u16.
    state, gc_retry, flags = byte40 & 0x0F, byte40 >> 4, chars[offset + 45]
    repl, etime = _u16_at(chars, offset + 46), _u32_at(chars, offset + 48)
    ctime, delay = _u64_at(chars, offset + 52), _u32_at(chars, offset + 60)
    retry, nacks = _u32_at(chars, offset + 64), _u16_at(chars, offset + 68)
    deliveries = _u16_at(chars, offset + 70)
    # Not JobRecord(...), whose Python-level __new__ would run for every job received or
    # loaded: compiled, allocated at its size and filled in place (job_slots.h); in
    # Python, positional through tuple.__new__.
    if COMPILED:
        return _record_in_place(  # noqa: F821
            JobRecord, job_id, state, gc_retry, flags, repl, etime, ctime, delay, retry,
            nacks, deliveries, queue, body, nodes,
        ), end  # fmt: skip
    record: JobRecord = _tuple_new(
        JobRecord,
        (job_id, state, gc_retry, flags, repl, etime, ctime, delay, retry, nacks, deliveries,
         queue, body, nodes),
    )  # fmt: skip
    return record, end


def decode_jobs(
    data: bytes | bytearray | memoryview, count: int, start: int = 0
) -> list[JobRecord]:
    """Decode `count` jobs laid back to back (a REPLJOB/YOURJOBS job area) using all of
    data from `start`. A bus frame's area is decoded in place from its offset: slicing
    it first would make every field a memoryview slice before its bytes.

    Error offsets are absolute into `data`.
    """
    view = data if type(data) is bytes else memoryview(data).cast("B")
    size = len(view)
    # count comes off the wire: refuse an impossible one before looping on it.
    if count < 0 or start < 0 or count * _MIN_RECORD > size - start:
        raise CodecError(f"{count} jobs cannot fit in {size - start} bytes")
    records = []
    offset = start
    if type(view) is bytes:  # a bus frame: straight to the compiled decoder
        for _ in range(count):
            record, offset = _decode_bytes(view, offset, 0)
            records.append(record)
    else:
        for _ in range(count):
            record, offset = decode_job(view, offset)
            records.append(record)
    if offset != size:
        raise CodecError(f"{size - offset} trailing bytes at offset {offset} after {count} jobs")
    return records
