"""Property tests of the pure core: random command sequences against a simple model.

A virtual clock and a seeded random source drive `Engine`, so every failing history
that hypothesis finds replays exactly. The invariants are the queue's contract:
- an unacknowledged job with retries is never lost before its TTL;
- an at-most-once job (RETRY 0) is never delivered twice;
- QLEN, the registered-jobs count, the memory estimate and a full JSCAN always agree
  with the jobs the engine holds.
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

from conveyor.core.engine import JOB_OVERHEAD_BYTES, AddJobArgs, Engine, EngineConfig
from conveyor.core.errors import CommandError
from conveyor.core.job import ACTIVE, QUEUED
from conveyor.core.waiters import Waiter

QUEUES = [b"a", b"b", b"c"]
START_MS = 1_700_000_000_000


@dataclass
class ModelJob:
    queue: bytes
    retry_s: int
    etime_ms: int
    deliveries: int = 0
    gone: bool = False  # acked, fast-acked or deleted on purpose
    dead_lettered: bool = False


@dataclass
class Model:
    jobs: dict[bytes, ModelJob] = field(default_factory=dict)


class EngineMachine(RuleBasedStateMachine):
    job_ids = Bundle("job_ids")

    def __init__(self) -> None:
        super().__init__()
        self.now = START_MS
        self.engine = Engine(
            "f" * 40,
            b"seed",
            random.Random(7),
            EngineConfig(max_deliveries=4, deadletter_queue=b"dead"),
        )
        self.model = Model()
        self.waiters: list[Waiter] = []

    # -- helpers -------------------------------------------------------------------------
    def _record_deliveries(self, jobs: list) -> None:
        for job in jobs:
            self.model.jobs[job.id].deliveries += 1

    def _drain_wakeups(self) -> None:
        for waiter, jobs in self.engine.take_wakeups():
            assert waiter.done
            if jobs:
                assert len(jobs) <= waiter.count
                self._record_deliveries(jobs)

    # -- rules ---------------------------------------------------------------------------
    @rule(
        target=job_ids,
        queue=st.sampled_from(QUEUES),
        retry=st.sampled_from([None, 0, 1, 3]),
        ttl=st.sampled_from([None, 2, 5, 30]),
        delay=st.sampled_from([0, 0, 1]),
        body=st.binary(max_size=20),
    )
    def add(self, queue: bytes, retry: int | None, ttl: int | None, delay: int, body: bytes):
        args = AddJobArgs(queue, body, 1, delay, retry, ttl, None, False)
        try:
            job = self.engine.add_job(args, self.now)
        except CommandError as exc:
            assert "DELAY" in exc.message
            return b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0000"
        self.model.jobs[job.id] = ModelJob(queue, job.retry, job.etime)
        self._drain_wakeups()
        return job.id

    @rule(queues=st.lists(st.sampled_from(QUEUES), min_size=1, max_size=3), count=st.integers(1, 4))
    def get(self, queues: list[bytes], count: int) -> None:
        jobs = self.engine.get_jobs(queues, count, self.now)
        assert len(jobs) <= count
        assert len({job.id for job in jobs}) == len(jobs)
        for job in jobs:
            assert job.state == ACTIVE
            assert job.queue in queues
        self._record_deliveries(jobs)

    @rule(
        queues=st.lists(st.sampled_from(QUEUES), min_size=1, max_size=2),
        timeout=st.sampled_from([0, 500]),
    )
    def block(self, queues: list[bytes], timeout: int) -> None:
        if self.engine.get_jobs(queues, 1, self.now):
            return  # only block when nothing was there, as the node does
        waiter = Waiter(object(), queues, 2, False, self.now + timeout if timeout else 0)
        self.engine.block(waiter, self.now)
        self.waiters.append(waiter)

    @precondition(lambda self: any(not w.done for w in self.waiters))
    @rule(data=st.data())
    def disconnect(self, data: st.DataObject) -> None:
        live = [w for w in self.waiters if not w.done]
        self.engine.unblock(data.draw(st.sampled_from(live)))

    @rule(job_id=consumes(job_ids))
    def ack(self, job_id: bytes) -> None:
        known = job_id in self.engine.jobs
        assert self.engine.ack([job_id], self.now) == (1 if known else 0)
        if job_id in self.model.jobs:
            self.model.jobs[job_id].gone = True

    @rule(job_id=consumes(job_ids))
    def fast_ack(self, job_id: bytes) -> None:
        self.engine.fast_ack([job_id], self.now)
        if job_id in self.model.jobs:
            self.model.jobs[job_id].gone = True

    @rule(job_id=consumes(job_ids))
    def deljob(self, job_id: bytes) -> None:
        self.engine.del_jobs([job_id], self.now)
        if job_id in self.model.jobs:
            self.model.jobs[job_id].gone = True

    @rule(job_id=job_ids, delay=st.sampled_from([None, None, 1]))
    def nack(self, job_id: bytes, delay: int | None) -> None:
        self.engine.nack([job_id], self.now, delay)
        self._drain_wakeups()

    @rule(job_id=job_ids)
    def enqueue(self, job_id: bytes) -> None:
        self.engine.enqueue([job_id], self.now)
        self._drain_wakeups()

    @rule(job_id=job_ids)
    def dequeue(self, job_id: bytes) -> None:
        self.engine.dequeue([job_id], self.now)

    @rule(job_id=job_ids)
    def working(self, job_id: bytes) -> None:
        try:
            retry = self.engine.working(job_id, self.now)
        except CommandError as exc:
            assert exc.message.startswith(("NOJOB", "TOOLATE"))
            return
        assert retry == self.model.jobs[job_id].retry_s

    @rule(ms=st.sampled_from([1, 10, 100, 250, 999, 1000, 2500, 6000]))
    def advance(self, ms: int) -> None:
        self.now += ms
        # The driver would have woken up at every deadline in between; so do we.
        while True:
            deadline = self.engine.next_deadline()
            if deadline is None or deadline > self.now:
                break
            self.engine.tick(deadline)
            self._drain_wakeups()
        self.engine.tick(self.now)
        self._drain_wakeups()

    # -- invariants ------------------------------------------------------------------------
    @invariant()
    def unacked_jobs_with_retries_are_kept_until_ttl(self) -> None:
        for job_id, expected in self.model.jobs.items():
            if expected.gone or expected.retry_s == 0:
                continue
            if self.now < expected.etime_ms:
                assert job_id in self.engine.jobs, f"{job_id!r} lost before its TTL"
            elif self.now >= expected.etime_ms + self.engine.timers.resolution_ms:
                assert job_id not in self.engine.jobs, f"{job_id!r} outlived its TTL"

    @invariant()
    def at_most_once_jobs_are_delivered_at_most_once(self) -> None:
        for expected in self.model.jobs.values():
            if expected.retry_s == 0:
                assert expected.deliveries <= 1

    @invariant()
    def counters_agree(self) -> None:
        engine = self.engine
        for name, queue in engine.queues.items():
            queued = [j for j in engine.jobs.values() if j.state == QUEUED and j.queue == name]
            assert queue.count == len(queued) == engine.qlen(name)
            assert [j.id for j in queue.live_jobs()] == [
                j.id for j in sorted(queued, key=lambda j: (j.ctime, j.id))
            ]
        queued_anywhere = [j for j in engine.jobs.values() if j.state == QUEUED]
        assert all(j.queue in engine.queues for j in queued_anywhere)
        assert engine.jobs_bytes == sum(
            JOB_OVERHEAD_BYTES + len(j.body) for j in engine.jobs.values()
        )
        assert engine.blocked_clients == sum(1 for w in self.waiters if not w.done)
        for queue in engine.queues.values():
            # A client may name a queue twice in one GETJOB; it then counts twice.
            assert queue.blocked == sum(
                w.queues.count(queue.name) for w in self.waiters if not w.done
            )

    @invariant()
    def full_jscan_returns_every_job_once(self) -> None:
        seen: list[bytes] = []
        cursor = 0
        for _ in range(1000):
            cursor, ids = self.engine.scan_jobs(cursor, 7, False, lambda job: True)
            seen.extend(ids)
            if cursor == 0:
                break
        assert sorted(seen) == sorted(self.engine.jobs)

    @invariant()
    def nobody_waits_while_jobs_are_ready(self) -> None:
        for queue in self.engine.queues.values():
            if queue.count and not queue.pause:
                assert queue.blocked == 0


EngineMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestEngineProperties = EngineMachine.TestCase
