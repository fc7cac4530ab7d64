"""Redis errors reach the caller as the same precise text from both clients."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import redis
from pressure_helpers import QueueFactory, free_port

from conveyor.pressure import (
    AsyncPressureQueue,
    PressureConnectionError,
    PressureError,
    PressureProtocolError,
    PressureQueue,
    list_queues,
)
from conveyor.pressure.aio import make_async_client
from conveyor.pressure.queue import make_client

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def sync_error(action: Callable[[], object]) -> str:
    with pytest.raises(PressureProtocolError) as caught:
        action()
    return str(caught.value)


def async_error(action: Callable[[AsyncPressureQueue], Awaitable[object]], q: PressureQueue) -> str:
    async def run() -> str:
        async with AsyncPressureQueue(q.name, redis_url=q.redis_url, prefix=q.prefix) as aq:
            try:
                await action(aq)
            except PressureError as exc:
                assert isinstance(exc, PressureProtocolError)
                return str(exc)
        raise AssertionError("no error")

    return asyncio.run(run())


def test_wrong_type_in_inspection_names_command_and_key_in_both_clients(
    make_queue: QueueFactory, raw: redis.Redis
) -> None:
    q = make_queue()
    q.create()
    raw.set(q.keys.queue, "not a list")
    expected = f"Redis at {q.address} rejected a command: LLEN {q.keys.queue}: {WRONGTYPE}"
    assert sync_error(q.length) == expected
    assert async_error(lambda aq: aq.length(), q) == expected
    assert sync_error(q.stats) == expected
    assert async_error(lambda aq: aq.stats(), q) == expected
    raw.delete(q.keys.queue, q.keys.bound)
    raw.rpush(q.keys.bound, "0")
    expected = f"Redis at {q.address} rejected a command: GET {q.keys.bound}: {WRONGTYPE}"
    assert sync_error(q.closed) == expected
    assert async_error(lambda aq: aq.closed(), q) == expected


def test_wrong_type_in_close_names_command_and_key_and_keeps_the_role(
    make_queue: QueueFactory, raw: redis.Redis
) -> None:
    q = make_queue()
    q.create()
    raw.delete(q.keys.bound)
    raw.rpush(q.keys.bound, "0")
    expected = f"Redis at {q.address} rejected a command: GET {q.keys.bound}: {WRONGTYPE}"
    assert sync_error(q.close) == expected
    assert async_error(lambda aq: aq.close(), q) == expected
    # The error stopped the close before it took the producer role, so the role is free.
    assert raw.lrange(q.keys.producer_free, 0, -1) == [b"1"]
    assert not raw.exists(q.keys.closed)


def test_errors_name_the_server_of_a_client_passed_in() -> None:
    port = free_port()  # nothing listens there
    where = f"cannot reach Redis at 127.0.0.1:{port}/3:"
    # Built by the library's own factories only for their no-retry settings (fast failure).
    client = make_client(f"redis://127.0.0.1:{port}/3")
    with pytest.raises(PressureConnectionError, match=where):
        PressureQueue("q", client=client).length()
    with pytest.raises(PressureConnectionError, match=where):
        list_queues(client=client)
    client.close()

    async def run() -> None:
        async_client = make_async_client(f"redis://127.0.0.1:{port}/3")
        async with AsyncPressureQueue("q", client=async_client) as aq:
            with pytest.raises(PressureConnectionError, match=where):
                await aq.length()
        await async_client.aclose()

    asyncio.run(run())
