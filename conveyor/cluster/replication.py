"""Replication: a job's copies on other nodes, made before ADDJOB answers (sans-IO).

The steps of seed 000's replication state machine and Disque's job.c/cluster.c:
- ADDJOB with REPLICATE n > 1 keeps the job in wait-repl, sends REPLJOB to n-1 random
  reachable nodes and blocks the client; each copy is confirmed by a GOTJOB. With n
  confirmations (ourselves included) the job becomes active and is queued (or waits its
  DELAY) and the client gets its ID. Every 50 ms while short, one more node is added to
  the targets and REPLJOB goes again to every target (each learns the others); beyond
  Disque, an at-most-once job keeps its one target, and a node takes an at-most-once
  copy once (TakenOnce): a stray copy would never be queued nor acked. At the
  ADDJOB timeout the client gets -NOREPL and the copies are deleted (DELJOB, best
  effort); a job whose TTL ends first gets Disque's "removed (expired?)" NOREPL.
- ASYNC (and a job replicated with the client gone) sends REPLJOB with NOREPLY; the
  job is queued at once.
- A REPLJOB received is a copy to keep, active (not queued), with its nodes; answered
  with GOTJOB even when the copy was already here (GOTJOBs get lost too). Not taken
  when the queue is paused for input.
- DELJOB deletes a copy.
- External replication (the node leaving, or above 75 % of maxmemory with other nodes
  around): REPLICATE copies go to other nodes and none stays here. Once they are made
  (at once with ASYNC), ENQUEUE tells one holder to queue the job and this node forgets
  it. REPLJOB is not taken in that state either.

Replies owed to clients go to the core's reply effects (`Reply(token, ...)`), messages
to other nodes to membership's actions (`Send`), so both drivers carry them out as they
do the rest. No socket, no clock: the time comes in.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, NamedTuple

from conveyor.cluster.actions import Send
from conveyor.cluster.batching import CopyOutbox, job_id_message
from conveyor.cluster.confirmations import confirm_copies
from conveyor.cluster.membership import Membership
from conveyor.cluster.messages import (
    MFLAG_NOREPLY,
    DelJob,
    Enqueue,
    GotJob,
    Header,
    ReplJob,
)
from conveyor.cluster.planned_adds import PlannedAdds
from conveyor.core.args import AddJobArgs
from conveyor.core.codec import JobRecord
from conveyor.core.effects import Reply
from conveyor.core.errors import CommandError
from conveyor.core.job import DELETED, QUEUED_ONCE, WAIT_REPL, Job
from conveyor.core.node import NodeCore
from conveyor.core.queue import PAUSE_IN
from conveyor.core.records import job_record

_tuple_new = tuple.__new__

EXTRA_TARGET_MS = 50  # while short of copies, one more target this often
MAX_TAKEN_ONCE = 10_000  # at-most-once job IDs remembered as taken (the latest)
NOREPL_TIMEOUT = "NOREPL Timeout reached before replicating to the requested number of nodes"
NOREPL_EXPIRED = "NOREPL job removed (expired?) before the requested replication level was achieved"


class TakenOnce:
    """The at-most-once job IDs this node took by one kind of message, the latest
    MAX_TAKEN_ONCE: a second copy of such a message (a REPLJOB sent again, a duplicate)
    must not bring back a job delivered, acked or moved on meanwhile."""

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        self._ids: OrderedDict[bytes, None] = OrderedDict()

    def first_time(self, job_id: bytes) -> bool:
        if job_id in self._ids:
            return False
        self._ids[job_id] = None
        if len(self._ids) > MAX_TAKEN_ONCE:
            self._ids.popitem(last=False)
        return True

    def __len__(self) -> int:
        return len(self._ids)


class PendingAdd(NamedTuple):
    """A synchronous ADDJOB waiting for its copies. Made with tuple.__new__ (every
    synchronous job: a class's __init__ is a Python call) and replaced, not changed."""

    job: Job
    token: Any  # the client to answer
    deadline_ms: int  # 0: no timeout
    next_target_ms: int


class Replication(PlannedAdds):
    def __init__(self, core: NodeCore, membership: Membership, rand: random.Random) -> None:
        self.core = core
        self.membership = membership
        self.rand = rand
        self.pending: dict[bytes, PendingAdd] = {}
        self.taken_once = TakenOnce()  # at-most-once copies taken by REPLJOB
        self.outbox = CopyOutbox()  # the copies of new jobs, until the actions are taken
        membership.before_take = self.outbox.seal
        # Caches of what every ADDJOB asks again: the reachable others (until membership's
        # epoch moves) and our header with NOREPLY (for our header).
        self._others: tuple[bytes, ...] = ()
        self._others_epoch = -1
        self._noreply: Header | None = None
        self._noreply_of: Header | None = None
        # This node and `_others`, made with them: the holders of every job that goes to
        # all the reachable others (REPLICATE n of n nodes), one tuple for them all.
        self._holders: tuple[bytes, ...] = ()
        # known_names' last answer: (membership epoch, names asked, names known)
        self._last_known: tuple[int, tuple[bytes, ...], tuple[bytes, ...]] = (-1, (), ())
        # Bound once: loading a method as a value makes a new bound method each time.
        self._takes_batches = membership.takes_batches

    # -- ADDJOB ---------------------------------------------------------------------------
    def add_job(self, args: AddJobArgs, token: Any, now_ms: int) -> tuple[Job, bool]:
        """ADDJOB in a cluster: the job, and whether the client is answered now
        (REPLICATE 1, ASYNC) or once the copies are confirmed (a Reply effect then).
        CommandError as the core raises it (NOREPL when too few nodes are reachable)."""
        core = self.core
        if args.repl is None:
            args.repl = core.default_repl()
        external = core.replicates_externally()
        synchronous = (args.repl > 1 or external) and not args.asynchronous
        # An external job is never queued here, ASYNC or not: it is held until handed over.
        job = core.add_job(args, now_ms, wait_repl=synchronous or external, external=external)
        if args.repl == 1 and not external:
            return job, True
        targets = self._pick(args.repl if external else args.repl - 1)
        header = self._header(noreply=not synchronous)
        answered = self._replicate(job, args, targets, external, header, synchronous, token, now_ms)
        return job, answered

    def _replicate(
        self,
        job: Job,
        args: AddJobArgs,
        targets: tuple[bytes, ...],
        external: bool,
        header: Header,
        synchronous: bool,
        token: Any,
        now_ms: int,
    ) -> bool:
        """Send a new job's copies to `targets` (`header`: ours, with NOREPLY unless the
        client waits: `synchronous`); whether the client is answered now rather than once
        confirmed."""
        # Not membership.name: a property is a Python call, on every job.
        me = self.membership.myself.name
        if external:
            job.nodes_delivered = targets
        elif targets is self._others:  # shared: the codec checks it once for all
            job.nodes_delivered = self._holders
        else:
            job.nodes_delivered = (me, *targets)
        # The targets are reachable nodes, past their handshake: sent to without
        # membership.send_to's checks, gathered with the copies of the jobs before.
        record = job_record(job, me, now_ms, for_bus=True)
        membership = self.membership
        self.outbox.add(membership.actions, targets, header, record, self._takes_batches)
        if not synchronous:  # ASYNC: nobody waits for the copies
            if external:
                self._hand_over(job, targets, now_ms)
            return True
        job.nodes_confirmed = () if external else (me,)
        deadline = now_ms + args.timeout_ms if args.timeout_ms else 0
        self.pending[job.id] = _tuple_new(
            PendingAdd, (job, token, deadline, now_ms + EXTRA_TARGET_MS)
        )
        return False

    def await_copies(
        self, jobs: list[Job], tokens: list[Any], timeout_ms: int, now_ms: int
    ) -> None:
        """What _replicate leaves for a synchronous job kept here, for each of `jobs`
        (their copies just queued to their targets; `tokens`: the clients to answer)."""
        confirmed = (self.membership.myself.name,)
        deadline = now_ms + timeout_ms if timeout_ms else 0
        next_target_ms = now_ms + EXTRA_TARGET_MS
        pending = self.pending
        for job, token in zip(jobs, tokens, strict=True):
            job.nodes_confirmed = confirmed
            pending[job.id] = _tuple_new(PendingAdd, (job, token, deadline, next_target_ms))

    def _hand_over(self, job: Job, holders: tuple[bytes, ...], now_ms: int) -> None:
        """An externally replicated job: one of its holders is told to queue it (ENQUEUE,
        after the job's DELAY) and this node forgets it, as Disque does."""
        if holders:
            first = self.rand.choice(holders)
            enqueue = Enqueue(self.membership.header(), job.id, job.delay)
            self.membership.actions.append(Send(first, enqueue))
        self.core.del_jobs([job.id], now_ms)

    def _pick(self, count: int, exclude: tuple[bytes, ...] = ()) -> tuple[bytes, ...]:
        """`count` reachable nodes other than this one and `exclude`, at random."""
        if self._others_epoch == self.membership.epoch:
            names = self._others  # every ADDJOB asks: no call while the view holds
        else:
            names = self._reachable_others()
        if exclude:
            names = tuple(name for name in names if name not in exclude)
        if count >= len(names):
            return names  # all of them: no need to draw (REPLICATE 3 of 3 nodes)
        return tuple(self.rand.sample(names, count))

    def _reachable_others(self) -> tuple[bytes, ...]:
        epoch = self.membership.epoch
        if self._others_epoch != epoch:
            # Listed again only when the view changes.
            me = self.membership.name
            reachable = self.membership.reachable()
            self._others = tuple(node.name for node in reachable if node.name != me)
            self._holders = (me, *self._others)
            self._others_epoch = epoch
        return self._others

    def _header(self, noreply: bool) -> Header:
        header = self.membership.header()
        if not noreply:
            return header
        if self._noreply_of is not header:  # made again only when our header is
            self._noreply = header._replace(mflags=MFLAG_NOREPLY)
            self._noreply_of = header
        return self._noreply

    def _send_copies(
        self, job: Job, targets: tuple[bytes, ...], now_ms: int, noreply: bool
    ) -> None:
        record = job_record(job, self.membership.name, now_ms, for_bus=True)
        self.membership.send_to(targets, ReplJob(self._header(noreply), (record,)))

    def client_gone(self, job_id: bytes, now_ms: int) -> None:
        """The client of a synchronous ADDJOB left: forget the job, as Disque does."""
        pending = self.pending.pop(job_id, None)
        if pending is not None and pending.job.state == WAIT_REPL:
            self._delete_everywhere(pending.job, now_ms)

    def _delete_everywhere(self, job: Job, now_ms: int) -> None:
        self.membership.send_to(job.nodes_delivered or (), DelJob(self.membership.header(), job.id))
        self.core.del_jobs([job.id], now_ms)

    # -- the 50 ms tick -------------------------------------------------------------------
    def tick(self, now_ms: int) -> None:
        for job_id, pending in list(self.pending.items()):
            job = pending.job
            if job.state == DELETED:  # its TTL ended (or it was deleted) first
                del self.pending[job_id]
                self._answer(pending, CommandError(NOREPL_EXPIRED))
            elif pending.deadline_ms and now_ms >= pending.deadline_ms:
                del self.pending[job_id]
                self._delete_everywhere(job, now_ms)
                self._answer(pending, CommandError(NOREPL_TIMEOUT))
            elif now_ms >= pending.next_target_ms:
                self.pending[job_id] = pending._replace(next_target_ms=now_ms + EXTRA_TARGET_MS)
                self._add_target(job, now_ms)

    def _add_target(self, job: Job, now_ms: int) -> None:
        delivered = job.nodes_delivered or ()
        # An at-most-once job (externally replicated: a leaving node) has one target: a
        # second one could keep a copy that is never queued (no RETRY) nor acked.
        extra = self._pick(1, exclude=delivered) if job.retry else ()
        job.nodes_delivered = delivered = delivered + extra
        unconfirmed = tuple(n for n in delivered if n not in (job.nodes_confirmed or ()))
        self._send_copies(job, unconfirmed, now_ms, noreply=False)

    def _answer(self, pending: PendingAdd, value: bytes | CommandError) -> None:
        # tuple.__new__: the named tuple's own __new__ is a Python call per answer.
        self.core.replies.append(_tuple_new(Reply, (pending.token, value)))

    # -- bus messages ---------------------------------------------------------------------
    def receive_repljob(self, message: ReplJob, now_ms: int) -> None:
        """Copies to keep: one job from Disque, several in one frame from a Conveyor node
        (CONVEYOR_MARK), each answered with its GOTJOB."""
        core = self.core
        if core.leaving or core.memory_warning():
            return  # no GOTJOB: the sender's next target (or its timeout) takes over
        taken = self._take_copies(message.jobs, now_ms)
        header = message.header
        if taken and not header.mflags & MFLAG_NOREPLY:
            # All at once, as coalesce would merge one GOTJOB per copy.
            membership = self.membership
            sender, mine = header.sender, membership.header()
            if membership.takes_batches(sender):
                confirm = job_id_message(GotJob, mine, [(job_id, 0) for job_id in taken])
                membership.actions.append(Send(sender, confirm))
            else:
                membership.actions.extend([Send(sender, GotJob(mine, i)) for i in taken])

    def _take_copies(self, records: Sequence[JobRecord], now_ms: int) -> list[bytes]:
        """The IDs of the copies of one REPLJOB kept or merged: `_take_copy` for each, the
        new ones through the core's run (import_copies) when the frame's queue takes input."""
        if records:
            queue = self.core.queues.get(records[0].queue)
            if queue is None or not queue.pause & PAUSE_IN:
                holders = self.known_names(records[0].nodes)
                return self.core.import_copies(records, now_ms, holders, self._take_copy)
        return [record.id for record in records if self._take_copy(record, now_ms)]

    def _take_copy(self, record: JobRecord, now_ms: int) -> bool:
        """Keep this copy (or merge its holders into ours); whether to confirm it."""
        core = self.core
        # One unpack: a named field is an attribute lookup each (every copy received).
        job_id, _, _, _, _, _, _, _, retry, _, _, queue_name, _, nodes = record
        queue = core.queues.get(queue_name)
        if queue is not None and queue.pause & PAUSE_IN:
            return False
        known = core.jobs.get(job_id)
        if known is None and not retry and not self.taken_once.first_time(job_id):
            pass  # sent again after this node took it (and moved it on, or it was acked)
        elif known is None:
            # A copy keeps the holders this node knows, however few.
            job = core.import_job(
                record, now_ms, etime_relative=True, holders=self.known_names(nodes)
            )
            if job is None:
                return False  # already expired
            # Its first queueing here is a requeue: counted, and announced with QUEUED
            # (Disque sets BCAST_QUEUED on every copy received).
            job.flags |= QUEUED_ONCE
        elif known.nodes_delivered is not None:
            merged = dict.fromkeys(known.nodes_delivered + self.known_names(nodes))
            known.nodes_delivered = tuple(merged)
        return True

    def known_names(self, names: tuple[bytes, ...]) -> tuple[bytes, ...]:
        # Names this node does not know are dropped (Disque does the same). Every copy
        # of a run names the same nodes: the last answer holds until the view changes,
        # and the copies share its tuple.
        epoch, last_names, last_known = self._last_known
        if names == last_names and epoch == self.membership.epoch:
            return last_known
        known = tuple(filter(self.membership.nodes.__contains__, names))
        self._last_known = (self.membership.epoch, names, known)
        return known

    def receive_gotjob(self, message: GotJob, now_ms: int) -> None:
        self.got_copies(message.header.sender, ((message.id, 0),), now_ms)

    def got_copies(self, sender: bytes, entries: Sequence[tuple[bytes, int]], now_ms: int) -> None:
        """`sender` holds a copy of each job of `entries` ((job ID, unused) pairs: one
        GOTJOB, or a Conveyor node's batch of them for a pipeline's ADDJOBs)."""
        core = self.core
        jobs = core.jobs
        me = self.membership.myself.name
        confirmed_here: list[Job] = []
        index, count = 0, len(entries)
        while True:
            # achieved's usual case without its call, for every entry up to the first job
            # replicated externally (cluster/confirmations.py).
            index = confirm_copies(
                entries, index, sender, me, jobs, self.pending, core.replies, confirmed_here,
            )  # fmt: skip
            if index == count:
                break
            self.achieved(jobs[entries[index][0]], now_ms)  # handed over
            index += 1
        core.replicated_run(confirmed_here, now_ms)  # each queued as `replicated` does

    def achieved(self, job: Job, now_ms: int, acked: bool = False) -> None:
        """Enough copies (or, `acked`, another node acked it already): active, client
        answered; an externally replicated job is handed over (queued there unless
        acked). An acked job held here is left in wait-repl for the caller to ack:
        queued first, it would go at once to a consumer blocked on its queue (Disque
        serves waiters only after the ack)."""
        pending = self.pending.pop(job.id, None)
        if pending is not None:  # as _answer does, one call less on every confirmed job
            self.core.replies.append(_tuple_new(Reply, (pending.token, b"+%s\r\n" % job.id)))
        if self.membership.myself.name in (job.nodes_delivered or ()):
            if not acked:
                self.core.replicated(job, now_ms)
        else:
            self._hand_over(job, () if acked else job.nodes_confirmed or (), now_ms)

    def receive_deljob(self, message: DelJob, now_ms: int) -> None:
        job = self.core.jobs.get(message.id)
        if job is None:
            return
        pending = self.pending.pop(job.id, None)
        if pending is None:
            self.core.del_jobs([job.id], now_ms)
            return
        # Deleted elsewhere (FASTACK of a copy) before its ADDJOB was answered: as Disque,
        # the client learns now and the copies made go too; waiting on would queue the
        # job once the last copy is confirmed, though it was deleted.
        self._delete_everywhere(job, now_ms)
        self._answer(pending, CommandError(NOREPL_EXPIRED))
