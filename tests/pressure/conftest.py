"""Fixtures for the pressure suite: a real redis-server on a free 127.0.0.1 port.

One server serves the whole session; every test gets an empty database (FLUSHDB) and its
own key prefix, and reads the keyspace through a raw redis-py client, never the library.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from pressure_helpers import QueueFactory, RedisServer, start_redis

from conveyor.pressure.queue import PressureQueue


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def raw(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A plain redis-py client on an empty database, for inspecting keys directly."""
    client = redis_server.client(socket_timeout=10)
    client.flushdb()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_queue(redis_server: RedisServer, raw: redis.Redis, prefix: str) -> Iterator[QueueFactory]:
    """Build PressureQueues on the test server and prefix; disconnects them afterwards."""
    made: list[PressureQueue] = []

    def factory(name: str = "q", **options: object) -> PressureQueue:
        queue = PressureQueue(name, redis_url=redis_server.url, prefix=prefix, **options)  # type: ignore[arg-type]
        made.append(queue)
        return queue

    yield factory
    for queue in made:
        queue.disconnect()


@pytest.fixture
def spec_redis(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client for the seed-following reference client, which blocks with BRPOP ... 0:
    no client-side read timeout."""
    client = redis_server.client(socket_timeout=None)
    yield client
    client.close()
