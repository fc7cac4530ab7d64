"""The core's job events (the persist effect): which events a job's life produces, in
which order, with which counters.

Each test scripts one life cycle on a virtual clock and reads the events the engine
leaves for its driver. The ADDJOB fast path must give exactly what the full path gives.
"""

from __future__ import annotations

import random

import pytest

from conveyor.core.effects import one_per_change
from conveyor.core.engine import AddJobArgs, Engine, EngineConfig
from conveyor.core.job import Job
from conveyor.core.waiters import Waiter

T0 = 1_800_000_000_000

Event = tuple[str, bytes, bytes, int, int, int]  # event, id, queue, nacks, additional, ms


class Recorder:
    """Drains the engine's job events whenever the test looks."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._events: list[Event] = []

    @property
    def events(self) -> list[Event]:
        taken = one_per_change(self.engine.take_job_events())
        for event, job, time_ms, queue, _state, nacks, deliveries in taken:
            self._events.append((event, job.id, queue, nacks, deliveries, time_ms))
        return self._events

    def kinds(self, job_id: bytes | None = None) -> list[str]:
        return [e[0] for e in self.events if job_id is None or e[1] == job_id]


def make_engine(max_deliveries: int = 0, deadletter_queue: bytes = b"") -> tuple[Engine, Recorder]:
    config = EngineConfig(max_deliveries=max_deliveries, deadletter_queue=deadletter_queue)
    engine = Engine("ab" * 20, b"seed", random.Random(1), config)
    engine.record_job_events(True)
    return engine, Recorder(engine)


def add(engine: Engine, now: int, queue: bytes = b"q", **options: int | None) -> Job:
    args = AddJobArgs(
        queue,
        b"body",
        1,
        options.get("delay_s") or 0,
        options.get("retry_s"),
        options.get("ttl_s"),
        None,
        False,
    )
    return engine.add_job(args, now)


@pytest.mark.parametrize("warm", [False, True])
def test_default_addjob_getjob_ack(warm: bool) -> None:
    engine, rec = make_engine()
    if warm:
        engine.add_default_job(b"q", b"warm", T0)  # the queue exists: the fast path
    rec.events.clear()
    job = engine.add_default_job(b"q", b"x", T0 + 1)
    assert rec.events == [
        ("added", job.id, b"q", 0, 0, T0 + 1),
        ("queued", job.id, b"q", 0, 0, T0 + 1),
    ]
    engine.get_jobs([b"q"], 10, T0 + 2)
    assert engine.ack([job.id], T0 + 3) == 1
    # One node holds the only copy: ack GC lets the ACKED job go at once.
    assert rec.kinds(job.id) == ["added", "queued", "delivered", "acked", "released"]
    assert rec.events[-2] == ("acked", job.id, b"q", 0, 0, T0 + 3)
    assert job.id not in engine.jobs


def test_delay_gives_added_then_queued_later() -> None:
    engine, rec = make_engine()
    job = add(engine, T0, delay_s=2)
    assert rec.kinds() == ["added"]
    engine.tick(T0 + 2_000)
    assert rec.events[-1] == ("queued", job.id, b"q", 0, 0, T0 + 2_000)


def test_nack_counts_before_the_event_and_requeues() -> None:
    engine, rec = make_engine()
    job = add(engine, T0)
    engine.get_jobs([b"q"], 1, T0 + 1)
    assert engine.nack([job.id], T0 + 2) == 1
    assert rec.events[-2:] == [
        ("nacked", job.id, b"q", 1, 0, T0 + 2),
        ("requeued", job.id, b"q", 1, 0, T0 + 2),
    ]
    assert (job.nacks, job.additional_deliveries) == (1, 0)


def test_nack_with_delay_requeues_when_due_without_counting_twice() -> None:
    engine, rec = make_engine()
    job = add(engine, T0)
    engine.get_jobs([b"q"], 1, T0)
    engine.nack([job.id], T0 + 1, delay_s=1)
    assert rec.events[-1] == ("nacked", job.id, b"q", 1, 0, T0 + 1)
    engine.tick(T0 + 1_100)
    assert rec.events[-1] == ("requeued", job.id, b"q", 1, 0, T0 + 1_100)


def test_retry_timeout_requeues_with_an_additional_delivery() -> None:
    engine, rec = make_engine()
    job = add(engine, T0, retry_s=1)
    engine.get_jobs([b"q"], 1, T0)
    engine.tick(T0 + 2_000)  # past RETRY plus the jitter
    assert rec.kinds(job.id) == ["added", "queued", "delivered", "requeued"]
    assert rec.events[-1][3:5] == (0, 1)


def test_ttl_expiry_fastack_deljob() -> None:
    engine, rec = make_engine()
    expiring = add(engine, T0, ttl_s=1)
    fast = add(engine, T0)
    deleted = add(engine, T0)
    engine.tick(T0 + 1_000)
    engine.fast_ack([fast.id], T0 + 1_000)
    engine.del_jobs([deleted.id], T0 + 1_000)
    assert rec.kinds(expiring.id)[-1] == "expired"
    assert rec.kinds(fast.id)[-2:] == ["acked", "released"]
    assert rec.kinds(deleted.id)[-1] == "deleted"


def test_dead_letter_names_the_queue_left_then_requeues_into_the_other() -> None:
    engine, rec = make_engine(max_deliveries=1, deadletter_queue=b"dlq")
    job = add(engine, T0)
    engine.get_jobs([b"q"], 1, T0)
    engine.nack([job.id], T0 + 1)
    assert rec.events[-3:] == [
        ("nacked", job.id, b"q", 1, 0, T0 + 1),
        ("dead-lettered", job.id, b"q", 1, 0, T0 + 1),
        ("requeued", job.id, b"dlq", 1, 0, T0 + 1),
    ]


def test_eviction_of_delivered_at_most_once_jobs() -> None:
    engine, rec = make_engine()
    job = add(engine, T0, retry_s=0)
    engine.get_jobs([b"q"], 1, T0)
    engine.evict(1, T0 + 5)
    assert rec.events[-1] == ("evicted", job.id, b"q", 0, 0, T0 + 5)


def test_a_blocked_consumer_is_served_on_add() -> None:
    engine, rec = make_engine()
    engine.block(Waiter(object(), [b"q"], 1, False, 0), T0)
    job = engine.add_default_job(b"q", b"x", T0 + 1)
    assert rec.kinds(job.id) == ["added", "queued", "delivered"]


def test_flush_all_deletes_every_job() -> None:
    engine, rec = make_engine()
    jobs = [add(engine, T0) for _ in range(3)]
    engine.flush_all(T0 + 9)
    assert [e for e in rec.events if e[0] == "deleted"] == [
        ("deleted", job.id, b"q", 0, 0, T0 + 9) for job in jobs
    ]


def test_no_consumer_no_events() -> None:
    engine = Engine("ab" * 20, b"seed", random.Random(1))
    engine.add_default_job(b"q", b"x", T0)
    engine.add_default_job(b"q", b"x", T0)  # fast path with events off
    assert engine.qlen(b"q") == 2
    assert engine.job_events is None and engine.take_job_events() == []


def test_dequeue_and_working_leave_the_queue_with_an_event() -> None:
    engine, rec = make_engine()
    dequeued = add(engine, T0)
    postponed = add(engine, T0)
    assert engine.dequeue([dequeued.id], T0 + 1) == 1
    assert engine.working(postponed.id, T0 + 1) > 0
    assert rec.kinds(dequeued.id) == ["added", "queued", "dequeued"]
    assert rec.kinds(postponed.id) == ["added", "queued", "dequeued"]
    assert engine.qlen(b"q") == 0
