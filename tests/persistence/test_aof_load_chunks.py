"""Loading an AOF a chunk at a time (as Redis streams it): records cut by a chunk's end,
a truncated tail and a damaged record give exactly what loading the whole file at once
gives, and no more than a chunk plus one record is ever held."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from conveyor.core.node import NodeCore
from conveyor.persistence.loader import LoadStats, load, open_file
from conveyor.persistence.reader import AofFormatError, read_records
from conveyor.persistence.records import RecordEncoder

NODE = "8bd36d49a0230449efcad4173c4b4c07f2f63204"
NOW = 1_795_344_732_800
JOBS = 200
CHUNKS = (97, 1000, 8192)  # smaller than a record, about one, several


def make_aof() -> bytes:
    """LOADJOBs of bodies from 1 byte to 1.5 KB, and DELJOBs of every third job."""
    core = NodeCore(NODE, b"seed", random.Random(3))
    core.record_job_events(True)
    sizes = random.Random(7)
    ids = [
        core.add_default_job(b"q%d" % (n % 5), b"x" * sizes.randint(1, 1500), NOW).id
        for n in range(JOBS)
    ]
    core.del_jobs(ids[::3], NOW)
    return b"".join(RecordEncoder(NODE.encode()).from_events(core.take_job_events()))


AOF = make_aof()
RECORD_ENDS = [record.end for record in read_records(AOF)]
LONGEST_RECORD = max(
    end - start for start, end in zip([0, *RECORD_ENDS[:-1]], RECORD_ENDS, strict=True)
)

Outcome = tuple[object, list[tuple[bytes, int, bytes]], int, int | None]


def loaded(path: Path, chunk_bytes: int | None) -> tuple[Outcome, LoadStats]:
    """(error or None, the jobs held, bytes loaded, truncated_at) and the load's stats;
    chunk_bytes None loads the whole file as one buffer, as the loader always did."""
    core = NodeCore(NODE, b"seed", random.Random(5))
    stats = LoadStats()
    failure: object = None
    handle = open_file(path)
    assert handle is not None
    with handle:
        source = handle.read() if chunk_bytes is None else handle
        options = {} if chunk_bytes is None else {"chunk_bytes": chunk_bytes}
        try:
            for _ in load(source, core, lambda: NOW, enqueue=False, stats=stats, **options):
                pass
        except AofFormatError as exc:
            failure = (exc.offset, exc.truncated, str(exc))
    jobs = sorted((job.id, job.state, job.body) for job in core.jobs.values())
    return (failure, jobs, stats.loaded_bytes, stats.truncated_at), stats


@pytest.mark.parametrize("chunk_bytes", CHUNKS)
def test_a_chunked_load_holds_what_a_whole_load_holds(tmp_path: Path, chunk_bytes: int) -> None:
    path = tmp_path / "disque.aof"
    path.write_bytes(AOF)
    whole, _ = loaded(path, None)
    chunked, stats = loaded(path, chunk_bytes)
    assert chunked == whole
    assert whole[0] is None and len(whole[1]) == JOBS - len(range(0, JOBS, 3))
    assert stats.records == len(RECORD_ENDS)
    # A chunk plus the one record its end cut, never the file.
    assert stats.peak_buffer <= chunk_bytes + LONGEST_RECORD < len(AOF) // 4


@pytest.mark.parametrize("chunk_bytes", CHUNKS)
def test_a_truncated_tail_stops_where_a_whole_load_stops(tmp_path: Path, chunk_bytes: int) -> None:
    path = tmp_path / "disque.aof"
    picks = random.Random(chunk_bytes)
    cuts = [RECORD_ENDS[n] - picks.randint(1, 60) for n in picks.sample(range(1, JOBS), 6)]
    for cut in [1, 17, *cuts]:
        path.write_bytes(AOF[:cut])
        whole, _ = loaded(path, None)
        assert whole[0] is not None and whole[0][1] is True  # truncated
        assert loaded(path, chunk_bytes)[0] == whole, cut


@pytest.mark.parametrize(
    "damage",
    [
        (b"*2\r\n$7\r\nLOADJOB", b"*2\r\n$7\r\nLOADJOX"),  # an unknown command
        (b"*2\r\n$7\r\nLOADJOB", b"*3\r\n$7\r\nLOADJOB"),  # a wrong argument count
        (b"*2\r\n$6\r\nDELJOB\r\n$40", b"*2\r\n$6\r\nDELJOB\r\n$41"),  # a damaged length
    ],
)
def test_a_damaged_record_is_named_as_a_whole_load_names_it(
    tmp_path: Path, damage: tuple[bytes, bytes]
) -> None:
    path = tmp_path / "disque.aof"
    picks = random.Random(11)
    for at in picks.sample(range(1, len(RECORD_ENDS) - 1), 3):
        start = AOF.find(damage[0], RECORD_ENDS[at])
        data = AOF[:start] + damage[1] + AOF[start + len(damage[1]) :]
        for tail in (len(data), start + 12):  # damage in the middle, or at the very end
            path.write_bytes(data[:tail])
            whole, _ = loaded(path, None)
            assert whole[0] is not None
            for chunk_bytes in CHUNKS:
                assert loaded(path, chunk_bytes)[0] == whole, (at, tail, chunk_bytes)
