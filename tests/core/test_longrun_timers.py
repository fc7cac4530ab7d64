"""A node runs for months: what it did for a job must not outlive the job.

The timer buckets file each job under its next deadline (its expiry while queued, its
requeue once delivered). These tests state what a long run needs of them: an acked job
is not kept in a bucket until its TTL (a day by default), and after any history, once
every job is acked and every client gone, the timers, waiter lists and queue table are
back to empty. A virtual clock drives the core facade, as in test_engine_properties.
"""

from __future__ import annotations

import random
import sys

from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant

from conveyor.core.args import EngineConfig
from conveyor.core.node import NodeCore
from conveyor.core.queue import PAUSE_NONE
from tests.core.test_engine_properties import GC_IDLE_MS, EngineMachine

T0 = 1_800_000_000_000


def make_core() -> NodeCore:
    return NodeCore("c" * 40, b"seed", random.Random(2), EngineConfig(queue_gc_idle_ms=1_000))


def run_until(core: NodeCore, now_ms: int) -> None:
    while (deadline := core.next_deadline()) is not None and deadline <= now_ms:
        core.tick(deadline)
    core.tick(now_ms)


def held_elsewhere(bodies: list[bytes]) -> int:
    """How many of `bodies` something besides the list refers to."""
    baseline = sys.getrefcount(bytes(bytearray(b"unshared")))  # the argument's own
    return sum(1 for index in range(len(bodies)) if sys.getrefcount(bodies[index]) > baseline + 1)


def test_an_acked_job_is_not_kept_until_its_ttl() -> None:
    """ADDJOB, GETJOB, ACKJOB with the default TTL (a day): the body of every job done
    must be freed within the hour, not held by the bucket of its expiry."""
    core = make_core()
    bodies = [bytes(bytearray(b"%d" % n)) for n in range(500)]  # each its own object
    now = T0
    for body in bodies:
        core.add_default_job(b"q", body, now)
        (job,) = core.get_jobs([b"q"], 1, now)
        assert core.ack([job.id], now) == 1
        now += 7
        run_until(core, now)
    del job, body
    run_until(core, now + 3_600_000)
    assert not core.jobs
    assert held_elsewhere(bodies) == 0


def test_a_fast_acked_queued_job_is_not_kept_until_its_ttl() -> None:
    core = make_core()
    bodies = [bytes(bytearray(b"%d" % n)) for n in range(200)]
    for body in bodies:
        job = core.add_default_job(b"q", body, T0)
        assert core.fast_ack([job.id], T0) == 1
    del job, body
    run_until(core, T0 + 3_600_000)
    assert held_elsewhere(bodies) == 0


def test_a_deleted_job_is_not_kept_until_its_ttl() -> None:
    """DELJOB (and eviction, expiry: every way a job is freed) takes it out of its
    bucket too. Delivered first, so that no queue holds it (a queue drops its gone jobs
    lazily too, within its own bound)."""
    core = make_core()
    bodies = [bytes(bytearray(b"%d" % n)) for n in range(300)]
    for body in bodies:
        core.add_default_job(b"q", body, T0)
        (job,) = core.get_jobs([b"q"], 1, T0)
        assert core.del_jobs([job.id], T0) == 1
    del job, body
    assert core.timers.job_entries() == 0
    assert held_elsewhere(bodies) == 0


class LongRunMachine(EngineMachine):
    """EngineMachine's histories, with resource invariants over the job timers, and a
    teardown that ends every job and client and requires everything to be freed."""

    @invariant()
    def timers_hold_a_few_entries_per_job_held(self) -> None:
        # A bucket is compacted once its stale entries outnumber its live ones, and a
        # job has at most two entries in the bucket it is filed in.
        entries = self.core.timers.job_entries()
        assert entries <= 4 * len(self.core.jobs), (entries, len(self.core.jobs))

    def teardown(self) -> None:
        core = self.core
        for waiter in self.waiters:
            core.unblock(waiter, self.now)
        for queue in list(core.queues.values()):
            core.pause(queue.name, PAUSE_NONE, self.now)
        core.ack(list(core.jobs), self.now)
        assert not core.jobs and core.jobs_bytes == 0
        assert core.timers.job_entries() == 0, "a timer bucket keeps an acked job"
        assert core.blocked_clients == 0
        assert all(not queue.waiters and not queue.blocked for queue in core.queues.values())
        self.now += GC_IDLE_MS
        self._settle()
        assert not core.queues, f"queues never collected: {sorted(core.queues)}"
        assert core.timers.call_entries() == 0
        assert core.next_deadline() is None or not core.timers.pending_calls()


LongRunMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestLongRunResources = LongRunMachine.TestCase
