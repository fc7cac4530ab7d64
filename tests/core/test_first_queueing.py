"""A job's first queueing takes a short way in the usual case (`_schedule_first_queueing`:
nobody waits on the queue, no job events, a fresh job); it must leave the node exactly as
the whole of `_enqueue` does, whatever the queue, the waiters, the flags and the events.

Two cores made alike hold the same job in wait-repl; one confirms it (`replicated`, the
way every synchronous ADDJOB of a cluster goes), the other queues it as the engine did
before the short way existed: DELAY's timer, or `_enqueue`.
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.core.args import AddJobArgs, GetJobArgs
from conveyor.core.job import ACTIVE, DELIVERED, NACK_PENDING, QUEUED_ONCE
from conveyor.core.node import NodeCore

NOW = 1_700_000_000_000
NODE_ID = "a" * 40


class _Hooks:
    """The cluster's hooks, recording what the core told them (other nodes wait on `q`)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        # A job by its ID, a queue by its name: the two cores' objects are not the same.
        def call(*args: Any) -> None:
            self.calls.append((name, [getattr(a, "id", getattr(a, "name", a)) for a in args]))

        return call


def _core(queue_before: bool, waiter: bool, events: bool, wanted: bool) -> NodeCore:
    core = NodeCore(NODE_ID, b"seed", random.Random(3))
    core.cluster_hooks = _Hooks()  # type: ignore[assignment]
    if queue_before:  # a queue that exists, emptied again
        core.add_job(AddJobArgs(b"q", b"first", None, 0, None, None, None, False), NOW)
        core.get_jobs([b"q"], 1, NOW)
    if waiter:
        core.get_job(GetJobArgs([b"q"], 1, 5000), object(), NOW)
    if events:
        core.job_events = []
    if wanted:
        core.wanted_queues = {b"q"}
    return core


def _state(core: NodeCore, job_id: bytes) -> tuple[Any, ...]:
    job = core.jobs[job_id]
    queue = core.queues.get(b"q")
    entries = [entry.id for entry in queue.entries] if queue is not None else None
    replies = [(type(reply).__name__, getattr(reply, "jobs", None)) for reply in core.replies]
    return (
        job.state,
        job.flags,
        job.qtime,
        job.awake,
        job.additional_deliveries,
        entries,
        queue.count if queue is not None else None,
        core.requeued_jobs,
        core.next_deadline(),
        [(event, when, state) for event, _, when, _, state, _, _ in core.job_events or ()],
        [[job.id for job in jobs] if jobs else jobs for _, jobs in replies],
        core.cluster_hooks.calls,  # type: ignore[union-attr]
    )


@settings(max_examples=200, deadline=None)
@given(
    queue_before=st.booleans(),
    waiter=st.booleans(),
    events=st.booleans(),
    wanted=st.booleans(),
    delay_s=st.sampled_from([0, 0, 5]),
    flags=st.sampled_from([0, 0, QUEUED_ONCE, NACK_PENDING | QUEUED_ONCE, DELIVERED]),
)
def test_the_short_way_queues_a_job_as_enqueue_does(
    queue_before: bool, waiter: bool, events: bool, wanted: bool, delay_s: int, flags: int
) -> None:
    short, whole = (_core(queue_before, waiter, events, wanted) for _ in range(2))
    ids = []
    for core in (short, whole):
        args = AddJobArgs(b"q", b"body", None, delay_s, None, None, None, False)
        job = core.add_job(args, NOW + 1, wait_repl=True)
        job.flags = flags
        ids.append(job.id)
    assert ids[0] == ids[1]
    job_id = ids[0]

    short.replicated(short.jobs[job_id], NOW + 2)

    job = whole.jobs[job_id]
    job.state = ACTIVE
    whole._changed("replicated", job, NOW + 2)
    if job.delay:
        job.qtime = NOW + 2 + job.delay * 1000
        whole.timers.file_job(job, job.qtime, NOW + 2)
    else:
        whole._enqueue(job, NOW + 2)

    assert _state(short, job_id) == _state(whole, job_id)
