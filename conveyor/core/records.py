# cython: annotation_typing=False
"""A job as Disque serializes it (`JobRecord`), for the AOF and for the cluster bus.

The codec (conveyor.core.codec) turns records into bytes; this module turns jobs into
records and says what each Disque field means for Conveyor. Importing goes the other way
through `Engine.import_job`. Flags: Disque's BCAST_QUEUED ("was queued at least once,
so a later queueing is a re-delivery") is Conveyor's QUEUED_ONCE; BCAST_WILLQUEUE is set
with it for jobs that have retries, as Disque does; DELIVERED is DELIVERED, and a copy
sent on the bus clears it (the receiver has not delivered it).

Every copy a node sends and every job it appends to the AOF is made here, so compiled
(`make compile`, with records.pxd) the record is built without Python-level calls: an
exact Job's slots are read in place, the flags are translated in C, and the JobRecord is
allocated at its size and filled (`_new_record`, job_slots.h), where
`tuple.__new__(JobRecord, items)` makes and copies a temporary tuple through a type call.
4.8k -> 2.8k instructions a record (docs/performance.md, eleventh look). Pure Python
reads the same attributes.
"""

from __future__ import annotations

from conveyor.core.codec import (
    DISQUE_BCAST_QUEUED,
    DISQUE_BCAST_WILLQUEUE,
    DISQUE_DELIVERED,
    JobRecord,
)
from conveyor.core.job import DELIVERED, QUEUED_ONCE, Job

try:
    import cython

    COMPILED: bool = cython.compiled
except ImportError:  # pure Python without Cython installed
    COMPILED = False

_U16_MAX = 0xFFFF
_U32_MAX = 0xFFFFFFFF

_tuple_new = tuple.__new__


def _disque_flags(flags: int, retry: int, for_bus: bool) -> int:
    """Disque's persisted flags for Conveyor's `flags` (`retry`: the job's, in seconds)."""
    disque = 0
    if flags & QUEUED_ONCE:
        disque = DISQUE_BCAST_QUEUED | (DISQUE_BCAST_WILLQUEUE if retry else 0)
    if flags & DELIVERED and not for_bus:
        disque |= DISQUE_DELIVERED
    return disque


def job_record(job: Job, node_name: bytes, now_ms: int, for_bus: bool = False) -> JobRecord:
    """The record of a job held here (`node_name`: this node, for the one-holder case).

    etime is absolute unix seconds in the AOF and, on the bus, seconds left + 1 (so a
    copy never arrives already expired by rounding).
    """
    if _IN_PLACE and type(job) is Job:
        # Compiled: each slot read in place (`_offsets[i]`: where slot i of _SLOTS lies;
        # AttributeError if never set, as the attribute read gives).
        job_id = _slot(job, _offsets[0])  # noqa: F821
        state = _slot(job, _offsets[1])  # noqa: F821
        flags = _slot(job, _offsets[2])  # noqa: F821
        retry = _slot(job, _offsets[3])  # noqa: F821
        repl = _slot(job, _offsets[4])  # noqa: F821
        etime = _slot(job, _offsets[5])  # noqa: F821
        ctime = _slot(job, _offsets[6])  # noqa: F821
        delay = _slot(job, _offsets[7])  # noqa: F821
        nacks = _slot(job, _offsets[8])  # noqa: F821
        deliveries = _slot(job, _offsets[9])  # noqa: F821
        queue = _slot(job, _offsets[10])  # noqa: F821
        body = _slot(job, _offsets[11])  # noqa: F821
        nodes = _slot(job, _offsets[12])  # noqa: F821
    else:
        job_id = job.id
        state = job.state
        flags = job.flags
        retry = job.retry
        repl = job.repl
        etime = job.etime
        ctime = job.ctime
        delay = job.delay
        nacks = job.nacks
        deliveries = job.additional_deliveries
        queue = job.queue
        body = job.body
        nodes = job.nodes_delivered
    etime = max(etime - now_ms, 0) // 1000 + 1 if for_bus else etime // 1000
    if nodes is None:
        nodes = (node_name,)
    # Disque's fields are u16/u32: values past them (ADDJOB accepts TTL, DELAY and RETRY up
    # to 2**63-1 seconds, as Disque does, which then truncates) saturate.
    return _new_record(
        job_id,
        state,
        _disque_flags(flags, retry, for_bus) if flags else 0,  # a new job's: no call
        min(repl, _U16_MAX),
        min(etime, _U32_MAX),
        ctime,
        min(delay, _U32_MAX),
        min(retry, _U32_MAX),
        min(nacks, _U16_MAX),
        min(deliveries, _U16_MAX),
        queue,
        body,
        nodes,
    )


def job_records(jobs: list[Job], node_name: bytes, now_ms: int, for_bus: bool) -> list[JobRecord]:
    """job_record for each of `jobs` (the copies of a run of ADDJOBs). Compiled, each is a
    C call: job_record's arguments are not parsed again for every job."""
    return [job_record(job, node_name, now_ms, for_bus) for job in jobs]


# The slots job_record reads, in the order it numbers them (`_offsets[i]`).
_SLOTS = (
    "id",
    "state",
    "flags",
    "retry",
    "repl",
    "etime",
    "ctime",
    "delay",
    "nacks",
    "additional_deliveries",
    "queue",
    "body",
    "nodes_delivered",
)
# Compiled, where each of them lies in a Job, learnt from Job's own slot descriptors
# (`_offsets`, job_slots.h): a read in place is a load, where compiled code reading
# `job.id` goes through the generic attribute lookup (~90 instructions, 13 reads a
# record). The records are then allocated at their size and filled in place (job_slots.h).
_IN_PLACE: bool = COMPILED and issubclass(JobRecord, tuple)
if _IN_PLACE:
    _IN_PLACE = _learn_slots(Job, _SLOTS, _offsets, len(_SLOTS))  # noqa: F821


def _new_record(
    job_id: bytes,
    state: int,
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
    nodes: tuple[bytes, ...],
) -> JobRecord:
    """JobRecord(job_id, state, 0, flags, ...): gc_retry is always 0 here."""
    if not _IN_PLACE:
        # Positional through tuple.__new__ (field order as in JobRecord): no Python-level
        # __new__ on the path of every job replicated or appended to the AOF.
        return _tuple_new(
            JobRecord,
            (job_id, state, 0, flags, repl, etime, ctime, delay, retry, nacks, deliveries,
             queue, body, nodes),
        )  # fmt: skip
    return _record_in_place(  # type: ignore[no-any-return]  # noqa: F821
        JobRecord, job_id, state, 0, flags, repl, etime, ctime, delay, retry, nacks,
        deliveries, queue, body, nodes,
    )  # fmt: skip
