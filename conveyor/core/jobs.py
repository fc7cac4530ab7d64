"""Jobs: creating, importing, expiring, deleting, evicting and freeing them (job.c).

Owns `jobs`, the ID generator, `jobs_bytes` and the at-most-once eviction list. Filing a
job in a queue is `queueing`'s business; this part only decides when to ask for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from conveyor.core import errors
from conveyor.core.args import AddJobArgs
from conveyor.core.codec import DISQUE_BCAST_QUEUED, DISQUE_DELIVERED
from conveyor.core.effects import (
    EV_ADDED,
    EV_ADDED_QUEUED,
    EV_DELETED,
    EV_EVICTED,
    EV_EXPIRED,
    EV_IMPORTED,
    EV_REPLICATED,
    WokenGetJob,
)
from conveyor.core.errors import CommandError
from conveyor.core.job import (
    ACTIVE,
    DELETED,
    DELIVERED,
    QUEUED,
    QUEUED_ONCE,
    WAIT_REPL,
    Job,
)
from conveyor.core.job_alloc import new_job
from conveyor.core.queue import PAUSE_IN
from conveyor.core.state import (
    DEFAULT_TTL_S,
    JOB_OVERHEAD_BYTES,
    MAX_DEFAULT_RETRY_S,
    CoreState,
)

if TYPE_CHECKING:
    from conveyor.core.codec import JobRecord


class JobsMixin(CoreState):
    # -- ADDJOB -------------------------------------------------------------------------
    def add_job(self, args: AddJobArgs, now_ms: int) -> Job:
        """A new job from a client (REPLICATE None counts as 1 here)."""
        ttl_s, retry_s = self.job_times(args)
        return self.add_checked(args, ttl_s, retry_s, now_ms)

    def job_times(self, args: AddJobArgs) -> tuple[int, int]:
        """(TTL, RETRY) in seconds, or Disque's error for options that can't go together."""
        ttl_s = DEFAULT_TTL_S if args.ttl_s is None else args.ttl_s
        retry_s = args.retry_s
        if (args.repl or 1) > 1 and retry_s == 0:
            raise CommandError(errors.RETRY0_REPLICATE)
        if args.delay_s >= ttl_s:
            raise CommandError(errors.DELAY_TOO_LONG)
        if retry_s is None:
            retry_s = min(ttl_s // 10, MAX_DEFAULT_RETRY_S) or 1
        return ttl_s, retry_s

    def add_checked(
        self, args: AddJobArgs, ttl_s: int, retry_s: int, now_ms: int, wait_repl: bool = False
    ) -> Job:
        """The job of an ADDJOB whose options passed their checks (job_times, and in a
        cluster NodeCore.check_add); the queue's MAXLEN and PAUSE are checked here."""
        queue = self.queues.get(args.queue)
        if args.maxlen is not None and queue is not None and queue.count >= args.maxlen:
            raise CommandError(errors.MAXLEN)
        if queue is not None and queue.pause & PAUSE_IN:
            raise CommandError(errors.PAUSED)

        job = self._register(
            self._ids.next_id(ttl_s, retry_s),
            # The queue's own name, not the request's copy: 48 bytes a job at a million.
            args.queue if queue is None else queue.name,
            args.body,
            args.repl or 1,
            ttl_s,
            args.delay_s,
            retry_s,
            now_ms,
        )
        if wait_repl:
            # Held, not queued, until enough nodes confirmed their copy (`replicated`);
            # only its TTL can end it meanwhile.
            job.state = WAIT_REPL
            if self.job_events is not None:  # _changed, without its call when nobody reads
                self._changed(EV_ADDED, job, now_ms)
            self.timers.file_job(job, job.etime, now_ms)
            return job
        if self.job_events is not None:  # _changed, without its call when nobody reads
            self._changed(EV_ADDED, job, now_ms)
        self._schedule_first_queueing(job, now_ms)
        return job

    def _schedule_first_queueing(self, job: Job, now_ms: int) -> None:
        if job.delay:
            job.qtime = now_ms + job.delay * 1000
            self.timers.file_job(job, job.qtime, now_ms)
            return
        if not job.flags and job.state == ACTIVE and self.job_events is None:
            # What _enqueue does for a first queueing that no client waits for and no
            # other node asked for, without its call and its rules for requeues: every
            # job a producer adds in a cluster comes here (tens of thousands a second).
            queue = self.queues.get(job.queue)
            if queue is not None and not queue.blocked and job.queue not in self.wanted_queues:
                job.flags = QUEUED_ONCE
                queue.admit(job, now_ms)
                self.timers.file_job(job, job.etime, now_ms)
                return
        self._enqueue(job, now_ms)

    def replicated(self, job: Job, now_ms: int) -> None:
        """A job held in wait-repl reached its replication level: active, and queued now
        or after its DELAY (counted from now, as Disque does)."""
        job.state = ACTIVE
        if self.job_events is not None:  # _changed, without its call when nobody reads
            self._changed(EV_REPLICATED, job, now_ms)
        self._schedule_first_queueing(job, now_ms)

    def add_default_job(self, queue_name: bytes, body: bytes, now_ms: int) -> Job:
        """ADDJOB with no options: the producer hot path, same outcome as add_job."""
        queue = self.queues.get(queue_name)
        if queue is None or queue.blocked or queue.pause or not self._fast_adds:
            args = AddJobArgs(queue_name, body, None, 0, None, None, None, False)
            return self.add_job(args, now_ms)
        queue_name = queue.name  # shared by its jobs: the request's copy is freed
        job = self._register(
            self._ids.next_id(DEFAULT_TTL_S, MAX_DEFAULT_RETRY_S),
            queue_name,
            body,
            1,
            DEFAULT_TTL_S,
            0,
            MAX_DEFAULT_RETRY_S,
            now_ms,
        )
        # What _enqueue does for a first queueing that nobody waits for: no counters,
        # no dead-letter rule, no waiters to serve (ruled out above).
        job.flags = QUEUED_ONCE
        queue.admit(job, now_ms)
        self.timers.file_job(job, job.etime, now_ms)
        events = self.job_events
        if events is not None:
            events.append((EV_ADDED_QUEUED, job, now_ms, queue_name, QUEUED, 0, 0))
        return job

    def _register(
        self,
        job_id: bytes,
        queue_name: bytes,
        body: bytes,
        repl: int,
        ttl_s: int,
        delay_s: int,
        retry_s: int,
        now_ms: int,
    ) -> Job:
        """A new job, known to the node (ACTIVE) but not yet queued or filed in a timer."""
        ctime = now_ms * 1_000_000
        if ctime <= self._last_ctime:
            ctime = self._last_ctime + 1  # jobs of the same ms keep their order
        self._last_ctime = ctime
        job = new_job(
            job_id, queue_name, body, repl, ctime, now_ms + ttl_s * 1000, delay_s, retry_s
        )
        self.jobs[job_id] = job
        self.jobs_bytes += JOB_OVERHEAD_BYTES + len(body)
        return job

    # -- import (AOF LOADJOB, the bus's REPLJOB/YOURJOBS) -----------------------------------
    def import_job(
        self,
        record: JobRecord,
        now_ms: int,
        *,
        etime_relative: bool = False,
        enqueue: bool = False,
        holders: tuple[bytes, ...] | None = None,
    ) -> Job | None:
        """Take in a job that exists elsewhere, keeping its ID, ctime, TTL and counters.

        The copy comes back ACTIVE, to be queued after DELAY + RETRY from now (what a
        Disque node does after loading its AOF or receiving a replica), unless `enqueue`
        asks to queue a job the record shows queued at once (aof-enqueue-jobs-once).
        At-most-once jobs are never queued again. Returns None for an expired record;
        a job already known is left as it is. `holders`: the nodes that hold it, when the
        caller knows them (a copy on the bus); else the record's nodes this node knows.
        """
        # One unpack rather than a named field read for each (every copy received).
        (job_id, state, _, flags, repl, etime, ctime, delay, retry, nacks, deliveries,
         queue_name, body, nodes) = record  # fmt: skip
        known = self.jobs.get(job_id)
        if known is not None:
            return known
        # On the bus etime is "seconds left + 1"; in the AOF an absolute unix time.
        etime_ms = now_ms + (etime - 1) * 1000 if etime_relative else etime * 1000
        if etime_ms <= now_ms:
            return None
        queue = self.queues.get(queue_name)
        job = new_job(
            job_id,
            queue_name if queue is None else queue.name,  # shared, as in add_checked
            body,
            repl,
            ctime,
            etime_ms,
            delay,
            retry,
        )
        if nacks or deliveries:  # a new job's copy has none: Job() starts at 0
            job.nacks = nacks
            job.additional_deliveries = deliveries
        if flags:  # nor flags
            job.flags = (QUEUED_ONCE if flags & DISQUE_BCAST_QUEUED else 0) | (
                DELIVERED if flags & DISQUE_DELIVERED else 0
            )
        job.nodes_delivered = self._known_nodes(nodes) if holders is None else holders
        # Nobody has confirmed holding this copy since it came back (Disque: empty).
        job.nodes_confirmed = ()
        self.jobs[job_id] = job
        self.jobs_bytes += JOB_OVERHEAD_BYTES + len(body)
        if ctime > self._last_ctime:
            self._last_ctime = ctime
        if self.job_events is not None:  # _changed, without its call when nobody reads
            self._changed(EV_IMPORTED, job, now_ms)
        if not retry:
            if job.flags & DELIVERED:
                self._amo_delivered[job_id] = job
        elif enqueue and state == QUEUED:
            self._enqueue(job, now_ms)
        else:
            job.qtime = now_ms + (delay + retry) * 1000 + self._jitter()
        if job.state == ACTIVE:
            self.timers.file_job(job, job.awake_at(), now_ms)
        return job

    def _known_nodes(self, nodes: tuple[bytes, ...]) -> tuple[bytes, ...] | None:
        # Names this node does not know are dropped, as Disque does: the cluster's
        # filter knows its nodes; a cluster of one knows only itself.
        if self.cluster_hooks is not None:
            known = self.cluster_hooks.known_nodes(nodes)
            if len(known) > 1:
                return known
        if self.node_name in nodes:
            return None
        return ()

    # -- freeing ----------------------------------------------------------------------------
    def _free(self, job: Job, now_ms: int, event: str) -> None:
        """Forget a job for good; `event` says why (released, expired, deleted, evicted)."""
        # Out of its timer bucket first: else the bucket would keep the job, body and
        # all, until its expiry or requeue time came (a day, at the default TTL).
        self.timers.unfile(job)
        was_queued = job.state == QUEUED
        job.state = DELETED
        if was_queued:
            self._left_queue(job, now_ms)
        del self.jobs[job.id]
        if not job.retry:
            self._amo_delivered.pop(job.id, None)
        self.jobs_bytes -= JOB_OVERHEAD_BYTES + len(job.body)
        self._changed(event, job, now_ms)

    def del_jobs(self, ids: list[bytes], now_ms: int) -> int:
        deleted = 0
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is not None:
                deleted += 1
                self._free(job, now_ms, EV_DELETED)
        return deleted

    def expire(self, job: Job, now_ms: int) -> None:
        self.expired_jobs += 1
        self._free(job, now_ms, EV_EXPIRED)

    def evict(self, bytes_to_free: int, now_ms: int) -> int:
        """Free delivered at-most-once jobs, oldest first. Returns the bytes freed."""
        freed = 0
        amo = self._amo_delivered
        while amo and freed < bytes_to_free:
            _, job = amo.popitem(last=False)
            freed += JOB_OVERHEAD_BYTES + len(job.body)
            self.evicted_jobs += 1
            self._free(job, now_ms, EV_EVICTED)
        return freed

    def flush_all(self, now_ms: int) -> None:
        """Drop every job and queue; blocked clients are answered with nothing."""
        for queue in self.queues.values():
            # unblock() edits the deques it walks, hence the copies.
            for waiter in list(queue.waiters):
                if not waiter.done:
                    self.unblock(waiter, now_ms)
                    self.replies.append(WokenGetJob(waiter, None))
        for job in self.jobs.values():
            job.state = DELETED
            # Every job ends with an event, even when an operator drops them all.
            self._changed(EV_DELETED, job, now_ms)
        self.jobs.clear()
        self.queues.clear()
        self._amo_delivered.clear()
        self.timers.clear()
        self._scans.clear()
        self._scan_gc_timer = None  # it went with the other timers
        self.jobs_bytes = 0
