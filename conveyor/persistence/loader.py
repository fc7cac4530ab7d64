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

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from conveyor.core.codec import CodecError, decode_job
from conveyor.core.jobid import JOB_ID_LEN, is_valid_id
from conveyor.core.node import NodeCore
from conveyor.persistence.reader import AofFormatError, read_records

# Records per chunk between two yields (Disque serves clients every 1000).
CHUNK_RECORDS = 1000

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


def load(
    data: bytes,
    core: NodeCore,
    now_ms: Callable[[], int],
    *,
    enqueue: bool,
    stats: LoadStats,
) -> Iterator[int]:
    """Import every record of `data` into `core`; yields the offset reached per chunk.

    Raises AofFormatError for damage (a truncated tail sets stats.truncated_at and
    raises too, with `truncated` True: the caller may accept the part before it).
    """
    stats.total_bytes = len(data)
    now = now_ms()
    import_job = core.import_job
    countdown = CHUNK_RECORDS
    start = 0  # where the current record begins: where the previous one ended
    try:
        for command, argument, end in read_records(data):
            if len(command) == 7:  # LOADJOB (the reader admits only LOADJOB and DELJOB)
                try:
                    record, used = decode_job(argument)
                except CodecError as exc:
                    raise AofFormatError(start, str(exc), False) from None
                if used != len(argument):
                    raise AofFormatError(
                        start,
                        f"{len(argument) - used} bytes after the serialized job",
                        False,
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
                now = now_ms()
    except AofFormatError as exc:
        if exc.truncated:
            damage = misread_truncation(data, exc)
            if damage is not None:
                raise damage from None
            stats.truncated_at = exc.offset
        raise
    yield stats.loaded_bytes


def misread_truncation(data: bytes | memoryview, error: AofFormatError) -> AofFormatError | None:
    """For a record the reader found unfinished: the error to report instead when it is
    not a cut-off last record but one with a damaged length, else None.

    A cut-off record holds a prefix of its argument, which cannot decode whole. A
    serialized job that decodes in fewer bytes than declared, or a DELJOB argument that
    is not an ID's length, shows that the length is wrong and runs over later records.
    """
    if not error.truncated:
        return None
    head = _HEAD.match(bytes(data[error.offset : error.offset + _HEAD_MAX]))
    if head is None:
        return None  # the file ends inside the head: nothing after it to lose
    command, declared = head.group(1).upper(), int(head.group(2))
    start = error.offset + head.end()
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


def read_file(path: Path) -> bytes | None:
    """The whole file, or None when there is none (a node that never wrote one)."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def truncate_file(path: Path, size: int) -> None:
    os.truncate(path, size)
