"""The node's job-event log: one JSON line per job life-cycle event, in hourly files.

Owns the line format, the in-memory buffer, file naming (`events-YYYYMMDDTHH-<node8>.jsonl`
by the UTC hour of each event) and the writes, including what happens when they fail.
It reads no clock and arms no timer: every event carries the engine's time, the log
writes its buffer itself once it holds ~64 KiB, and the server calls `flush` for the
rest (a timer while something is buffered, shutdown).

The format is a contract with readers (the Spark analytics job): keys in a fixed order,

    {"time_ms":…,"node":"<40 hex>","event":"added","id":"D-…","queue":"q1",
     "nacks":0,"additional_deliveries":0}    (one line; see docs/operations.md)

Recording is on the ADDJOB hot path (two events per job), so a line is not built with
json.dumps but kept as three pre-encoded pieces joined at flush time: the head (time,
node and event; made once per event kind and millisecond), the job ID (ASCII by
construction) and the tail (JSON-escaped queue name and counters; cached per queue for
the common 0/0 counters). The server hands over the core's job events once per batch
(`record_events`); "released" (an acked job let go by ack GC) is not a life-cycle event
for readers, "acked" already ended the job.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from conveyor.core.effects import (
    EV_ACKED,
    EV_ADDED,
    EV_ADDED_QUEUED,
    EV_DEAD_LETTERED,
    EV_DELETED,
    EV_DELIVERED,
    EV_DEQUEUED,
    EV_EVICTED,
    EV_EXPIRED,
    EV_IMPORTED,
    EV_NACKED,
    EV_QUEUED,
    EV_RELEASED,
    EV_REPLICATED,
    EV_REQUEUED,
    JobEvent,
)
from conveyor.core.job import Job

log = logging.getLogger("conveyor.node")

HOUR_MS = 3_600_000
# A full buffer is written at the first event of a new millisecond: lines are ~170
# bytes, so this many events is ~64 KiB.
FLUSH_EVENTS = 400
PARTS_PER_EVENT = 3
FLUSH_PARTS = FLUSH_EVENTS * PARTS_PER_EVENT
# Lines handed to one write(): bounds the memory of a flush after a burst (FLUSHALL of a
# million jobs buffers a million events before the server gets to flush).
_WRITE_CHUNK_PARTS = 8192 * PARTS_PER_EVENT
# Distinct queue names whose escaped form is kept; past this the cache starts over.
_QUEUE_CACHE_MAX = 10_000
# Files already checked for a torn last line; a node running for months starts over.
_CHECKED_MAX = 64

EVENTS = (
    EV_ADDED,
    EV_QUEUED,
    EV_DELIVERED,
    EV_ACKED,
    EV_NACKED,
    EV_REQUEUED,
    EV_EXPIRED,
    EV_DELETED,
    EV_DEAD_LETTERED,
    EV_EVICTED,
    EV_DEQUEUED,
    EV_IMPORTED,
    EV_REPLICATED,
)
_EVENT_JSON = {event: b'","event":"%s","id":"' % event.encode() for event in EVENTS}


def queue_json(queue: bytes) -> bytes:
    """A queue name as a JSON string: arbitrary bytes, decoded as UTF-8 with replacement.

    ensure_ascii escapes everything outside ASCII and every control character, so the
    result is ASCII and a line never breaks inside a name.
    """
    return json.dumps(queue.decode("utf-8", errors="replace")).encode("ascii")


def _tail(escaped_queue: bytes, nacks: int, additional_deliveries: int) -> bytes:
    return b'","queue":%s,"nacks":%d,"additional_deliveries":%d}\n' % (
        escaped_queue,
        nacks,
        additional_deliveries,
    )


def file_name(hour: int, node_id: str) -> str:
    """`events-YYYYMMDDTHH-<node8>.jsonl` for an hour counted from the epoch (UTC)."""
    stamp = time.strftime("%Y%m%dT%H", time.gmtime(hour * 3600))
    return f"events-{stamp}-{node_id[:8]}.jsonl"


@dataclass(slots=True)
class EventLogCounters:
    """Since the node started; shared by the logs CONFIG SET event-log switches between."""

    events: int = 0  # written
    bytes: int = 0  # written
    dropped: int = 0  # lost to failed writes


class EventLog:
    """Buffers events as pre-encoded pieces; `flush` appends them to the hour's file."""

    def __init__(
        self, directory: Path, node_id: str, counters: EventLogCounters | None = None
    ) -> None:
        """Create the directory if needed; OSError (with its reason) when it can't be."""
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(directory))
        self.directory = directory
        self.node_id = node_id
        self._node_json = b',"node":"' + node_id.encode()
        self._path_hour = -1
        self._path = ""  # of _path_hour
        # The current run of events of one UTC hour, and earlier runs not yet written.
        self.parts: list[bytes] = []
        self._hour = -1
        self._runs: list[tuple[int, list[bytes]]] = []
        self._last_ms = -1
        self._prefix = b""  # of _last_ms: '{"time_ms":…,"node":"…'
        self._heads: dict[str, bytes] = {}  # of _last_ms, made on first use
        self._tails: dict[bytes, bytes] = {}  # queue -> tail with 0/0 counters
        self._queues: dict[bytes, bytes] = {}  # queue -> queue_json(queue)
        # Files this process already appended to, checked once for a torn last line.
        self._checked: set[str] = set()
        self.failing = False
        self.counters = counters or EventLogCounters()

    # -- recording: the core's job events -------------------------------------------------
    # Lookups are d.get, not `try: d[key]`: the heads start over every millisecond, and
    # a raised KeyError costs ~8,000 instructions in the compiled module (a traceback).
    def record_events(self, events: list[JobEvent]) -> None:
        """The job events of one batch, each with the queue and counters it happened with."""
        last_ms: int = self._last_ms
        # Typed locals: compiled, dict lookups and list appends become direct C-API calls.
        heads: dict = self._heads
        tails: dict = self._tails
        parts: list = self.parts
        # Checked by identity before any dict lookup: the last head used, the "added" head
        # of this millisecond and the last zero-counter tail (a batch's jobs mostly share
        # one queue name object).
        last_event: object = None
        last_head: bytes = b""
        head_added: bytes = b""
        zero_queue: object = None
        zero_tail: bytes = b""
        for event, job, time_ms, queue, _state, nacks, deliveries in events:
            if time_ms != last_ms:
                # May write the buffer and start new head and part lists.
                self._new_millisecond(time_ms)
                last_ms = time_ms
                heads = self._heads
                parts = self.parts
                last_event = None
                head_added = b""
            if event is EV_RELEASED:
                continue  # before its tail is made (an ACKJOB's every other event)
            if queue is zero_queue and event is EV_ADDED_QUEUED:
                tail = zero_tail  # a plain ADDJOB's counters are 0: no need to test them
            elif nacks or deliveries:
                tail = _tail(self._escaped(queue), nacks, deliveries)
            elif queue is zero_queue:
                tail = zero_tail
            else:
                tail = tails.get(queue)
                if tail is None:
                    tail = self._zero_tail(queue)
                zero_queue, zero_tail = queue, tail
            job_id = job.id
            if event is EV_ADDED_QUEUED:
                # A plain ADDJOB, one event for two lines: "added" here, "queued" below.
                if not head_added:
                    head_added = heads.get(EV_ADDED) or self._head(EV_ADDED)
                parts.append(head_added)
                parts.append(job_id)
                parts.append(tail)
                event = EV_QUEUED
            if event is last_event:
                head = last_head
            else:
                head = heads.get(event)
                if head is None:
                    if event == EV_RELEASED:
                        continue
                    head = self._head(event)
                last_event, last_head = event, head
            parts.append(head)
            parts.append(job_id)
            parts.append(tail)

    def record(self, event: str, job: Job, now_ms: int) -> None:
        """One event of one job, with the job's current queue and counters."""
        self.record_events(
            [(event, job, now_ms, job.queue, job.state, job.nacks, job.additional_deliveries)]
        )

    def _new_millisecond(self, now_ms: int) -> None:
        # The buffer-full check lives here, once per millisecond, not once per event.
        if len(self.parts) >= FLUSH_PARTS:
            self.flush()
        self._last_ms = now_ms
        self._prefix = b'{"time_ms":' + str(now_ms).encode() + self._node_json
        self._heads = {}
        hour = now_ms // HOUR_MS
        if hour != self._hour:
            # Events go to the file of their own hour, even if the clock steps back.
            if self.parts:
                self._runs.append((self._hour, self.parts))
                self.parts = []
            self._hour = hour

    def _head(self, event: str) -> bytes:
        head = self._heads[event] = self._prefix + _EVENT_JSON[event]
        return head

    def _zero_tail(self, queue: bytes) -> bytes:
        if len(self._tails) >= _QUEUE_CACHE_MAX:
            self._tails.clear()
        tail = self._tails[queue] = _tail(self._escaped(queue), 0, 0)
        return tail

    def _escaped(self, queue: bytes) -> bytes:
        escaped = self._queues.get(queue)
        if escaped is None:
            if len(self._queues) >= _QUEUE_CACHE_MAX:
                self._queues.clear()
            escaped = self._queues[queue] = queue_json(queue)
        return escaped

    # -- state ---------------------------------------------------------------------------
    def buffered(self) -> int:
        """Events recorded and not yet written."""
        return (len(self.parts) + sum(len(parts) for _, parts in self._runs)) // PARTS_PER_EVENT

    def path_for(self, now_ms: int) -> Path:
        return self.directory / file_name(now_ms // HOUR_MS, self.node_id)

    def set_node_id(self, node_id: str) -> None:
        """A new node identity: what is buffered is written under the old one first."""
        self.flush()
        self.node_id = node_id
        self._node_json = b',"node":"' + node_id.encode()
        self._last_ms = -1  # the cached heads name the old node
        self._path_hour = -1

    # -- writing -------------------------------------------------------------------------
    def flush(self) -> None:
        """Append everything buffered to its hour's file. Never raises for disk errors."""
        runs = self._runs
        if self.parts:
            runs.append((self._hour, self.parts))
            self.parts = []
        if not runs:
            return
        self._runs = []
        for hour, parts in runs:
            self._write(hour, parts)

    def _write(self, hour: int, parts: list[bytes]) -> None:
        if hour != self._path_hour:
            self._path = os.path.join(self.directory, file_name(hour, self.node_id))
            self._path_hour = hour
        path = self._path
        if len(parts) <= _WRITE_CHUNK_PARTS:
            chunks = [parts]
        else:
            step = _WRITE_CHUNK_PARTS
            chunks = [parts[start : start + step] for start in range(0, len(parts), step)]
        written = 0  # parts
        try:
            fd = self._open(path)
            try:
                for chunk in chunks:
                    self._write_whole(fd, b"".join(chunk))
                    written += len(chunk)
            finally:
                os.close(fd)
        except OSError as exc:
            lost = (len(parts) - written) // PARTS_PER_EVENT
            self.counters.dropped += lost
            if not self.failing:
                # Once per failure episode: a full disk must not flood the node's log.
                log.warning(
                    "Job-event log: cannot write %s (%s); dropping events until it works "
                    "again (INFO event_log_dropped counts them)",
                    path,
                    exc.strerror or exc,
                )
            self.failing = True
        else:
            if self.failing:
                log.warning("Job-event log: writing to %s again", path)
            self.failing = False
        self.counters.events += written // PARTS_PER_EVENT

    def _open(self, path: str) -> int:
        # Opened per flush, not kept open: a removed or replaced directory or file shows
        # up as an error (or is recreated) instead of writes going to an unlinked inode.
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o644)
        except FileNotFoundError:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, flags, 0o644)
        if path not in self._checked:
            if len(self._checked) >= _CHECKED_MAX:
                self._checked.clear()  # a new file an hour: checking again costs one read
            self._checked.add(path)
            try:
                self._terminate_torn_line(path, fd)
            except OSError:
                os.close(fd)
                raise
        return fd

    def _terminate_torn_line(self, path: str, fd: int) -> None:
        # A node killed in the middle of a write can leave a partial last line; ending it
        # keeps our first line whole (readers skip the one broken line).
        try:
            with open(path, "rb") as file:
                file.seek(-1, os.SEEK_END)
                last = file.read(1)
        except OSError:
            return  # empty (nothing to end) or unreadable (best effort)
        if last != b"\n":
            os.write(fd, b"\n")

    def _write_whole(self, fd: int, data: bytes) -> None:
        """Write all of data, or leave the file as it was and raise."""
        done = 0
        try:
            done = os.write(fd, data)
            if done < len(data):  # rare: a full disk, a signal
                view = memoryview(data)
                while done < len(data):
                    count = os.write(fd, view[done:])
                    if count <= 0:
                        raise OSError(errno.EIO, "short write")
                    done += count
        except OSError:
            # No partial line may stay behind: the next append would glue onto it. This
            # node is the file's only writer, so what it wrote is the file's last bytes.
            if done:
                try:
                    os.ftruncate(fd, os.lseek(fd, 0, os.SEEK_END) - done)
                except OSError:
                    pass
            raise
        self.counters.bytes += len(data)
