"""The copies of one REPLJOB are taken in one call (Replication._take_copies, through
JobRunsMixin.import_copies): the node must end exactly as taking them one by one with
_take_copy leaves it, whatever the frame holds (sans-IO, in process).

Two replicas made alike (same name, seed and view) take the same records, one through the
run, the other one by one; the IDs confirmed, every slot of every job, the order of the
jobs, the timers' buckets (and the one filed into last), the counters, the random draws
still to come and the at-most-once memory must be equal. A frame can mix queues, holders,
known jobs, at-most-once and expired copies, and the queue can be paused or watched.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.cluster.state import ClusterState
from conveyor.core.codec import JobRecord
from conveyor.core.job import Job
from conveyor.core.queue import PAUSE_IN
from tests.cluster.test_hot_path_caches import NAMES, NOW, node

_HOLDERS = (NAMES[0], NAMES[1], NAMES[2])
# A name this replica does not know: dropped from the holders it keeps.
_WITH_UNKNOWN = (NAMES[0], NAMES[1], b"%040x" % 0xDEAD)

# The tuples a frame's records share (the codec gives each jobs of a frame the same one).
_SHARED = {"unknown": _WITH_UNKNOWN, "two": _HOLDERS[:2], "one": _HOLDERS[:1]}

_RECORD = st.fixed_dictionaries(
    {
        "n": st.integers(0, 11),  # IDs repeat: in the frame, and with the jobs known
        "queue": st.sampled_from([b"q", b"r"]),
        # The frame's shared tuple (as the codec gives), an equal tuple of its own, others.
        "nodes": st.sampled_from(["shared", "equal", "unknown", "two", "one"]),
        # 90 s: requeued past a minute from now, in the timers' coarse buckets; 60 s with
        # one holder (no WILLQUEUE ahead): either side of that minute, by the jitter.
        "retry": st.sampled_from([0, 30, 1, 90, 60]),
        "etime": st.sampled_from([1, 2, 600]),  # seconds left + 1: 1 has expired
        "ctime": st.sampled_from([5, 7, NOW * 1_000_000]),
        "delay": st.sampled_from([0, 3]),
        "counters": st.sampled_from([(0, 0), (2, 1)]),
        "flags": st.sampled_from([0, 1, 4, 5]),  # Disque's BCAST_QUEUED 1, DELIVERED 4
    }
)


def _nodes(kind: str) -> tuple[bytes, ...]:
    if kind == "shared":
        return _HOLDERS
    if kind == "equal":
        return tuple(bytes(bytearray(name)) for name in _HOLDERS)
    return _SHARED[kind]


def _record(fields: dict[str, Any]) -> JobRecord:
    nacks, deliveries = fields["counters"]
    return JobRecord(
        b"D-00000000-%024d-0005" % fields["n"], 1, 0, fields["flags"], 3, fields["etime"],
        fields["ctime"], fields["delay"], fields["retry"], nacks, deliveries,
        bytes(bytearray(fields["queue"])), b"body-%d" % fields["n"], _nodes(fields["nodes"]),
    )  # fmt: skip


def _replica(setup: dict[str, Any]) -> ClusterState:
    state = node(1)
    core = state.core
    for name in setup["queues"]:
        core.queue_for(name, NOW)
    if setup["paused"]:
        core.pause(b"q", PAUSE_IN, NOW)
    if setup["events"]:
        core.job_events = []
    for record in setup["known"]:  # copies taken before this frame
        state.replication._take_copy(record, NOW - 3)
    return state


def _state(state: ClusterState) -> tuple[Any, ...]:
    core = state.core
    timers = core.timers
    return (
        [[(name, getattr(job, name)) for name in Job.__slots__] for job in core.jobs.values()],
        {key: [job.id for job in jobs] for key, (_, jobs) in timers._buckets.items()},
        sorted(timers._bucket_heap),
        (timers._last[0], timers._last_when),  # where the next job's filing starts from
        core.jobs_bytes,
        core._last_ctime,
        core._rand.random(),  # the draws so far: each copy draws its jitter
        [
            (event, job.id, when, state)
            for event, job, when, _, state, _, _ in core.job_events or ()
        ],
        [state.replication.taken_once.first_time(b"D-00000000-%024d-0005" % n) for n in range(12)],
    )


@settings(max_examples=400, deadline=None)
@given(
    frame=st.lists(_RECORD, max_size=14),
    known=st.lists(_RECORD, max_size=4),
    queues=st.sampled_from([(), (b"q",), (b"q", b"r")]),
    paused=st.booleans(),
    events=st.booleans(),
    # The frame's time: a minute from it falls inside a 1000 ms bucket, or on its edge.
    at=st.sampled_from([NOW, NOW + 437]),
)
def test_a_frame_of_copies_is_taken_as_one_by_one(
    frame: list[dict[str, Any]],
    known: list[dict[str, Any]],
    queues: tuple[bytes, ...],
    paused: bool,
    events: bool,
    at: int,
) -> None:
    setup = {
        "queues": queues,
        "paused": paused and b"q" in queues,
        "events": events,
        "known": [_record(fields) for fields in known],
    }
    _compare(setup, tuple(_record(fields) for fields in frame), at)


def _compare(setup: dict[str, Any], records: tuple[JobRecord, ...], at: int) -> None:
    together, one_by_one = _replica(setup), _replica(setup)
    taken = together.replication._take_copies(records, at)
    expected = [r.id for r in records if one_by_one.replication._take_copy(r, at)]
    assert taken == expected
    assert _state(together) == _state(one_by_one)


def test_copies_requeued_either_side_of_a_minute_are_filed_as_one_by_one() -> None:
    """A minute from now splits the timers' fine buckets from their 1000 ms ones: copies
    whose jittered requeue falls on either side, in a 1000 ms bucket's range, must each
    go where file_job puts them."""
    at = NOW + 437  # a minute from it is inside a 1000 ms bucket's range
    fields = {"queue": b"q", "nodes": "one", "retry": 60, "etime": 600, "ctime": 5,
              "delay": 0, "counters": (0, 0), "flags": 0}  # fmt: skip
    records = tuple(_record({**fields, "n": n}) for n in range(12))
    setup = {"queues": (b"q",), "paused": False, "events": False, "known": []}
    state = _replica(setup)
    state.replication._take_copies(records, at)
    far = at + 60_000
    sides = [job.qtime > far for job in state.core.jobs.values()]
    assert True in sides[:-1] and False in sides[sides.index(True) :]  # coarse, then fine
    _compare(setup, records, at)


def test_a_frame_of_new_copies_is_taken_without_the_one_job_path() -> None:
    """The run's own point: no _take_copy call for a frame of new copies of one queue and
    holders, and one holders tuple and one queue name for all of them."""
    state = node(1)
    state.core.queue_for(b"q", NOW)
    one_by_one: list[JobRecord] = []
    state.replication._take_copy = lambda record, now_ms: one_by_one.append(record) or True  # type: ignore[method-assign]
    records = tuple(
        _record({"n": n, "queue": b"q", "nodes": "shared", "retry": 30, "etime": 600,
                 "ctime": n, "delay": 0, "counters": (0, 0), "flags": 0})
        for n in range(3)
    )  # fmt: skip
    assert len(state.replication._take_copies(records, NOW)) == 3
    assert one_by_one == []
    jobs = list(state.core.jobs.values())
    assert all(job.nodes_delivered is jobs[0].nodes_delivered for job in jobs)
    assert all(job.queue is state.core.queues[b"q"].name for job in jobs)
