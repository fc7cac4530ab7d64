"""`AsyncClient` against a real node: the main flows, blocking, cancelling, errors, scans."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import redis

from conveyor.client import (
    AsyncClient,
    BadIdError,
    ConnectionError,
    Job,
    NoJobError,
    PausedError,
)
from tests.conftest import free_port
from tests.servers import NodeProcess

UNKNOWN_ID = "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"


@pytest.fixture
async def aclient(node: NodeProcess, raw: redis.Redis) -> AsyncIterator[AsyncClient]:
    async with AsyncClient([f"127.0.0.1:{node.port}"], socket_timeout=5) as client:
        yield client


async def test_add_get_ack_round_trip(aclient: AsyncClient) -> None:
    job_id = await aclient.add_job("q", b"hello", retry=10)
    assert await aclient.qlen("q") == 1
    job = await aclient.get_job("q", with_counters=True)
    assert job == Job("q", job_id, b"hello", 0, 0)
    assert await aclient.working(job) == 10
    assert await aclient.ack(job) == 1
    assert await aclient.show(job_id) is None


async def test_every_job_command(aclient: AsyncClient) -> None:
    a = await aclient.add_job("q", b"a")
    b = await aclient.add_job("q", "b")
    assert [job.id for job in await aclient.qpeek("q", 5)] == [a, b]
    assert await aclient.dequeue(a) == 1
    assert await aclient.enqueue(a) == 1
    jobs = await aclient.get_jobs("q", count=2)
    assert {job.id for job in jobs} == {a, b}
    assert await aclient.nack(a) == 1
    assert await aclient.nack(b, delay=60) == 1
    shown = await aclient.show(a)
    assert shown is not None and shown["nacks"] == 1 and shown["state"] == "queued"
    assert await aclient.fast_ack(a) == 1
    assert await aclient.del_job(b) == 1
    stat = await aclient.qstat("q")
    assert stat is not None and stat["len"] == 0


async def test_nohang_and_timeout(aclient: AsyncClient) -> None:
    assert await aclient.get_jobs("empty", nohang=True) == []
    started = time.monotonic()
    assert await aclient.get_job("empty", timeout_ms=200) is None
    assert 0.15 < time.monotonic() - started < 3


async def test_blocking_get_is_woken_by_another_client(node: NodeProcess, raw: redis.Redis) -> None:
    address = f"127.0.0.1:{node.port}"
    async with (
        AsyncClient([address], socket_timeout=0.3) as consumer,
        AsyncClient([address]) as producer,
    ):
        waiting = asyncio.create_task(consumer.get_job("wake"))
        await asyncio.sleep(0.8)  # longer than the consumer's socket timeout
        assert not waiting.done()
        job_id = await producer.add_job("wake", b"now")
        job = await asyncio.wait_for(waiting, 5)
        assert job is not None and job.id == job_id
        # A TIMEOUT longer than the socket timeout is not cut short either.
        started = time.monotonic()
        assert await consumer.get_jobs("wake", timeout_ms=700) == []
        assert time.monotonic() - started >= 0.6


async def test_cancelled_get_leaves_the_client_usable(aclient: AsyncClient) -> None:
    waiting = asyncio.create_task(aclient.get_job("never"))
    await asyncio.sleep(0.1)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    job_id = await aclient.add_job("other", b"x")
    assert [job.id for job in await aclient.get_jobs("other", nohang=True)] == [job_id]
    assert await aclient.ping() is True


async def test_concurrent_commands(aclient: AsyncClient) -> None:
    ids = await asyncio.gather(*(aclient.add_job("many", str(n)) for n in range(50)))
    assert len(set(ids)) == 50
    assert await aclient.qlen("many") == 50


async def test_errors_are_typed(aclient: AsyncClient) -> None:
    with pytest.raises(BadIdError):
        await aclient.ack("bad")
    with pytest.raises(NoJobError):
        await aclient.working(UNKNOWN_ID)
    assert await aclient.pause("q", "in") == "in"
    with pytest.raises(PausedError):
        await aclient.add_job("q", b"x")


async def test_scans(aclient: AsyncClient) -> None:
    names = {f"aq{n}" for n in range(12)}
    ids = set()
    for name in names:
        ids.add(await aclient.add_job(name, b"x"))
    assert {name async for name in aclient.scan_queues(count=5)} == names
    assert {job_id async for job_id in aclient.scan_jobs(count=5)} == ids
    assert {job_id async for job_id in aclient.scan_jobs(queue="aq1", states="queued")} == {
        job_id for job_id in ids if (await aclient.show(job_id) or {}).get("queue") == "aq1"
    }


async def test_server_commands(aclient: AsyncClient, node: NodeProcess) -> None:
    assert await aclient.ping() is True
    hello = await aclient.hello()
    assert hello.version == 1 and hello.nodes[0].port == node.port
    assert aclient.node_id == hello.node_id
    info = await aclient.info("jobs")
    assert info["registered_jobs"] == 0
    assert await aclient.execute_command("QLEN", "q") == 0
    assert await aclient.connect() == f"127.0.0.1:{node.port}"
    assert (await aclient.get_redis()) is not None


async def test_dead_port() -> None:
    port = free_port()
    async with AsyncClient([f"127.0.0.1:{port}"], socket_timeout=2) as client:
        with pytest.raises(ConnectionError) as caught:
            await client.ping()
    assert caught.value.address == f"127.0.0.1:{port}"


async def test_from_url(node: NodeProcess) -> None:
    async with AsyncClient.from_url(f"disque://127.0.0.1:{node.port}") as client:
        assert await client.ping()
