"""The fast path against a client following the specification: messages, bound, timeouts.

`SpecClient` transcribes the specification's reference command sequences; it shares no code
with the library. Every exchange here crosses implementations: what one puts the other
gets, a full queue blocks producers of either kind, and a library call that times out
leaves the roles free for the reference client.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
import redis
from pressure_helpers import QueueFactory, RedisServer, background, wait_until
from pressure_spec_client import QueueEmptyError, QueueFullError, SpecClient

from conveyor.pressure import AsyncPressureQueue, QueueEmpty, QueueFull, QueueInUse

STILL_BLOCKED = 0.3


def test_messages_cross_both_ways_through_the_fast_path(
    make_queue: QueueFactory, spec_redis: redis.Redis, raw: redis.Redis, prefix: str
) -> None:
    q = make_queue(client_uid="lib")
    q.create(bound=4)
    spec = SpecClient(spec_redis, prefix, "q", "spec")
    # Interleaved: each side reads what the other wrote, in FIFO order, including elements
    # the other side queued behind its own.
    spec.put(b"s1")
    q.put("l1")
    spec.put(b"")
    assert q.get() == b"s1"
    assert spec.get() == b"l1"
    q.put(b"\x00\xff")
    assert q.get() == b""
    assert spec.get() == b"\x00\xff"
    stats = q.stats()
    assert (stats.produced_messages, stats.consumed_messages) == (4, 4)
    assert (stats.produced_bytes, stats.consumed_bytes) == (6, 6)
    assert raw.llen(q.keys.not_full) == 1


def test_full_queue_blocks_reference_producer_until_fast_get(
    make_queue: QueueFactory, spec_redis: redis.Redis, raw: redis.Redis, prefix: str
) -> None:
    q = make_queue()
    q.create(bound=2)
    q.put("a")
    q.put("b")
    spec = SpecClient(spec_redis, prefix, "q", "spec")
    with pytest.raises(QueueFullError):
        spec.put_nowait(b"c")
    blocked, errors = background(lambda: spec.put(b"c"))
    blocked.join(STILL_BLOCKED)
    assert blocked.is_alive(), "the reference producer must wait for room"
    assert raw.llen(q.keys.queue) == 2
    assert q.get() == b"a"  # the fast path pushes :not_full, which wakes it
    blocked.join(5)
    assert not blocked.is_alive() and errors == []
    assert [q.get(), q.get()] == [b"b", b"c"]


def test_full_queue_blocks_fast_producer_until_reference_get(
    make_queue: QueueFactory, spec_redis: redis.Redis, raw: redis.Redis, prefix: str
) -> None:
    q = make_queue()
    q.create(bound=2)
    spec = SpecClient(spec_redis, prefix, "q", "spec")
    spec.put(b"a")
    spec.put(b"b")
    with pytest.raises(QueueFull):
        q.put_nowait("c")
    with pytest.raises(QueueFull):
        q.put("c", timeout=0.2)
    # The timed-out put gave the role and no room back: the reference sees "full", not "in use".
    with pytest.raises(QueueFullError):
        spec.put_nowait(b"c")
    blocked, errors = background(lambda: q.put("c"))
    blocked.join(STILL_BLOCKED)
    assert blocked.is_alive()
    assert spec.get() == b"a"
    blocked.join(5)
    assert not blocked.is_alive() and errors == []
    assert raw.llen(q.keys.queue) == 2
    assert raw.llen(q.keys.not_full) == 0, "full again"
    assert [spec.get(), spec.get()] == [b"b", b"c"]


def test_fast_timeouts_leave_roles_to_the_reference_client(
    make_queue: QueueFactory, spec_redis: redis.Redis, prefix: str
) -> None:
    q = make_queue()
    q.create(bound=1)
    spec = SpecClient(spec_redis, prefix, "q", "spec")
    with pytest.raises(QueueEmpty):
        q.get(timeout=0.2)
    with pytest.raises(QueueEmptyError):  # not QueueInUseError: the role came back
        spec.get_nowait()
    spec.put_nowait(b"x")
    with pytest.raises(QueueFull):
        q.put(b"y", timeout=0.2)
    assert spec.get_nowait() == b"x"
    # A reference consumer waiting on an empty queue holds its role: the fast path sees it.
    waiting, errors = background(spec.get)
    # :consumer still says "spec" from the get_nowait above: wait for the role token to
    # be taken, or our get_nowait can take it first (a CI run saw QueueEmpty).
    wait_until(
        lambda: (
            spec_redis.llen(q.keys.consumer_free) == 0
            and spec_redis.get(q.keys.consumer) == b"spec"
        )
    )
    with pytest.raises(QueueInUse):
        q.get_nowait()
    q.put("z")
    waiting.join(5)
    assert not waiting.is_alive() and errors == []


async def test_async_fast_path_with_reference_client(
    redis_server: RedisServer, spec_redis: redis.Redis, prefix: str
) -> None:
    spec = SpecClient(spec_redis, prefix, "q", "spec")
    async with AsyncPressureQueue("q", redis_url=redis_server.url, prefix=prefix) as q:
        await q.create(bound=2)
        spec.put(b"from-spec")
        await q.put("from-async")
        assert await q.get() == b"from-spec"
        assert await asyncio.to_thread(spec.get) == b"from-async"
        waiting = asyncio.create_task(q.get())  # empty: waits holding the role
        await asyncio.sleep(STILL_BLOCKED)
        assert not waiting.done()
        await asyncio.to_thread(spec.put, b"late")
        assert await asyncio.wait_for(waiting, 5) == b"late"
        stats = await q.stats()
        assert stats.produced_messages == stats.consumed_messages == 3


def test_bound_holds_under_concurrent_producers(
    make_queue: QueueFactory, spec_redis: redis.Redis, raw: redis.Redis, prefix: str
) -> None:
    """Bound 5, four producer threads (three fast path, one reference), a slow consumer.

    A monitor polls LLEN all along: the queue must reach its bound (so an overshoot would
    be seen) and never pass it, and every message must arrive once, in each producer's order.
    """
    bound, per_producer = 5, 60
    q = make_queue(client_uid="consumer")
    q.create(bound=bound)
    lengths: list[int] = []
    stop = threading.Event()

    def monitor() -> None:
        observer = redis.Redis(host="127.0.0.1", port=raw.connection_pool.connection_kwargs["port"])
        while not stop.is_set():
            lengths.append(int(observer.llen(q.keys.queue)))
        observer.close()

    def fast_producer(n: int) -> Callable[[], None]:
        def run() -> None:
            producer = make_queue(client_uid=f"fast-{n}")
            for i in range(per_producer):
                producer.put(f"{n}:{i}")

        return run

    def reference_producer() -> None:
        spec = SpecClient(spec_redis, prefix, "q", "spec-3")
        for i in range(per_producer):
            spec.put(f"3:{i}".encode())

    watcher = threading.Thread(target=monitor, daemon=True)
    watcher.start()
    producers = [background(fast_producer(n)) for n in range(3)]
    producers.append(background(reference_producer))
    received: list[bytes] = []
    for _ in range(4 * per_producer):
        if len(received) % 20 == 0:
            time.sleep(0.05)  # let the producers pile up against the bound
        received.append(q.get(timeout=10))
        assert q.length() <= bound
    for thread, errors in producers:
        thread.join(10)
        assert not thread.is_alive() and errors == []
    stop.set()
    watcher.join(5)
    assert max(lengths) == bound, (
        f"the bound was {'passed' if max(lengths) > bound else 'never reached'}"
    )
    assert len(lengths) > 100
    for n in range(4):
        assert [m for m in received if m.startswith(f"{n}:".encode())] == [
            f"{n}:{i}".encode() for i in range(per_producer)
        ]
    stats = q.stats()
    assert stats.produced_messages == stats.consumed_messages == 4 * per_producer
    assert (stats.length, stats.producer_busy, stats.consumer_busy) == (0, False, False)
    assert raw.llen(q.keys.not_full) == 1
