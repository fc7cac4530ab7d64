"""Requeue without duplicates: WILLQUEUE, QUEUED and WORKING between holders (sans-IO).

Every node holding an active copy keeps its own requeue timer (RETRY), so a job survives
the loss of any holder; these messages keep the holders from all requeueing it at once
(seed 000's requeue state machine, Disque's job.c/cluster.c):
- WILLQUEUE_ADVANCE_MS before requeueing, a holder sends WILLQUEUE to the others. One that
  has the job queued answers QUEUED (to every holder); one that has it acked answers
  SETACK, which acks it at the sender too.
- A holder that queues the job again broadcasts QUEUED, with the counter to bump in the
  message flags (INCR_DELIV, or INCR_NACKS for a NACK). Receivers push their own requeue
  time a RETRY ahead and, if they have it queued too, drop it from their queue when the
  sender's name, XORed with the job ID's random part, compares greater: of two nodes
  that queued it at the same time exactly one keeps it.
- WORKING (a client works on the job) goes to the other holders, which always take it
  out of their queue and push their requeue time.
- ENQUEUE (from a node that replicated a job externally and kept no copy) makes this
  holder the first to queue it.

The core calls `will_queue`/`queued`/`working` (its ClusterHooks) for jobs held
elsewhere; messages leave as membership's Send actions.
"""

from __future__ import annotations

from conveyor.cluster.actions import Send
from conveyor.cluster.membership import Membership
from conveyor.cluster.messages import (
    MFLAG_INCR_DELIV,
    MFLAG_INCR_NACKS,
    Enqueue,
    Message,
    Queued,
    SetAck,
    WillQueue,
    Working,
)
from conveyor.core.job import ACKED, ACTIVE, QUEUED, WAIT_REPL, Job
from conveyor.core.node import NodeCore

_RANDOM_PART = slice(11, 35)  # the 24 random characters of a job ID


def sender_wins(sender: bytes, me: bytes, job_id: bytes) -> bool:
    """Disque's compareNodeIDsByJob(sender, myself, job) > 0: both names XORed with the
    job ID's random part, compared as bytes."""
    random_part = job_id[_RANDOM_PART]
    for index in range(len(sender)):
        mask = random_part[index % 24]
        a, b = sender[index] ^ mask, me[index] ^ mask
        if a != b:
            return a > b
    return False


class Requeue:
    """The core's ClusterHooks, and the receiving side of the same messages."""

    def __init__(self, core: NodeCore, membership: Membership) -> None:
        self.core = core
        self.membership = membership

    # -- from the core --------------------------------------------------------------------
    def will_queue(self, job: Job, now_ms: int) -> None:
        self._broadcast(job, WillQueue(self.membership.header(), job.id))

    def queued(self, job: Job, nacked: bool, now_ms: int) -> None:
        flags = MFLAG_INCR_NACKS if nacked else MFLAG_INCR_DELIV
        header = self.membership.header()._replace(mflags=flags)
        self._broadcast(job, Queued(header, job.id))

    def working(self, job: Job, now_ms: int) -> None:
        self._broadcast(job, Working(self.membership.header(), job.id))

    def _broadcast(self, job: Job, message: Message) -> None:
        self.membership.send_to(job.nodes_delivered or (), message)

    # -- from other nodes -----------------------------------------------------------------
    def receive_queued(self, message: Queued | Working, now_ms: int) -> None:
        job = self.core.jobs.get(message.id)
        sender = message.header.sender
        if job is None:
            return
        if job.state == ACKED:
            # Queued elsewhere but acked here: make the sender ack it too.
            self._send(sender, SetAck(self.membership.header(), job.id, _holders(job)))
            return
        if job.state not in (WAIT_REPL, ACTIVE, QUEUED):
            return
        is_working = isinstance(message, Working)
        drop = is_working or sender_wins(sender, self.membership.name, job.id)
        self.core.requeued_elsewhere(job, drop, now_ms)
        if not is_working:
            mflags = message.header.mflags
            if mflags & MFLAG_INCR_NACKS:
                job.nacks += 1
            if mflags & MFLAG_INCR_DELIV:
                job.additional_deliveries += 1

    def receive_enqueue(self, message: Enqueue, now_ms: int) -> None:
        """The node that replicated the job here kept no copy: queue it (Disque)."""
        job = self.core.jobs.get(message.id)
        if job is not None:
            self.core.enqueue_requested(job, message.delay, now_ms)

    def receive_willqueue(self, message: WillQueue, now_ms: int) -> None:
        job = self.core.jobs.get(message.id)
        if job is None:
            return
        sender = message.header.sender
        if job.state in (ACTIVE, QUEUED):
            holders = job.nodes_delivered or (self.membership.name,)
            if sender not in holders:
                job.nodes_delivered = (*holders, sender)
        if job.state == QUEUED:
            self._broadcast(job, Queued(self.membership.header(), job.id))
        elif job.state == ACKED:
            self._send(sender, SetAck(self.membership.header(), job.id, _holders(job)))

    def _send(self, name: bytes, message: Message) -> None:
        self.membership.actions.append(Send(name, message))


def _holders(job: Job) -> int:
    return len(job.nodes_delivered or ()) or 1
