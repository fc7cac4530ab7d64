"""Queue names that are not UTF-8 round-trip through both clients, as docs/client.md says."""

from __future__ import annotations

import asyncio

import redis

from conveyor.client import AsyncClient, Client
from tests.servers import NodeProcess

NAME = b"bad\xffq"


def test_a_name_scan_queues_gave_goes_back_as_it_came(client: Client, raw: redis.Redis) -> None:
    """scan_queues() gives b"bad\\xffq" as 'bad\\udcffq' (surrogateescape); every method
    sends it back as those bytes. redis-py's hiredis packer ignores the connection's
    encoding_errors, so each call raised UnicodeEncodeError before sending."""
    raw.execute_command("ADDJOB", NAME, b"x", 0)
    (name,) = list(client.scan_queues())
    assert name == "bad\udcffq"
    assert client.qlen(name) == 1
    assert client.qstat(name) is not None
    assert len(client.qpeek(name, 5)) == 1
    client.add_job(name, "y")
    assert client.execute_command("QLEN", name) == 2
    (job,) = client.get_jobs(name, count=1)
    assert job.queue == name
    assert raw.execute_command("QLEN", NAME) == 1


def test_the_async_client_sends_it_back_alike(node: NodeProcess, raw: redis.Redis) -> None:
    raw.execute_command("ADDJOB", NAME, b"x", 0)

    async def lengths() -> tuple[int, int]:
        async with AsyncClient([f"127.0.0.1:{node.port}"], socket_timeout=5) as client:
            names = [name async for name in client.scan_queues()]
            await client.add_job(names[0], "y")
            return await client.qlen(names[0]), await client.execute_command("QLEN", names[0])

    assert asyncio.run(lengths()) == (2, 2)
