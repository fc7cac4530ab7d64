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

`new_ids` makes the IDs of a run of ADDJOBs (core/jobid.py) from one block of the ID
stream: compiled, each is one bytes object made at its final size and filled with three
copies, where the interpreter makes a slice, a tuple and a join per ID (~380 ns an ID
on the machine of docs/performance.md's fourteenth look).
"""

from __future__ import annotations

from conveyor.core.job import Job

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
# Where new_jobs finds the two slots it sets in `_offsets`.
_STATE = _FIELDS.index("state")
_FLAGS = _FIELDS.index("flags")
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
