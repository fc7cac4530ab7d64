"""Property tests of the pure core: random command sequences against a simple model.

A virtual clock and a seeded random source drive the node facade (`NodeCore`), so every
failing history that hypothesis finds replays exactly. Like the asyncio node, every
rule ends by running the timers that are due. The invariants are the queue's contract:
- an unacknowledged job with retries is never lost before its TTL;
- an at-most-once job (RETRY 0) is never delivered twice;
- QLEN, the registered-jobs count, the memory estimate and a full JSCAN always agree
  with the jobs the engine holds;
and the resources a node running for months must not leak:
- an empty, idle, unpaused queue without waiters is collected within its GC time;
- a queue's waiter list holds only live waiters;
- no timer entry keeps a finished waiter alive, and cancelled entries stay bounded;
- every job change produced exactly one job event (the persist effect): replaying the
  events through `TRANSITIONS` gives exactly the states the engine holds.
`tests/core/test_planted_bugs.py` shows that each of these catches a bug planted in it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from conveyor.core.args import AddJobArgs, EngineConfig, GetJobArgs
from conveyor.core.effects import GONE, TRANSITIONS, WokenGetJob
from conveyor.core.errors import CommandError
from conveyor.core.job import ACTIVE, QUEUED
from conveyor.core.node import NodeCore
from conveyor.core.queue import PAUSE_IN, PAUSE_NONE, PAUSE_OUT
from conveyor.core.state import JOB_OVERHEAD_BYTES
from conveyor.core.waiters import Waiter

QUEUES = [b"a", b"b", b"c"]
START_MS = 1_700_000_000_000
GC_IDLE_MS = 2_000


@dataclass
class ModelJob:
    queue: bytes
    retry_s: int
    etime_ms: int
    deliveries: int = 0
    gone: bool = False  # acked, fast-acked or deleted on purpose


@dataclass
class Model:
    jobs: dict[bytes, ModelJob] = field(default_factory=dict)


class EngineMachine(RuleBasedStateMachine):
    job_ids = Bundle("job_ids")

    def __init__(self) -> None:
        super().__init__()
        self.now = START_MS
        self.core = NodeCore(
            "f" * 40,
            b"seed",
            random.Random(7),
            EngineConfig(max_deliveries=4, deadletter_queue=b"dead", queue_gc_idle_ms=GC_IDLE_MS),
        )
        self.core.record_job_events(True)
        self.model = Model()
        self.waiters: list[Waiter] = []
        # The recording consumer: each job's state as replayed from the job events.
        self.replayed: dict[bytes, int] = {}

    # -- helpers -------------------------------------------------------------------------
    def _record_deliveries(self, jobs: list) -> None:
        for job in jobs:
            self.model.jobs[job.id].deliveries += 1

    def _settle(self) -> None:
        """What the driver does after every batch: run what is due, drain the effects."""
        while True:
            deadline = self.core.next_deadline()
            if deadline is None or deadline > self.now:
                break
            self.core.tick(self.now)
        effects = self.core.drain()
        for reply in effects.replies:
            assert isinstance(reply, WokenGetJob)
            assert reply.waiter.done
            if reply.jobs:
                assert len(reply.jobs) <= reply.waiter.count
                self._record_deliveries(reply.jobs)
        for name, job, _time_ms, _queue, state_then, _nacks, _more in effects.job_events:
            allowed, after = TRANSITIONS[name]
            before = self.replayed.get(job.id, GONE)
            assert before in allowed, f"{name} after state {before}: {job.id!r}"
            state = state_then if after is None else after
            assert state_then == state, (name, job.id)
            if state == GONE:
                self.replayed.pop(job.id, None)
            else:
                self.replayed[job.id] = state

    # -- rules ---------------------------------------------------------------------------
    @rule(
        target=job_ids,
        queue=st.sampled_from(QUEUES),
        retry=st.sampled_from([None, 0, 1, 3]),
        ttl=st.sampled_from([None, 2, 5, 30]),
        delay=st.sampled_from([0, 0, 1]),
        body=st.binary(max_size=20),
        fast=st.booleans(),
    )
    def add(
        self, queue: bytes, retry: int | None, ttl: int | None, delay: int, body: bytes, fast: bool
    ) -> bytes:
        try:
            if fast:
                job = self.core.add_default_job(queue, body, self.now)
            else:
                args = AddJobArgs(queue, body, None, delay, retry, ttl, None, False)
                job = self.core.add_job(args, self.now)
        except CommandError as exc:
            assert "DELAY" in exc.message or "PAUSED" in exc.message
            self._settle()
            return b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0000"
        self.model.jobs[job.id] = ModelJob(queue, job.retry, job.etime)
        self._settle()
        return job.id

    @rule(queues=st.lists(st.sampled_from(QUEUES), min_size=1, max_size=3), count=st.integers(1, 4))
    def get(self, queues: list[bytes], count: int) -> None:
        jobs = self.core.get_jobs(queues, count, self.now)
        assert len(jobs) <= count
        assert len({job.id for job in jobs}) == len(jobs)
        for job in jobs:
            assert job.state == ACTIVE
            assert job.queue in queues
        self._record_deliveries(jobs)
        self._settle()

    @rule(
        queues=st.lists(st.sampled_from(QUEUES), min_size=1, max_size=2),
        timeout=st.sampled_from([0, 20, 500, 5000]),
    )
    def block(self, queues: list[bytes], timeout: int) -> None:
        result = self.core.get_job(GetJobArgs(queues, 2, timeout), object(), self.now)
        if isinstance(result, Waiter):
            self.waiters.append(result)
        else:
            self._record_deliveries(result)
        self._settle()

    @precondition(lambda self: any(not w.done for w in self.waiters))
    @rule(data=st.data())
    def disconnect(self, data: st.DataObject) -> None:
        live = [w for w in self.waiters if not w.done]
        self.core.unblock(data.draw(st.sampled_from(live)), self.now)
        self._settle()

    @rule(job_id=consumes(job_ids))
    def ack(self, job_id: bytes) -> None:
        known = job_id in self.core.jobs
        assert self.core.ack([job_id], self.now) == (1 if known else 0)
        if job_id in self.model.jobs:
            self.model.jobs[job_id].gone = True
        self._settle()

    @rule(job_id=consumes(job_ids))
    def fast_ack(self, job_id: bytes) -> None:
        self.core.fast_ack([job_id], self.now)
        if job_id in self.model.jobs:
            self.model.jobs[job_id].gone = True
        self._settle()

    @rule(job_id=consumes(job_ids))
    def deljob(self, job_id: bytes) -> None:
        self.core.del_jobs([job_id], self.now)
        if job_id in self.model.jobs:
            self.model.jobs[job_id].gone = True
        self._settle()

    @rule(job_id=job_ids, delay=st.sampled_from([None, None, 1]))
    def nack(self, job_id: bytes, delay: int | None) -> None:
        self.core.nack([job_id], self.now, delay)
        self._settle()

    @rule(job_id=job_ids)
    def enqueue(self, job_id: bytes) -> None:
        self.core.enqueue([job_id], self.now)
        self._settle()

    @rule(job_id=job_ids)
    def dequeue(self, job_id: bytes) -> None:
        self.core.dequeue([job_id], self.now)
        self._settle()

    @rule(job_id=job_ids)
    def working(self, job_id: bytes) -> None:
        try:
            retry = self.core.working(job_id, self.now)
        except CommandError as exc:
            assert exc.message.startswith(("NOJOB", "TOOLATE"))
        else:
            expected = self.model.jobs[job_id].retry_s
            assert retry == expected
        self._settle()

    @rule(queue=st.sampled_from(QUEUES), flags=st.sampled_from([PAUSE_NONE, PAUSE_IN, PAUSE_OUT]))
    def pause(self, queue: bytes, flags: int) -> None:
        self.core.pause(queue, flags, self.now)
        self._settle()

    @rule(ms=st.sampled_from([1, 10, 100, 250, 999, 1000, 2500, 6000]))
    def advance(self, ms: int) -> None:
        target = self.now + ms
        # The driver would have woken up at every deadline in between; so do we.
        while True:
            deadline = self.core.next_deadline()
            if deadline is None or deadline > target:
                break
            self.now = max(self.now, deadline)
            self._settle()
        self.now = target
        self._settle()

    # -- invariants: jobs ----------------------------------------------------------------
    @invariant()
    def unacked_jobs_with_retries_are_kept_until_ttl(self) -> None:
        for job_id, expected in self.model.jobs.items():
            if expected.gone or expected.retry_s == 0:
                continue
            if self.now < expected.etime_ms:
                assert job_id in self.core.jobs, f"{job_id!r} lost before its TTL"
            elif self.now >= expected.etime_ms + self.core.timers.resolution_ms:
                assert job_id not in self.core.jobs, f"{job_id!r} outlived its TTL"

    @invariant()
    def at_most_once_jobs_are_delivered_at_most_once(self) -> None:
        for expected in self.model.jobs.values():
            if expected.retry_s == 0:
                assert expected.deliveries <= 1

    @invariant()
    def counters_agree(self) -> None:
        core = self.core
        for name, queue in core.queues.items():
            queued = [j for j in core.jobs.values() if j.state == QUEUED and j.queue == name]
            assert queue.count == len(queued) == core.qlen(name)
            assert [j.id for j in queue.live_jobs()] == [
                j.id for j in sorted(queued, key=lambda j: (j.ctime, j.id))
            ]
        queued_anywhere = [j for j in core.jobs.values() if j.state == QUEUED]
        assert all(j.queue in core.queues for j in queued_anywhere)
        assert core.jobs_bytes == sum(JOB_OVERHEAD_BYTES + len(j.body) for j in core.jobs.values())
        assert core.blocked_clients == sum(1 for w in self.waiters if not w.done)
        for queue in core.queues.values():
            # A client may name a queue twice in one GETJOB; it then counts twice.
            assert queue.blocked == sum(
                w.queues.count(queue.name) for w in self.waiters if not w.done
            )

    @invariant()
    def full_jscan_returns_every_job_once(self) -> None:
        seen: list[bytes] = []
        cursor = 0
        for _ in range(1000):
            cursor, ids = self.core.scan_jobs(cursor, 7, False, lambda job: True, self.now)
            seen.extend(ids)
            if cursor == 0:
                break
        assert sorted(seen) == sorted(self.core.jobs)

    @invariant()
    def nobody_waits_while_jobs_are_ready(self) -> None:
        for queue in self.core.queues.values():
            if queue.count and not queue.pause & PAUSE_OUT:
                assert queue.blocked == 0

    # -- invariants: resources -----------------------------------------------------------
    @invariant()
    def idle_empty_queues_are_collected_within_their_gc_time(self) -> None:
        for name, queue in self.core.queues.items():
            if queue.is_collectable():
                idle_ms = self.now - queue.atime_ms
                assert idle_ms < GC_IDLE_MS, f"queue {name!r} idle {idle_ms} ms, not collected"

    @invariant()
    def waiter_lists_hold_only_live_waiters(self) -> None:
        for name, queue in self.core.queues.items():
            finished = [w for w in queue.waiters if w.done]
            assert not finished, f"queue {name!r} keeps {len(finished)} finished waiters"
            assert len(queue.waiters) == queue.blocked

    @invariant()
    def no_timer_keeps_a_finished_waiter(self) -> None:
        timers = self.core.timers
        pending = timers.pending_calls()
        for _when, _callback, arg in pending:
            if isinstance(arg, Waiter):
                assert not arg.done, "a timer entry keeps a finished waiter alive"
        # Cancelled entries are dropped in bulk; they never outnumber live ones by much.
        assert timers.call_entries() <= 2 * len(pending) + 64 + 1

    @invariant()
    def job_events_replay_to_the_engine_state(self) -> None:
        held = {job_id: job.state for job_id, job in self.core.jobs.items()}
        assert self.replayed == held


EngineMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestEngineProperties = EngineMachine.TestCase
