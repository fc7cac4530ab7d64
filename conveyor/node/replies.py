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


def show_fields(job: Job, node_id: bytes, now_ms: int) -> list[object]:
    """SHOW's 15 pairs, in Disque's order."""
    if job.state == ACTIVE and job.qtime:
        requeue_within: int | None = max(job.qtime - now_ms, 0)
    else:
        requeue_within = None
    awake = job.awake_at()
    return [
        b"id", job.id,
        b"queue", job.queue,
        b"state", STATE_NAMES.get(job.state, b"deleted"),
        b"repl", job.repl,
        b"ttl", max((job.etime - now_ms) // 1000, 0),
        b"ctime", job.ctime,
        b"delay", job.delay,
        b"retry", job.retry,
        b"nacks", job.nacks,
        b"additional-deliveries", job.additional_deliveries,
        b"nodes-delivered", [node_id],
        b"nodes-confirmed", [node_id],
        b"next-requeue-within", requeue_within,
        b"next-awake-within", max(awake - now_ms, 0),
        b"body", job.body,
    ]
