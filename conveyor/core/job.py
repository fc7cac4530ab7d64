"""The job record and its states.

A job is one `__slots__` object with times as int milliseconds: at a million queued
jobs every slot costs 8 MB, so only what SHOW, the timers and the queues need is kept.
"""

from __future__ import annotations

from conveyor.core.untracked import untrack

# States, numbered as in Disque so SHOW and a future bus codec can share them.
WAIT_REPL = 0
ACTIVE = 1
QUEUED = 2
ACKED = 3
# Not a Disque state: the job was freed. Queues and timers drop references lazily,
# and this is how they tell a stale reference from a live one.
DELETED = -1

STATE_NAMES: dict[int, bytes] = {
    WAIT_REPL: b"wait-repl",
    ACTIVE: b"active",
    QUEUED: b"queued",
    ACKED: b"acked",
}
STATE_BY_NAME: dict[bytes, int] = {name: state for state, name in STATE_NAMES.items()}

# flags
QUEUED_ONCE = 1  # a later queueing is a re-delivery (counts additional-deliveries)
DELIVERED = 2  # handed to a client at least once (at-most-once jobs can't come back)
NACK_PENDING = 4  # a delayed NACK already counted; its timed re-queue must not count again
WILLQUEUE_SENT = 8  # the other holders were told (WILLQUEUE) of the coming requeue

# In a cluster, how long before requeueing a holder tells the others (WILLQUEUE), so that
# one that has the job queued or acked can stop it (Disque's JOB_WILLQUEUE_ADVANCE).
WILLQUEUE_ADVANCE_MS = 500


class Job:
    __slots__ = (
        "additional_deliveries",
        "awake",
        "body",
        "ctime",
        "delay",
        "etime",
        "flags",
        "id",
        "nacks",
        "nodes_confirmed",
        "nodes_delivered",
        "qtime",
        "queue",
        "repl",
        "retry",
        "state",
    )

    id: bytes
    queue: bytes
    body: bytes
    state: int
    repl: int
    ctime: int  # creation time: ms * 1_000_000 + a per-ms counter, the queue order key
    etime: int  # expiry, absolute ms
    delay: int  # seconds
    retry: int  # seconds; 0 means at-most-once
    nacks: int
    additional_deliveries: int
    qtime: int  # absolute ms of the next timed (re)queue while active, 0 when none
    flags: int
    awake: int  # timer bucket the job is filed under, 0 when none
    # The nodes that may hold a copy, and those that confirmed they do. None means "this
    # node only": the one-holder case costs one shared pointer, not a tuple per job.
    nodes_delivered: tuple[bytes, ...] | None
    nodes_confirmed: tuple[bytes, ...] | None

    def __init__(
        self,
        job_id: bytes,
        queue: bytes,
        body: bytes,
        repl: int,
        ctime: int,
        etime: int,
        delay: int,
        retry: int,
    ) -> None:
        self.id = job_id
        self.queue = queue
        self.body = body
        self.state = ACTIVE
        self.repl = repl
        self.ctime = ctime
        self.etime = etime
        self.delay = delay
        self.retry = retry
        self.nacks = 0
        self.additional_deliveries = 0
        self.qtime = 0
        self.flags = 0
        self.awake = 0
        self.nodes_delivered = None
        self.nodes_confirmed = None
        # No job can be in a reference cycle (its slots hold bytes, ints and tuples of
        # names): the cycle collector need not walk it (core/untracked.py).
        untrack(self)

    def __lt__(self, other: Job) -> bool:
        # Only reached when two ctimes tie (jobs from different nodes): order by ID.
        return (self.ctime, self.id) < (other.ctime, other.id)

    @property
    def ctime_ms(self) -> int:
        return self.ctime // 1_000_000

    def awake_at(self) -> int:
        """When the timers must next look at this job: its requeue time or its expiry."""
        qtime = self.qtime
        if qtime and self.state == ACTIVE and qtime < self.etime:
            holders = self.nodes_delivered
            if holders is not None and len(holders) > 1 and not self.flags & WILLQUEUE_SENT:
                return qtime - WILLQUEUE_ADVANCE_MS  # first tell the other holders
            return qtime
        return self.etime

    def __repr__(self) -> str:
        return f"<Job {self.id.decode()} {STATE_NAMES.get(self.state, b'deleted').decode()}>"
