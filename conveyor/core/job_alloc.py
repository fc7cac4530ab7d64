# cython: annotation_typing=False
"""New jobs and their IDs, made without a Python-level call when compiled.

Every ADDJOB makes a Job, and `Job(...)` costs ~3.5k instructions: the class call, its
Python __init__ storing sixteen slots, and the call that takes the job out of the cycle
collector's sight (core/untracked.py). Compiled (`make compile`, with job_alloc.pxd),
`new_job` allocates the Job untracked and stores each slot in place at the offset its
descriptor states (job_slots.h): the eight it is given, and the others as Job.__init__
set them on a job made once at import (`_TEMPLATE`), so that __init__ stays the one place
that says how a job starts. Pure Python, or a Job whose slots are not all listed below (a
slot added later), calls Job(...) itself; tests/core/test_job_alloc.py holds both to the
same sixteen values.

`new_copies` makes a REPLJOB's new copies (core/job_runs.py, `import_copies`) the same
way, in one loop: compiled, the loop runs in C and each copy's slots are stored in place.

`new_ids` makes the IDs of a run of ADDJOBs (core/jobid.py) from one block of the ID
stream: compiled, each is one bytes object made at its final size and filled with three
copies, where the interpreter makes a slice, a tuple and a join per ID (~380 ns an ID
on the machine of docs/performance.md's fourteenth look).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from conveyor.core.job import DELIVERED, QUEUED_ONCE, Job

try:
    import cython

    COMPILED: bool = cython.compiled
except ImportError:  # pure Python without Cython installed
    COMPILED = False

# Job's slots: new_job's arguments, in their order, then those it copies from _TEMPLATE.
_FIELDS = (
    "id",
    "queue",
    "body",
    "repl",
    "ctime",
    "etime",
    "delay",
    "retry",
    "state",
    "nacks",
    "additional_deliveries",
    "qtime",
    "flags",
    "awake",
    "nodes_delivered",
    "nodes_confirmed",
)
_ARGUMENTS = 8
# Where new_jobs and new_copies find the slots they set in `_offsets`.
_STATE = _FIELDS.index("state")
_FLAGS = _FIELDS.index("flags")
_NACKS = _FIELDS.index("nacks")
_DELIVERIES = _FIELDS.index("additional_deliveries")
_QTIME = _FIELDS.index("qtime")
_DELIVERED_TO = _FIELDS.index("nodes_delivered")
_CONFIRMED_BY = _FIELDS.index("nodes_confirmed")
# A copy's flags: its first queueing here is a requeue; DELIVERED too when the sender
# says it was delivered (Disque's flag, core/codec.py's DISQUE_DELIVERED, passed in).
_COPY_FLAGS = QUEUED_ONCE
_DELIVERED_COPY_FLAGS = QUEUED_ONCE | DELIVERED
# Compiled, where each of them lies in a Job (`_offsets`, job_slots.h).
_IN_PLACE: bool = COMPILED and sorted(_FIELDS) == sorted(Job.__slots__)
if _IN_PLACE:
    _IN_PLACE = _learn_slots(Job, _FIELDS, _offsets, len(_FIELDS))  # noqa: F821
    _TEMPLATE = Job(b"", b"", b"", 0, 0, 0, 0, 0)


def new_job(
    job_id: bytes,
    queue: bytes,
    body: bytes,
    repl: int,
    ctime: int,
    etime: int,
    delay: int,
    retry: int,
) -> Job:
    """Job(job_id, queue, body, repl, ctime, etime, delay, retry), ACTIVE."""
    if not _IN_PLACE:
        return Job(job_id, queue, body, repl, ctime, etime, delay, retry)
    # The C helpers and `_offsets` come from job_alloc.pxd (compiled only).
    job = _alloc_untracked(Job, 0)  # noqa: F821
    _fill(job, _offsets[0], job_id)  # noqa: F821
    _fill(job, _offsets[1], queue)  # noqa: F821
    _fill(job, _offsets[2], body)  # noqa: F821
    _fill(job, _offsets[3], repl)  # noqa: F821
    _fill(job, _offsets[4], ctime)  # noqa: F821
    _fill(job, _offsets[5], etime)  # noqa: F821
    _fill(job, _offsets[6], delay)  # noqa: F821
    _fill(job, _offsets[7], retry)  # noqa: F821
    for i in range(_ARGUMENTS, 16):  # 16: len(_FIELDS), the size of `_offsets`
        _copy_slot(job, _TEMPLATE, _offsets[i])  # noqa: F821
    return job  # type: ignore[no-any-return]


def new_jobs(
    ids: list[bytes],
    queue: bytes,
    bodies: list[bytes],
    repl: int,
    ctime: int,
    etime: int,
    delay: int,
    retry: int,
    state: int,
    flags: int,
    jobs_by_id: dict[bytes, Job],
) -> list[Job]:
    """new_job(ids[n], queue, bodies[n], repl, ctime + n, etime, delay, retry) for each n,
    with `state` and `flags`, each entered in `jobs_by_id` as it is made (a run of
    ADDJOBs: core/job_runs.py). Compiled, the loop runs in C."""
    count = len(ids)
    if len(bodies) != count:
        raise ValueError(f"{count} IDs for {len(bodies)} bodies")
    jobs = []
    for index in range(count):
        job_id = ids[index]
        job = new_job(job_id, queue, bodies[index], repl, ctime, etime, delay, retry)
        if _IN_PLACE:
            _set_slot(job, _offsets[_STATE], state)  # noqa: F821
            _set_slot(job, _offsets[_FLAGS], flags)  # noqa: F821
        else:
            job.state = state
            job.flags = flags
        jobs_by_id[job_id] = job
        jobs.append(job)
        ctime += 1
    return jobs


def new_copies(
    records: Sequence[Any],
    start: int,
    nodes: tuple[bytes, ...],
    queue_name: bytes,
    name: bytes,
    holders: tuple[bytes, ...],
    now_ms: int,
    advance_ms: int,
    jitter_ms: int,
    overhead: int,
    delivered_flag: int,
    jobs_by_id: dict[bytes, Job],
    random: Callable[[], float],
    made: tuple[list[bytes], list[Job], list[int]],
    last_ctime: int,
) -> tuple[int, int, int]:
    """The copies of `records` (JobRecords of one REPLJOB: core/codec.py) from `start` on,
    made as `import_copies` makes them (core/job_runs.py), up to the first that it does
    not make this way: of other nodes than `nodes` (the frame's tuple), at-most-once, of
    another queue than `queue_name`, or known here. Each is made ACTIVE in queue `name`
    with `holders`, its requeue drawn with `random` (the jitter as CoreState draws it),
    and entered in `jobs_by_id`; its ID goes to `made[0]`, the job to `made[1]` and its
    timer's deadline to `made[2]` (its requeue, told `advance_ms` ahead, or its expiry if
    sooner). A copy already expired is skipped. Returns where it stopped (len(records)
    when at the end), the bytes the copies hold (`overhead` a job) and the latest ctime
    (from `last_ctime`). Compiled, the loop runs in C."""
    taken, filed, whens = made
    count = len(records)
    index = start
    size = 0
    while index < count:
        (job_id, _, _, flags, repl, etime, ctime, delay, retry, nacks, deliveries,
         job_queue, body, job_nodes) = records[index]  # fmt: skip
        if job_nodes is not nodes or not retry or job_queue != queue_name or job_id in jobs_by_id:
            break
        index += 1
        etime_ms = now_ms + (etime - 1) * 1000  # on the bus: seconds left + 1
        if etime_ms <= now_ms:
            continue  # expired on its way: neither kept nor taken
        taken.append(job_id)
        job = new_job(job_id, name, body, repl, ctime, etime_ms, delay, retry)
        # The jitter as CoreState._jitter draws it: int() of a float, which truncates as
        # C's conversion of a double does.
        jitter = random() * 2 * jitter_ms
        drawn = cython.cast(cython.longlong, jitter) if COMPILED else int(jitter)
        qtime = now_ms + (delay + retry) * 1000 + drawn - jitter_ms
        copy_flags = _DELIVERED_COPY_FLAGS if flags & delivered_flag else _COPY_FLAGS
        if _IN_PLACE:
            if nacks or deliveries:
                _set_slot(job, _offsets[_NACKS], nacks)  # noqa: F821
                _set_slot(job, _offsets[_DELIVERIES], deliveries)  # noqa: F821
            _set_slot(job, _offsets[_FLAGS], copy_flags)  # noqa: F821
            _set_slot(job, _offsets[_DELIVERED_TO], holders)  # noqa: F821
            _set_slot(job, _offsets[_CONFIRMED_BY], ())  # noqa: F821
            _set_slot(job, _offsets[_QTIME], qtime)  # noqa: F821
        else:
            if nacks or deliveries:
                job.nacks = nacks
                job.additional_deliveries = deliveries
            job.flags = copy_flags
            job.nodes_delivered = holders
            job.nodes_confirmed = ()
            job.qtime = qtime
        jobs_by_id[job_id] = job
        size += overhead + len(body)
        if ctime > last_ctime:
            last_ctime = ctime
        filed.append(job)
        whens.append(qtime - advance_ms if qtime < etime_ms else etime_ms)
    return index, size, last_ctime


def new_ids(
    prefix: bytes, chars: bytes, start: int, count: int, width: int, suffix: bytes
) -> list[bytes]:
    """The `count` IDs prefix + chars[at:at + width] + suffix, for at = start,
    start + width, ... (the caller stays within `chars`, one block of the stream)."""
    end = start + width * count
    if start < 0 or count < 0 or width <= 0 or end > len(chars):
        raise ValueError(f"{count} IDs from {start} are not within the block")
    if COMPILED and type(prefix) is bytes and type(chars) is bytes and type(suffix) is bytes:
        return _ids_in_place(prefix, chars, start, count, width, suffix)
    return [b"".join((prefix, chars[at : at + width], suffix)) for at in range(start, end, width)]


def _ids_in_place(
    prefix: bytes, chars: bytes, start: int, count: int, width: int, suffix: bytes
) -> list[bytes]:
    """new_ids, each ID written into a bytes object made at its size: compiled only
    (job_alloc.pxd types it, and the C API names come from there)."""
    plen = len(prefix)
    slen = len(suffix)
    size = plen + width + slen
    source = PyBytes_AS_STRING(chars) + start  # noqa: F821
    ids = []
    for _ in range(count):
        one = PyBytes_FromStringAndSize(cython.NULL, size)  # noqa: F821
        out = PyBytes_AS_STRING(one)  # noqa: F821
        memcpy(out, PyBytes_AS_STRING(prefix), plen)  # noqa: F821
        memcpy(out + plen, source, width)  # noqa: F821
        memcpy(out + plen + width, PyBytes_AS_STRING(suffix), slen)  # noqa: F821
        ids.append(one)
        source += width
    return ids
