# cython: annotation_typing=False
"""New jobs, made without a Python-level call when compiled.

Every ADDJOB makes a Job, and `Job(...)` costs ~3.5k instructions: the class call, its
Python __init__ storing sixteen slots, and the call that takes the job out of the cycle
collector's sight (core/untracked.py). Compiled (`make compile`, with job_alloc.pxd),
`new_job` allocates the Job untracked and stores each slot in place at the offset its
descriptor states (job_slots.h): the eight it is given, and the others as Job.__init__
set them on a job made once at import (`_TEMPLATE`), so that __init__ stays the one place
that says how a job starts. Pure Python, or a Job whose slots are not all listed below (a
slot added later), calls Job(...) itself; tests/core/test_job_alloc.py holds both to the
same sixteen values.
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
