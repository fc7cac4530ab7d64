"""Runs of jobs taken in one call, each job ending as the one-job path of jobs.py leaves it.

A producer's run of ADDJOBs (`add_run`), the copies a batch of GOTJOBs confirmed
(`replicated_run`) and the copies of one REPLJOB (`import_copies`) share their conditions:
one queue, one set of options, one set of holders. Checked once for the run, they save a
handful of Python calls a job, which at tens of thousands of jobs a second is most of
what is left to save in an interpreted node (docs/performance.md). When anything is
unusual for a job, it takes the one-job path (or the run is declined before anything
changed): these are shortcuts, not rules of their own, and tests/core/test_add_run.py and
tests/cluster/test_take_copies.py hold each to the one-job path on nodes made alike.

Owns no state: `jobs` and the ID generator are jobs.py's, the queues queue.py's, the
timers timers.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from conveyor.core.args import AddJobArgs
from conveyor.core.codec import DISQUE_DELIVERED
from conveyor.core.job import (
    QUEUED,
    QUEUED_ONCE,
    WAIT_REPL,
    WILLQUEUE_ADVANCE_MS,
    Job,
)
from conveyor.core.job_alloc import new_copies, new_jobs
from conveyor.core.queue import PAUSE_IN
from conveyor.core.state import JITTER_MS, JOB_OVERHEAD_BYTES, CoreState

if TYPE_CHECKING:
    from conveyor.core.codec import JobRecord


class JobRunsMixin(CoreState):
    # -- a run of ADDJOBs --------------------------------------------------------------------
    def add_run(
        self,
        args: AddJobArgs,
        bodies: list[bytes],
        ttl_s: int,
        retry_s: int,
        now_ms: int,
        wait_repl: bool,
    ) -> list[Job] | None:
        """add_checked for a job of each of `bodies`, in their order, in one call (a run
        of ADDJOBs: node/addjob_runs.py), when none can be refused and none needs more than
        `_register` and the filing after it: a queue that exists, no MAXLEN given, not
        paused for input, no DELAY, nobody reading job events and, when the jobs are
        queued at once, nobody waiting on the queue and no other node asking for it.
        Else None, having added nothing. Each job ends as add_checked would leave it
        (tests/core/test_add_run.py)."""
        if not bodies:
            return []
        queue = self.queues.get(args.queue)
        if (
            queue is None
            or args.maxlen is not None
            or queue.pause & PAUSE_IN
            or args.delay_s
            or self.job_events is not None
            or (not wait_repl and (queue.blocked or queue.name in self.wanted_queues))
        ):
            return None
        ctime = now_ms * 1_000_000
        if ctime <= self._last_ctime:
            ctime = self._last_ctime + 1  # jobs of the same ms keep their order
        name, repl, etime = queue.name, args.repl or 1, now_ms + ttl_s * 1000
        state, flags = (WAIT_REPL, 0) if wait_repl else (QUEUED, QUEUED_ONCE)
        ids = self._ids.next_ids(ttl_s, retry_s, len(bodies))
        jobs = new_jobs(ids, name, bodies, repl, ctime, etime, 0, retry_s, state, flags, self.jobs)
        self._last_ctime = ctime + len(jobs) - 1
        self.jobs_bytes += JOB_OVERHEAD_BYTES * len(jobs) + sum(map(len, bodies))
        if not wait_repl:
            queue.admit_new(jobs, now_ms)
        self.timers.file_new_jobs(jobs, etime, now_ms)
        return jobs

    # -- a batch of confirmations ------------------------------------------------------------
    def replicated_run(self, jobs: list[Job], now_ms: int) -> None:
        """replicated for each of `jobs`, in their order (the copies a batch of GOTJOBs
        confirmed), in one call when all are fresh jobs without DELAY for one queue that
        exists and nobody waits on, in creation-time order, with nobody reading job
        events and no other node asking for the queue: the short way of
        `_schedule_first_queueing` for them all (tests/core/test_add_run.py)."""
        if not jobs:
            return
        name = jobs[0].queue
        queue = self.queues.get(name)
        short = not (
            self.job_events is not None
            or queue is None
            or queue.blocked
            or name in self.wanted_queues
        )
        ctime = -1
        for job in jobs if short else ():
            if job.queue != name or job.delay or job.flags or job.ctime <= ctime:
                short = False
                break
            ctime = job.ctime
        if not short:
            for job in jobs:
                self.replicated(job, now_ms)
            return
        for job in jobs:
            job.state = QUEUED
            job.flags = QUEUED_ONCE
        queue.admit_new(jobs, now_ms)  # type: ignore[union-attr]
        self.timers.file_at_etime(jobs, now_ms)

    # -- a REPLJOB's copies ------------------------------------------------------------------
    def import_copies(
        self,
        records: Sequence[JobRecord],
        now_ms: int,
        holders: tuple[bytes, ...],
        otherwise: Callable[[JobRecord, int], bool],
    ) -> list[bytes]:
        """The IDs of the copies of one REPLJOB (`records`) this node takes.

        Each record that is of `records[0]`'s queue, names `records[0]`'s nodes (the same
        tuple: core/codec.py shares it between the jobs of a frame), is new here and is
        at-least-once is imported as `import_job(record, now_ms, etime_relative=True,
        holders=holders)` imports it, and flagged QUEUED_ONCE: its first queueing here is
        a requeue. Every other record goes to `otherwise(record, now_ms)` in its turn,
        which says whether it was taken; all do while somebody reads job events. The
        caller has checked that the queue takes input (a paused one keeps no copy)."""
        if not records or self.job_events is not None:
            return [record[0] for record in records if otherwise(record, now_ms)]
        first = records[0]
        queue_name, nodes = first[11], first[13]
        queue = self.queues.get(queue_name)
        name = queue_name if queue is None else queue.name  # shared, as in import_job
        # Job.awake_at for a fresh copy (active, its WILLQUEUE not sent): its requeue, told
        # WILLQUEUE_ADVANCE_MS ahead to the other holders, or its expiry if sooner.
        advance = WILLQUEUE_ADVANCE_MS if len(holders) > 1 else 0
        taken: list[bytes] = []
        count = len(records)
        index = 0
        while True:
            # The copies up to the first new_copies does not make, filed in the timers
            # together with their deadlines.
            made: tuple[list[bytes], list[Job], list[int]] = (taken, [], [])
            index, size, self._last_ctime = new_copies(
                records, index, nodes, queue_name, name, holders, now_ms, advance,
                JITTER_MS, JOB_OVERHEAD_BYTES, DISQUE_DELIVERED, self.jobs,
                self._rand.random, made, self._last_ctime,
            )  # fmt: skip
            self.jobs_bytes += size
            self.timers.file_new_at(made[1], made[2], now_ms)
            if index == count:
                return taken
            # The one-job path for this one: it reads and moves what the copies before it
            # left (and files after them).
            if otherwise(records[index], now_ms):
                taken.append(records[index][0])
            index += 1
