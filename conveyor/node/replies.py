"""Encoding of the job-shaped replies (GETJOB, QPEEK, SHOW, JSCAN ALL)."""

from __future__ import annotations

from conveyor.core.job import ACTIVE, STATE_NAMES, Job

# `$<n>\r\n` for the lengths most bodies and names have: formatting bytes with % costs
# more than the rest of a one-job reply.
_BULK_HEADERS = [b"$%d\r\n" % size for size in range(4096)]
# queue name -> `*3\r\n$<n>\r\n<name>\r\n$40\r\n`, the part of a job entry shared by
# every job of that queue (bounded: names are client-chosen).
_JOB_PREFIXES: dict[bytes, bytes] = {}
_MAX_PREFIXES = 10_000


def _bulk_header(size: int) -> bytes:
    return _BULK_HEADERS[size] if size < 4096 else b"$%d\r\n" % size


def _job_prefix(queue: bytes) -> bytes:
    prefix = _JOB_PREFIXES.get(queue)
    if prefix is None:
        prefix = b"*3\r\n" + _bulk_header(len(queue)) + queue + b"\r\n$40\r\n"
        if len(_JOB_PREFIXES) >= _MAX_PREFIXES:
            _JOB_PREFIXES.clear()
        _JOB_PREFIXES[queue] = prefix
    return prefix


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
                    len(queue),
                    queue,
                    job.id,
                    len(body),
                    body,
                    job.nacks,
                    job.additional_deliveries,
                )
            )
    else:
        for job in jobs:
            body = job.body
            append(_job_prefix(job.queue))
            append(job.id)
            append(b"\r\n")
            append(_bulk_header(len(body)))
            append(body)
            append(b"\r\n")
    return b"".join(parts)


# RESP integers are signed 64-bit: clients refuse longer ones (hiredis: "Bad integer
# value"), and TTL/RETRY/DELAY values up to 2**63-1 seconds are accepted as in Disque.
_INT64_MAX = 2**63 - 1


def _left(deadline_ms: int, now_ms: int, unit_ms: int = 1) -> int:
    """Time until deadline_ms in units of unit_ms, clamped to 0..INT64_MAX."""
    return min(max((deadline_ms - now_ms) // unit_ms, 0), _INT64_MAX)


def _node_list(nodes: tuple[bytes, ...] | None, node_name: bytes) -> list[bytes]:
    return [node_name] if nodes is None else list(nodes)


# SHOW's 15 field names, in Disque's order: a job's and a dummy ack's replies pair them.
_SHOW_KEYS = (
    b"id",
    b"queue",
    b"state",
    b"repl",
    b"ttl",
    b"ctime",
    b"delay",
    b"retry",
    b"nacks",
    b"additional-deliveries",
    b"nodes-delivered",
    b"nodes-confirmed",
    b"next-requeue-within",
    b"next-awake-within",
    b"body",
)


def _show_pairs(values: list[object]) -> list[object]:
    return [item for pair in zip(_SHOW_KEYS, values, strict=True) for item in pair]


def show_fields(job: Job, node_name: bytes, now_ms: int) -> list[object]:
    """SHOW's 15 pairs, in Disque's order; node_name is this node's (None lists it)."""
    if job.state == ACTIVE and job.qtime:
        requeue_within: int | None = _left(job.qtime, now_ms)
    else:
        requeue_within = None
    return _show_pairs(
        [
            job.id,
            job.queue,
            STATE_NAMES.get(job.state, b"deleted"),
            job.repl,
            # Whole seconds on both sides, as Disque (etime - time(NULL)): a job SHOWn by
            # both after a migration reads the same TTL.
            _left(job.etime // 1000, now_ms // 1000),
            job.ctime,
            job.delay,
            job.retry,
            job.nacks,
            job.additional_deliveries,
            _node_list(job.nodes_delivered, node_name),
            _node_list(job.nodes_confirmed, node_name),
            requeue_within,
            _left(job.awake_at(), now_ms),
            job.body,
        ]
    )


def dummy_ack_show_fields(job_id: bytes, etime_ms: int, now_ms: int) -> list[object]:
    """SHOW of a dummy ack (an ACKJOB of an ID this node never held, kept while the ack
    looks for a holder: cluster/acks.py). C Disque keeps one as an acked job with no queue,
    body or holders and shows it so; the fields it never sets (its uninitialised memory)
    are 0 or nil here."""
    ttl = _left(etime_ms // 1000, now_ms // 1000)
    return _show_pairs([job_id, None, b"acked", 0, ttl, 0, 0, 0, 0, 0, [], [], None, None, None])
