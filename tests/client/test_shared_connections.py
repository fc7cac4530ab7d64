"""One client shared by threads or tasks: one caller's failure leaves the others' commands
alone, and `close()` ends everything, racing commands included."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator

import pytest
import redis

from conveyor.client import (
    AsyncClient,
    Client,
    ConveyorError,
    Hello,
    NodeInfo,
    TimeoutError,
    TooManyConnectionsError,
)
from conveyor.client._routing import MOVE_AFTER, JobSources
from tests.client.test_discovery import FakeNode, wait_until
from tests.servers import NodeProcess


def clients_info(raw: redis.Redis) -> dict[str, int]:
    return raw.info("clients")  # type: ignore[return-value]


def test_a_timeout_in_one_thread_does_not_cut_another_threads_get(
    node: NodeProcess, raw: redis.Redis
) -> None:
    before = clients_info(raw)["connected_clients"]
    with Client([f"127.0.0.1:{node.port}"], socket_timeout=0.5) as client:
        client.connect()
        outcome: list[object] = []

        def consume() -> None:
            try:  # a legitimate wait, well beyond the socket timeout
                outcome.append(client.get_job("empty", timeout_ms=2000))
            except Exception as exc:
                outcome.append(exc)

        consumer = threading.Thread(target=consume)
        consumer.start()
        wait_until(lambda: clients_info(raw)["blocked_clients"] == 1, "the GETJOB blocked")
        # A raw command has only the socket timeout: this one times out on the client.
        with pytest.raises(TimeoutError):
            client.execute_command("GETJOB", "TIMEOUT", 3000, "FROM", "other")
        consumer.join(10)
        assert outcome == [None]  # its GETJOB ran to its own TIMEOUT, on its connection
        # The pool given up after the timeout keeps no connection once its users are done.
        wait_until(
            lambda: clients_info(raw)["connected_clients"] <= before,
            "the given-up pool's connections closed",
        )
        assert client.ping() is True  # and the client connects again


async def test_a_timeout_in_one_task_does_not_cut_another_tasks_get(
    node: NodeProcess, raw: redis.Redis
) -> None:
    before = clients_info(raw)["connected_clients"]
    async with AsyncClient([f"127.0.0.1:{node.port}"], socket_timeout=0.5) as client:
        await client.connect()
        consumer = asyncio.create_task(client.get_job("empty", timeout_ms=2000))
        while clients_info(raw)["blocked_clients"] != 1:
            assert not consumer.done(), consumer
            await asyncio.sleep(0.02)
        with pytest.raises(TimeoutError):
            await client.execute_command("GETJOB", "TIMEOUT", 3000, "FROM", "other")
        assert await consumer is None
        for _ in range(500):
            if clients_info(raw)["connected_clients"] <= before:
                break
            await asyncio.sleep(0.02)
        assert clients_info(raw)["connected_clients"] <= before
        assert await client.ping() is True


async def test_close_during_a_connect_leaves_the_async_client_closed(
    node: NodeProcess, raw: redis.Redis
) -> None:
    before = clients_info(raw)["connected_clients"]
    client = AsyncClient([f"127.0.0.1:{node.port}"])
    connecting = asyncio.create_task(client.connect())
    await asyncio.sleep(0)  # the task is now waiting for its connection, holding the lock
    await client.close()
    with pytest.raises(ConveyorError, match="closed"):
        await connecting
    with pytest.raises(ConveyorError, match="closed"):
        await client.ping()
    for _ in range(500):
        if clients_info(raw)["connected_clients"] <= before:
            break
        await asyncio.sleep(0.02)
    assert clients_info(raw)["connected_clients"] <= before  # nothing left open


@pytest.fixture
def routed_job(node: NodeProcess, raw: redis.Redis) -> Iterator[tuple[FakeNode, str]]:
    """A node whose HELLO lists the module's node as a peer, and a job made on the latter:
    a client on the first sends that job's ACKJOB to the second, on a connection of its own."""
    real_id = raw.execute_command("CLUSTER", "MYID")
    fake = FakeNode([[real_id, b"127.0.0.1", str(node.port).encode(), b"1"]])
    fake.hello_nodes.insert(0, [fake.node_id, b"", str(fake.port).encode(), b"1"])
    try:
        yield fake, raw.execute_command("ADDJOB", "q", "x", 0).decode()
    finally:
        fake.stop()


def test_a_closed_client_refuses_a_routed_ack(
    routed_job: tuple[FakeNode, str], raw: redis.Redis
) -> None:
    fake, job_id = routed_job
    client = Client([f"127.0.0.1:{fake.port}"], socket_timeout=2)
    client.connect()
    client.close()
    with pytest.raises(ConveyorError, match="closed"):
        client.ack(job_id)
    assert raw.execute_command("QLEN", "q") == 1  # not acked behind the closed client's back


async def test_a_closed_async_client_refuses_a_routed_ack(
    routed_job: tuple[FakeNode, str], raw: redis.Redis
) -> None:
    fake, job_id = routed_job
    client = AsyncClient([f"127.0.0.1:{fake.port}"], socket_timeout=2)
    await client.connect()
    await client.close()
    with pytest.raises(ConveyorError, match="closed"):
        await client.show(job_id)
    with pytest.raises(ConveyorError, match="closed"):
        await client.ack(job_id)
    assert raw.execute_command("QLEN", "q") == 1


def test_threads_counting_their_jobs_at_once_do_not_break_each_others_getjob() -> None:
    """Where a shared Client's threads count the makers of the jobs they got (to follow
    them): a second thread's count and reset, coming between the first one's check and
    its `most_common`, left the first an empty count (IndexError, its jobs lost)."""
    node_id = "aaaaaaaa" + "0" * 32
    hello = Hello(1, node_id, [NodeInfo(node_id, "127.0.0.1", 7711, 1)])
    ids = [f"D-aaaaaaaa-{'x' * 24}-05a1"]
    sources = JobSources()
    failures: list[BaseException] = []
    other_done = threading.Event()

    def other_thread() -> None:
        try:
            sources.observe(ids, hello)
        except BaseException as error:  # reported by the assertion below
            failures.append(error)
        other_done.set()

    other = threading.Thread(target=other_thread)

    class LetsTheOtherThreadIn(Counter[str]):
        def most_common(self, n: int | None = None) -> list[tuple[str, int]]:
            if not other.is_alive() and not other_done.is_set():
                other.start()
                # Unlocked, the other thread counts and resets meanwhile; locked, it waits
                # for this one, and this wait ends first.
                other_done.wait(0.5)
            return super().most_common(n)

    sources.prefixes = LetsTheOtherThreadIn()
    for _ in range(MOVE_AFTER):
        assert sources.observe(ids, hello) is None  # this node made them: no move
    other.join(5)
    assert failures == [] and other_done.is_set()


def test_a_full_pool_refuses_a_command_and_keeps_the_node_and_the_cap(
    node: NodeProcess, raw: redis.Redis
) -> None:
    """max_connections reached is no failed node: the node was dropped, and the next
    command opened a new pool beside the busy one, so the cap capped nothing."""
    with Client([f"127.0.0.1:{node.port}"], max_connections=1) as client:
        address = client.connect()
        got: list[object] = []
        consumer = threading.Thread(target=lambda: got.append(client.get_job("q")))
        consumer.start()
        wait_until(lambda: clients_info(raw)["blocked_clients"] == 1, "the GETJOB blocked")
        for _ in range(2):
            with pytest.raises(TooManyConnectionsError, match="Too many connections"):
                client.qlen("q")
            with pytest.raises(TooManyConnectionsError):
                client.add_job("q", b"never sent")
        assert client.address == address
        job_id = raw.execute_command("ADDJOB", "q", "for the consumer", 0).decode()
        consumer.join(10)
        assert [job.id for job in got] == [job_id]  # type: ignore[attr-defined]
        assert client.qlen("q") == 0


async def test_a_full_async_pool_refuses_a_command_and_keeps_the_node_and_the_cap(
    node: NodeProcess, raw: redis.Redis
) -> None:
    async with AsyncClient([f"127.0.0.1:{node.port}"], max_connections=1) as client:
        address = await client.connect()
        consumer = asyncio.create_task(client.get_job("q"))
        while clients_info(raw)["blocked_clients"] != 1:
            assert not consumer.done(), consumer
            await asyncio.sleep(0.02)
        for _ in range(2):
            with pytest.raises(TooManyConnectionsError, match="Too many connections"):
                await client.qlen("q")
            with pytest.raises(TooManyConnectionsError):
                await client.add_job("q", b"never sent")
        assert client.address == address
        job_id = raw.execute_command("ADDJOB", "q", "for the consumer", 0).decode()
        job = await consumer
        assert job is not None and job.id == job_id
        assert await client.qlen("q") == 0
