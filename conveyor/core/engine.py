"""The node's job state machine: jobs, queues, blocked clients and their timers.

Sans-IO: every method takes the current time in ms; randomness comes from the
`random.Random` passed in; nothing here reads a clock, sleeps or touches a socket.
What the driver must do afterwards is left in `wakeups` (blocked clients to answer)
and `next_deadline()` (when to call `tick` again).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from conveyor.core import errors
from conveyor.core.errors import CommandError
from conveyor.core.job import (
    ACKED,
    ACTIVE,
    DELETED,
    DELIVERED,
    NACK_PENDING,
    QUEUED,
    QUEUED_ONCE,
    Job,
)
from conveyor.core.jobid import JobIdGenerator
from conveyor.core.queue import PAUSE_IN, PAUSE_NONE, PAUSE_OUT, JobQueue
from conveyor.core.scan import ScanCursors
from conveyor.core.timers import Timers
from conveyor.core.waiters import Waiter

DEFAULT_TTL_S = 86400
MAX_DEFAULT_RETRY_S = 300
# Requeue times get +-250 ms of jitter, as in Disque, so copies on several nodes
# (once there is a cluster) do not requeue in lockstep.
JITTER_MS = 250
QUEUE_GC_IDLE_MS = 300_000
# Estimated bytes a job costs beyond its body: the Job object, its ID, the ints it holds,
# its entries in the jobs dict, its queue and its timer bucket (measured with
# tracemalloc on CPython 3.11; see tests/core/test_memory_estimate.py).
JOB_OVERHEAD_BYTES = 420
QUEUE_OVERHEAD_BYTES = 900

# Listener events, in a job's life order. Every entry into a queue gives "queued" (the
# first) or "requeued" (any later one, a dead-letter move included: "dead-lettered",
# carrying the queue the job leaves, comes just before it); every way a job is freed
# gives exactly one of acked, expired, deleted or evicted. The job's counters are already
# updated when an event is emitted (a "nacked" job counts that NACK).
EV_ADDED = "added"
EV_QUEUED = "queued"
EV_DELIVERED = "delivered"
EV_ACKED = "acked"
EV_NACKED = "nacked"
EV_REQUEUED = "requeued"
EV_EXPIRED = "expired"
EV_DELETED = "deleted"
EV_DEAD_LETTERED = "dead-lettered"
EV_EVICTED = "evicted"

Listener = Callable[[str, Job, int], None]
AddedQueuedListener = Callable[[Job, int], None]
Wakeup = tuple[Waiter, list[Job] | None]


@dataclass(slots=True)
class EngineConfig:
    max_deliveries: int = 0  # 0 disables the dead-letter rule
    deadletter_queue: bytes = b""
    queue_gc_idle_ms: int = QUEUE_GC_IDLE_MS


@dataclass(slots=True)
class AddJobArgs:
    queue: bytes
    body: bytes
    repl: int
    delay_s: int
    retry_s: int | None  # None: derive from the TTL
    ttl_s: int | None  # None: the default TTL
    maxlen: int | None
    asynchronous: bool


class Engine:
    def __init__(
        self,
        node_id: str,
        seed: bytes,
        rand: random.Random,
        config: EngineConfig | None = None,
        timer_resolution_ms: int = 10,
    ) -> None:
        self.node_id = node_id
        self.config = config or EngineConfig()
        self._ids = JobIdGenerator(node_id, seed)
        self._default_id_suffix = self._ids.suffix_for(DEFAULT_TTL_S, MAX_DEFAULT_RETRY_S)
        self._rand = rand
        self.jobs: dict[bytes, Job] = {}
        self.queues: dict[bytes, JobQueue] = {}
        self.timers = Timers(timer_resolution_ms)
        self._scans = ScanCursors()
        self._last_ctime = 0
        # Delivered at-most-once jobs, oldest first: the first thing evicted under memory
        # pressure, since nobody can get them again anyway.
        self._amo_delivered: OrderedDict[bytes, Job] = OrderedDict()
        self.wakeups: list[Wakeup] = []
        self.listener: Listener | None = None
        # Optional: ADDJOB's hot path calls it once, after queueing, instead of
        # listener(EV_ADDED) + listener(EV_QUEUED): the same two events for one call,
        # which is what keeps the job-event log cheap on producers.
        self.added_queued_listener: AddedQueuedListener | None = None
        self.leaving = False
        self.cluster_size = 1
        self.reachable_nodes = 0
        self.jobs_bytes = 0  # estimate of the memory held by jobs (see JOB_OVERHEAD_BYTES)
        self.blocked_clients = 0
        # stats
        self.expired_jobs = 0
        self.evicted_jobs = 0
        self.dead_lettered_jobs = 0

    def set_node_id(self, node_id: str) -> None:
        """A new identity (CLUSTER RESET HARD): later job IDs carry the new prefix."""
        self.node_id = node_id
        self._ids = JobIdGenerator(node_id, self._ids.seed)

    # -- helpers ------------------------------------------------------------------------
    def _emit(self, event: str, job: Job, now_ms: int) -> None:
        listener = self.listener
        if listener is not None:
            listener(event, job, now_ms)

    def _jitter(self) -> int:
        return int(self._rand.random() * 2 * JITTER_MS) - JITTER_MS

    def queue_for(self, name: bytes, now_ms: int) -> JobQueue:
        queue = self.queues.get(name)
        if queue is None:
            queue = self.queues[name] = JobQueue(name, now_ms)
            self._arm_queue_gc(queue, now_ms)
        return queue

    def memory_estimate(self) -> int:
        return self.jobs_bytes + len(self.queues) * QUEUE_OVERHEAD_BYTES

    # -- ADDJOB -------------------------------------------------------------------------
    def add_job(self, args: AddJobArgs, now_ms: int) -> Job:
        ttl_s = DEFAULT_TTL_S if args.ttl_s is None else args.ttl_s
        retry_s = args.retry_s
        if args.repl > 1 and retry_s == 0:
            raise CommandError(errors.RETRY0_REPLICATE)
        if args.delay_s >= ttl_s:
            raise CommandError(errors.DELAY_TOO_LONG)
        if retry_s is None:
            retry_s = min(ttl_s // 10, MAX_DEFAULT_RETRY_S) or 1
        if self.leaving:
            # A leaving node keeps no new copies; with nobody else to hold one, refuse.
            if args.repl > self.reachable_nodes:
                raise CommandError(errors.NOREPL_LEAVING)
        elif args.repl - 1 > self.reachable_nodes:
            raise CommandError(errors.NOREPL_LEVEL)
        queue = self.queues.get(args.queue)
        if args.maxlen is not None and queue is not None and queue.count >= args.maxlen:
            raise CommandError(errors.MAXLEN)
        if queue is not None and queue.pause & PAUSE_IN:
            raise CommandError(errors.PAUSED)

        job = self._register(
            self._ids.next_id(ttl_s, retry_s),
            args.queue,
            args.body,
            args.repl,
            ttl_s,
            args.delay_s,
            retry_s,
            now_ms,
        )
        self._emit(EV_ADDED, job, now_ms)
        if args.delay_s:
            job.qtime = now_ms + args.delay_s * 1000
            self.timers.file_job(job, job.qtime, now_ms)
        else:
            self._enqueue(job, now_ms)
        return job

    def add_default_job(self, queue_name: bytes, body: bytes, now_ms: int) -> Job:
        """ADDJOB with no options: the producer hot path, same outcome as add_job."""
        queue = self.queues.get(queue_name)
        if queue is None or queue.blocked or queue.pause or self.leaving or self.cluster_size > 1:
            repl = min(self.cluster_size, 3)
            args = AddJobArgs(queue_name, body, repl, 0, None, None, None, False)
            return self.add_job(args, now_ms)
        job = self._register(
            self._ids.next_id_with_suffix(self._default_id_suffix),
            queue_name,
            body,
            1,
            DEFAULT_TTL_S,
            0,
            MAX_DEFAULT_RETRY_S,
            now_ms,
        )
        listener = self.listener
        added_queued = self.added_queued_listener
        if listener is not None and added_queued is None:
            listener(EV_ADDED, job, now_ms)
        # What _enqueue does for a first queueing that nobody waits for: no counters,
        # no dead-letter rule, no waiters to serve (ruled out above).
        job.state = QUEUED
        job.flags = QUEUED_ONCE
        queue.push(job)
        queue.atime_ms = now_ms
        self.timers.file_job(job, job.etime, now_ms)
        if added_queued is not None:
            added_queued(job, now_ms)
        elif listener is not None:
            listener(EV_QUEUED, job, now_ms)
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
        job = Job(job_id, queue_name, body, repl, ctime, now_ms + ttl_s * 1000, delay_s, retry_s)
        self.jobs[job_id] = job
        self.jobs_bytes += JOB_OVERHEAD_BYTES + len(body)
        return job

    # -- queueing -----------------------------------------------------------------------
    def _enqueue(self, job: Job, now_ms: int) -> bool:
        """Put an active job in its queue. Returns False when it can't be (re)queued."""
        if job.state == QUEUED:
            return False
        flags = job.flags
        if flags & DELIVERED and job.retry == 0:
            return False  # at-most-once: delivered means gone for good
        if flags & NACK_PENDING:
            pass  # counted when the NACK came in
        elif flags & QUEUED_ONCE:
            job.additional_deliveries += 1
        job.flags = (flags | QUEUED_ONCE) & ~NACK_PENDING
        requeue = bool(flags & QUEUED_ONCE)
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
            self._emit(EV_DEAD_LETTERED, job, now_ms)
            job.queue = config.deadletter_queue
        job.state = QUEUED
        job.qtime = 0
        queue = self.queues.get(job.queue)
        if queue is None:
            queue = self.queue_for(job.queue, now_ms)
        queue.push(job)
        queue.atime_ms = now_ms
        # A queued job never requeues, so only its expiry matters; refiling makes any
        # entry for an earlier requeue time stale.
        self.timers.file_job(job, job.etime, now_ms)
        listener = self.listener
        if listener is not None:
            listener(EV_REQUEUED if requeue else EV_QUEUED, job, now_ms)
        if queue.blocked and not queue.pause & PAUSE_OUT:
            self._serve_waiters(queue, now_ms)
        return True

    def _unqueue(self, job: Job) -> None:
        """Take a QUEUED job out of its queue, leaving it ACTIVE."""
        job.state = ACTIVE
        queue = self.queues.get(job.queue)
        if queue is not None:
            queue.forget()

    def _deliver(self, job: Job, queue: JobQueue, now_ms: int) -> None:
        """A job popped from its queue goes to a client."""
        job.state = ACTIVE
        job.flags |= DELIVERED
        retry = job.retry
        if retry:
            # The requeue clock starts at delivery (like a visibility timeout), not at the
            # last queueing as in Disque: a job that waited in a long queue must not be
            # re-delivered the moment a worker takes it.
            base = now_ms + retry * 1000
            qtime = base + int(self._rand.random() * 2 * JITTER_MS) - JITTER_MS
            job.qtime = qtime
            # A requeue a minute or more away lands in a one-second timer bucket anyway:
            # filing every job of a burst at the end of the jitter window lets them share
            # one deadline (cheap to file), and tick() still requeues each at >= qtime.
            when = base + JITTER_MS if retry >= 60 else qtime
            self.timers.file_job(job, when if when < job.etime else job.etime, now_ms)
        else:
            self._amo_delivered[job.id] = job
        listener = self.listener
        if listener is not None:
            listener(EV_DELIVERED, job, now_ms)

    # -- GETJOB -------------------------------------------------------------------------
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
                self._deliver(job, queue, now_ms)
                taken.append(job)
            if not queue.count:
                self._arm_queue_gc(queue, now_ms)
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
                self._deliver(job, queue, now_ms)
                taken.append(job)
                if not queue.count:
                    candidates.remove(queue)
                    self._arm_queue_gc(queue, now_ms)
                if len(taken) >= count:
                    break
        return taken

    def block(self, waiter: Waiter, now_ms: int) -> None:
        """Register a client that found nothing; it is answered through `wakeups`."""
        for name in waiter.queues:
            queue = self.queue_for(name, now_ms)
            queue.waiters.append(waiter)
            queue.blocked += 1
        self.blocked_clients += 1
        if waiter.deadline_ms:
            self.timers.call_at(waiter.deadline_ms, self._waiter_timeout, waiter)

    def unblock(self, waiter: Waiter) -> None:
        """The client went away (or was answered): forget it."""
        if waiter.done:
            return
        waiter.done = True
        self.blocked_clients -= 1
        for name in waiter.queues:
            queue = self.queues.get(name)
            if queue is not None:
                queue.blocked -= 1
                # Purge answered waiters from the front so the deque does not grow.
                waiters = queue.waiters
                while waiters and waiters[0].done:
                    waiters.popleft()

    def _waiter_timeout(self, waiter: Waiter, now_ms: int) -> None:
        if not waiter.done:
            self.unblock(waiter)
            self.wakeups.append((waiter, None))

    def _serve_waiters(self, queue: JobQueue, now_ms: int) -> None:
        # Arrival order: the oldest waiter on this queue is served first.
        while queue.count and queue.blocked:
            waiters = queue.waiters
            waiter = waiters.popleft()
            if waiter.done:
                continue
            self.unblock(waiter)
            jobs = self.get_jobs(waiter.queues, waiter.count, now_ms)
            self.wakeups.append((waiter, jobs))

    def take_wakeups(self) -> list[Wakeup]:
        wakeups = self.wakeups
        self.wakeups = []
        return wakeups

    # -- acknowledgements and state changes -----------------------------------------------
    def _free(self, job: Job, now_ms: int, event: str) -> None:
        was_queued = job.state == QUEUED
        if was_queued:
            self._unqueue(job)
        job.state = DELETED
        del self.jobs[job.id]
        if not job.retry:
            self._amo_delivered.pop(job.id, None)
        self.jobs_bytes -= JOB_OVERHEAD_BYTES + len(job.body)
        listener = self.listener
        if listener is not None:
            listener(event, job, now_ms)
        if was_queued:
            # Only leaving the queue can make it collectable; freeing a delivered job
            # changes nothing the queue's garbage collection looks at.
            queue = self.queues.get(job.queue)
            if queue is not None and not queue.count:
                self._arm_queue_gc(queue, now_ms)

    def ack(self, ids: list[bytes], now_ms: int) -> int:
        # On one node nobody else can hold a copy, so an ACK frees the job at once; the
        # cluster will keep ACKED jobs until their garbage collection completes.
        acked = 0
        jobs = self.jobs
        for job_id in ids:
            job = jobs.get(job_id)
            if job is not None and job.state != ACKED:
                acked += 1
                self._free(job, now_ms, EV_ACKED)
        return acked

    def fast_ack(self, ids: list[bytes], now_ms: int) -> int:
        freed = 0
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is not None:
                freed += 1
                self._free(job, now_ms, EV_ACKED)
        return freed

    def del_jobs(self, ids: list[bytes], now_ms: int) -> int:
        deleted = 0
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is not None:
                deleted += 1
                self._free(job, now_ms, EV_DELETED)
        return deleted

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
            self._unqueue(job)
        requeue_at = now_ms + job.retry * 1000 + self._jitter()
        if job.qtime > requeue_at and not job.flags & DELIVERED:
            requeue_at = job.qtime  # WORKING postpones; it never brings a DELAY forward
        job.qtime = requeue_at
        self.timers.file_job(job, job.awake_at(), now_ms)
        return job.retry

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
            job.flags |= NACK_PENDING
            self._emit(EV_NACKED, job, now_ms)
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

    def dequeue(self, ids: list[bytes], now_ms: int) -> int:
        moved = 0
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is not None and job.state == QUEUED:
                self._unqueue(job)
                if job.retry:
                    # Out of the queue but not acknowledged: it comes back after RETRY.
                    job.qtime = now_ms + job.retry * 1000 + self._jitter()
                    self.timers.file_job(job, job.awake_at(), now_ms)
                moved += 1
        return moved

    # -- queues -------------------------------------------------------------------------
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

    def _arm_queue_gc(self, queue: JobQueue, now_ms: int) -> None:
        if queue.gc_armed or not queue.is_collectable():
            return
        queue.gc_armed = True
        due = queue.atime_ms + self.config.queue_gc_idle_ms
        self.timers.call_at(max(due, now_ms), self._queue_gc, queue)

    def _queue_gc(self, queue: JobQueue, now_ms: int) -> None:
        queue.gc_armed = False
        if self.queues.get(queue.name) is not queue or not queue.is_collectable():
            return
        if now_ms - queue.atime_ms >= self.config.queue_gc_idle_ms:
            del self.queues[queue.name]
        else:
            self._arm_queue_gc(queue, now_ms)

    def scan_queues(
        self, cursor: int, count: int, busyloop: bool, accept: Callable[[JobQueue], bool]
    ) -> tuple[int, list[bytes]]:
        queues = self.queues

        def accept_name(name: bytes) -> bool:
            queue = queues.get(name)
            return queue is not None and accept(queue)

        return self._scans.scan(
            cursor, queues.keys, accept_name, count, None if busyloop else count * 10
        )

    def scan_jobs(
        self, cursor: int, count: int, busyloop: bool, accept: Callable[[Job], bool]
    ) -> tuple[int, list[bytes]]:
        jobs = self.jobs

        def accept_id(job_id: bytes) -> bool:
            job = jobs.get(job_id)
            return job is not None and accept(job)

        return self._scans.scan(
            cursor, jobs.keys, accept_id, count, None if busyloop else count * 10
        )

    # -- time ---------------------------------------------------------------------------
    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def tick(self, now_ms: int) -> None:
        """Run everything that is due at now_ms."""
        for job in self.timers.due_jobs(now_ms):
            if job.state == DELETED:
                continue
            if now_ms >= job.etime:
                self.expired_jobs += 1
                self._free(job, now_ms, EV_EXPIRED)
                continue
            if job.state == ACTIVE and job.qtime and now_ms >= job.qtime:
                queue = self.queues.get(job.queue)
                if queue is not None and queue.pause & PAUSE_IN:
                    job.qtime = now_ms + max(job.retry, 1) * 1000
                else:
                    self._enqueue(job, now_ms)
            if job.state != DELETED and job.awake == 0:
                self.timers.file_job(job, job.awake_at(), now_ms)
        for callback, arg in self.timers.due_calls(now_ms):
            callback(arg, now_ms)

    # -- memory -------------------------------------------------------------------------
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
        """Drop every job and queue; blocked clients are answered with nothing (wakeups)."""
        for queue in self.queues.values():
            # unblock() trims the deques it walks, hence the copies.
            for waiter in list(queue.waiters):
                if not waiter.done:
                    self.unblock(waiter)
                    self.wakeups.append((waiter, None))
        listener = self.listener
        for job in self.jobs.values():
            job.state = DELETED
            if listener is not None:
                # Every job ends with an event, even when an operator drops them all.
                listener(EV_DELETED, job, now_ms)
        self.jobs.clear()
        self.queues.clear()
        self._amo_delivered.clear()
        self.timers.clear()
        self._scans.clear()
        self.jobs_bytes = 0
