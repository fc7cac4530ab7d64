"""The job codec against bytes recorded from real Disque 1.0-rc1, plus property tests.

Fixtures (tests/fixtures/disque_wire, copied from the recording in the shared reference):
appendonly.aof / rewritten.aof and their decoded tables in DECODED.md; jobs.json (SHOW of
every job, for body, queue and node bytes the tables only summarise); bus/messages.txt
(every bus message, decoded fields and full hex).
"""

from __future__ import annotations

import ast
import json
import re
import struct
from pathlib import Path
from typing import Any

import hiredis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor.core.codec import (
    DISQUE_BCAST_QUEUED,
    DISQUE_BCAST_WILLQUEUE,
    DISQUE_DELIVERED,
    CodecError,
    JobRecord,
    decode_job,
    decode_jobs,
    encode_job,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "disque_wire"

# --------------------------------------------------------------------------- fixture parsing


def resp_records(path: Path) -> list[tuple[int, list[bytes]]]:
    """Every command in an AOF, with the file offset it starts at."""
    data = path.read_bytes()
    reader = hiredis.Reader()
    reader.feed(data)
    records = []
    offset = 0
    while (command := reader.gets()) is not False:
        records.append((offset, command))
        # hiredis gives no offsets, so recompute the framing: this also proves the
        # whole file was consumed as the commands DECODED.md lists.
        offset += len(b"*%d\r\n" % len(command))
        offset += sum(len(b"$%d\r\n" % len(arg)) + len(arg) + 2 for arg in command)
    assert offset == len(data)
    return records


def split_cells(line: str) -> list[str]:
    # DECODED.md escapes the pipes inside flag names as "\|".
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def decoded_section(text: str, heading: str) -> str:
    start = text.index(heading)
    following = text.find("\n## ", start + len(heading))
    return text[start : following if following != -1 else len(text)]


def section5_rows(file_name: str) -> list[dict[str, Any]]:
    """The 'All records' table for one AOF file."""
    text = decoded_section((FIXTURES / "DECODED.md").read_text(), "## 5. All records")
    start = text.index(f"### {file_name}\n")
    end = text.find("\n### ", start + 1)
    rows = []
    for line in text[start : end if end != -1 else len(text)].splitlines():
        cells = split_cells(line) if line.startswith("| ") else []
        if not cells or not cells[0].isdigit():
            continue
        row: dict[str, Any] = {
            "n": int(cells[0]),
            "offset": int(cells[1]),
            "cmd": cells[2],
            "label": cells[3],
            "id": cells[4].strip("`").encode(),
        }
        if row["cmd"] == "LOADJOB":
            names = ("state", "flags", "repl", "etime", "ctime", "delay", "retry", "nacks")
            for name, cell in zip(names, cells[5:13], strict=True):
                row[name] = int(cell.split()[0])
            row["additional_deliveries"] = int(cells[13])
            row["queue"] = ast.literal_eval(cells[14].strip("`"))
            row["body_len"] = int(cells[15])
            row["node_count"] = int(cells[16])
        rows.append(row)
    return rows


def section3_records() -> list[list[dict[str, str]]]:
    """The byte-by-byte tables of the first records: rows that lie inside the job."""
    text = decoded_section((FIXTURES / "DECODED.md").read_text(), "## 3. ")
    records = []
    for chunk in text.split("\n### Record ")[1:]:
        rows = []
        for line in chunk.splitlines():
            cells = split_cells(line) if line.startswith("| ") else []
            if len(cells) == 6 and cells[1].isdigit():
                rows.append(
                    dict(zip(("file", "job", "len", "hex", "field", "value"), cells, strict=True))
                )
        records.append(rows)
    return records


def show_by_id() -> dict[bytes, dict[str, Any]]:
    shows = {}
    for entry in json.loads((FIXTURES / "jobs.json").read_text()):
        # The two acked jobs are only shown as they were just before ACKJOB.
        shows[entry["id"].encode()] = entry.get("show_just_before_ackjob") or entry
    return shows


_MESSAGE_RE = re.compile(r"^#(\d+) \[\s*[\d.]+\] (\w+) ")
_JOB_FIELD_RE = re.compile(r"^\s+@(\d+)\s+(\d+)\s+(.+?)\s{2,}(.*)$")
_HEX_RE = re.compile(r"^\s+[0-9a-f]{4}: ([0-9a-f]+)$")


def bus_job_messages() -> list[dict[str, Any]]:
    """REPLJOB and YOURJOBS blocks of messages.txt: header counts, job fields, bytes."""
    messages: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for line in (FIXTURES / "bus" / "messages.txt").read_text().splitlines():
        if match := _MESSAGE_RE.match(line):
            current = None
            if match[2] in ("REPLJOB", "YOURJOBS"):
                current = {"n": int(match[1]), "type": match[2], "jobs": [], "hex": ""}
                messages.append(current)
        elif current is None or line.startswith(">>>"):
            current = None
        elif match := re.search(r"numjobs=(\d+) .*datasize=(\d+)", line):
            current["numjobs"], current["datasize"] = int(match[1]), int(match[2])
        elif line.strip().startswith("job["):
            current["jobs"].append({})
        elif match := _JOB_FIELD_RE.match(line):
            current["jobs"][-1][match[3]] = match[4]
        elif match := _HEX_RE.match(line):
            current["hex"] += match[1]
    return messages


def first_int(text: str) -> int:
    return int(text.split()[0])


# --------------------------------------------------------------------------- AOF fixtures

AOF_COUNTS = {"appendonly.aof": (25, 2), "rewritten.aof": (23, 0)}


@pytest.mark.parametrize("file_name", sorted(AOF_COUNTS))
def test_aof_records_match_decoded_md_and_reencode_byte_for_byte(file_name: str) -> None:
    records = resp_records(FIXTURES / file_name)
    rows = section5_rows(file_name)
    shows = show_by_id()
    loadjobs, deljobs = AOF_COUNTS[file_name]
    assert [cmd for _, (cmd, _arg) in records].count(b"LOADJOB") == loadjobs
    assert [cmd for _, (cmd, _arg) in records].count(b"DELJOB") == deljobs
    assert len(rows) == len(records) == loadjobs + deljobs

    for (offset, (cmd, arg)), row in zip(records, rows, strict=True):
        assert (offset, cmd.decode()) == (row["offset"], row["cmd"]), row["n"]
        if cmd == b"DELJOB":
            assert arg == row["id"]
            continue
        record, end = decode_job(arg)
        assert end == len(arg)
        expected = {key: row[key] for key in JobRecord._fields if key in row}
        assert {key: getattr(record, key) for key in expected} == expected, row["label"]
        assert (len(record.body), len(record.nodes)) == (row["body_len"], row["node_count"])
        assert record.gc_retry == 0
        # The tables summarise bodies and nodes; SHOW has the bytes.
        show = shows[record.id]
        assert record.body.hex() == show["body_hex"]
        assert record.queue.hex() == show["queue_hex"]
        assert [node.decode() for node in record.nodes] == show["nodes-delivered"]
        assert encode_job(record) == arg
        assert decode_jobs(arg, 1) == [record]


def test_first_three_records_match_the_byte_by_byte_tables() -> None:
    records = resp_records(FIXTURES / "appendonly.aof")
    tables = section3_records()
    assert [len(rows) for rows in tables] == [17, 17, 17]
    for (_, (_, arg)), rows in zip(records, tables, strict=False):
        record, _ = decode_job(arg)
        # Every documented field must sit where the table says, with the value we decode.
        for row in rows:
            start, width = int(row["job"]), int(row["len"])
            raw = arg[start : start + width]
            assert raw.hex() == (row["hex"].strip("`") if width else ""), row["field"]
            field, value = row["field"], row["value"]
            if field == "id[40]":
                assert record.id.decode() == value
            elif field.startswith("state:4"):
                assert f"state={record.state} " in value
                assert value.endswith(f"gc_retry={record.gc_retry}")
            elif field == "queue name bytes":
                assert record.queue == ast.literal_eval(value)
            elif field == "body bytes":
                assert record.body == ast.literal_eval(value)
            elif field.startswith("node name "):
                assert record.nodes[int(field.split()[2])].decode() == value
            elif field.startswith("total length"):
                assert int(value) == len(arg) - 4
            else:
                lengths = {
                    "queue name length": len(record.queue),
                    "body length": len(record.body),
                    "node count": len(record.nodes),
                }
                key = field.split(" (")[0]
                actual = lengths[key] if key in lengths else getattr(record, key.replace(" ", "_"))
                assert actual == first_int(value), field


# --------------------------------------------------------------------------- bus fixtures


def test_bus_repljob_and_yourjobs_payloads_decode_and_reencode() -> None:
    messages = bus_job_messages()
    assert [m["type"] for m in messages].count("REPLJOB") == 9
    assert [m["type"] for m in messages].count("YOURJOBS") == 1
    decoded_jobs = 0
    for message in messages:
        raw = bytes.fromhex(message["hex"])
        numjobs, datasize = struct.unpack_from(">II", raw, 144)
        assert (numjobs, datasize) == (message["numjobs"], message["datasize"])
        area = raw[152:]
        assert len(area) == datasize
        records = decode_jobs(area, numjobs)
        assert len(records) == len(message["jobs"]) == numjobs
        assert b"".join(encode_job(record) for record in records) == area
        for record, fields in zip(records, message["jobs"], strict=True):
            decoded_jobs += 1
            assert first_int(fields["total length (u32 LE, bytes after this field)"]) == (
                len(encode_job(record)) - 4
            )
            assert record.id.decode() == fields["id[40]"]
            state = fields["state:4 (low nibble) | gc_retry:4 (high nibble)"]
            assert re.match(rf"state={record.state} \(.*\), gc_retry={record.gc_retry}$", state)
            ints = {
                "flags (u8)": record.flags,
                "repl (u16 LE)": record.repl,
                "etime (u32 LE)": record.etime,
                "ctime (u64 LE)": record.ctime,
                "delay (u32 LE, seconds)": record.delay,
                "retry (u32 LE, seconds)": record.retry,
                "nacks (u16 LE)": record.nacks,
                "additional deliveries (u16 LE)": record.additional_deliveries,
                "queue name length (u32 LE)": len(record.queue),
                "body length (u32 LE)": len(record.body),
                "node count (u32 LE)": len(record.nodes),
            }
            assert {name: first_int(fields[name]) for name in ints} == ints
            assert record.queue == ast.literal_eval(fields["queue name bytes"])
            assert record.body == ast.literal_eval(fields["body bytes"])
            nodes = [fields[f"node name {i} [40]"].split()[0] for i in range(len(record.nodes))]
            assert [node.decode() for node in record.nodes] == nodes
            # What makes a bus copy differ from an AOF one: relative etime, no DELIVERED.
            assert "(relative" in fields["etime (u32 LE)"]
            assert 0 < record.etime <= 86401
            assert record.flags & DISQUE_DELIVERED == 0
    assert decoded_jobs == 10


def fixture_record() -> bytes:
    """The first job of the recorded AOF, as its LOADJOB argument (serialized bytes)."""
    return resp_records(FIXTURES / "appendonly.aof")[0][1][1]


_VALID = JobRecord(
    id=b"D-8bd36d49-BAbMTO/1taPFRfHQEJTfn/qs-05a1",
    state=2,
    gc_retry=0,
    flags=DISQUE_BCAST_QUEUED | DISQUE_BCAST_WILLQUEUE,
    repl=1,
    etime=1795431132,
    ctime=1795344732800000000,
    delay=0,
    retry=300,
    nacks=0,
    additional_deliveries=0,
    queue=b"q:ascii",
    body=b"hello world",
    nodes=(b"8bd36d49a0230449efcad4173c4b4c07f2f63204",),
)


def test_encoding_the_documented_record_gives_disques_bytes() -> None:
    assert encode_job(_VALID) == fixture_record()


_WIDTHS = {
    "state": 15,
    "gc_retry": 15,
    "flags": 0xFF,
    "repl": 0xFFFF,
    "etime": 2**32 - 1,
    "ctime": 2**64 - 1,
    "delay": 2**32 - 1,
    "retry": 2**32 - 1,
    "nacks": 0xFFFF,
    "additional_deliveries": 0xFFFF,
}


@pytest.mark.parametrize("field", sorted(_WIDTHS))
def test_encode_rejects_values_that_do_not_fit(field: str) -> None:
    top = _VALID._replace(**{field: _WIDTHS[field]})
    assert decode_job(encode_job(top))[0] == top
    for bad in (_WIDTHS[field] + 1, -1):
        with pytest.raises(CodecError, match=field):
            encode_job(_VALID._replace(**{field: bad}))
    if field not in ("state", "gc_retry"):
        with pytest.raises(CodecError, match="not an int"):
            encode_job(_VALID._replace(**{field: 1.0}))


@pytest.mark.parametrize(
    "change",
    [
        {"id": _VALID.id[:39]},
        {"id": _VALID.id + b"1"},
        {"id": b"X" + _VALID.id[1:]},
        {"nodes": (b"a" * 39,)},
        {"nodes": (b"a" * 40, b"a" * 41)},
    ],
)
def test_encode_rejects_malformed_ids_and_node_names(change: dict[str, Any]) -> None:
    with pytest.raises(CodecError):
        encode_job(_VALID._replace(**change))


# --------------------------------------------------------------------------- properties

_ID = st.builds(
    lambda node, rand, ttl: b"D-" + node + b"-" + rand + b"-" + ttl,
    st.binary(min_size=8, max_size=8),
    st.binary(min_size=24, max_size=24),
    st.binary(min_size=4, max_size=4),
)


def _uint(bits: int) -> st.SearchStrategy[int]:
    return st.integers(0, 2**bits - 1)


RECORDS = st.builds(
    JobRecord,
    id=_ID,
    state=_uint(4),
    gc_retry=_uint(4),
    flags=_uint(8),
    repl=_uint(16),
    etime=_uint(32),
    ctime=_uint(64),
    delay=_uint(32),
    retry=_uint(32),
    nacks=_uint(16),
    additional_deliveries=_uint(16),
    queue=st.binary(max_size=40),
    body=st.binary(max_size=80),
    nodes=st.lists(st.binary(min_size=40, max_size=40), max_size=5).map(tuple),
)

PROPERTY = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _decodes_to_itself_or_fails_cleanly(data: bytes) -> None:
    try:
        record, end = decode_job(data)
    except CodecError:
        pass
    else:
        assert encode_job(record) == data[:end]
    try:
        records = decode_jobs(data, 1)
    except CodecError:
        pass
    else:
        assert encode_job(records[0]) == data


@PROPERTY
@given(st.lists(RECORDS, min_size=1, max_size=4))
def test_round_trip(records: list[JobRecord]) -> None:
    encoded = [encode_job(record) for record in records]
    for record, raw in zip(records, encoded, strict=True):
        assert struct.unpack_from("<I", raw)[0] == len(raw) - 4
        assert decode_job(raw) == (record, len(raw))
    assert decode_jobs(b"".join(encoded), len(records)) == records


@PROPERTY
@given(RECORDS)
def test_every_truncation_is_a_codec_error(record: JobRecord) -> None:
    raw = encode_job(record)
    for cut in range(len(raw)):
        with pytest.raises(CodecError):
            decode_job(raw[:cut])
        with pytest.raises(CodecError):
            decode_jobs(raw[:cut], 1)


@PROPERTY
@given(st.binary(max_size=300))
def test_random_bytes_decode_cleanly_or_fail_with_codec_error(data: bytes) -> None:
    _decodes_to_itself_or_fails_cleanly(data)


@PROPERTY
@given(st.binary(min_size=80, max_size=300))
def test_random_bytes_with_a_plausible_prefix(rest: bytes) -> None:
    # A correct prefix and ID get random input past the first checks.
    data = struct.pack("<I", len(rest) + 40) + _VALID.id + rest
    _decodes_to_itself_or_fails_cleanly(data)


@settings(deadline=None, max_examples=300)
@given(RECORDS, st.data())
def test_single_byte_corruption_decodes_to_itself_or_fails_cleanly(
    record: JobRecord, data: st.DataObject
) -> None:
    raw = bytearray(encode_job(record))
    index = data.draw(st.integers(0, len(raw) - 1), label="index")
    raw[index] = data.draw(st.integers(0, 255).filter(lambda b: b != raw[index]), label="byte")
    _decodes_to_itself_or_fails_cleanly(bytes(raw))
