"""Queues: filing jobs, delivering them, NACK/ENQUEUE/DEQUEUE/WORKING, pause, queue GC
and scans (queue.c).

Owns `queues` and the scan cursors. A queue lives while it holds jobs, has clients
waiting or is paused; once none of that is true it is collected after
`queue_gc_idle_ms` without use. Every way a queue can become collectable arms that
collection (`_arm_queue_gc`), so no idle queue outlives its GC time.
"""

from __future__ import annotations

from conveyor.core import errors
from conveyor.core.effects import (
    EV_DEAD_LETTERED,
    EV_DELIVERED,
    EV_DEQUEUED,
    EV_NACKED,
    EV_QUEUED,
    EV_REQUEUED,
)
from conveyor.core.errors import CommandError
from conveyor.core.job import (
    ACKED,
    ACTIVE,
    DELIVERED,
    NACK_PENDING,
    QUEUED,
    QUEUED_ONCE,
    WILLQUEUE_SENT,
    Job,
)
from conveyor.core.queue import PAUSE_IN, PAUSE_NONE, PAUSE_OUT, JobQueue
from conveyor.core.state import JITTER_MS, CoreState


class QueueingMixin(CoreState):
    def queue_for(self, name: bytes, now_ms: int) -> JobQueue:
        queue = self.queues.get(name)
        if queue is None:
            queue = self.queues[name] = JobQueue(name, now_ms)
            self._arm_queue_gc(queue, now_ms)
        return queue

    # -- filing -----------------------------------------------------------------------------
    def _enqueue(self, job: Job, now_ms: int) -> bool:
        """Put an active job in its queue. Returns False when it can't be (re)queued."""
        if job.state != ACTIVE:
            return False
        flags = job.flags
        if flags & DELIVERED and job.retry == 0:
            return False  # at-most-once: delivered means gone for good
        if flags & NACK_PENDING:
            pass  # counted when the NACK came in
        elif flags & QUEUED_ONCE:
            job.additional_deliveries += 1
        job.flags = (flags | QUEUED_ONCE) & ~(NACK_PENDING | WILLQUEUE_SENT)
        requeue = bool(flags & QUEUED_ONCE)
        if requeue:
            self.requeued_jobs += 1
        config = self.config
        if (
            requeue
            and config.max_deliveries
            and job.nacks + job.additional_deliveries >= config.max_deliveries
            and config.deadletter_queue
            and job.queue != config.deadletter_queue
        ):
            self.dead_lettered_jobs += 1
            # Emitted with the queue the job leaves: the "requeued" below names the other.
            self._changed(EV_DEAD_LETTERED, job, now_ms)
            job.queue = config.deadletter_queue
        queue = self.queues.get(job.queue)
        if queue is None:
            queue = self.queue_for(job.queue, now_ms)
        queue.admit(job, now_ms)
        # A queued job never requeues, so only its expiry matters; refiling makes any
        # entry for an earlier requeue time stale.
        self.timers.file_job(job, job.etime, now_ms)
        if self.job_events is not None:
            self._changed(EV_REQUEUED if requeue else EV_QUEUED, job, now_ms)
        hooks = self.cluster_hooks
        if hooks is not None and requeue and _held_elsewhere(job):
            hooks.queued(job, bool(flags & NACK_PENDING), now_ms)
        if queue.blocked and not queue.pause & PAUSE_OUT:
            self._serve_waiters(queue, now_ms)
        elif job.queue in self.wanted_queues and hooks is not None:
            hooks.jobs_available(queue, now_ms)  # other nodes' consumers wait for it
        return True

    def _left_queue(self, job: Job, now_ms: int) -> None:
        """A job whose state was just moved off QUEUED is no longer in its queue."""
        queue = self.queues.get(job.queue)
        if queue is not None:
            queue.forget()
            if not queue.count:
                self._arm_queue_gc(queue, now_ms)

    def _deliver(self, job: Job, now_ms: int) -> None:
        """A job popped from its queue goes to a client."""
        job.state = ACTIVE
        job.flags |= DELIVERED
        self.delivered_jobs += 1
        retry = job.retry
        if retry:
            # The requeue clock starts at delivery (like a visibility timeout), not at the
            # last queueing as in Disque: a job that waited in a long queue must not be
            # re-delivered the moment a worker takes it.
            base = now_ms + retry * 1000
            job.qtime = qtime = base + self._jitter()
            # A requeue a minute or more away lands in a one-second timer bucket anyway:
            # filing every job of a burst at the end of the jitter window lets them share
            # one deadline (cheap to file), and tick() still requeues each at >= qtime.
            when = base + JITTER_MS if retry >= 60 else qtime
            self.timers.file_job(job, when if when < job.etime else job.etime, now_ms)
        else:
            self._amo_delivered[job.id] = job
        if self.job_events is not None:
            self._changed(EV_DELIVERED, job, now_ms)

    # -- GETJOB -----------------------------------------------------------------------------
    def get_jobs(self, queue_names: list[bytes], count: int, now_ms: int) -> list[Job]:
        """Take up to `count` jobs, one per non-empty queue per pass, in the given order."""
        queues = self.queues
        if len(queue_names) == 1:
            queue = queues.get(queue_names[0])
            if queue is None:
                # Like Disque, asking for a queue makes it exist (QSTAT shows who waits).
                self.queue_for(queue_names[0], now_ms)
                return []
            queue.atime_ms = now_ms
            if not queue.count or queue.pause & PAUSE_OUT:
                return []
            taken: list[Job] = []
            while len(taken) < count:
                job = queue.pop()
                if job is None:
                    break
                self._deliver(job, now_ms)
                taken.append(job)
            if not queue.count:
                self._arm_queue_gc(queue, now_ms)
                if queue.imports is not None and self.cluster_hooks is not None:
                    self.cluster_hooks.drained(queue, now_ms)
            return taken
        candidates: list[JobQueue] = []
        for name in queue_names:
            queue = queues.get(name)
            if queue is None:
                queue = self.queue_for(name, now_ms)
            queue.atime_ms = now_ms
            if queue.count and not queue.pause & PAUSE_OUT and queue not in candidates:
                candidates.append(queue)
        taken = []
        while candidates and len(taken) < count:
            for queue in list(candidates):
                job = queue.pop()
                if job is None:
                    candidates.remove(queue)
                    continue
                self._deliver(job, now_ms)
                taken.append(job)
                if not queue.count:
                    candidates.remove(queue)
                    if queue.imports is not None and self.cluster_hooks is not None:
                        self.cluster_hooks.drained(queue, now_ms)
                    self._arm_queue_gc(queue, now_ms)
                if len(taken) >= count:
                    break
        return taken

    # -- NACK, ENQUEUE, DEQUEUE, WORKING -----------------------------------------------------
    def nack(self, ids: list[bytes], now_ms: int, delay_s: int | None = None) -> int:
        moved = 0
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is None or job.state != ACTIVE:
                continue
            if job.flags & DELIVERED and job.retry == 0:
                continue
            # Counted now, so the "nacked" event shows it; the queueing (at once or after
            # DELAY) sees NACK_PENDING and does not count it again.
            job.nacks += 1
            self.nacked_jobs += 1
            job.flags |= NACK_PENDING
            self._changed(EV_NACKED, job, now_ms)
            if delay_s:
                job.flags |= QUEUED_ONCE
                job.qtime = now_ms + delay_s * 1000
                self.timers.file_job(job, job.awake_at(), now_ms)
                moved += 1
            elif self._enqueue(job, now_ms):
                moved += 1
        return moved

    def enqueue(self, ids: list[bytes], now_ms: int) -> int:
        moved = 0
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is not None and job.state == ACTIVE and self._enqueue(job, now_ms):
                moved += 1
        return moved

    def _dequeue(self, job: Job, now_ms: int) -> None:
        """Take a QUEUED job out of its queue, leaving it ACTIVE."""
        job.state = ACTIVE
        self._left_queue(job, now_ms)
        self._changed(EV_DEQUEUED, job, now_ms)

    def dequeue(self, ids: list[bytes], now_ms: int) -> int:
        moved = 0
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is not None and job.state == QUEUED:
                self._dequeue(job, now_ms)
                if job.retry:
                    # Out of the queue but not acknowledged: it comes back after RETRY.
                    job.qtime = now_ms + job.retry * 1000 + self._jitter()
                    self.timers.file_job(job, job.awake_at(), now_ms)
                moved += 1
        return moved

    def working(self, job_id: bytes, now_ms: int) -> int:
        job = self.jobs.get(job_id)
        if job is None or job.state == ACKED:
            raise CommandError(errors.NOJOB)
        ctime_ms = job.ctime_ms
        if now_ms - ctime_ms > (job.etime - ctime_ms) // 2:
            raise CommandError(errors.TOOLATE)
        if not job.retry:
            # Nothing to postpone for an at-most-once job, and taking a queued one out of
            # its queue would strand it until its TTL: nobody would ever queue it again.
            return 0
        if job.state == QUEUED:
            self._dequeue(job, now_ms)
        requeue_at = now_ms + job.retry * 1000 + self._jitter()
        if job.qtime > requeue_at and not job.flags & DELIVERED:
            requeue_at = job.qtime  # WORKING postpones; it never brings a DELAY forward
        job.qtime = requeue_at
        job.flags &= ~WILLQUEUE_SENT
        self.timers.file_job(job, job.awake_at(), now_ms)
        if self.cluster_hooks is not None and _held_elsewhere(job):
            self.cluster_hooks.working(job, now_ms)
        return job.retry

    def requeued_elsewhere(self, job: Job, dequeue: bool, now_ms: int) -> None:
        """Another holder queued the job (QUEUED) or a client works on it there
        (WORKING): take it out of our queue when `dequeue`, and wait a RETRY again."""
        if dequeue and job.state == QUEUED:
            self._dequeue(job, now_ms)
        if job.retry and job.state != QUEUED:
            job.flags &= ~WILLQUEUE_SENT
            job.qtime = now_ms + job.retry * 1000 + self._jitter()
            self.timers.file_job(job, job.awake_at(), now_ms)

    def enqueue_requested(self, job: Job, delay_s: int, now_ms: int) -> None:
        """ENQUEUE from the node that replicated the job here and kept no copy: queue it
        now or after `delay_s`, as this node's first queueing (not a requeue, so no
        QUEUED to the other holders). Ignored once queued or for a queue paused in."""
        if job.state != ACTIVE:
            return
        queue = self.queues.get(job.queue)
        if queue is not None and queue.pause & PAUSE_IN:
            return
        if not job.flags & DELIVERED:
            job.flags &= ~QUEUED_ONCE
        if delay_s:
            job.flags &= ~WILLQUEUE_SENT
            job.qtime = now_ms + delay_s * 1000
            self.timers.file_job(job, job.awake_at(), now_ms)
        else:
            self._enqueue(job, now_ms)

    def take_for_transfer(self, queue: JobQueue, count: int, now_ms: int) -> list[Job]:
        """Up to `count` queued jobs leave the queue for another node (YOURJOBS): active
        here, requeued after RETRY if that node never gets them delivered."""
        taken: list[Job] = []
        while len(taken) < count:
            job = queue.pop()
            if job is None:
                break
            job.state = ACTIVE
            self._changed(EV_DEQUEUED, job, now_ms)
            if job.retry:
                job.qtime = now_ms + job.retry * 1000 + self._jitter()
                self.timers.file_job(job, job.awake_at(), now_ms)
            taken.append(job)
        if not queue.count:
            self._arm_queue_gc(queue, now_ms)
        return taken

    def enqueue_moved(self, job: Job, now_ms: int) -> bool:
        """A job another node moved here (YOURJOBS): queued as a move, not a requeue (no
        counter, no QUEUED to the holders). False when it could not be queued."""
        if job.state != ACTIVE:
            return False
        job.flags &= ~QUEUED_ONCE
        return self._enqueue(job, now_ms)

    # -- queues -----------------------------------------------------------------------------
    def qlen(self, name: bytes) -> int:
        queue = self.queues.get(name)
        return queue.count if queue is not None else 0

    def qpeek(self, name: bytes, count: int) -> list[Job]:
        queue = self.queues.get(name)
        if queue is None or count == 0:
            return []
        peeked = []
        limit = abs(count)
        for job in queue.live_jobs(newest_first=count < 0):
            peeked.append(job)
            if len(peeked) >= limit:
                break
        return peeked

    def pause(self, name: bytes, flags: int | None, now_ms: int) -> int:
        """Set a queue's pause flags (None: only read them). Returns the new flags."""
        queue = self.queue_for(name, now_ms)
        if flags is None:
            return queue.pause
        was_out = queue.pause & PAUSE_OUT
        queue.pause = flags
        if was_out and not flags & PAUSE_OUT and queue.blocked:
            self._serve_waiters(queue, now_ms)
        if flags == PAUSE_NONE:
            self._arm_queue_gc(queue, now_ms)
        return flags

    def queue_gc_idle_ms(self) -> int:
        """How long an empty queue nobody uses is kept: `queue_gc_idle_ms` (300 s), but
        10 s above 75 % of maxmemory and 2 s above 95 %, as Disque does."""
        level = self.memory_warning()
        if level:
            return min(self.config.queue_gc_idle_ms, 2000 if level > 1 else 10_000)
        return self.config.queue_gc_idle_ms

    def collect_queues_sooner(self, now_ms: int) -> None:
        """Memory got short: collect idle queues at the shorter idle time from now on."""
        for queue in self.queues.values():
            if queue.is_collectable():
                queue.gc_armed = False  # the timer armed for later finds nothing to do
                self._arm_queue_gc(queue, now_ms)

    def _arm_queue_gc(self, queue: JobQueue, now_ms: int) -> None:
        if queue.gc_armed or not queue.is_collectable():
            return
        queue.gc_armed = True
        due = queue.atime_ms + self.queue_gc_idle_ms()
        self.timers.call_at(max(due, now_ms), self._queue_gc, queue)

    def _queue_gc(self, queue: JobQueue, now_ms: int) -> None:
        queue.gc_armed = False
        if self.queues.get(queue.name) is not queue or not queue.is_collectable():
            return  # whatever makes it collectable again arms a new collection
        if now_ms - queue.atime_ms >= self.queue_gc_idle_ms():
            del self.queues[queue.name]
        else:
            self._arm_queue_gc(queue, now_ms)


def _held_elsewhere(job: Job) -> bool:
    holders = job.nodes_delivered
    return holders is not None and len(holders) > 1
