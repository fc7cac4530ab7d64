"""The state every part of the engine shares, and the one function job changes go through.

The engine is split by concern the way Disque splits job.c / queue.c / ack.c: `jobs`
(creating, importing, expiring and freeing jobs), `queueing` (queues, delivery, NACK,
WORKING, pause, queue GC, scans), `blocking` (clients waiting in GETJOB) and `acks`.
Each is a mixin over this state; `Engine` joins them and `NodeCore` adds node policy.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Container
from typing import TYPE_CHECKING

from conveyor.core.args import EngineConfig
from conveyor.core.effects import (
    ClusterHooks,
    Effects,
    JobEvent,
    Reply,
    SendMessage,
    WokenGetJob,
)
from conveyor.core.job import Job
from conveyor.core.jobid import JobIdGenerator
from conveyor.core.queue import JobQueue
from conveyor.core.scan import ScanCursors
from conveyor.core.timers import TimerEntry, Timers

if TYPE_CHECKING:
    from conveyor.core.waiters import Waiter

DEFAULT_TTL_S = 86400
MAX_DEFAULT_RETRY_S = 300
# Requeue times get +-250 ms of jitter, as in Disque, so copies on several nodes do not
# requeue in lockstep.
JITTER_MS = 250
# Estimated bytes a job costs beyond its body: the Job object, its ID, the ints it holds,
# its entries in the jobs dict, its queue and its timer bucket (measured with
# tracemalloc on CPython 3.11; see tests/core/test_memory_estimate.py).
JOB_OVERHEAD_BYTES = 436
QUEUE_OVERHEAD_BYTES = 900


class CoreState:
    """Fields shared by the engine's parts; see each part for what it owns."""

    def __init__(
        self,
        node_id: str,
        seed: bytes,
        rand: random.Random,
        config: EngineConfig | None = None,
        timer_resolution_ms: int = 10,
    ) -> None:
        self.node_id = node_id
        self.node_name = node_id.encode()
        self.config = config or EngineConfig()
        self._ids = JobIdGenerator(node_id, seed)
        self._rand = rand
        self.jobs: dict[bytes, Job] = {}
        self.queues: dict[bytes, JobQueue] = {}
        self.timers = Timers(timer_resolution_ms)
        self._scans = ScanCursors()
        # The timer that drops the scans given up (core/scan.py), while any is kept.
        self._scan_gc_timer: TimerEntry | None = None
        self._last_ctime = 0
        # Delivered at-most-once jobs, oldest first: the first thing evicted under memory
        # pressure, since nobody can get them again anyway.
        self._amo_delivered: OrderedDict[bytes, Job] = OrderedDict()
        # Effects for the driver (see conveyor.core.effects).
        self.replies: list[WokenGetJob | Reply] = []
        self.job_events: list[JobEvent] | None = None  # None: nobody consumes them
        self.messages: list[SendMessage] = []
        # The cluster (conveyor.cluster.state): requeue coordination, node names; None
        # for a node that has no cluster machinery (the core alone, in unit tests).
        self.cluster_hooks: ClusterHooks | None = None
        # Queues other nodes' consumers wait on (the federation's; ClusterHooks is told
        # when a job is queued in one with no consumer here).
        self.wanted_queues: Container[bytes] = ()
        # False while anything (a cluster, leaving) needs ADDJOB's full path.
        self._fast_adds = True
        self.jobs_bytes = 0  # estimate of the memory held by jobs (see JOB_OVERHEAD_BYTES)
        self.blocked_clients = 0
        # stats
        self.expired_jobs = 0
        self.evicted_jobs = 0
        self.dead_lettered_jobs = 0
        # Totals since start, for INFO and /metrics.
        self.delivered_jobs = 0
        self.acked_jobs = 0
        self.nacked_jobs = 0
        self.requeued_jobs = 0

    def set_node_id(self, node_id: str) -> None:
        """A new identity (CLUSTER RESET HARD): later job IDs carry the new prefix."""
        self.node_id = node_id
        self.node_name = node_id.encode()
        self._ids = JobIdGenerator(node_id, self._ids.seed)

    # -- effects ----------------------------------------------------------------------------
    def record_job_events(self, enabled: bool) -> None:
        """Start or stop producing JobEvents (the persist effect); off costs nothing."""
        if enabled and self.job_events is None:
            self.job_events = []
        elif not enabled:
            self.job_events = None

    def _changed(self, event: str, job: Job, now_ms: int) -> None:
        """The one place a job change becomes an effect; call it after every change."""
        events = self.job_events
        if events is not None:
            events.append(
                (event, job, now_ms, job.queue, job.state, job.nacks, job.additional_deliveries)
            )

    def take_replies(self) -> list[WokenGetJob | Reply]:
        replies = self.replies
        self.replies = []
        return replies

    def take_job_events(self) -> list[JobEvent]:
        events = self.job_events
        if not events:
            return []
        self.job_events = []
        return events

    def take_messages(self) -> list[SendMessage]:
        messages = self.messages
        self.messages = []
        return messages

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def drain(self) -> Effects:
        """Every effect left by the batch, and the timer to arm (the simulator's view;
        the asyncio node drains the lists one by one, skipping the empty ones)."""
        return Effects(
            self.take_replies(), self.take_job_events(), self.take_messages(), self.next_deadline()
        )

    # -- shared helpers ---------------------------------------------------------------------
    def _jitter(self) -> int:
        return int(self._rand.random() * 2 * JITTER_MS) - JITTER_MS

    def memory_warning(self) -> int:
        """Disque's memory warning level (NodeCore knows the limit; none here)."""
        return 0

    def memory_estimate(self) -> int:
        return self.jobs_bytes + len(self.queues) * QUEUE_OVERHEAD_BYTES

    if TYPE_CHECKING:
        # Implemented by the parts (see the module docstring); declared for type checkers.
        def queue_for(self, name: bytes, now_ms: int) -> JobQueue: ...
        def _enqueue(self, job: Job, now_ms: int) -> bool: ...
        def _left_queue(self, job: Job, now_ms: int) -> None: ...
        def _arm_queue_gc(self, queue: JobQueue, now_ms: int) -> None: ...
        def get_jobs(self, queue_names: list[bytes], count: int, now_ms: int) -> list[Job]: ...
        def _serve_waiters(self, queue: JobQueue, now_ms: int) -> None: ...
        def unblock(self, waiter: Waiter, now_ms: int) -> None: ...
        def _free(self, job: Job, now_ms: int, event: str) -> None: ...
