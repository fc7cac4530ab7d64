"""Acks across the cluster and their garbage collection (Disque's ack.c; sans-IO).

An ACKJOB on a job with copies elsewhere keeps it ACKED here and starts a GC round:
SETACK (with how many nodes may hold it) to every holder that has not confirmed, each
answers GOTACK, and once all did, DELJOB goes to all of them and the job is let go.
Rounds repeat with exponential backoff (1 s doubling to 3 min, +-250 ms) until done or
the TTL ends. An ACKJOB for an ID this node does not know, when the ID says the job has
retries (odd TTL digits), leaves a *dummy ack*: SETACK 0 goes to every node, so that
whoever holds the job acks it; the dummy goes once a node that knows the job answers,
or once every node said it does not. FASTACK deletes at once and sends DELJOB to the
holders (to every node for an unknown ID), best effort.

Receiving: SETACK acks the copy (a wait-repl job first becomes active, its client
answered) and answers GOTACK unless this node knows of more holders than the sender,
in which case it runs the GC itself; GOTACK counts a confirmation.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from conveyor.cluster.actions import Send
from conveyor.cluster.membership import Membership
from conveyor.cluster.messages import DelJob, GotAck, SetAck
from conveyor.cluster.replication import Replication
from conveyor.core.job import ACKED, DELETED, WAIT_REPL, Job
from conveyor.core.jobid import id_has_retry, id_ttl_minutes, is_valid_id
from conveyor.core.node import NodeCore

GC_MIN_MS = 1000
GC_MAX_MS = 180_000
GC_JITTER_MS = 250
# Dummy acks are made by clients (any ACKJOB of an unknown ID with odd TTL digits) and
# live up to the TTL the ID claims (up to 45 days): past this many, no new one is kept,
# so a client acking random IDs cannot grow the node without bound.
MAX_DUMMY_ACKS = 100_000
# Jobs in `collecting` looked at per cron tick for having gone (deleted, expired) since:
# every one of them when fewer, so that a long GC backlog (a holder down for hours) costs
# a tick a bounded amount of work rather than a walk over all of it ten times a second.
SWEEP_PER_TICK = 1000


@dataclass(slots=True)
class GcState:
    """One acked job (or dummy ack) being collected."""

    confirmed: set[bytes]
    retries: int = 0
    next_ms: int = 0
    queued_ms: int = -1  # when its entry in the due heap is, -1 when it has none


@dataclass(slots=True)
class DummyAck:
    """An ack for a job this node never held: kept until the holder is found."""

    id: bytes
    etime_ms: int
    gc: GcState = field(default_factory=lambda: GcState(set()))


class AckGC:
    def __init__(
        self,
        core: NodeCore,
        membership: Membership,
        replication: Replication,
        rand: random.Random,
    ) -> None:
        self.core = core
        self.membership = membership
        self.replication = replication
        self.rand = rand
        self.collecting: dict[bytes, GcState] = {}  # acked jobs held here
        self.dummies: dict[bytes, DummyAck] = {}
        # (when, ID) heaps of the rounds to come, so that a tick looks only at what is
        # due: an entry whose state went, or was queued again sooner, is skipped.
        self._jobs_due: list[tuple[int, bytes]] = []
        self._dummies_due: list[tuple[int, bytes]] = []
        self._sweep: list[bytes] = []  # collecting's IDs still to look at for gone jobs

    # -- client commands ------------------------------------------------------------------
    def ack(self, ids: list[bytes], now_ms: int) -> int:
        """ACKJOB: how many of the jobs were known here and not acked before."""
        core = self.core
        known = 0
        for job_id in ids:
            job = core.jobs.get(job_id)
            if job is None:
                if job_id not in self.dummies and self._wants_dummy(job_id):
                    self._start_dummy(job_id, now_ms)
                continue
            if job.state != ACKED:
                known += 1
                core.ack([job_id], now_ms)  # frees it when no other node may hold it
            if job.state == ACKED:
                self._gc(job, now_ms)
        return known

    def _wants_dummy(self, job_id: bytes) -> bool:
        return (
            self.membership.size() > 1
            and len(self.dummies) < MAX_DUMMY_ACKS
            and not self.core.leaving
            and is_valid_id(job_id)
            and id_has_retry(job_id)
        )

    def fast_ack(self, ids: list[bytes], now_ms: int) -> int:
        core = self.core
        freed = 0
        for job_id in ids:
            job = core.jobs.get(job_id)
            message = DelJob(self.membership.header(), job_id)
            if job is None:
                self.membership.send_to(self._others(), message)
                continue
            self.membership.send_to(self._holders(job), message)
            self.collecting.pop(job_id, None)
            freed += core.fast_ack([job_id], now_ms)
        return freed

    # -- GC rounds ------------------------------------------------------------------------
    def _gc(self, job: Job, now_ms: int) -> None:
        state = self.collecting.get(job.id)
        if state is None:
            state = self.collecting[job.id] = GcState({self.membership.name})
        self._schedule(state, now_ms, self._jobs_due, job.id)
        holders = self._holders(job)
        if all(name in state.confirmed for name in holders):
            self._release(job, now_ms)
            return
        message = SetAck(self.membership.header(), job.id, len(job.nodes_delivered or ()))
        self.membership.send_to([n for n in holders if n not in state.confirmed], message)

    def _start_dummy(self, job_id: bytes, now_ms: int) -> None:
        minutes = id_ttl_minutes(job_id) or 1
        dummy = self.dummies[job_id] = DummyAck(job_id, now_ms + minutes * 60_000)
        dummy.gc.confirmed.add(self.membership.name)
        self._dummy_round(dummy, now_ms)

    def _dummy_round(self, dummy: DummyAck, now_ms: int) -> None:
        self._schedule(dummy.gc, now_ms, self._dummies_due, dummy.id, dummy.etime_ms)
        if self.membership.size() == 1:
            del self.dummies[dummy.id]
            return
        message = SetAck(self.membership.header(), dummy.id, 0)
        unanswered = [n for n in self.membership.members() if n not in dummy.gc.confirmed]
        self.membership.send_to(unanswered, message)

    def _schedule(
        self,
        state: GcState,
        now_ms: int,
        due: list[tuple[int, bytes]],
        key: bytes,
        end_ms: int | None = None,
    ) -> None:
        """The next round after backoff, queued in `due` (by `end_ms` when sooner)."""
        period = min(GC_MIN_MS << min(state.retries, 16), GC_MAX_MS)
        state.retries += 1
        state.next_ms = now_ms + period + self.rand.randint(-GC_JITTER_MS, GC_JITTER_MS)
        self._queue(state, due, key, end_ms)

    @staticmethod
    def _queue(
        state: GcState, due: list[tuple[int, bytes]], key: bytes, end_ms: int | None
    ) -> None:
        at = state.next_ms if end_ms is None else min(state.next_ms, end_ms)
        # One live entry per state: a later round is found when the earlier entry pops.
        if state.queued_ms < 0 or at < state.queued_ms:
            heapq.heappush(due, (at, key))
            state.queued_ms = at

    def _release(self, job: Job, now_ms: int) -> None:
        self.collecting.pop(job.id, None)
        if job.state != DELETED:
            self.core.release_acked(job, now_ms)

    def tick(self, now_ms: int) -> None:
        """Retry the rounds that are due; forget what expired or went. Looks at what is
        due (the heaps) and at most SWEEP_PER_TICK other jobs, whatever the backlog."""
        self._sweep_gone()
        jobs, due = self.core.jobs, self._jobs_due
        while due and due[0][0] <= now_ms:
            at, job_id = heapq.heappop(due)
            state = self.collecting.get(job_id)
            if state is None or state.queued_ms != at:
                continue  # collected, gone, or queued again sooner
            state.queued_ms = -1
            job = jobs.get(job_id)
            if job is None or job.state != ACKED:
                del self.collecting[job_id]
            elif now_ms >= state.next_ms:
                self._gc(job, now_ms)
            else:  # put off by a round run since it was queued
                self._queue(state, due, job_id, None)
        due = self._dummies_due
        while due and due[0][0] <= now_ms:
            at, job_id = heapq.heappop(due)
            dummy = self.dummies.get(job_id)
            if dummy is None or dummy.gc.queued_ms != at:
                continue
            dummy.gc.queued_ms = -1
            if now_ms >= dummy.etime_ms:
                del self.dummies[job_id]
            elif now_ms >= dummy.gc.next_ms:
                self._dummy_round(dummy, now_ms)
            else:
                self._queue(dummy.gc, due, job_id, dummy.etime_ms)

    def _sweep_gone(self) -> None:
        """Drop from `collecting` the jobs that went (DELJOB, TTL) without being
        collected here: up to SWEEP_PER_TICK a tick, all of them when fewer."""
        if not self._sweep:
            if not self.collecting:
                return
            self._sweep = list(self.collecting)
        batch = self._sweep[-SWEEP_PER_TICK:]
        del self._sweep[-SWEEP_PER_TICK:]
        jobs, collecting = self.core.jobs, self.collecting
        for job_id in batch:
            job = jobs.get(job_id)
            if job is None or job.state != ACKED:
                collecting.pop(job_id, None)

    def pending(self) -> bool:
        return bool(self.collecting or self.dummies)

    # -- bus messages ---------------------------------------------------------------------
    def receive_setack(self, message: SetAck, now_ms: int) -> None:
        core = self.core
        sender = message.header.sender
        job = core.jobs.get(message.id)
        if job is not None:
            if job.state == WAIT_REPL:
                self.replication.achieved(job, now_ms, acked=True)
            if job.state != ACKED:
                core.ack([job.id], now_ms)
        elif message.id in self.dummies:
            # Another node holds a dummy ack for the same ID: neither knows the job.
            self._send(sender, GotAck(self.membership.header(), message.id, 0))
            return
        if job is None or job.state == DELETED:
            self._send(sender, GotAck(self.membership.header(), message.id, int(job is not None)))
            return
        if len(job.nodes_delivered or ()) <= message.may_have:
            self._send(sender, GotAck(self.membership.header(), message.id, 1))
            # The sender collects; should it die or its DELJOB be lost, our own rounds
            # start later (Disque retries the GC of every acked job it holds).
            if job.id not in self.collecting:
                state = self.collecting[job.id] = GcState({self.membership.name}, 1)
                self._schedule(state, now_ms, self._jobs_due, job.id)
            return
        if message.may_have == 0:
            self._send(sender, GotAck(self.membership.header(), message.id, 1))
        self._gc(job, now_ms)

    def receive_gotack(self, message: GotAck, now_ms: int) -> None:
        sender = message.header.sender
        dummy = self.dummies.get(message.id)
        if dummy is not None:
            if message.known:
                del self.dummies[message.id]  # the node that knows the job takes over
                return
            dummy.gc.confirmed.add(sender)
            # Nodes in handshake and the noaddr names of nodes back under a new name
            # never answer: counted, as in Disque, they kept every dummy to its TTL.
            if all(name in dummy.gc.confirmed for name in self.membership.members()):
                del self.dummies[message.id]  # nobody in the cluster knows this ID
            return
        job = self.core.jobs.get(message.id)
        if job is None or job.state != ACKED:
            return
        delivered = job.nodes_delivered or ()
        if not message.known and sender not in delivered:
            return
        if sender not in delivered:
            job.nodes_delivered = (*delivered, sender)
        state = self.collecting.get(job.id)
        if state is None:
            return
        state.confirmed.add(sender)
        holders = self._holders(job)
        if all(name in state.confirmed for name in holders):
            self.membership.send_to(
                [n for n in holders if n != self.membership.name],
                DelJob(self.membership.header(), job.id),
            )
            self._release(job, now_ms)

    # -- helpers --------------------------------------------------------------------------
    def _holders(self, job: Job) -> list[bytes]:
        me = self.membership.name
        return [me] if job.nodes_delivered is None else list(job.nodes_delivered)

    def _others(self) -> list[bytes]:
        me = self.membership.name
        return [name for name in self.membership.nodes if name != me]

    def _send(self, name: bytes, message: object) -> None:
        self.membership.actions.append(Send(name, message))  # type: ignore[arg-type]
