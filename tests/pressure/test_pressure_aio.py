"""The asyncio twin: the main flows, blocking, closing, deleting, cancelling."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable

import pytest
import redis
from pressure_helpers import QueueFactory, RedisServer, free_port, keyspace

from conveyor.pressure import (
    AsyncPressureQueue,
    PressureConnectionError,
    QueueAlreadyExists,
    QueueClosed,
    QueueDoesNotExist,
    QueueEmpty,
    QueueFull,
    QueueInUse,
)

STILL_BLOCKED = 0.3
AsyncFactory = Callable[..., AsyncPressureQueue]


@pytest.fixture
async def make_aqueue(
    redis_server: RedisServer, raw: redis.Redis, prefix: str
) -> AsyncIterator[AsyncFactory]:
    made: list[AsyncPressureQueue] = []

    def factory(name: str = "q", **options: object) -> AsyncPressureQueue:
        queue = AsyncPressureQueue(name, redis_url=redis_server.url, prefix=prefix, **options)  # type: ignore[arg-type]
        made.append(queue)
        return queue

    yield factory
    for queue in made:
        await queue.disconnect()


async def still_pending(task: asyncio.Task[object]) -> bool:
    done, _ = await asyncio.wait({task}, timeout=STILL_BLOCKED)
    return not done


async def test_main_flow(make_aqueue: AsyncFactory, raw: redis.Redis) -> None:
    q = make_aqueue(client_uid="async-client")
    assert await q.exists() is False
    with pytest.raises(QueueDoesNotExist):
        await q.get_nowait()
    await q.create(bound=3)
    with pytest.raises(QueueAlreadyExists):
        await q.create()
    await q.put("a")
    await q.put_nowait(b"bc")
    assert await q.length() == 2
    assert await q.len() == 2
    assert await q.get() == b"a"
    stats = await q.stats()
    assert (stats.produced_messages, stats.produced_bytes) == (2, 3)
    assert (stats.consumed_messages, stats.consumed_bytes) == (1, 1)
    assert stats.producer == stats.consumer == "async-client"
    assert await q.closed() is False
    await q.close()
    assert await q.closed() is True
    with pytest.raises(QueueClosed):
        await q.put("late")
    assert [item async for item in q] == [b"bc"]
    with pytest.raises(QueueClosed):
        await q.get()
    assert keyspace(raw, q.prefix, q.name)["closed"] == ("list", 2)
    await q.delete()
    assert raw.keys("*") == []


async def test_bound_blocks_until_get(make_aqueue: AsyncFactory) -> None:
    q = make_aqueue()
    await q.create(bound=2)
    await q.put("1")
    await q.put("2")
    with pytest.raises(QueueFull):
        await q.put_nowait("x")
    third = asyncio.create_task(make_aqueue().put("3"))
    assert await still_pending(third)
    with pytest.raises(QueueInUse):
        await q.put_nowait("x")  # the waiting put holds the producer role
    assert await q.get() == b"1"
    await asyncio.wait_for(third, 5)
    assert [await q.get(), await q.get()] == [b"2", b"3"]
    with pytest.raises(QueueEmpty):
        await q.get(timeout=0.2)


async def test_producer_consumer_tasks(make_aqueue: AsyncFactory) -> None:
    q = make_aqueue()
    await q.create(bound=4)
    producer_q = make_aqueue()

    async def produce() -> None:
        for i in range(100):
            await producer_q.put(str(i))
        await producer_q.close()

    producer = asyncio.create_task(produce())
    received = [int(item) async for item in q]
    await asyncio.wait_for(producer, 10)
    assert received == list(range(100))


async def test_delete_wakes_blocked_consumer(make_aqueue: AsyncFactory, raw: redis.Redis) -> None:
    q = make_aqueue()
    await q.create()
    consumer = asyncio.create_task(make_aqueue().get())
    assert await still_pending(consumer)
    await q.delete()
    with pytest.raises(QueueDoesNotExist):
        await asyncio.wait_for(consumer, 5)
    assert raw.keys("*") == []


async def test_cancelled_get_gives_role_back(make_aqueue: AsyncFactory, raw: redis.Redis) -> None:
    q = make_aqueue()
    await q.create()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(q.get(), STILL_BLOCKED)
    assert raw.llen(q.keys.consumer_free) == 1
    await q.put("x")
    assert await make_aqueue().get_nowait() == b"x"


async def test_unreachable_redis() -> None:
    port = free_port()
    async with AsyncPressureQueue("q", redis_url=f"redis://127.0.0.1:{port}/0") as q:
        with pytest.raises(PressureConnectionError, match=f"127.0.0.1:{port}"):
            await q.put("x")


async def blocked(raw: redis.Redis, count: int) -> None:
    """Wait until `count` clients are blocked in Redis (in their BRPOPs)."""
    for _ in range(500):
        if raw.info("clients")["blocked_clients"] == count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never {count} blocked clients")


async def test_cancelled_get_gives_back_the_element_redis_popped_for_it(
    make_aqueue: AsyncFactory, make_queue: QueueFactory, raw: redis.Redis
) -> None:
    q = make_aqueue()
    await q.create(bound=1)
    getter = asyncio.create_task(q.get())
    await blocked(raw, 1)
    # From this thread, so the loop cannot read the BRPOP's reply before the cancel: Redis
    # hands the element to the waiting BRPOP, then the task is cancelled.
    make_queue().put("payload")
    getter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await getter
    stats = await q.stats()
    assert (stats.length, stats.consumed_messages, stats.consumer_busy) == (1, 0, False)
    assert await q.get_nowait() == b"payload"  # not lost
    await make_aqueue().put("next", timeout=5)  # and the queue is not wedged full
    assert await q.get_nowait() == b"next"


async def test_an_element_given_back_is_the_next_one_got(
    make_aqueue: AsyncFactory, make_queue: QueueFactory, raw: redis.Redis
) -> None:
    q = make_aqueue()
    await q.create()
    getter = asyncio.create_task(q.get())
    await blocked(raw, 1)
    producer = make_queue()
    producer.put("first")  # served to the waiting BRPOP
    producer.put("second")
    getter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await getter
    assert [await q.get_nowait(), await q.get_nowait()] == [b"first", b"second"]


async def test_cancelled_wait_for_a_role_gives_back_the_token_redis_popped_for_it(
    make_aqueue: AsyncFactory, make_queue: QueueFactory, raw: redis.Redis
) -> None:
    q = make_aqueue()
    await q.create()
    holder = make_queue()
    holding = threading.Thread(target=holder.get)  # holds the consumer role, waiting
    holding.start()
    await blocked(raw, 1)
    waiter = asyncio.create_task(make_aqueue(client_uid="waiter").get())
    await blocked(raw, 2)  # the waiter is in its BRPOP on :consumer_free
    make_queue().put("x")
    # The holder gets the element and returns the role, which Redis hands to the waiter's
    # BRPOP; joined from this thread, so the loop cannot read that reply before the cancel.
    holding.join(10)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert raw.llen(q.keys.consumer_free) == 1
    assert (await q.stats()).consumer_busy is False
    with pytest.raises(QueueEmpty):  # not QueueInUse: the role is free
        await q.get_nowait()
