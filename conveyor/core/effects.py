"""What the core asks its driver to do: the effects of a batch of commands.

The core never writes to a socket, a file or a peer. Each command returns its own
immediate reply; everything else is left here for the driver to drain after the batch:

- `WokenGetJob` / `Reply`: a reply owed to a client other than the one whose command
  ran (a blocked GETJOB answered by an ADDJOB, a timeout), or owed later (in a cluster,
  an ADDJOB answered once replication completes);
- `JobEvent`: one job change (the persist effect). Every change of a job's state goes
  through one function (`CoreState._changed`), so an AOF writer, the job-event log and
  the cluster all see the same stream. Recorded only while someone consumes it;
- `SendMessage`: a message for another node (produced once the cluster exists);
- the timer to arm: `next_deadline()`, read after the batch.

`TRANSITIONS` is the contract of the `JobEvent` stream: replaying the events of a job
from "absent" through this table yields the state the core holds for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeAlias

from conveyor.core.job import ACKED, ACTIVE, QUEUED, WAIT_REPL

if TYPE_CHECKING:
    from conveyor.core.job import Job
    from conveyor.core.queue import JobQueue
    from conveyor.core.waiters import Waiter

# Job events, in a job's life order. Every entry into a queue is "queued" (the first)
# or "requeued" (any later one; a dead-letter move is "dead-lettered", carrying the
# queue the job leaves, just before it). Every way a job is freed is exactly one of
# released (after an ack), expired, deleted or evicted. The counters in the event are
# the job's after the change (a "nacked" event counts that NACK).
EV_ADDED = "added"
# A plain ADDJOB (queued at once, nobody waiting, counters 0) is one event, not "added"
# then "queued": half the work on the hottest path. It means exactly those two events,
# at one time and on one queue; `one_per_change` spells it out for readers that want that.
EV_ADDED_QUEUED = "added+queued"
EV_REPLICATED = "replicated"  # a job added in wait-repl reached its replication level
EV_IMPORTED = "imported"
EV_QUEUED = "queued"
EV_DELIVERED = "delivered"
EV_DEQUEUED = "dequeued"
EV_ACKED = "acked"
EV_RELEASED = "released"
EV_NACKED = "nacked"
EV_REQUEUED = "requeued"
EV_EXPIRED = "expired"
EV_DELETED = "deleted"
EV_DEAD_LETTERED = "dead-lettered"
EV_EVICTED = "evicted"

# The job is no longer held by the node.
GONE = -1
_ANY_HELD = frozenset((WAIT_REPL, ACTIVE, QUEUED, ACKED))
# event -> (states it may follow, state after it); GONE before "added" means unknown.
TRANSITIONS: dict[str, tuple[frozenset[int], int | None]] = {
    EV_ADDED: (frozenset((GONE,)), None),  # ACTIVE, or WAIT_REPL while replicating
    EV_ADDED_QUEUED: (frozenset((GONE,)), QUEUED),
    EV_REPLICATED: (frozenset((WAIT_REPL,)), ACTIVE),
    EV_IMPORTED: (frozenset((GONE,)), None),  # the state the record brought
    EV_QUEUED: (frozenset((ACTIVE,)), QUEUED),
    EV_REQUEUED: (frozenset((ACTIVE,)), QUEUED),
    EV_DELIVERED: (frozenset((QUEUED,)), ACTIVE),
    EV_DEQUEUED: (frozenset((QUEUED,)), ACTIVE),
    EV_NACKED: (frozenset((ACTIVE,)), ACTIVE),
    EV_DEAD_LETTERED: (frozenset((ACTIVE,)), ACTIVE),
    EV_ACKED: (frozenset((WAIT_REPL, ACTIVE, QUEUED)), ACKED),
    EV_RELEASED: (frozenset((ACKED,)), GONE),
    EV_EXPIRED: (_ANY_HELD, GONE),
    EV_DELETED: (_ANY_HELD, GONE),
    EV_EVICTED: (_ANY_HELD, GONE),
}
# Events that change no state: they annotate the next change.
ANNOTATIONS = frozenset((EV_NACKED, EV_DEAD_LETTERED))


# (event, job, time_ms, queue, state, nacks, additional_deliveries): the queue, state
# and counters are copied when the event happens, so a later change in the same batch
# does not show. A plain tuple, not a NamedTuple: it is built on the ADDJOB hot path
# (one BUILD_TUPLE), and consumers unpack it.
JobEvent: TypeAlias = tuple[str, "Job", int, bytes, int, int, int]


def one_per_change(events: Iterable[JobEvent]) -> Iterator[JobEvent]:
    """The stream with each EV_ADDED_QUEUED as its "added" and "queued" events."""
    for event in events:
        if event[0] is EV_ADDED_QUEUED:
            _kind, job, time_ms, queue, _state, nacks, deliveries = event
            yield (EV_ADDED, job, time_ms, queue, ACTIVE, nacks, deliveries)
            yield (EV_QUEUED, job, time_ms, queue, QUEUED, nacks, deliveries)
        else:
            yield event


class WokenGetJob(NamedTuple):
    """A blocked GETJOB is answered: with jobs, or None (timed out, flushed)."""

    waiter: Waiter
    jobs: list[Job] | None


class Reply(NamedTuple):
    """A reply owed to `token` (a client the driver knows), decided after its command."""

    token: Any
    value: Any


class SendMessage(NamedTuple):
    """A message for another node (the cluster bus codec lives in conveyor.cluster)."""

    node_id: bytes
    message: Any


class Effects(NamedTuple):
    """Everything a batch left for the driver (see `CoreState.drain`)."""

    replies: list[WokenGetJob | Reply]
    job_events: list[JobEvent]
    messages: list[SendMessage]
    deadline_ms: int | None


class ClusterHooks(Protocol):
    """What the core tells the cluster about a job other nodes hold copies of, as it
    happens, and asks it of node names (conveyor.cluster.state implements it). The
    requeue calls come only for jobs held elsewhere."""

    def will_queue(self, job: Job, now_ms: int) -> None:
        """The job is about to be requeued here (WILLQUEUE_ADVANCE_MS ahead)."""

    def queued(self, job: Job, nacked: bool, now_ms: int) -> None:
        """The job was queued again here (after RETRY, or by a NACK when `nacked`)."""

    def working(self, job: Job, now_ms: int) -> None:
        """A client said it works on the job: the others must not requeue it."""

    def known_nodes(self, names: tuple[bytes, ...]) -> tuple[bytes, ...]:
        """Which of an imported record's node names are nodes of the cluster."""

    def blocked(self, queue_names: list[bytes], now_ms: int) -> None:
        """A client now waits on these queues, empty here: other nodes may have jobs."""

    def drained(self, queue: JobQueue, now_ms: int) -> None:
        """A queue that imports jobs was just emptied by a GETJOB."""

    def jobs_available(self, queue: JobQueue, now_ms: int) -> None:
        """A job was queued in a queue with no consumer here that other nodes want."""
