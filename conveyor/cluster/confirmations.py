# cython: annotation_typing=False
"""A batch of GOTJOBs taken in one loop: the origin's half of a synchronous ADDJOB.

Each synchronous ADDJOB's job waits in WAIT_REPL until REPLICATE nodes hold it; every
copy a node took comes back as one GOTJOB entry (a Conveyor node sends a pipeline's as
one batch). Two entries a job at REPLICATE 3, each a dict lookup, a tuple grown by one
name and, for the second, the client's reply: interpreted, ~1.5 µs a job, the most the
origin spends on a job after making it (docs/performance.md, fifteenth look). Compiled
(`make compile`, with confirmations.pxd) the loop runs in C and reads and writes the
job's slots in place (core/job_slots.h); pure Python runs the same loop.

`Replication.got_copies` (cluster/replication.py) owns the rules and calls this for the
entries it would handle the same way; what is unusual (a job replicated externally, whose
origin keeps no copy) stops the loop and goes back to it. Owns no state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conveyor.core.effects import Reply
from conveyor.core.job import ACTIVE, WAIT_REPL, Job

try:
    import cython

    COMPILED: bool = cython.compiled
except ImportError:  # pure Python without Cython installed
    COMPILED = False

_tuple_new = tuple.__new__

# The Job slots the loop reads and writes, and, compiled, where each lies (`_offsets`).
_FIELDS = ("state", "repl", "nodes_confirmed", "nodes_delivered")
_IN_PLACE: bool = COMPILED
if _IN_PLACE:
    _IN_PLACE = _learn_slots(Job, _FIELDS, _offsets, len(_FIELDS))  # noqa: F821


def confirm_copies(
    entries: Sequence[tuple[bytes, int]],
    start: int,
    sender: bytes,
    me: bytes,
    jobs_by_id: dict[bytes, Job],
    pending: dict[bytes, Any],
    replies: list[Any],
    confirmed_here: list[Job],
) -> int:
    """`sender` holds a copy of the job of each of `entries` ((job ID, unused) pairs) from
    `start` on: each job of theirs still in WAIT_REPL counts it among its confirmations
    (`nodes_confirmed`). One with REPLICATE of them becomes ACTIVE and goes to
    `confirmed_here`, and the client whose ADDJOB waits for it (its PendingAdd in
    `pending`, taken out) is owed `+<ID>` (a Reply in `replies`). Stops at the
    first job with enough confirmations that this node does not hold (replicated
    externally: handed over elsewhere) and returns its index, or len(entries)."""
    count = len(entries)
    index = start
    while index < count:
        job_id = entries[index][0]
        job = jobs_by_id.get(job_id)
        index += 1
        if job is None:
            continue
        if _IN_PLACE:
            if _slot(job, _offsets[0]) != WAIT_REPL:  # noqa: F821
                continue
            confirmed = _slot(job, _offsets[2]) or ()  # noqa: F821
            if sender not in confirmed:
                confirmed = (*confirmed, sender)
                _set_slot(job, _offsets[2], confirmed)  # noqa: F821
            if len(confirmed) < _slot(job, _offsets[1]):  # noqa: F821
                continue
            if me not in (_slot(job, _offsets[3]) or ()):  # noqa: F821
                return index - 1
        else:
            if job.state != WAIT_REPL:
                continue
            confirmed = job.nodes_confirmed or ()
            if sender not in confirmed:
                job.nodes_confirmed = confirmed = (*confirmed, sender)
            if len(confirmed) < job.repl:
                continue
            if me not in (job.nodes_delivered or ()):
                return index - 1
        added = pending.pop(job_id, None)
        if added is not None:
            replies.append(_tuple_new(Reply, (added[1], b"+%s\r\n" % job_id)))
        # Out of wait-repl at once: another entry for it in this batch (a REPLJOB sent
        # again and answered twice) finds it confirmed already.
        if _IN_PLACE:
            _set_slot(job, _offsets[0], ACTIVE)  # noqa: F821
        else:
            job.state = ACTIVE
        confirmed_here.append(job)
    return count
