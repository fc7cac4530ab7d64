"""Interop: the spec's reference command sequences on one side, `PressureQueue` on the other."""

from __future__ import annotations

import threading

import pytest
import redis
from pressure_helpers import QueueFactory, background, keyspace, wait_until
from pressure_spec_client import (
    QueueClosedError,
    QueueEmptyError,
    QueueFullError,
    QueueInUseError,
    SpecClient,
)

from conveyor.pressure import QueueClosed, QueueDoesNotExist, QueueInUse

COUNT = 200
STILL_BLOCKED = 0.3


def test_spec_producer_library_consumer(
    make_queue: QueueFactory, spec_redis: redis.Redis, raw: redis.Redis, prefix: str
) -> None:
    spec = SpecClient(spec_redis, prefix, "q", "spec-producer")
    spec.create(3)
    items = [f"item-{i}".encode() for i in range(COUNT)]

    def produce() -> None:
        for item in items:
            spec.put(item)
        spec.close()

    producer, errors = background(produce)
    q = make_queue(client_uid="lib-consumer")
    assert list(q) == items
    producer.join(30)
    assert not producer.is_alive() and errors == []
    stats = q.stats()
    assert stats.produced_messages == stats.consumed_messages == COUNT
    assert stats.produced_bytes == stats.consumed_bytes == sum(map(len, items))
    assert (stats.producer, stats.consumer) == ("spec-producer", "lib-consumer")
    state = keyspace(raw, prefix, "q")
    assert state["closed"] == ("list", 2)
    assert "" not in state
    q.delete()
    assert raw.keys("*") == []


def test_library_producer_spec_consumer(
    make_queue: QueueFactory, spec_redis: redis.Redis, raw: redis.Redis, prefix: str
) -> None:
    q = make_queue(client_uid="lib-producer")
    q.create(bound=3)
    items = [f"item-{i}".encode() for i in range(COUNT)]

    def produce() -> None:
        for item in items:
            q.put(item)
        q.close()

    producer, errors = background(produce)
    spec = SpecClient(spec_redis, prefix, "q", "spec-consumer")
    received = []
    while True:
        try:
            received.append(spec.get())
        except QueueClosedError:
            break
    producer.join(30)
    assert not producer.is_alive() and errors == []
    assert received == items
    stats = q.stats()
    assert stats.consumed_messages == COUNT
    assert stats.consumed_bytes == sum(map(len, items))
    assert stats.consumer == "spec-consumer"
    spec.delete()
    assert raw.keys("*") == []


def test_non_blocking_calls_across_implementations(
    make_queue: QueueFactory, spec_redis: redis.Redis, prefix: str
) -> None:
    q = make_queue()
    q.create(bound=2)
    spec = SpecClient(spec_redis, prefix, "q", "spec")
    with pytest.raises(QueueEmptyError):
        spec.get_nowait()
    spec.put_nowait(b"a")
    q.put_nowait("b")
    with pytest.raises(QueueFullError):
        spec.put_nowait(b"c")
    assert q.get_nowait() == b"a"
    spec.put_nowait(b"c")
    assert spec.get_nowait() == b"b"
    assert q.get_nowait() == b"c"
    q.close()
    with pytest.raises(QueueClosedError):
        spec.put_nowait(b"d")
    with pytest.raises(QueueClosedError):
        spec.get_nowait()
    with pytest.raises(QueueClosedError):
        spec.close()


def test_roles_are_exclusive_across_implementations(
    make_queue: QueueFactory, spec_redis: redis.Redis, raw: redis.Redis, prefix: str
) -> None:
    q = make_queue()
    q.create(bound=1)
    q.put("a")
    spec = SpecClient(spec_redis, prefix, "q", "spec-producer")
    blocked_put, errors = background(lambda: spec.put(b"b"))  # holds the role, waits for room
    wait_until(lambda: raw.get(q.keys.producer) == b"spec-producer")
    with pytest.raises(QueueInUse):
        q.put_nowait("x")
    assert q.get() == b"a"
    blocked_put.join(5)
    assert not blocked_put.is_alive() and errors == []
    # And the other way round: a library consumer waiting on an empty queue holds its role.
    assert q.get() == b"b"
    waiting_get, get_errors = background(make_queue().get)
    wait_until(lambda: raw.llen(q.keys.consumer_free) == 0)
    with pytest.raises(QueueInUseError):
        spec.get_nowait()
    spec.put(b"c")
    waiting_get.join(5)
    assert not waiting_get.is_alive() and get_errors == []


def test_spec_delete_wakes_library_consumer(
    make_queue: QueueFactory, spec_redis: redis.Redis, raw: redis.Redis, prefix: str
) -> None:
    q = make_queue()
    q.create()
    consumer, errors = background(q.get)
    wait_until(lambda: raw.llen(q.keys.consumer_free) == 0)
    consumer.join(STILL_BLOCKED)
    assert consumer.is_alive()
    SpecClient(spec_redis, prefix, "q", "spec-deleter").delete()
    consumer.join(5)
    assert not consumer.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], QueueDoesNotExist)
    assert raw.keys("*") == []


def test_library_delete_wakes_spec_consumer(
    make_queue: QueueFactory, spec_redis: redis.Redis, raw: redis.Redis, prefix: str
) -> None:
    q = make_queue()
    q.create()
    spec = SpecClient(spec_redis, prefix, "q", "spec-consumer")
    consumer, errors = background(spec.get)
    wait_until(lambda: raw.get(q.keys.consumer) == b"spec-consumer")
    consumer.join(STILL_BLOCKED)
    assert consumer.is_alive()
    q.delete(timeout=5)
    consumer.join(5)
    assert not consumer.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], QueueClosedError)
    assert raw.keys("*") == []


def test_spec_close_ends_library_iteration(
    make_queue: QueueFactory, spec_redis: redis.Redis, prefix: str
) -> None:
    q = make_queue()
    q.create()
    spec = SpecClient(spec_redis, prefix, "q", "spec")
    spec.put(b"only")
    consumer_done = threading.Event()
    received: list[bytes] = []

    def consume() -> None:
        received.extend(q)
        consumer_done.set()

    threading.Thread(target=consume, daemon=True).start()
    assert not consumer_done.wait(STILL_BLOCKED)
    spec.close()
    assert consumer_done.wait(5)
    assert received == [b"only"]
    with pytest.raises(QueueClosed):
        q.put("late")
