"""The job decoder on bad and unusual input: offsets into larger inputs, any buffer type,
corrupt and truncated records (each a CodecError naming its offset, never another
exception), starting from the first job of the recorded Disque AOF."""

from __future__ import annotations

import re
import struct
from typing import Any

import pytest
from hypothesis import given

from conveyor.core import codec
from conveyor.core.codec import CodecError, JobRecord, decode_job, decode_jobs, encode_job
from tests.core.test_codec import PROPERTY, RECORDS, fixture_record


def _with_prefix(body: bytes, joblen: int) -> bytes:
    return struct.pack("<I", joblen) + body[4:]


def test_decode_at_offset_and_from_views() -> None:
    raw = fixture_record()
    record, _ = decode_job(raw)
    data = b"junk" + raw + raw
    assert decode_job(data, 4) == (record, 4 + len(raw))
    assert decode_job(memoryview(data), 4 + len(raw)) == (record, len(data))
    assert decode_job(bytearray(data), 4)[0] == record
    assert decode_jobs(memoryview(raw + raw), 2) == [record, record]
    assert decode_jobs(b"", 0) == []
    # From a start offset, in place (a bus frame's job area): the same records.
    assert decode_jobs(b"junk" + raw + raw, 2, 4) == [record, record]
    assert decode_jobs(b"junk", 0, 4) == []
    with pytest.raises(CodecError, match="1 trailing bytes at offset 146"):
        decode_jobs(b"junk" + raw + b"\x00", 1, 4)  # offsets count from data's start
    with pytest.raises(CodecError, match="2 jobs cannot fit in 142 bytes"):
        decode_jobs(b"junk" + raw, 2, 4)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda raw: raw[:83], "truncated job at offset 0"),
        (lambda raw: _with_prefix(raw, len(raw) - 3), "runs past the end of input"),
        (lambda raw: _with_prefix(raw, len(raw) - 5), "node count 1 at offset"),
        (lambda raw: _with_prefix(raw, 79), "below the minimum 80"),
        (lambda raw: _with_prefix(raw + b"x", len(raw) - 3), "but the length prefix leaves 41"),
        (lambda raw: raw[:72] + b"\xff\xff\xff\xff" + raw[76:], "queue name length 4294967295"),
        (lambda raw: raw[:83] + b"\xff\xff\xff\xff" + raw[87:], "body length 4294967295"),
        (lambda raw: raw[:98] + b"\xff\xff\xff\xff" + raw[102:], "node count 4294967295"),
        (lambda raw: raw[:98] + b"\x00" * 4 + raw[102:], "node count 0 at offset 98"),
        (lambda raw: raw[:4] + b"X" + raw[5:], "is not a Disque job ID"),
        (lambda raw: raw[:39] + b"+" + raw[40:], "is not a Disque job ID"),
    ],
)  # fmt: skip
def test_corrupt_records_are_rejected_with_their_offset(mutate: Any, message: str) -> None:
    with pytest.raises(CodecError, match=re.escape(message)):
        decode_job(mutate(fixture_record()))


def test_decode_jobs_insists_on_exact_count_and_size() -> None:
    raw = fixture_record()
    with pytest.raises(CodecError, match="1 trailing bytes at offset 142"):
        decode_jobs(raw + b"\x00", 1)
    with pytest.raises(CodecError, match="142 trailing bytes"):
        decode_jobs(raw + raw, 1)
    with pytest.raises(CodecError, match="truncated job at offset 142"):
        decode_jobs(raw + raw[:80], 2)
    # A hostile numjobs is refused before any work is sized by it.
    for count in (4, 2**32 - 1, -1):
        with pytest.raises(CodecError, match=f"{count} jobs cannot fit in 284 bytes"):
            decode_jobs(raw + raw, count)
    with pytest.raises(CodecError, match="outside"):
        decode_job(raw, len(raw) + 1)


def test_every_single_byte_substitution_of_a_real_record() -> None:
    raw = fixture_record()
    outcomes = {"decoded": 0, "rejected": 0}
    for index in range(len(raw)):
        for value in range(256):
            if value != raw[index]:
                bad = raw[:index] + bytes([value]) + raw[index + 1 :]
                try:
                    record, end = decode_job(bad)
                except CodecError:
                    outcomes["rejected"] += 1
                else:
                    assert (encode_job(record), end) == (bad, len(bad))
                    outcomes["decoded"] += 1
    # Both branches must be taken, or the test proves nothing.
    assert outcomes["decoded"] > 20_000
    assert outcomes["rejected"] > 1_000


def _outcome(data: bytes | bytearray | memoryview, offset: int) -> object:
    try:
        return decode_job(data, offset)
    except CodecError as exc:
        return str(exc)


def test_any_buffer_decodes_as_bytes_do_with_the_same_offsets() -> None:
    """bytes are decoded in place and any other buffer from a copy of the record: every
    single byte substitution, and every truncation, at an offset into a larger input,
    gives the same record, end and error message (its offsets absolute) either way."""
    raw = fixture_record()
    prefix = b"junk"
    cases = [raw[:cut] for cut in range(len(raw))]
    cases += [
        raw[:index] + bytes([value]) + raw[index + 1 :]
        for index in range(len(raw))
        for value in (0x00, 0x01, 0x2D, 0x44, 0x7F, 0x80, 0xFF)
        if value != raw[index]
    ]
    errors = 0
    for case in cases:
        data = prefix + case + b"tail"
        expected = _outcome(data, len(prefix))
        errors += isinstance(expected, str)
        assert _outcome(memoryview(data), len(prefix)) == expected, case
        assert _outcome(bytearray(data), len(prefix)) == expected, case
    assert errors > 200  # the error paths were taken (261), with their offsets


def _packed_field_by_field(record: JobRecord) -> bytes:
    """The layout of the module docstring, packed here on its own: the oracle."""
    struct_part = struct.pack(
        "<40sBBHIQIIHHI",
        record.id,
        record.state | record.gc_retry << 4,
        record.flags,
        record.repl,
        record.etime,
        record.ctime,
        record.delay,
        record.retry,
        record.nacks,
        record.additional_deliveries,
        len(record.queue),
    )
    rest = (
        bytes(record.queue)
        + struct.pack("<I", len(record.body))
        + bytes(record.body)
        + struct.pack("<I", len(record.nodes))
        + b"".join(record.nodes)
    )
    return struct.pack("<I", len(struct_part) + len(rest)) + struct_part + rest


@PROPERTY
@given(RECORDS)
def test_encoding_is_the_layout_packed_field_by_field(record: JobRecord) -> None:
    # Compiled, encode_job writes the bytes in place (_write_record); pure Python packs
    # them with struct. Both must give the layout, whichever this run loaded.
    assert encode_job(record) == _packed_field_by_field(record)
    # A queue or body that is not exactly bytes takes the struct path, same bytes.
    odd = record._replace(queue=bytearray(record.queue), body=memoryview(record.body))
    assert encode_job(odd) == _packed_field_by_field(record)


def test_the_writer_runs_only_where_it_was_compiled() -> None:
    import conveyor.compiled as compiled

    assert (compiled.status.get("conveyor.core.codec") == "compiled") == codec.COMPILED


def test_a_decoded_record_is_a_job_record_out_of_the_collectors_sight_when_compiled() -> None:
    """Compiled, decode allocates the record at its size and fills it in place
    (job_slots.h): it must be an exact JobRecord, equal field by field to the one the
    pure path makes, hold its own references and be untracked only when compiled."""
    import gc
    import sys

    import conveyor.compiled as compiled

    raw = fixture_record()
    record, _ = decode_job(raw)
    assert type(record) is JobRecord and len(record) == 14
    assert record == JobRecord._make(codec._tuple_new(tuple, record))
    assert record._replace(nacks=1).nacks == 1  # a named tuple like any other
    assert gc.is_tracked(record) is (compiled.status.get("conveyor.core.codec") != "compiled")
    body = record.body
    before = sys.getrefcount(body)
    del record
    assert sys.getrefcount(body) == before - 1  # the record's reference went with it
