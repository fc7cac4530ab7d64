"""A batch of GOTJOBs is taken in one loop (Replication.got_copies, through
cluster/confirmations.py): the origin must end exactly as confirming each copy one by one
with `achieved` leaves it, whatever the batches hold (sans-IO, in process).

Two origins made alike (same name, seed and view) add the same synchronous jobs, then take
the same GOTJOB entries: one in batches through got_copies, the other entry by entry
through the one-job rules below. Every slot of every job, the replies owed (to whom, what,
in which order), the ADDJOBs still waiting, the queue, the timers and the messages left to
send must be equal. Batches can repeat entries, name unknown jobs, jobs confirmed already
and jobs replicated externally (this node holds no copy: handed over to a holder).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.cluster.confirmations import confirm_copies
from conveyor.cluster.state import ClusterState
from conveyor.core.effects import Reply
from conveyor.core.job import WAIT_REPL, Job
from conveyor.node.cmd_jobs import parse_addjob
from tests.cluster.test_hot_path_caches import NAMES, NOW, node

_UNKNOWN = b"D-00000000-%024d-0005" % 999

_JOB = st.fixed_dictionaries(
    {
        "repl": st.sampled_from([b"2", b"3"]),
        "external": st.booleans(),  # replicated externally: this node keeps no copy
    }
)
# (which job, or None for an ID this node does not know; which replica sent it)
_ENTRY = st.tuples(st.one_of(st.none(), st.integers(0, 5)), st.integers(1, 2))


def _origin(jobs: list[dict[str, Any]]) -> tuple[ClusterState, list[bytes]]:
    state = node(0)
    ids = []
    for index, fields in enumerate(jobs):
        args = parse_addjob(
            [b"ADDJOB", b"q", b"body-%d" % index, b"5000", b"REPLICATE", fields["repl"]]
        )
        job, _ = state.replication.add_job(args, ("client", index), NOW)
        assert job.state == WAIT_REPL
        if fields["external"]:
            job.nodes_delivered = tuple(name for name in job.nodes_delivered if name != NAMES[0])
        ids.append(job.id)
    state.membership.take_actions()  # the copies sent: not what this test compares
    state.core.take_replies()
    return state, ids


def _one_by_one(state: ClusterState, sender: bytes, entries: list[tuple[bytes, int]]) -> None:
    """The one-job rules: each copy confirmed counts; enough of them and `achieved`."""
    replication = state.replication
    for job_id, _ in entries:
        job = state.core.jobs.get(job_id)
        if job is None or job.state != WAIT_REPL:
            continue
        confirmed = job.nodes_confirmed or ()
        if sender not in confirmed:
            job.nodes_confirmed = confirmed = (*confirmed, sender)
        if len(confirmed) >= job.repl:
            replication.achieved(job, NOW + 5)


def _state(state: ClusterState) -> tuple[Any, ...]:
    core = state.core
    queue = core.queues.get(b"q")
    return (
        [[(name, getattr(job, name)) for name in Job.__slots__] for job in core.jobs.values()],
        [(reply.token, reply.value) for reply in core.take_replies()],
        sorted(state.replication.pending),
        None if queue is None else [job.id for job in queue.live_jobs()],
        {key: [job.id for job in jobs] for key, (_, jobs) in core.timers._buckets.items()},
        [repr(action) for action in state.membership.take_actions()],
    )


@settings(max_examples=300, deadline=None)
@given(
    jobs=st.lists(_JOB, min_size=1, max_size=6),
    batches=st.lists(st.lists(_ENTRY, max_size=8), max_size=5),
)
def test_a_batch_of_gotjobs_is_taken_as_one_by_one(
    jobs: list[dict[str, Any]], batches: list[list[tuple[int | None, int]]]
) -> None:
    together, ids = _origin(jobs)
    one_by_one, same_ids = _origin(jobs)
    assert ids == same_ids
    for batch in batches:
        # One batch comes from one replica: its first entry's says which.
        sender = NAMES[batch[0][1]] if batch else NAMES[1]
        entries = [(_UNKNOWN if n is None else ids[n % len(ids)], 0) for n, _ in batch]
        together.replication.got_copies(sender, tuple(entries), NOW + 5)
        _one_by_one(one_by_one, sender, entries)
        assert _state(together) == _state(one_by_one)


def test_the_loop_stops_at_a_job_replicated_externally() -> None:
    """confirm_copies hands back the index of the first job it must not take itself, with
    the jobs before it confirmed and their clients owed their IDs."""
    state, ids = _origin([{"repl": b"2", "external": False}, {"repl": b"2", "external": True}])
    core, confirmed = state.core, []
    replies: list[Reply] = []
    entries = [(ids[0], 0), (ids[1], 0), (ids[0], 0)]
    stop = confirm_copies(
        entries, 0, NAMES[1], NAMES[0], core.jobs, state.replication.pending, replies,
        confirmed,
    )  # fmt: skip
    assert stop == 1
    assert [job.id for job in confirmed] == [ids[0]]
    assert replies == [Reply(("client", 0), b"+%s\r\n" % ids[0])]
    assert core.jobs[ids[0]].state != WAIT_REPL
    assert core.jobs[ids[1]].nodes_confirmed == (NAMES[0], NAMES[1])  # counted, not taken
    # Resumed after it, the repeated entry finds its job confirmed already.
    assert confirm_copies(
        entries, 2, NAMES[1], NAMES[0], core.jobs, state.replication.pending, replies,
        confirmed,
    ) == 3  # fmt: skip
    assert len(confirmed) == 1 and len(replies) == 1
