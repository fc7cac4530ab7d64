"""A job as Disque serializes it (`JobRecord`), for the AOF and for the cluster bus.

The codec (conveyor.core.codec) turns records into bytes; this module turns jobs into
records and says what each Disque field means for Conveyor. Importing goes the other way
through `Engine.import_job`. Flags: Disque's BCAST_QUEUED ("was queued at least once,
so a later queueing is a re-delivery") is Conveyor's QUEUED_ONCE; BCAST_WILLQUEUE is set
with it for jobs that have retries, as Disque does; DELIVERED is DELIVERED, and a copy
sent on the bus clears it (the receiver has not delivered it).
"""

from __future__ import annotations

from conveyor.core.codec import (
    DISQUE_BCAST_QUEUED,
    DISQUE_BCAST_WILLQUEUE,
    DISQUE_DELIVERED,
    JobRecord,
)
from conveyor.core.job import DELIVERED, QUEUED_ONCE, Job

_U16_MAX = 0xFFFF
_U32_MAX = 0xFFFFFFFF

_tuple_new = tuple.__new__


def disque_flags(job: Job, for_bus: bool = False) -> int:
    flags = 0
    if job.flags & QUEUED_ONCE:
        flags = DISQUE_BCAST_QUEUED | (DISQUE_BCAST_WILLQUEUE if job.retry else 0)
    if job.flags & DELIVERED and not for_bus:
        flags |= DISQUE_DELIVERED
    return flags


def job_record(job: Job, node_name: bytes, now_ms: int, for_bus: bool = False) -> JobRecord:
    """The record of a job held here (`node_name`: this node, for the one-holder case).

    etime is absolute unix seconds in the AOF and, on the bus, seconds left + 1 (so a
    copy never arrives already expired by rounding).
    """
    etime = max(job.etime - now_ms, 0) // 1000 + 1 if for_bus else job.etime // 1000
    nodes = (node_name,) if job.nodes_delivered is None else job.nodes_delivered
    # Positional through tuple.__new__ (field order as in JobRecord): no Python-level
    # __new__ on the path of every job replicated or appended to the AOF.
    return _tuple_new(
        JobRecord,
        (
            job.id,
            job.state,
            0,  # gc_retry
            disque_flags(job, for_bus) if job.flags else 0,  # a new job's: no call
            # Disque's fields are u16/u32: values past them (ADDJOB accepts TTL, DELAY and
            # RETRY up to 2**63-1 seconds, as Disque does, which then truncates) saturate.
            min(job.repl, _U16_MAX),
            min(etime, _U32_MAX),
            job.ctime,
            min(job.delay, _U32_MAX),
            min(job.retry, _U32_MAX),
            min(job.nacks, _U16_MAX),
            min(job.additional_deliveries, _U16_MAX),
            job.queue,
            job.body,
            nodes,
        ),
    )
