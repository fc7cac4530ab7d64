"""The AOF's two records, as C Disque writes them, and which job events produce them.

Disque logs `LOADJOB <serialized job>` once, when a job is added (after it is queued,
so a job without DELAY is written `queued`, a delayed one `active`), and
`DELJOB <id>` when the job is acknowledged or freed while still active or queued.
Deliveries, NACKs and dequeues write nothing: the file holds each job as it was added,
and a restart requeues it after DELAY + RETRY (at-least-once). A rewrite writes the
jobs' current images instead (`snapshot_record`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

from conveyor.core.codec import NODE_NAME_LEN, encode_job
from conveyor.core.effects import (
    EV_ACKED,
    EV_ADDED,
    EV_ADDED_QUEUED,
    EV_DELETED,
    EV_EVICTED,
    EV_EXPIRED,
    EV_IMPORTED,
    EV_QUEUED,
    EV_REPLICATED,
    JobEvent,
)
from conveyor.core.job import ACTIVE, DELIVERED, QUEUED, QUEUED_ONCE, WAIT_REPL, Job
from conveyor.core.records import job_record

_LOADJOB_HEAD = b"*2\r\n$7\r\nLOADJOB\r\n"
_DELJOB_HEAD = b"*2\r\n$6\r\nDELJOB\r\n$40\r\n"
# The one-node list of a job only this node holds: count 1, then the name.
_U32 = struct.Struct("<I")
_MIN_JOBLEN = 68 + 12
# Disque's flags by Conveyor's QUEUED_ONCE (1) | DELIVERED (2): BCAST_QUEUED (1), with
# BCAST_WILLQUEUE (2) for a job that has retries, and DELIVERED (4).
_FLAG_BITS = QUEUED_ONCE | DELIVERED
_FLAGS = (0, 3, 4, 7)
_FLAGS_AT_MOST_ONCE = (0, 1, 4, 5)
# Events after which the job needs no record any more: Disque's AOFDelJob callers.
_FREEING = frozenset((EV_ACKED, EV_DELETED, EV_EXPIRED, EV_EVICTED))


def deljob(job_id: bytes) -> bytes:
    return _DELJOB_HEAD + job_id + b"\r\n"


def loadjob(serialized: bytes) -> bytes:
    return b"%s$%d\r\n%s\r\n" % (_LOADJOB_HEAD, len(serialized), serialized)


# Position in RecordEncoder.job's field list -> the largest value its width holds.
_FIELD_MAX = {4: 0xFFFF, 5: 0xFFFFFFFF, 7: 0xFFFFFFFF, 8: 0xFFFFFFFF, 9: 0xFFFF, 10: 0xFFFF}


def _saturated(fields: list[object]) -> list[object]:
    return [
        min(value, _FIELD_MAX[index]) if index in _FIELD_MAX else value  # type: ignore[call-overload]
        for index, value in enumerate(fields)
    ]


class RecordEncoder:
    """Encodes this node's jobs as LOADJOB records; `node_name` is its 40-char ID."""

    def __init__(self, node_name: bytes) -> None:
        self.set_node_name(node_name)

    def set_node_name(self, node_name: bytes) -> None:
        self.node_name = node_name
        # The node list of a job only this node holds, with the bulk's closing CRLF.
        self._own_tail = _U32.pack(1) + node_name + b"\r\n"
        self._prefixes: dict[int, bytes] = {}
        self._packers: dict[int, Callable[..., bytes]] = {}

    def _prefix(self, joblen: int) -> bytes:
        # "*2 $7 LOADJOB $<len>": a handful of distinct lengths in practice; bounded.
        prefix = b"%s$%d\r\n" % (_LOADJOB_HEAD, joblen + 4)
        if len(self._prefixes) < 4096:
            self._prefixes[joblen] = prefix
        return prefix

    def job(self, job: Job, state: int, etime_s: int | None = None) -> bytes:
        """The LOADJOB record of `job` as if in `state`: the hot path (one pack, one join)."""
        if job.nodes_delivered is not None:
            record = job_record(job, self.node_name, 0)._replace(state=state)
            return loadjob(encode_job(record))
        queue, body = job.queue, job.body
        qlen, blen = len(queue), len(body)
        joblen = _MIN_JOBLEN + qlen + blen + NODE_NAME_LEN
        pack = self._packers.get(qlen)
        if pack is None:
            pack = self._packer(qlen)
        prefix = self._prefixes.get(joblen)
        if prefix is None:
            prefix = self._prefix(joblen)
        retry = job.retry
        fields = [
            joblen,
            job.id,
            state,
            (_FLAGS if retry else _FLAGS_AT_MOST_ONCE)[job.flags & _FLAG_BITS],
            job.repl,
            job.etime // 1000 if etime_s is None else etime_s,
            job.ctime,
            job.delay,
            retry,
            job.nacks,
            job.additional_deliveries,
            qlen,
            queue,
            blen,
        ]
        try:
            head = pack(*fields)
        except struct.error:
            # A TTL, DELAY or RETRY past Disque's u32 seconds (ADDJOB accepts up to
            # 2**63-1, as Disque does, which then truncates): saturate instead.
            head = pack(*_saturated(fields))
        return b"".join((prefix, head, body, self._own_tail))

    def _packer(self, qlen: int) -> Callable[..., bytes]:
        # The fixed part, the queue name and the body length in one pack: one struct per
        # queue-name length (a handful in practice; bounded).
        pack = struct.Struct(f"<I40sBBHIQIIHHI{qlen}sI").pack
        if len(self._packers) < 1024:
            self._packers[qlen] = pack
        return pack

    def snapshot_record(self, job: Job) -> bytes | None:
        """A rewrite's record of a held job: its current image, only if active or queued."""
        state = job.state
        if state != ACTIVE and state != QUEUED:
            return None
        return self.job(job, state)

    def from_events(self, events: Iterable[JobEvent]) -> list[bytes]:
        """The records a batch of job events writes, in order.

        A job added in this batch (or replicated to here, or become active once its
        synchronous replication completed; a job still in wait-repl is not written) is
        written with the state it had when its ADDJOB finished: the core reports "added"
        and, for a job queued at once, "queued" right after it, so the LOADJOB waits one
        event (a plain ADDJOB comes as one "added+queued", written at once). Flags and
        counters are read now, which for a job added and delivered in the same batch
        includes DELIVERED (it then reloads as delivered, the safe side).
        This runs once per ADDJOB: plain locals and identity tests, no per-batch dicts.
        """
        out: list[bytes] = []
        append = out.append
        encode = self.job
        added: Job | None = None  # its LOADJOB waits for a "queued" right after it
        added_state = 0
        acked: set[Job] | None = None
        for event, job, _time, _queue, state, _nacks, _deliveries in events:
            if added is not None:
                if event is EV_QUEUED and job is added:
                    append(encode(job, QUEUED))
                    added = None
                    continue
                append(encode(added, added_state))
                added = None
            if event is EV_ADDED_QUEUED:
                append(encode(job, QUEUED))
            elif event is EV_ADDED or event is EV_REPLICATED or event is EV_IMPORTED:
                if state == WAIT_REPL:
                    continue  # written once replicated: a job the client was not told of
                added = job
                added_state = state
            elif event in _FREEING:
                # An acked job was logged gone at its ack: not again when it is freed in
                # the same batch. (Freed in a later batch, after a cluster's ack GC, it
                # gets a second DELJOB, which a load ignores.)
                if acked is None or job not in acked:
                    append(deljob(job.id))
                if event is EV_ACKED:
                    if acked is None:
                        acked = set()
                    acked.add(job)
        if added is not None:
            append(encode(added, added_state))
        return out
