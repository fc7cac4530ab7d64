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
from collections.abc import Iterable

from conveyor.core.codec import JobRecord, encode_job
from conveyor.core.effects import (
    EV_ACKED,
    EV_ADDED,
    EV_DELETED,
    EV_EVICTED,
    EV_EXPIRED,
    EV_QUEUED,
    JobEvent,
)
from conveyor.core.job import ACTIVE, DELIVERED, QUEUED, QUEUED_ONCE, Job
from conveyor.core.records import job_record

_LOADJOB_HEAD = b"*2\r\n$7\r\nLOADJOB\r\n"
_DELJOB_HEAD = b"*2\r\n$6\r\nDELJOB\r\n$40\r\n"
# Disque's struct part, see conveyor.core.codec: one pack for everything fixed-width.
_HEAD = struct.Struct("<I40sBBHIQIIHHI")
_U32 = struct.Struct("<I")
_MIN_JOBLEN = 68 + 12
_DISQUE_BCAST_QUEUED = 1
_DISQUE_BCAST_WILLQUEUE = 2
_DISQUE_DELIVERED = 4
# Events after which the job needs no record any more: Disque's AOFDelJob callers.
_FREEING = frozenset((EV_ACKED, EV_DELETED, EV_EXPIRED, EV_EVICTED))


def deljob(job_id: bytes) -> bytes:
    return _DELJOB_HEAD + job_id + b"\r\n"


def loadjob(serialized: bytes) -> bytes:
    return b"%s$%d\r\n%s\r\n" % (_LOADJOB_HEAD, len(serialized), serialized)


class RecordEncoder:
    """Encodes this node's jobs as LOADJOB records; `node_name` is its 40-char ID."""

    def __init__(self, node_name: bytes) -> None:
        self.set_node_name(node_name)

    def set_node_name(self, node_name: bytes) -> None:
        self.node_name = node_name
        # The node list of a job only this node holds, with the bulk's closing CRLF.
        self._own_tail = _U32.pack(1) + node_name + b"\r\n"

    def job(self, job: Job, state: int, etime_s: int | None = None) -> bytes:
        """The LOADJOB record of `job` as if in `state` (the hot path: one pack, one join)."""
        if job.nodes_delivered is not None:
            record = job_record(job, self.node_name, 0)._replace(state=state)
            return loadjob(encode_job(record))
        flags = job.flags
        disque_flags = 0
        if flags & QUEUED_ONCE:
            disque_flags = _DISQUE_BCAST_QUEUED | (_DISQUE_BCAST_WILLQUEUE if job.retry else 0)
        if flags & DELIVERED:
            disque_flags |= _DISQUE_DELIVERED
        queue, body = job.queue, job.body
        qlen, blen = len(queue), len(body)
        joblen = _MIN_JOBLEN + qlen + blen + 40
        head = _HEAD.pack(
            joblen,
            job.id,
            state,
            disque_flags,
            job.repl,
            job.etime // 1000 if etime_s is None else etime_s,
            job.ctime,
            job.delay,
            job.retry,
            job.nacks,
            job.additional_deliveries,
            qlen,
        )
        return b"".join(
            (
                b"%s$%d\r\n" % (_LOADJOB_HEAD, joblen + 4),
                head,
                queue,
                _U32.pack(blen),
                body,
                self._own_tail,
            )
        )

    def snapshot_record(self, job: Job) -> bytes | None:
        """A rewrite's record of a held job: its current image, only if active or queued."""
        state = job.state
        if state != ACTIVE and state != QUEUED:
            return None
        return self.job(job, state)

    def from_events(self, events: Iterable[JobEvent]) -> list[bytes]:
        """The records a batch of job events writes, in order.

        A job added in this batch is written with the state it had when its ADDJOB
        finished (queued at once unless delayed), as Disque writes it; its flags and
        counters are read now, which for a job added and delivered in the same batch
        includes DELIVERED (it then reloads as delivered, the safe side).
        """
        out: list[bytes | Job] = []
        added: dict[Job, int] = {}  # job -> (index in out) of its pending LOADJOB
        states: dict[Job, int] = {}
        acked: set[Job] = set()
        for event, job, _time, _queue, state, _nacks, _deliveries in events:
            if event == EV_ADDED:
                added[job] = len(out)
                states[job] = state
                out.append(job)
            elif event == EV_QUEUED:
                if job in added and states[job] == ACTIVE:
                    states[job] = QUEUED
            elif event in _FREEING:
                # An acked job was logged gone at its ack: not again when it is freed in
                # the same batch. (Freed in a later batch, after a cluster's ack GC, it
                # gets a second DELJOB, which a load ignores.)
                if job not in acked:
                    out.append(deljob(job.id))
                if event == EV_ACKED:
                    acked.add(job)
        return [item if isinstance(item, bytes) else self.job(item, states[item]) for item in out]


def record_of(record: JobRecord) -> bytes:
    """A LOADJOB record of an already-built JobRecord (tests, tools)."""
    return loadjob(encode_job(record))
