"""JobRunsMixin.add_run adds a run of ADDJOBs into one queue in one call when none of them
can be refused and none needs more than `_register` and the filing after it. It must
leave the node exactly as adding the same jobs one by one with add_checked does, and
where it declines (None) it must have changed nothing.

Two cores made alike add the same bodies; one through add_run, the other one by one.
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.core.args import AddJobArgs, GetJobArgs
from conveyor.core.job import NACK_PENDING, QUEUED_ONCE, Job
from conveyor.core.node import NodeCore
from conveyor.core.queue import PAUSE_IN
from tests.core.test_first_queueing import _Hooks

NOW = 1_700_000_000_000
LATER = NOW + 5  # when the run is added
NODE_ID = "b" * 40


def _name() -> bytes:
    """The queue's name, a new bytes object each time (a job must share its queue's)."""
    return bytes(bytearray(b"jobs"))


def _core(setup: dict[str, bool]) -> NodeCore:
    core = NodeCore(NODE_ID, b"seed", random.Random(5))
    core.cluster_hooks = _Hooks()  # type: ignore[assignment]
    if setup["queue_before"]:  # a queue that exists, with one job left in it
        for body in (b"first", b"second"):
            core.add_job(AddJobArgs(_name(), body, None, 0, None, None, None, False), NOW)
        core.get_jobs([_name()], 1, NOW)
        if setup["paused"]:
            core.queues[b"jobs"].pause = PAUSE_IN
    if setup["waiter"]:
        core.get_job(GetJobArgs([_name()], 1, 5000), object(), NOW)
    if setup["events"]:
        core.job_events = []
    if setup["wanted"]:
        core.wanted_queues = {_name()}
    if setup["same_ms"]:  # a job made earlier in this millisecond: ctimes move on from it
        core._last_ctime = LATER * 1_000_000 + 7
    return core


def _state(core: NodeCore) -> tuple[Any, ...]:
    queue = core.queues.get(b"jobs")
    replies = [(type(reply).__name__, getattr(reply, "jobs", None)) for reply in core.replies]
    return (
        sorted(
            [(name, getattr(job, name)) for name in Job.__slots__] for job in core.jobs.values()
        ),
        all(job.queue is queue.name for job in core.jobs.values()) if queue else None,
        {name: [entry.id for entry in queue.entries] for name, queue in core.queues.items()},
        (queue.count, queue.jobs_in, queue.atime_ms) if queue is not None else None,
        core.jobs_bytes,
        core.requeued_jobs,
        core._last_ctime,
        core._ids.next_id(60, 6),  # the ID generator's state
        core.next_deadline(),
        # Each job filed once: a job filed twice would stay in its bucket's list twice.
        sum(len(jobs) for _, jobs in core.timers._buckets.values()),
        sorted(job.id for job in core.timers.due_jobs(NOW + 10**9)),
        [(event, when, state) for event, _, when, _, state, _, _ in core.job_events or ()],
        [[job.id for job in jobs] if jobs else jobs for _, jobs in replies],
        core.cluster_hooks.calls,  # type: ignore[union-attr]
    )


@settings(max_examples=400, deadline=None)
@given(
    setup=st.fixed_dictionaries(
        {
            name: st.booleans()
            for name in ("queue_before", "paused", "waiter", "events", "wanted", "same_ms")
        }
    ),
    wait_repl=st.booleans(),
    delay_s=st.sampled_from([0, 0, 5]),
    repl=st.sampled_from([None, 1, 3]),
    retry_s=st.sampled_from([0, 30]),
    maxlen=st.sampled_from([None, None, 100]),
    bodies=st.lists(st.binary(max_size=20), min_size=1, max_size=40),
)
def test_a_run_adds_its_jobs_as_adding_them_one_by_one_does(
    setup: dict[str, bool],
    wait_repl: bool,
    delay_s: int,
    repl: int | None,
    retry_s: int,
    maxlen: int | None,
    bodies: list[bytes],
) -> None:
    run, one_by_one, untouched = (_core(setup) for _ in range(3))
    args = AddJobArgs(_name(), b"", repl, delay_s, None, None, maxlen, False)
    jobs = run.add_run(args, bodies, 600, retry_s, LATER, wait_repl)
    queue = untouched.queues.get(b"jobs")  # a waiter makes it too
    declines = (
        queue is None
        or queue.pause != 0
        or maxlen is not None
        or delay_s > 0
        or setup["events"]
        # A waiter served at once by the job left in the queue does not block.
        or (not wait_repl and (queue.blocked > 0 or setup["wanted"]))
    )
    if jobs is None:
        assert declines
        assert _state(run) == _state(untouched)
        return
    assert not declines
    for body in bodies:
        args = AddJobArgs(_name(), body, repl, delay_s, None, None, maxlen, False)
        one_by_one.add_checked(args, 600, retry_s, LATER, wait_repl)
    assert [job.id for job in jobs] == list(one_by_one.jobs)[-len(bodies) :]
    assert _state(run) == _state(one_by_one)


def test_a_run_behind_a_requeued_job_is_filed_in_creation_time_order() -> None:
    run, one_by_one = (_core(dict.fromkeys(("queue_before",), True) | _FALSE) for _ in range(2))
    for core in (run, one_by_one):  # the queue's last job made after the run's first
        core.queues[b"jobs"].entries[-1].ctime = LATER * 1_000_000 + 10**6
    args = AddJobArgs(_name(), b"", 3, 0, None, None, None, False)
    bodies = [b"a", b"b", b"c"]
    assert run.add_run(args, bodies, 600, 30, LATER, False) is not None
    for body in bodies:
        args = AddJobArgs(_name(), body, 3, 0, None, None, None, False)
        one_by_one.add_checked(args, 600, 30, LATER)
    assert _state(run) == _state(one_by_one)
    entries = run.queues[b"jobs"].entries
    assert [job.ctime for job in entries] == sorted(job.ctime for job in entries)


_FALSE = dict.fromkeys(("paused", "waiter", "events", "wanted", "same_ms"), False)


@settings(max_examples=300, deadline=None)
@given(
    setup=st.fixed_dictionaries(
        # Mostly what lets the copies be queued together, so that their order, queues,
        # DELAYs and flags decide.
        {
            name: st.sampled_from([False, False, False, True])
            for name in ("waiter", "events", "wanted")
        }
        | {"queue_before": st.sampled_from([True, True, True, False])}
        | {"paused": st.just(False), "same_ms": st.just(False)}
    ),
    kinds=st.lists(
        st.sampled_from(["fresh", "fresh", "fresh", "delayed", "flagged", "other queue"]),
        min_size=1,
        max_size=12,
    ),
    order=st.one_of(st.just(list(range(12))), st.permutations(list(range(12)))),
)
def test_copies_confirmed_together_are_queued_as_one_by_one(
    setup: dict[str, bool], kinds: list[str], order: list[int]
) -> None:
    """JobRunsMixin.replicated_run (a batch of GOTJOBs, cluster/replication.py got_copies)
    leaves the node as `replicated` called for each job in the same order does."""
    together, one_by_one = (_core(setup) for _ in range(2))
    # The order the GOTJOBs confirm them in: as they were made, or any other.
    confirmed = [n for n in order if n < len(kinds)]
    jobs_of = []
    for core in (together, one_by_one):
        jobs = []
        for n, kind in enumerate(kinds):
            queue = b"other" if kind == "other queue" else _name()
            delay_s = 5 if kind == "delayed" else 0
            args = AddJobArgs(queue, b"%d" % n, 3, delay_s, None, None, None, False)
            job = core.add_checked(args, 600, 30, LATER, wait_repl=True)
            # A copy carries the flags of its origin's job: one NACKed there, say.
            job.flags = QUEUED_ONCE | NACK_PENDING if kind == "flagged" else 0
            jobs.append(job)
        jobs_of.append([jobs[n] for n in confirmed])
    for job in jobs_of[0]:
        job.state = 1  # ACTIVE: got_copies takes each out of wait-repl as it confirms it
    together.replicated_run(jobs_of[0], LATER + 3)
    for job in jobs_of[1]:
        one_by_one.replicated(job, LATER + 3)
    assert _state(together) == _state(one_by_one)
