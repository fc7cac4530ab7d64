"""Loading an AOF into the core at start, as Disque's loadAppendOnlyFile does.

`load` is a generator: it imports a chunk of records and yields how far it got, so the
node can answer other clients with -LOADING between chunks. Each LOADJOB goes through
`import_job` (a queued job comes back active, to be queued after DELAY + RETRY, an
at-most-once job never again, an expired one is dropped), unless `enqueue` (the
`aof-enqueue-jobs-once` restart) asks to put queued jobs straight back in their
queues; each DELJOB frees the job.

A file that ends inside a record is `truncated`: the caller decides (aof-load-truncated)
whether to cut it at `offset` and go on. Any other damage is fatal and names its offset,
including a record whose length field was damaged so that it seems to run past the end
of the file (`misread_truncation`): cutting there would throw the records after it away.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from conveyor.core.codec import CodecError, decode_job
from conveyor.core.jobid import JOB_ID_LEN, is_valid_id
from conveyor.core.node import NodeCore
from conveyor.persistence.reader import AofFormatError, read_records

# Records per chunk between two yields (Disque serves clients every 1000).
CHUNK_RECORDS = 1000
# The file is read this much at a time: what a load holds beyond the jobs it makes.
CHUNK_BYTES = 4 * 1024 * 1024
# Damage found this far before a chunk's end is what the whole file would show.
_SETTLE_BYTES = 64 * 1024

# A record's head up to its argument's bytes, in any case and with leading zeros, as the
# reader accepts it; group 1 the command, group 2 the argument's declared length.
_HEAD = re.compile(rb"\*0*2\r\n\$0*[67]\r\n(LOADJOB|DELJOB)\r\n\$([0-9]{1,10})\r\n", re.I)
_HEAD_MAX = 48


@dataclass
class LoadStats:
    total_bytes: int = 0
    loaded_bytes: int = 0
    records: int = 0
    jobs_loaded: int = 0
    jobs_deleted: int = 0
    # Set when the file ends inside a record: where the last good record ends.
    truncated_at: int | None = None
    # The most file data held at once (a chunk, plus a record cut by its end).
    peak_buffer: int = 0


def load(
    source: bytes | BinaryIO,
    core: NodeCore,
    now_ms: Callable[[], int],
    *,
    enqueue: bool,
    stats: LoadStats,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[int]:
    """Import every record of `source` (the file's bytes, or the file open for reading
    at its start) into `core`; yields the offset reached per chunk of records.

    The file is read `chunk_bytes` at a time: a record cut by a chunk's end is finished
    with the next read, so at most one chunk plus the record that straddles it is held
    (`stats.peak_buffer`) whatever the file's size, as Redis streams its AOF. (A record
    whose head is not Disque's usual one may take up to twice its size while read.)

    Raises AofFormatError for damage (a truncated tail sets stats.truncated_at and
    raises too, with `truncated` True: the caller may accept the part before it).
    """
    handle = io.BytesIO(source) if isinstance(source, bytes) else source
    stats.total_bytes = os.fstat(handle.fileno()).st_size if handle is source else len(source)
    clock = [now_ms()]
    buffer = b""
    origin = 0  # the file offset of buffer[0]
    while True:
        more = handle.read(max(chunk_bytes, _missing(buffer)))
        buffer = buffer + more if buffer else more
        stats.peak_buffer = max(stats.peak_buffer, len(buffer))
        try:
            yield from _import_records(buffer, origin, core, now_ms, clock, enqueue, stats)
        except AofFormatError as exc:
            # Decided by the chunk's end, not the file's: a tail cut short, or damage the
            # next bytes may name differently (a wrong argc ending inside the command).
            settled = len(buffer) - (exc.offset - origin) >= _SETTLE_BYTES
            if not more or (settled and not exc.truncated):
                _at_the_end(buffer, origin, exc, stats)
                raise
        if not more:
            break
        used = stats.loaded_bytes - origin  # up to the record the chunk's end cut, if any
        buffer = buffer[used:]
        origin += used
    yield stats.loaded_bytes


def _import_records(
    buffer: bytes,
    origin: int,
    core: NodeCore,
    now_ms: Callable[[], int],
    clock: list[int],
    enqueue: bool,
    stats: LoadStats,
) -> Iterator[int]:
    """The records of `buffer` (file offset `origin`) into `core`; `clock` holds the time
    used, read again each time the event loop had a turn."""
    import_job = core.import_job
    now = clock[0]
    start = stats.loaded_bytes  # where the current record begins: the previous one's end
    countdown = CHUNK_RECORDS - stats.records % CHUNK_RECORDS
    for command, argument, end in read_records(buffer, 0, origin):
        if len(command) == 7:  # LOADJOB (the reader admits only LOADJOB and DELJOB)
            try:
                record, used = decode_job(argument)
            except CodecError as exc:
                raise AofFormatError(start, str(exc), False) from None
            if used != len(argument):
                raise AofFormatError(
                    start, f"{len(argument) - used} bytes after the serialized job", False
                )
            if import_job(record, now, enqueue=enqueue) is not None:
                stats.jobs_loaded += 1
        else:
            if not is_valid_id(argument):
                raise AofFormatError(start, f"DELJOB of an invalid job ID {argument!r}", False)
            stats.jobs_deleted += core.del_jobs([argument], now)
        stats.records += 1
        stats.loaded_bytes = start = end
        countdown -= 1
        if not countdown:
            countdown = CHUNK_RECORDS
            yield end
            now = clock[0] = now_ms()


def _missing(unfinished: bytes) -> int:
    """How many bytes the record begun in `unfinished` lacks, as far as its head says: a
    record longer than a chunk is then read whole at once, not re-scanned per chunk."""
    head = _HEAD.match(unfinished, 0, _HEAD_MAX)
    if head is None:
        return len(unfinished)  # an unusual head (or none yet): grow geometrically
    return head.end() + int(head.group(2)) + 2 - len(unfinished)


def _at_the_end(buffer: bytes, origin: int, exc: AofFormatError, stats: LoadStats) -> None:
    """For damage that stops the load: a truncated tail sets `stats.truncated_at`, unless
    it is a damaged length in disguise, raised instead."""
    if exc.truncated:
        damage = misread_truncation(buffer, exc, origin)
        if damage is not None:
            raise damage from None
        stats.truncated_at = exc.offset


def misread_truncation(
    data: bytes | memoryview, error: AofFormatError, origin: int = 0
) -> AofFormatError | None:
    """For a record the reader found unfinished: the error to report instead when it is
    not a cut-off last record but one with a damaged length, else None. `data` is the
    file from offset `origin` to its end.

    A cut-off record holds a prefix of its argument, which cannot decode whole. A
    serialized job that decodes in fewer bytes than declared, or a DELJOB argument that
    is not an ID's length, shows that the length is wrong and runs over later records.
    """
    if not error.truncated:
        return None
    at = error.offset - origin
    head = _HEAD.match(bytes(data[at : at + _HEAD_MAX]))
    if head is None:
        return None  # the file ends inside the head: nothing after it to lose
    command, declared = head.group(1).upper(), int(head.group(2))
    start = at + head.end()
    if command == b"DELJOB":
        if declared == JOB_ID_LEN:
            return None
        reason = f"DELJOB argument length {declared}, not a job ID's {JOB_ID_LEN}"
        return AofFormatError(error.offset, reason, False)
    try:
        _, used = decode_job(bytes(data[start : start + declared]))
    except CodecError:
        return None  # a prefix of a job, as a cut-off record holds
    if used == declared:
        return None  # the whole job is there, the file ends in its CRLF
    reason = (
        f"LOADJOB argument length {declared} runs past the end of the file, but its "
        f"serialized job ends after {used} bytes: a damaged length, not a cut-off record"
    )
    return AofFormatError(error.offset, reason, False)


def open_file(path: Path) -> BinaryIO | None:
    """The file open for reading (unbuffered: `load` reads it in large chunks), or None
    when there is none (a node that never wrote one)."""
    try:
        return open(path, "rb", buffering=0)
    except FileNotFoundError:
        return None


def truncate_file(path: Path, size: int) -> None:
    os.truncate(path, size)
