"""The job state machine of one node: its parts joined, and the clock that drives them.

Sans-IO: every method takes the current time in ms; randomness comes from the
`random.Random` passed in; nothing here reads a clock, sleeps or touches a socket.
What the driver must do afterwards is left as effects (see conveyor.core.effects).
The parts, by concern: jobs.py (and job_runs.py, its runs taken in one call),
queueing.py, blocking.py, acks.py over state.py.
"""

from __future__ import annotations

from conveyor.core.acks import AcksMixin
from conveyor.core.args import QUEUE_GC_IDLE_MS, AddJobArgs, EngineConfig, GetJobArgs
from conveyor.core.blocking import BlockingMixin
from conveyor.core.job import ACTIVE, DELETED, WILLQUEUE_ADVANCE_MS, WILLQUEUE_SENT
from conveyor.core.job_runs import JobRunsMixin
from conveyor.core.jobs import JobsMixin
from conveyor.core.queue import PAUSE_IN
from conveyor.core.queueing import QueueingMixin
from conveyor.core.scanning import ScanningMixin
from conveyor.core.state import (
    DEFAULT_TTL_S,
    JITTER_MS,
    JOB_OVERHEAD_BYTES,
    MAX_DEFAULT_RETRY_S,
    QUEUE_OVERHEAD_BYTES,
)

__all__ = [
    "DEFAULT_TTL_S",
    "JITTER_MS",
    "JOB_OVERHEAD_BYTES",
    "MAX_DEFAULT_RETRY_S",
    "QUEUE_GC_IDLE_MS",
    "QUEUE_OVERHEAD_BYTES",
    "AddJobArgs",
    "Engine",
    "EngineConfig",
    "GetJobArgs",
]


class Engine(JobsMixin, JobRunsMixin, QueueingMixin, ScanningMixin, BlockingMixin, AcksMixin):
    def tick(self, now_ms: int) -> None:
        """Run everything that is due at now_ms."""
        timers = self.timers
        for job in timers.due_jobs(now_ms):
            if job.state == DELETED:
                continue
            if now_ms >= job.etime:
                self.expire(job, now_ms)
                continue
            if (
                job.state == ACTIVE
                and job.qtime
                and not job.flags & WILLQUEUE_SENT
                and job.nodes_delivered is not None
                and len(job.nodes_delivered) > 1
                and now_ms >= job.qtime - WILLQUEUE_ADVANCE_MS
            ):
                job.flags |= WILLQUEUE_SENT
                if self.cluster_hooks is not None:
                    self.cluster_hooks.will_queue(job, now_ms)
            if job.state == ACTIVE and job.qtime and now_ms >= job.qtime:
                queue = self.queues.get(job.queue)
                if queue is not None and queue.pause & PAUSE_IN:
                    job.qtime = now_ms + max(job.retry, 1) * 1000
                else:
                    self._enqueue(job, now_ms)
            if job.state != DELETED and job.awake == 0:
                timers.file_job(job, job.awake_at(), now_ms)
        for callback, arg in timers.due_calls(now_ms):
            callback(arg, now_ms)
