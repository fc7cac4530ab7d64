"""The AOF record reader against real Disque files, every kind of damage, and properties.

Fixtures: tests/fixtures/disque_wire/appendonly.aof and rewritten.aof, written by Disque
1.0-rc1, with their record tables (offset, command, job) in DECODED.md next to them.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor.core.codec import decode_job
from conveyor.persistence.reader import (
    AofFormatError,
    AofRecord,
    _parse_one,
    read_records,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "disque_wire"
APPENDONLY = (FIXTURES / "appendonly.aof").read_bytes()
REWRITTEN = (FIXTURES / "rewritten.aof").read_bytes()


def frame(command: bytes, argument: bytes) -> bytes:
    return b"*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(command), command, len(argument), argument)


def decoded_table(name: str) -> list[tuple[int, bytes]]:
    """(file offset, command) of every record, from the table under `### <name>` in DECODED.md."""
    text = (FIXTURES / "DECODED.md").read_text()
    section = text.split(f"### {name}\n", 1)[1].split("\n### ", 1)[0]
    rows = re.findall(r"^\| \d+ \| (\d+) \| (LOADJOB|DELJOB) \|", section, re.MULTILINE)
    return [(int(offset), command.encode()) for offset, command in rows]


Outcome = tuple[list[AofRecord], tuple[int, str, bool] | None]


def outcome(data: bytes | memoryview, start: int = 0) -> Outcome:
    """The records read and the error (offset, reason, truncated) or None, for comparisons."""
    records: list[AofRecord] = []
    try:
        for record in read_records(data, start):
            records.append(record)
    except AofFormatError as exc:
        return records, (exc.offset, exc.reason, exc.truncated)
    return records, None


def slow_outcome(data: bytes) -> Outcome:
    """The same, using only the exact byte-by-byte parser: the reference for the fast path."""
    records: list[AofRecord] = []
    pos = 0
    while pos < len(data):
        try:
            record = _parse_one(data, pos, len(data))
        except AofFormatError as exc:
            return records, (exc.offset, exc.reason, exc.truncated)
        records.append(record)
        pos = record.end
    return records, None


def error_of(data: bytes) -> AofFormatError:
    with pytest.raises(AofFormatError) as info:
        list(read_records(data))
    return info.value


# ----------------------------------------------------------------------- the recorded files


@pytest.mark.parametrize(
    ("data", "name", "count", "first_three"),
    [
        (APPENDONLY, "appendonly.aof", 27, [0, 167, 323]),
        (REWRITTEN, "rewritten.aof", 23, [0, 182, 349]),
    ],
)
def test_recorded_disque_files(data: bytes, name: str, count: int, first_three: list[int]) -> None:
    records = list(read_records(data))
    assert len(records) == count
    starts = [0] + [record.end for record in records[:-1]]
    assert starts[:3] == first_three
    assert records[-1].end == len(data)
    # Every offset and command in DECODED.md's table, not just the first three.
    assert [(s, r.command) for s, r in zip(starts, records, strict=True)] == decoded_table(name)
    for record in records:
        if record.command == b"LOADJOB":
            job, end = decode_job(record.argument)
            assert end == len(record.argument)
            assert len(job.id) == 40
        else:
            assert len(record.argument) == 40


def test_first_record_bytes_match_decoded_md() -> None:
    first = next(read_records(APPENDONLY))
    assert first.command == b"LOADJOB"
    assert len(first.argument) == 142
    assert first.argument[4:44] == b"D-8bd36d49-BAbMTO/1taPFRfHQEJTfn/qs-05a1"
    assert first.end == 167


def test_deljob_records_name_acked_jobs() -> None:
    deljobs = [r for r in read_records(APPENDONLY) if r.command == b"DELJOB"]
    assert [r.argument for r in deljobs] == [
        b"D-8bd36d49-h+44uLfc3C/Ly0fo6OOpqa+w-05a1",
        b"D-8bd36d49-YxsXF1gFxRzlpebIiAXJCVsU-05a1",
    ]
    assert [r.end for r in deljobs] == [14508, 14571]


def test_empty_input_yields_nothing() -> None:
    assert list(read_records(b"")) == []
    assert list(read_records(memoryview(b""))) == []


def test_start_offset_and_memoryview_give_the_same_records() -> None:
    records = list(read_records(APPENDONLY))
    assert list(read_records(memoryview(APPENDONLY))) == records
    assert list(read_records(bytearray(APPENDONLY))) == records  # type: ignore[arg-type]
    assert list(read_records(APPENDONLY, 323)) == records[2:]
    assert list(read_records(APPENDONLY, len(APPENDONLY))) == []
    with pytest.raises(ValueError):
        list(read_records(APPENDONLY, len(APPENDONLY) + 1))


def test_windowed_reading_across_window_edges_and_huge_records() -> None:
    # Non-bytes input is read through 4 MiB windows: mix small records, records that
    # straddle window edges, and one record bigger than a window.
    parts = [frame(b"LOADJOB", bytes([i % 251]) * (700_000 + i)) for i in range(12)]
    parts.insert(5, frame(b"LOADJOB", b"\xff" * (5 * 1024 * 1024)))
    parts += [frame(b"DELJOB", b"x" * 40)] * 1000
    data = b"".join(parts)
    expected = outcome(data)
    assert expected[1] is None
    assert len(expected[0]) == 1013
    assert outcome(memoryview(data)) == expected
    cut = data[: len(data) - 3]
    assert outcome(memoryview(cut)) == outcome(cut)
    error = outcome(cut)[1]
    assert error is not None
    assert (error[0], error[2]) == (expected[0][-2].end, True)


def test_spellings_disque_also_accepts() -> None:
    # Disque's loader takes any case (lookupCommand) and strtol lengths: the exact parser
    # handles these, the fast path hands them over.
    data = b"*2\r\n$6\r\ndeljob\r\n$3\r\nabc\r\n*02\r\n$007\r\nLoadJob\r\n$0\r\n\r\n"
    assert list(read_records(data)) == [
        AofRecord(b"deljob", b"abc", 25),
        AofRecord(b"LoadJob", b"", len(data)),
    ]


# ------------------------------------------------------------------------------------ damage

GOOD = frame(b"LOADJOB", b"job-one") + frame(b"DELJOB", b"job-two")
SECOND = len(frame(b"LOADJOB", b"job-one"))


@pytest.mark.parametrize(
    ("tail", "reason"),
    [
        (b"x2\r\n", "expected '*', got 'x'"),
        (b"\n", "expected '*', got '\\n'"),
        (b"\x00\xff\xfe garbage", "expected '*', got '\\x00'"),
        (b"*2\r\n#6\r\nDELJOB\r\n", "expected '$' at offset {+4}, got '#'"),
        (b"*2\r\n$6\r\nDELJOB\r\n:3\r\n", "expected '$' at offset {+16}, got ':'"),
        (b"*2\r\n$6x\r\nDELJOB\r\n", "invalid command length '6x' at offset {+5}"),
        (b"*2\r\n$\r\nDELJOB\r\n", "invalid command length '\\r' at offset {+5}"),
        (b"*2\r\n$-1\r\n", "invalid command length '-' at offset {+5}"),
        (b"*2\r\n$6\r\nDELJOB\r\n$ 3\r\nabc\r\n", "invalid argument length ' ' at offset {+17}"),
        (b"*2\r\n$6\r\nDELJOB\r\n$99999999999\r\n", "invalid argument length '99999999999'"),
        (b"*2\r\n$6\r\nDELJOB\r\n$999999999\r\n", "invalid argument length 999999999 at"),
        (b"*2x\r\n", "invalid multibulk length '2x' at offset {+1}"),
        (b"*2\rx", "expected '\\r\\n' after the multibulk length at offset {+2}"),
        (b"*2\r\n$6\r\nDELJOB\r\n$3\r\nabcd\r\n", "expected '\\r\\n' after the 3-byte argument"),
        (b"*2\r\n$6\r\nDELJOB\r\n$3\r\nab\r\n", "expected '\\r\\n' after the 3-byte argument"),
        (b"*2\r\n$6\r\nDELJOBxx$3\r\nabc\r\n", "expected '\\r\\n' after the 6-byte command"),
        (b"*0\r\n", "invalid multibulk length 0"),
        (
            b"*3\r\n$6\r\nDELJOB\r\n$3\r\nabc\r\n$1\r\nx\r\n",
            "wrong number of arguments (3) for DELJOB",
        ),
        (b"*1\r\n$7\r\nloadjob\r\n", "wrong number of arguments (1) for loadjob"),
        (b"*3\r\n$7\r\nLOA", "wrong number of arguments (3), and the file ends in the command"),
        (b"*2\r\n$3\r\nFOO\r\n$1\r\nx\r\n", "unknown command 'FOO'"),
        (b"*2\r\n$7\r\nLOADJOX\r\n$1\r\nx\r\n", "unknown command 'LOADJOX'"),
        (b"*2\r\n$4\r\nSET\x00\r\n$1\r\nx\r\n", "unknown command 'SET\\x00'"),
        (b"*2\r\n$7\r\nDEL", "unknown command 'DEL'... (7 bytes)"),
        (b"*2\r\n$4\r\n", "unknown command ''... (4 bytes)"),
    ],
)
def test_damage_after_a_good_record_names_its_start(tail: bytes, reason: str) -> None:
    data = GOOD + tail
    exc = error_of(data)
    assert exc.offset == len(GOOD)
    assert not exc.truncated
    # "{+n}" in the expected reason is an offset relative to the bad record.
    expected = re.sub(r"\{\+(\d+)\}", lambda m: str(len(GOOD) + int(m[1])), reason)
    assert exc.reason.startswith(expected), exc.reason
    assert str(exc) == (
        f"Bad file format reading the append only file at offset {len(GOOD)}: {exc.reason}"
    )
    # The good records before it still come out, in order.
    assert outcome(data)[0] == list(read_records(GOOD))


def test_corrupt_record_in_the_middle_of_a_real_file() -> None:
    # Record 5 (J05) starts at 10901 in DECODED.md; damage its bulk-length line.
    data = bytearray(APPENDONLY)
    assert data[10901 + 4 : 10901 + 8] == b"$7\r\n"
    data[10901 + 5] = ord("x")
    records, error = outcome(bytes(data))
    assert [r.end for r in records] == [167, 323, 505, 10901]
    assert error == (10901, "invalid command length 'x' at offset 10906", False)


def test_corrupt_job_length_overruns_into_next_record() -> None:
    # A bulk length that is too long swallows the next record's start, then misses CRLF.
    data = APPENDONLY.replace(b"$142\r\n", b"$145\r\n", 1)
    assert outcome(data) == (
        [],
        (0, "expected '\\r\\n' after the 145-byte argument at offset 168, got '2\\r'", False),
    )


def test_a_wrong_length_that_happens_to_land_on_crlf_is_framing_we_cannot_see() -> None:
    # $150 ends the first argument at 173, where record 2's "$7\r\n" has a CRLF: RESP
    # framing alone cannot tell, so the damage shows one record later (and the codec,
    # which check-aof runs on every LOADJOB, refuses the 150-byte job at offset 0).
    data = APPENDONLY.replace(b"$142\r\n", b"$150\r\n", 1)
    records, error = outcome(data)
    assert [r.end for r in records] == [175]
    assert error == (175, "expected '*', got 'L'", False)


def test_cut_at_every_byte_of_a_real_file() -> None:
    # Small records (DELJOBs) and big ones (J04's 10 KB body) alike.
    records = list(read_records(APPENDONLY))
    starts = [0] + [r.end for r in records]
    for cut in range(len(APPENDONLY) + 1):
        got, error = outcome(APPENDONLY[:cut])
        complete = [r for r in records if r.end <= cut]
        assert got == complete
        if cut in starts:
            assert error is None
        else:
            assert error is not None
            offset, _, truncated = error
            assert (offset, truncated) == (complete[-1].end if complete else 0, True)


def test_truncated_error_message() -> None:
    data = GOOD + b"*2\r\n$7\r\nLOADJOB\r\n$10\r\nabc"
    exc = error_of(data)
    assert (exc.offset, exc.truncated) == (len(GOOD), True)
    assert exc.reason == f"unexpected end of file in the argument, at offset {len(data)}"
    assert str(exc) == (
        "Bad file format reading the append only file: "
        f"unexpected end of file at offset {len(GOOD)}"
    )


def test_error_survives_pickling() -> None:
    exc = error_of(GOOD + b"?")
    copy = pickle.loads(pickle.dumps(exc))
    assert (copy.offset, copy.reason, copy.truncated, str(copy)) == (
        exc.offset,
        exc.reason,
        exc.truncated,
        str(exc),
    )


# -------------------------------------------------------------------------------- properties

commands = st.sampled_from([b"LOADJOB", b"DELJOB", b"loadjob", b"DelJob"])
records_strategy = st.lists(st.tuples(commands, st.binary(max_size=300)), max_size=12)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_strategy, data=st.data())
def test_any_cut_yields_the_records_before_it_and_a_tail_at_the_cut_record(
    records: list[tuple[bytes, bytes]], data: st.DataObject
) -> None:
    framed = [frame(command, argument) for command, argument in records]
    blob = b"".join(framed)
    cut = data.draw(st.integers(0, len(blob)), label="cut")
    starts = [0]
    for part in framed:
        starts.append(starts[-1] + len(part))
    complete = sum(1 for end in starts[1:] if end <= cut)
    got, error = outcome(blob[:cut])
    assert [(r.command, r.argument) for r in got] == records[:complete]
    assert [r.end for r in got] == starts[1 : complete + 1]
    if cut == starts[complete]:
        assert error is None
    else:
        assert error is not None
        assert (error[0], error[2]) == (starts[complete], True)
    assert outcome(memoryview(blob[:cut])) == (got, error)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=records_strategy.filter(bool),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.binary(max_size=3)), max_size=3),
)
def test_fast_path_agrees_with_the_exact_parser_on_damaged_files(
    records: list[tuple[bytes, bytes]], edits: list[tuple[int, bytes]]
) -> None:
    # The fast path may only ever take a shortcut: on any damage, the exact parser's
    # records and error must come out unchanged.
    blob = bytearray(b"".join(frame(c, a) for c, a in records))
    for where, replacement in edits:
        where %= len(blob)
        blob[where : where + len(replacement)] = replacement
    damaged = bytes(blob)
    assert outcome(damaged) == slow_outcome(damaged)
    assert outcome(memoryview(damaged)) == slow_outcome(damaged)


@settings(max_examples=200)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_crash_and_offsets_stay_in_range(blob: bytes) -> None:
    records, error = outcome(blob)
    assert outcome(blob) == slow_outcome(blob)
    if error is not None:
        offset = error[0]
        assert offset == (records[-1].end if records else 0)
