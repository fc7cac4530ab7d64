"""Encoding of the job-shaped replies (GETJOB, QPEEK, SHOW, JSCAN ALL)."""

from __future__ import annotations

from conveyor.core.job import ACTIVE, STATE_NAMES, Job


def encode_getjob_reply(jobs: list[Job], with_counters: bool) -> bytes:
    parts = [b"*%d\r\n" % len(jobs)]
    append = parts.append
    if with_counters:
        for job in jobs:
            queue, body = job.queue, job.body
            append(
                b"*7\r\n$%d\r\n%s\r\n$40\r\n%s\r\n$%d\r\n%s\r\n"
                b"$5\r\nnacks\r\n:%d\r\n$21\r\nadditional-deliveries\r\n:%d\r\n"
                % (
                    len(queue), queue, job.id, len(body), body,
                    job.nacks, job.additional_deliveries,
                )
            )
    else:
        for job in jobs:
            queue, body = job.queue, job.body
            append(
                b"*3\r\n$%d\r\n%s\r\n$40\r\n%s\r\n$%d\r\n%s\r\n"
                % (len(queue), queue, job.id, len(body), body)
            )
    return b"".join(parts)


# RESP integers are signed 64-bit: clients refuse longer ones (hiredis: "Bad integer
# value"), and TTL/RETRY/DELAY values up to 2**63-1 seconds are accepted as in Disque.
_INT64_MAX = 2**63 - 1


def _left(deadline_ms: int, now_ms: int, unit_ms: int = 1) -> int:
    """Time until deadline_ms in units of unit_ms, clamped to 0..INT64_MAX."""
    return min(max((deadline_ms - now_ms) // unit_ms, 0), _INT64_MAX)


def show_fields(job: Job, node_id: bytes, now_ms: int) -> list[object]:
    """SHOW's 15 pairs, in Disque's order."""
    if job.state == ACTIVE and job.qtime:
        requeue_within: int | None = _left(job.qtime, now_ms)
    else:
        requeue_within = None
    awake = job.awake_at()
    return [
        b"id", job.id,
        b"queue", job.queue,
        b"state", STATE_NAMES.get(job.state, b"deleted"),
        b"repl", job.repl,
        b"ttl", _left(job.etime, now_ms, 1000),
        b"ctime", job.ctime,
        b"delay", job.delay,
        b"retry", job.retry,
        b"nacks", job.nacks,
        b"additional-deliveries", job.additional_deliveries,
        b"nodes-delivered", [node_id],
        b"nodes-confirmed", [node_id],
        b"next-requeue-within", requeue_within,
        b"next-awake-within", _left(awake, now_ms),
        b"body", job.body,
    ]
