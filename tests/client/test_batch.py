"""`add_jobs`: one ADDJOB per body, packed by hand and pipelined, on both clients."""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis

from conveyor.client import (
    AsyncClient,
    BatchError,
    Client,
    ConnectionError,
    ConveyorError,
    MaxLenError,
    PausedError,
    TimeoutError,
    _batch,
)
from conveyor.client._commands import Body
from tests.servers import NodeProcess, running_node


@pytest.fixture
async def aclient(node: NodeProcess, raw: redis.Redis) -> AsyncIterator[AsyncClient]:
    async with AsyncClient([f"127.0.0.1:{node.port}"], socket_timeout=5) as client:
        yield client


def mixed_bodies(count: int) -> list[Body]:
    """Bodies of every accepted type, each distinct, non-ASCII text included."""
    bodies: list[Body] = []
    for index in range(count):
        match index % 4:
            case 0:
                bodies.append(b"bytes-%d" % index)
            case 1:
                bodies.append(f"text-é-{index}")
            case 2:
                bodies.append(bytearray(b"bytearray-%d" % index))
            case _:
                bodies.append(memoryview(b"view-%d" % index))
    return bodies


def as_bytes(body: Body) -> bytes:
    return body.encode() if isinstance(body, str) else bytes(body)


def sleeping_node(node: NodeProcess, seconds: float) -> threading.Thread:
    """A thread that blocks the whole node for `seconds` (DEBUG SLEEP), started."""

    def sleep() -> None:
        with node.client() as other:
            other.execute_command("DEBUG", "SLEEP", seconds)

    thread = threading.Thread(target=sleep)
    thread.start()
    time.sleep(0.2)  # the node is asleep now
    return thread


def test_a_thousand_bodies_give_a_thousand_ids_in_order(client: Client, raw: redis.Redis) -> None:
    bodies = mixed_bodies(1000)
    ids = client.add_jobs("q", bodies)
    assert len(ids) == 1000 and len(set(ids)) == 1000
    assert all(isinstance(job_id, str) and job_id.startswith("D-") for job_id in ids)
    assert client.qlen("q") == 1000
    peeked = client.qpeek("q", 1000)
    assert [job.id for job in peeked] == ids
    assert [job.body for job in peeked] == [as_bytes(body) for body in bodies]
    jobs = client.get_jobs("q", count=1000, nohang=True)
    assert [(job.id, job.body) for job in jobs] == [(job.id, job.body) for job in peeked]
    assert raw.execute_command("QLEN", "q") == 0


def test_options_are_applied_to_every_job(client: Client) -> None:
    ids = client.add_jobs(
        "q", [b"a", "b", b"c"], replicate=1, delay=5, retry=7, ttl=100, maxlen=10, timeout_ms=500
    )
    for job_id, body in zip(ids, (b"a", b"b", b"c"), strict=True):
        shown = client.show(job_id)
        assert shown is not None
        assert (shown["repl"], shown["delay"], shown["retry"]) == (1, 5, 7)
        assert 0 < shown["ttl"] <= 100
        assert (shown["queue"], shown["body"]) == ("q", body)
    assert client.qlen("q") == 0  # delayed
    async_ids = client.add_jobs("q", [b"x", b"y"], asynchronous=True, retry=0)
    assert all(job_id.endswith("0") for job_id in async_ids)  # RETRY 0: even TTL digits
    assert client.qlen("q") == 2


def test_error_replies_in_the_middle_raise_batch_error(client: Client) -> None:
    with pytest.raises(BatchError) as caught:
        client.add_jobs("q", [b"job-%d" % index for index in range(10)], maxlen=5)
    error = caught.value
    assert isinstance(error, ConveyorError)
    results = error.results
    assert len(results) == 10
    assert all(isinstance(result, str) and result.startswith("D-") for result in results[:5])
    assert all(isinstance(result, MaxLenError) for result in results[5:])
    assert str(error).startswith("5 of 10 ADDJOBs failed: first error: MAXLEN")
    assert error.ids == results[:5] and error.errors == results[5:]
    # Every reply was read: the connection is in step and gives the right answers.
    assert client.ping() is True
    assert client.qlen("q") == 5
    assert [job.id for job in client.qpeek("q", 10)] == results[:5]
    assert client.add_jobs("q", [b"more"]) != []


def test_every_body_failing(client: Client) -> None:
    client.pause("q", "in")
    with pytest.raises(BatchError) as caught:
        client.add_jobs("q", [b"a", b"b", b"c"])
    assert all(isinstance(result, PausedError) for result in caught.value.results)
    assert str(caught.value).startswith("3 of 3 ADDJOBs failed: first error: PAUSED")
    assert client.pause("q", "none") == "none"
    assert client.qlen("q") == 0


def test_batch_error_pickles() -> None:
    error = BatchError.from_results("ADDJOB", ["D-1", MaxLenError("MAXLEN too long")])
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error) == "1 of 2 ADDJOBs failed: first error: MAXLEN too long"
    assert copy.results[0] == "D-1" and isinstance(copy.results[1], MaxLenError)


def test_empty_batch(client: Client, raw: redis.Redis) -> None:
    assert client.add_jobs("q", []) == []
    assert client.add_jobs("q", ()) == []
    assert raw.execute_command("QLEN", "q") == 0


def test_bad_bodies_send_nothing(client: Client) -> None:
    with pytest.raises(TypeError):
        client.add_jobs("q", "one body")  # a str is a sequence too
    with pytest.raises(TypeError):
        client.add_jobs("q", [b"ok", 42])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        client.add_jobs("q", [b"ok"], timeout_ms=-1)
    assert client.qlen("q") == 0


def test_batches_larger_than_a_chunk(client: Client) -> None:
    bodies = [b"%d" % index for index in range(2500)]
    assert [count for count, _ in _batch.add_jobs("q", bodies).chunks()] == [1000, 1000, 500]
    ids = client.add_jobs("q", bodies)
    assert len(ids) == 2500 and len(set(ids)) == 2500
    assert [job.id for job in client.qpeek("q", 2500)] == ids
    assert [job.body for job in client.qpeek("q", 2500)] == bodies


def test_chunks_are_bounded_in_bytes(client: Client) -> None:
    bodies = [bytes([65 + index]) * 1_500_000 for index in range(5)]
    chunks = list(_batch.add_jobs("q", bodies).chunks())
    assert [count for count, _ in chunks] == [3, 2]
    assert all(len(packed) < 5_000_000 for _, packed in chunks)
    ids = client.add_jobs("q", bodies)
    assert [job.body for job in client.qpeek("q", 5)] == bodies
    assert [job.id for job in client.qpeek("q", 5)] == ids


def test_packing_matches_redis_py() -> None:
    bodies = [*mixed_bodies(8), memoryview(bytes(range(16))).cast("I"), memoryview(b"abcdef")[::2]]
    batch = _batch.add_jobs("q", bodies, replicate=2, retry=3, asynchronous=True)
    [(count, packed)] = list(batch.chunks())
    commands = [
        ("ADDJOB", "q", as_bytes(body), 0, "REPLICATE", 2, "RETRY", 3, "ASYNC") for body in bodies
    ]
    assert count == len(bodies)
    assert packed == b"".join(redis.Connection().pack_commands(commands))


def test_timeout_mid_batch_closes_the_connection(node: NodeProcess, raw: redis.Redis) -> None:
    """The replies of an ADDJOB batch that timed out must never be read by a later command."""
    with Client([f"127.0.0.1:{node.port}"], socket_timeout=0.3) as client:
        assert client.ping()
        sleeper = sleeping_node(node, 1.0)
        with pytest.raises(TimeoutError):
            client.add_jobs("q", [b"late"] * 10)
        sleeper.join()
        assert client.ping() is True
        assert client.qlen("q") == raw.execute_command("QLEN", "q")


def test_connection_failure_is_not_retried_and_fails_over(tmp_path: Path) -> None:
    with running_node(tmp_path / "a") as first, running_node(tmp_path / "b") as second:
        nodes = [f"127.0.0.1:{first.port}", f"127.0.0.1:{second.port}"]
        with Client(nodes, socket_timeout=2) as client:
            assert len(client.add_jobs("q", [b"on first"] * 3)) == 3
            used = nodes.index(client.address)  # type: ignore[arg-type]  # random order
            (first, second)[used].stop()
            with pytest.raises(ConnectionError) as caught:
                client.add_jobs("q", [b"lost"] * 3)
            assert caught.value.address == nodes[used]
            assert client.add_jobs("q", [b"on second"]) != []
            assert client.address == nodes[1 - used]
            assert client.qlen("q") == 1  # the failed batch was not sent again


async def test_async_add_jobs(aclient: AsyncClient) -> None:
    bodies = mixed_bodies(2500)
    ids = await aclient.add_jobs("q", bodies)
    assert len(ids) == 2500 and len(set(ids)) == 2500
    peeked = await aclient.qpeek("q", 2500)
    assert [job.id for job in peeked] == ids
    assert [job.body for job in peeked] == [as_bytes(body) for body in bodies]
    assert await aclient.add_jobs("q", []) == []
    [job_id] = await aclient.add_jobs("delayed", ["x"], delay=5, retry=7, ttl=100, timeout_ms=500)
    shown = await aclient.show(job_id)
    assert shown is not None and (shown["delay"], shown["retry"]) == (5, 7)
    assert 0 < shown["ttl"] <= 100


async def test_async_error_replies_raise_batch_error(aclient: AsyncClient) -> None:
    with pytest.raises(BatchError) as caught:
        await aclient.add_jobs("q", [b"job-%d" % index for index in range(10)], maxlen=5)
    results = caught.value.results
    assert all(isinstance(result, str) for result in results[:5])
    assert all(isinstance(result, MaxLenError) for result in results[5:])
    assert str(caught.value).startswith("5 of 10 ADDJOBs failed: first error: MAXLEN")
    assert await aclient.ping() is True
    assert await aclient.qlen("q") == 5
    assert [job.id for job in await aclient.qpeek("q", 10)] == results[:5]


async def test_async_timeout_mid_batch_closes_the_connection(
    node: NodeProcess, raw: redis.Redis
) -> None:
    async with AsyncClient([f"127.0.0.1:{node.port}"], socket_timeout=0.3) as client:
        assert await client.ping()
        sleeper = sleeping_node(node, 1.0)
        with pytest.raises(TimeoutError):
            await client.add_jobs("q", [b"late"] * 10)
        sleeper.join()
        assert await client.ping() is True
        assert await client.qlen("q") == raw.execute_command("QLEN", "q")
