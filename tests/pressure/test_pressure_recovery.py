"""Crash recovery, timeouts and an unreachable or dying Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import redis
from pressure_helpers import QueueFactory, RedisServer, free_port, start_redis, wait_until

from conveyor.pressure import (
    PressureConnectionError,
    PressureQueue,
    QueueEmpty,
    QueueFull,
    QueueInUse,
)

STILL_BLOCKED = 0.3

# A client that takes a role and then blocks holding it, until we SIGKILL it.
HOLDER = """
import sys
from conveyor.pressure import PressureQueue
url, prefix, role = sys.argv[1:4]
q = PressureQueue("q", redis_url=url, prefix=prefix)
if role == "producer":
    q.put("blocked")  # the queue is full: waits for room holding the producer role
else:
    q.get()  # the queue is empty: waits holding the consumer role
"""


def start_holder(redis_server: RedisServer, prefix: str, role: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, redis_server.url, prefix, role],
        cwd=Path(__file__).resolve().parents[2],
    )


def kill(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)  # reaped, so the pid no longer looks alive


def test_dead_producer_is_recovered_by_unlock(
    make_queue: QueueFactory, raw: redis.Redis, redis_server: RedisServer, prefix: str
) -> None:
    q = make_queue(client_uid="main")
    q.create(bound=1)
    q.put("first")
    holder = start_holder(redis_server, prefix, "producer")
    try:
        wait_until(lambda: raw.get(q.keys.producer) != b"main", timeout=15)
        holder_uid = raw.get(q.keys.producer).decode()  # type: ignore[union-attr]
        assert f":{holder.pid}:" in holder_uid
        with pytest.raises(QueueInUse):
            q.unlock(producer=True, consumer=False)  # refuses: the holder is alive
    finally:
        kill(holder)
    assert raw.llen(q.keys.producer_free) == 0, "the dead holder took the token with it"
    with pytest.raises(QueueInUse):
        q.put_nowait("x")
    result = q.unlock(producer=True, consumer=False)
    assert result.producer_released and not result.consumer_released
    assert result.producer == holder_uid
    assert raw.llen(q.keys.producer_free) == 1
    assert q.get() == b"first"
    q.put_nowait("second")
    assert q.get() == b"second"
    again = q.unlock()
    assert not again.producer_released and not again.consumer_released


def test_delete_waiting_for_dead_consumer_finishes_after_unlock(
    make_queue: QueueFactory, raw: redis.Redis, redis_server: RedisServer, prefix: str
) -> None:
    q = make_queue()
    q.create()
    holder = start_holder(redis_server, prefix, "consumer")
    try:
        wait_until(lambda: raw.get(q.keys.consumer) is not None, timeout=15)
        wait_until(lambda: raw.llen(q.keys.consumer_free) == 0)
    finally:
        kill(holder)
    deleted = threading.Event()
    deleter = threading.Thread(target=lambda: (q.delete(), deleted.set()), daemon=True)
    deleter.start()
    assert not deleted.wait(STILL_BLOCKED), "delete waits for the consumer role"
    assert not q.exists()
    make_queue().unlock(consumer=True, producer=False)
    assert deleted.wait(5)
    assert raw.keys("*") == []


def test_stalled_delete_times_out_then_force_clears(
    make_queue: QueueFactory, raw: redis.Redis
) -> None:
    q = make_queue()
    q.create()
    assert raw.rpop(q.keys.consumer_free) is not None  # a consumer that died holding the role
    raw.set(q.keys.consumer, "ghost:1:1")
    with pytest.raises(QueueInUse, match="ghost"):
        q.delete(timeout=0.3)
    assert not q.exists()
    assert raw.keys("*"), "half deleted: tokens and markers remain"
    with pytest.raises(QueueInUse):
        q.create()  # refuses to mix with the remains
    q.delete(force=True)
    assert raw.keys("*") == []
    q.create()
    assert q.exists()


def test_unlock_restores_lost_room(make_queue: QueueFactory, raw: redis.Redis) -> None:
    q = make_queue()
    q.create(bound=2)
    # A producer killed after popping :producer_free and :not_full, before pushing.
    raw.rpop(q.keys.producer_free)
    raw.rpop(q.keys.not_full)
    with pytest.raises(QueueInUse):
        q.put_nowait("x")
    result = q.unlock()
    assert result.producer_released and result.not_full_restored
    assert not result.consumer_released
    q.put_nowait("x")
    q.put_nowait("y")
    with pytest.raises(QueueFull):
        q.put_nowait("z")


def test_unlock_restores_room_lost_with_a_popped_element(
    make_queue: QueueFactory, raw: redis.Redis, redis_server: RedisServer, prefix: str
) -> None:
    q = make_queue()
    q.create(bound=1)
    consumer = start_holder(redis_server, prefix, "consumer")
    try:
        wait_until(lambda: raw.info("clients")["blocked_clients"] == 1, timeout=15)
        # Stopped in its BRPOP, the consumer cannot read what Redis hands it: the element
        # goes with it, as with a connection that drops before the reply is read.
        consumer.send_signal(signal.SIGSTOP)
        q.put("lost")
    finally:
        kill(consumer)
    stats = q.stats()
    assert (stats.length, stats.consumer_busy, stats.producer_busy) == (0, True, False)
    with pytest.raises(QueueFull):  # empty, yet full: the room went with the element
        q.put("x", timeout=0.3)
    result = q.unlock()
    assert result.consumer_released and not result.producer_released
    assert result.not_full_restored
    q.put_nowait("x")
    assert q.get_nowait() == b"x"


def test_unlock_restores_room_with_no_role_to_give_back(
    make_queue: QueueFactory, raw: redis.Redis
) -> None:
    q = make_queue()
    q.create(bound=1)
    q.put("lost")
    # A consumer whose connection dropped after Redis served its BRPOP, whose role its
    # `finally` then gave back: the element and the room are gone, no role is stranded.
    raw.rpop(q.keys.queue)
    with pytest.raises(QueueFull):
        q.put("x", timeout=0.3)
    result = q.unlock()
    assert not result.consumer_released and not result.producer_released
    assert result.not_full_restored
    q.put_nowait("x")
    # A producer holding the role may hold :not_full (about to push): left alone.
    raw.rpop(q.keys.producer_free)
    raw.rpop(q.keys.queue)
    assert q.unlock(producer=False).not_full_restored is False


def test_unlock_refuses_live_holder_in_this_process(make_queue: QueueFactory) -> None:
    q = make_queue()
    q.create(bound=1)
    q.put("a")
    producer = threading.Thread(target=lambda: make_queue().put("b"), daemon=True)
    producer.start()
    wait_until(lambda: q.stats().producer_busy)
    with pytest.raises(QueueInUse, match=str(os.getpid())):
        q.unlock()
    assert q.get() == b"a"
    producer.join(5)
    assert not producer.is_alive()
    assert q.get() == b"b"


def test_timeouts_give_roles_back(make_queue: QueueFactory, raw: redis.Redis) -> None:
    q = make_queue()
    q.create(bound=1)
    with pytest.raises(QueueEmpty):
        q.get(timeout=0.3)
    assert raw.llen(q.keys.consumer_free) == 1
    q.put("a")
    with pytest.raises(QueueFull):
        q.put("b", timeout=0.3)
    assert raw.llen(q.keys.producer_free) == 1
    assert raw.llen(q.keys.not_full) == 0, "still full: no room was invented"
    # The roles really are free: other clients can take them at once.
    other = make_queue()
    assert other.get_nowait() == b"a"
    other.put_nowait("c")


def test_unreachable_redis_raises_typed_error() -> None:
    port = free_port()  # nothing listens here
    q = PressureQueue("q", redis_url=f"redis://127.0.0.1:{port}/0")
    for operation in (q.exists, q.create, lambda: q.put("x"), q.get_nowait, q.stats):
        with pytest.raises(PressureConnectionError, match=f"127.0.0.1:{port}/0"):
            operation()


def test_redis_dying_under_a_blocked_consumer(tmp_path: Path) -> None:
    server = start_redis(tmp_path)
    try:
        q = PressureQueue("q", redis_url=server.url)
        q.create()
        errors: list[BaseException] = []

        def consume() -> None:
            try:
                q.get()
            except BaseException as exc:
                errors.append(exc)

        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        consumer.join(STILL_BLOCKED)
        assert consumer.is_alive()
    finally:
        server.stop()
    consumer.join(10)
    assert not consumer.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], PressureConnectionError)
    assert f"127.0.0.1:{server.port}" in str(errors[0])
