"""The leaks found in review, each as the scenario that showed it.

A node runs for months: nothing a client does over and over may leave state behind.
These drive the core facade on a virtual clock; the hypothesis state machine
(test_engine_properties) states the same rules as invariants over random histories.
"""

from __future__ import annotations

import random

from conveyor.core.args import AddJobArgs, EngineConfig, GetJobArgs
from conveyor.core.node import NodeCore
from conveyor.core.records import job_record
from conveyor.core.waiters import Waiter

T0 = 1_800_000_000_000
GC_MS = 1_000


def make_core() -> NodeCore:
    return NodeCore("c" * 40, b"seed", random.Random(2), EngineConfig(queue_gc_idle_ms=GC_MS))


def run_until(core: NodeCore, now_ms: int) -> None:
    """Tick at every deadline up to now_ms, as the node's timer would."""
    while (deadline := core.next_deadline()) is not None and deadline <= now_ms:
        core.tick(deadline)
    core.tick(now_ms)


def block(core: NodeCore, queue: bytes, timeout_ms: int, now_ms: int) -> Waiter:
    waiter = core.get_job(GetJobArgs([queue], 1, timeout_ms), object(), now_ms)
    assert isinstance(waiter, Waiter)
    return waiter


def test_queue_whose_gc_fired_while_a_client_was_blocked_is_collected_later() -> None:
    core = make_core()
    waiter = block(core, b"q", 0, T0)
    run_until(core, T0 + 5 * GC_MS)  # the GC timer fires and finds a blocked client
    assert b"q" in core.queues
    core.unblock(waiter, T0 + 5 * GC_MS)  # the client goes away
    run_until(core, T0 + 7 * GC_MS)
    assert b"q" not in core.queues


def test_queue_emptied_by_dequeue_or_working_is_collected() -> None:
    core = make_core()
    jobs = {
        queue: core.add_job(AddJobArgs(queue, b"x", None, 0, None, None, None, False), T0)
        for queue in (b"d", b"w")
    }
    run_until(core, T0 + 3 * GC_MS)  # the GC timers fire while the queues hold a job
    assert core.dequeue([jobs[b"d"].id], T0 + 3 * GC_MS) == 1
    assert core.working(jobs[b"w"].id, T0 + 3 * GC_MS) > 0
    assert core.qlen(b"d") == core.qlen(b"w") == 0
    run_until(core, T0 + 5 * GC_MS)
    assert b"d" not in core.queues and b"w" not in core.queues


def test_waiter_list_holds_only_the_live_waiter_under_a_cycling_poller() -> None:
    core = make_core()
    long_waiter = block(core, b"q", 0, T0)  # first in line, never answered
    now = T0
    for _ in range(10_000):  # a poller with 100 ms timeouts
        block(core, b"q", 100, now)
        now += 100
        run_until(core, now)
    queue = core.queues[b"q"]
    assert list(queue.waiters) == [long_waiter]
    assert queue.blocked == 1 and core.blocked_clients == 1
    assert core.timers.call_entries() <= 2


def test_a_served_getjob_leaves_no_timer_entry_holding_it() -> None:
    core = make_core()
    tokens = []
    for index in range(1_000):
        token = object()
        tokens.append(token)
        waiter = core.get_job(GetJobArgs([b"q"], 1, 3_600_000), token, T0 + index)
        assert isinstance(waiter, Waiter)
        core.add_default_job(b"q", b"x", T0 + index)  # answers it at once
        assert waiter.done
    core.take_replies()
    pending = core.timers.pending_calls()
    assert not [arg for _, _, arg in pending if isinstance(arg, Waiter)]
    # Cancelled entries are dropped in bulk: the heap stays small.
    assert core.timers.call_entries() < 200


def test_getjob_on_a_leaving_node_creates_no_queue() -> None:
    core = make_core()
    core.set_leaving(True)
    try:
        core.get_job(GetJobArgs([b"never-made"], 1, 0), object(), T0)
    except Exception as exc:
        assert str(exc).startswith("LEAVING")
    else:
        raise AssertionError("a leaving node blocked a client")
    assert b"never-made" not in core.queues
    assert core.get_job(GetJobArgs([b"never-made"], 1, 0, nohang=True), object(), T0) == []
    assert b"never-made" not in core.queues


def test_idle_queues_go_sooner_under_memory_pressure() -> None:
    """Disque's queue GC: 300 s idle normally, 10 s above 75 % of maxmemory, 2 s above
    95 % (queues made before the pressure are collected at the shorter time too)."""
    core = NodeCore("c" * 40, b"seed", random.Random(2))  # the default 300 s
    for n in range(100):
        assert core.get_jobs([b"q%d" % n], 1, T0) == []  # GETJOB makes an empty queue
    assert len(core.queues) == 100
    baseline = 30 << 20  # a node's own RSS dwarfs 100 queues, as in a real process
    core.set_memory_limit(0, "acks", baseline, T0)
    used = core.used_memory()
    core.set_memory_limit(used * 100 // 85, "acks", baseline, T0)  # 85 %: level 1
    assert core.memory_warning() == 1
    run_until(core, T0 + 9_000)
    assert len(core.queues) == 100
    run_until(core, T0 + 10_000)
    assert len(core.queues) == 0
    for n in range(10):
        core.get_jobs([b"r%d" % n], 1, T0 + 10_000)
    core.set_memory_limit(used * 100 // 99, "acks", baseline, T0 + 10_000)
    assert core.memory_warning() == 2
    run_until(core, T0 + 12_000)
    assert len(core.queues) == 0
    core.set_memory_limit(0, "acks", baseline, T0 + 12_000)
    core.get_jobs([b"s"], 1, T0 + 12_000)
    run_until(core, T0 + 100_000)
    assert b"s" in core.queues  # no pressure: 300 s again


def test_jobs_share_their_queue_name_with_the_queue() -> None:
    """Each request brings its own copy of the queue name; a job keeping it would cost 48
    bytes more at a million queued jobs. Every path that makes a job uses the queue's."""
    core = make_core()
    names = [bytes(bytearray(b"q")) for _ in range(4)]  # distinct objects, equal
    first = core.add_default_job(names[0], b"a", T0)  # creates the queue
    queue_name = core.queues[b"q"].name
    fast = core.add_default_job(names[1], b"b", T0)
    with_options = core.add_job(AddJobArgs(names[2], b"c", None, 0, 5, 60, None, False), T0)
    record = job_record(fast, core.node_name, T0)
    imported = core.import_job(record._replace(id=fast.id[:-4] + b"ffff", queue=names[3]), T0)
    assert imported is not None
    assert all(job.queue is queue_name for job in (first, fast, with_options, imported))
