"""A Redis at its maxmemory (policy noeviction): clear errors, no stranded role, no lost element.

Over maxmemory Redis refuses every MULTI, and commands that may grow memory (LPUSH, SET,
INCR) alone or as a script's first write; single reads, pops and deletes still run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from pressure_helpers import QueueFactory, RedisServer, background, keyspace, wait_until

from conveyor.pressure import (
    AsyncPressureQueue,
    PressureProtocolError,
    PressureQueue,
    QueueClosed,
    QueueEmpty,
    QueueFull,
    QueueStats,
)


@contextmanager
def out_of_memory(raw: redis.Redis) -> Iterator[None]:
    """Every write that may grow memory is refused until the block ends."""
    assert raw.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
    raw.config_set("maxmemory", 1)
    try:
        yield
    finally:
        raw.config_set("maxmemory", 0)


def test_failures_under_maxmemory_give_the_roles_back(
    make_queue: QueueFactory, raw: redis.Redis
) -> None:
    q = make_queue()
    q.create(bound=1)
    with out_of_memory(raw):
        with pytest.raises(QueueEmpty):
            q.get(timeout=0.05)
        assert raw.llen(q.keys.consumer_free) == 1
        with pytest.raises(PressureProtocolError, match="maxmemory"):
            q.put_nowait("refused")
        assert raw.llen(q.keys.producer_free) == 1
    q.put("a")
    # Waiting for room, holding the role, when memory runs out: its timeout gives it back.
    producer, errors = background(lambda: q.put("b", timeout=0.5))
    wait_until(lambda: raw.llen(q.keys.producer_free) == 0)
    with out_of_memory(raw):
        producer.join(5)
        assert len(errors) == 1 and isinstance(errors[0], QueueFull)
        assert raw.llen(q.keys.producer_free) == 1
        assert not raw.exists(q.keys.not_full), "still full: no room was invented"
    # Memory is back: the roles are free for anyone, and nothing was lost.
    other = make_queue()
    assert other.get_nowait() == b"a"
    other.put_nowait("c")
    other.close()
    assert q.get_nowait() == b"c"


def test_delete_under_maxmemory_completes(make_queue: QueueFactory, raw: redis.Redis) -> None:
    q = make_queue()
    q.create(bound=2)
    q.put("a")
    with out_of_memory(raw):
        q.delete(timeout=2)  # deleting is how memory gets freed
    assert raw.keys(f"{q.prefix}:*") == []


def test_element_reaching_a_waiting_get_as_memory_runs_out_is_returned(
    make_queue: QueueFactory, raw: redis.Redis
) -> None:
    q = make_queue()
    q.create()
    got: list[bytes] = []
    consumer, errors = background(lambda: got.append(q.get(timeout=10)))
    wait_until(lambda: raw.llen(q.keys.consumer_free) == 0)  # holding the role, waiting
    raw.config_set("maxmemory", raw.info("memory")["used_memory"] + (1 << 20))
    try:
        # Another client's write crosses maxmemory in the same step as the element arrives:
        # the get's BRPOP is served, and its next script runs over the limit.
        # (SETRANGE: a small command that makes a 4 MB string.)
        raw.pipeline().setrange(f"{q.prefix}:ballast", 4 << 20, "x").lpush(
            q.keys.queue, "a"
        ).execute()
        consumer.join(10)
    finally:
        raw.config_set("maxmemory", 0)
    assert not consumer.is_alive()
    assert errors == [] and got == [b"a"]
    assert raw.llen(q.keys.consumer_free) == 1


def test_put_over_maxmemory_is_refused_and_changes_nothing(
    make_queue: QueueFactory, raw: redis.Redis
) -> None:
    q = make_queue()
    q.create(bound=2)
    q.put("a")
    with out_of_memory(raw):
        for put in (lambda: q.put("b"), lambda: q.put_nowait("b")):
            with pytest.raises(PressureProtocolError, match="maxmemory"):
                put()
        assert raw.lrange(q.keys.queue, 0, -1) == [b"a"]
        assert raw.llen(q.keys.producer_free) == 1 and raw.llen(q.keys.not_full) == 1
        assert q.get_nowait() == b"a"  # consumers still drain
    q.put("c")
    assert q.stats().produced_messages == 2


def test_inspection_works_over_maxmemory_sync_and_async(
    make_queue: QueueFactory, raw: redis.Redis
) -> None:
    q = make_queue()
    q.create(bound=3)
    q.put("a")

    async def inspect() -> tuple[QueueStats, int, bool]:
        async with AsyncPressureQueue(q.name, redis_url=q.redis_url, prefix=q.prefix) as aq:
            return await aq.stats(), await aq.length(), await aq.closed()

    with out_of_memory(raw):
        seen = (q.stats(), q.length(), q.closed())
        assert asyncio.run(inspect()) == seen
    stats, length, closed = seen
    assert (stats.length, stats.bound, stats.produced_messages, length, closed) == (
        1,
        3,
        1,
        1,
        False,
    )


def test_close_and_unlock_work_over_maxmemory_sync_and_async(
    make_queue: QueueFactory, raw: redis.Redis
) -> None:
    q, other = make_queue("q"), make_queue("other")
    for queue in (q, other):
        queue.create(bound=1)
        queue.put("a")
    # Both roles of q stranded by clients that died (a token popped, never given back).
    raw.rpop(q.keys.producer_free)
    raw.rpop(q.keys.consumer_free)
    raw.set(q.keys.producer, "ghost")
    raw.set(q.keys.consumer, "ghost")

    async def close_other() -> None:
        async with AsyncPressureQueue("other", redis_url=q.redis_url, prefix=q.prefix) as aq:
            await aq.close()

    with out_of_memory(raw):
        result = q.unlock()
        assert result.producer_released and result.consumer_released
        q.close()  # closing is how the consumers of a full Redis get to finish
        asyncio.run(close_other())
        for queue in (q, other):
            assert raw.llen(queue.keys.closed) == 2
            assert raw.llen(queue.keys.producer_free) == 1
            assert queue.get_nowait() == b"a"
            with pytest.raises(QueueClosed):
                queue.get_nowait()


class MemoryRunsOutAfterSetnx(redis.Redis):
    """A client whose SETNX is the write that takes Redis over its maxmemory."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        reply = super().execute_command(*args, **options)
        if args[0] == "SETNX":
            super().execute_command("CONFIG", "SET", "maxmemory", 1)
        return reply


def test_create_that_crosses_maxmemory_still_makes_a_whole_queue(
    redis_server: RedisServer, raw: redis.Redis, prefix: str
) -> None:
    client = MemoryRunsOutAfterSetnx(host="127.0.0.1", port=redis_server.port)
    q = PressureQueue("q", prefix=prefix, client=client)
    try:
        q.create(bound=2)
    finally:
        raw.config_set("maxmemory", 0)
        client.close()
    # Not a :bound without tokens, on which every put and get would wait forever.
    assert keyspace(raw, prefix, "q") == {
        "bound": ("string", "2"),
        "producer_free": ("list", 1),
        "consumer_free": ("list", 1),
        "not_full": ("list", 1),
    }
