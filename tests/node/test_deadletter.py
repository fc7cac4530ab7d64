"""max-deliveries + deadletter-queue: jobs re-queued too often go to the dead-letter queue."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.node.helpers import (
    counters,
    error_of,
    info,
    show,
    strict_client,
    wait_blocked,
    wait_until,
)
from tests.servers import NodeProcess, running_node


@pytest.fixture
def dlq(r: redis.Redis) -> Iterator[redis.Redis]:
    """max-deliveries 2, dead letters to 'dlq'; both reset afterwards."""
    assert r.execute_command("CONFIG", "SET", "max-deliveries", "2") == b"OK"
    assert r.execute_command("CONFIG", "SET", "deadletter-queue", "dlq") == b"OK"
    yield r
    r.execute_command("CONFIG", "SET", "max-deliveries", "0")
    r.execute_command("CONFIG", "SET", "deadletter-queue", "")


def add(r: redis.Redis, *options: str) -> bytes:
    return r.execute_command("ADDJOB", "q", "body", "0", *options)


def fetch(r: redis.Redis, queue: str = "q") -> bytes:
    reply = r.execute_command("GETJOB", "NOHANG", "FROM", queue)
    assert reply is not None, f"nothing in {queue}"
    return reply[0][1]


def queue_of(r: redis.Redis, job_id: bytes) -> bytes:
    fields = show(r, job_id)
    assert fields is not None
    return fields[b"queue"]


def test_config_values(dlq: redis.Redis) -> None:
    assert dlq.execute_command("CONFIG", "GET", "max-deliveries") == [b"max-deliveries", b"2"]
    assert dlq.execute_command("CONFIG", "GET", "deadletter-queue") == [
        b"deadletter-queue",
        b"dlq",
    ]


@pytest.mark.parametrize("value", ["-1", "abc", "1.5"])
def test_bad_max_deliveries(r: redis.Redis, value: str) -> None:
    expected = f"ERR Invalid argument '{value}' for CONFIG SET 'max-deliveries'"
    if value == "-1":  # a number out of range: the error names the range
        expected += ": argument must be at least 0"
    assert error_of(r, "CONFIG", "SET", "max-deliveries", value) == expected
    assert r.execute_command("CONFIG", "GET", "max-deliveries") == [b"max-deliveries", b"0"]


def test_nacks_reaching_the_limit(dlq: redis.Redis) -> None:
    r = dlq
    job_id = add(r)
    assert fetch(r) == job_id
    assert r.execute_command("NACK", job_id) == 1  # 1 < 2: back to q
    assert queue_of(r, job_id) == b"q"
    assert r.execute_command("QLEN", "q") == 1
    assert fetch(r) == job_id
    dead_before = int(info(r, "jobs")["dead_lettered_jobs"])
    assert r.execute_command("NACK", job_id) == 1  # 2 >= 2: dead letter
    assert queue_of(r, job_id) == b"dlq"
    assert show(r, job_id)[b"state"] == b"queued"  # type: ignore[index]
    assert r.execute_command("QLEN", "q") == 0
    assert r.execute_command("QLEN", "dlq") == 1
    assert int(info(r, "jobs")["dead_lettered_jobs"]) == dead_before + 1
    reply = r.execute_command("GETJOB", "WITHCOUNTERS", "FROM", "dlq")
    assert reply == [[b"dlq", job_id, b"body", b"nacks", 2, b"additional-deliveries", 0]]


def test_dead_letters_stay_in_the_dead_letter_queue(dlq: redis.Redis) -> None:
    r = dlq
    job_id = add(r)
    for _ in range(2):
        fetch(r)
        r.execute_command("NACK", job_id)
    assert queue_of(r, job_id) == b"dlq"
    for _ in range(3):
        assert fetch(r, "dlq") == job_id
        assert r.execute_command("NACK", job_id) == 1
        assert queue_of(r, job_id) == b"dlq"
    assert counters(r, job_id) == (5, 0)
    assert r.execute_command("QLEN", "dlq") == 1
    assert r.execute_command("ACKJOB", job_id) == 1


def test_enqueue_counts_as_a_delivery(dlq: redis.Redis) -> None:
    r = dlq
    job_id = add(r)
    fetch(r)
    r.execute_command("ENQUEUE", job_id)  # additional-deliveries 1
    assert queue_of(r, job_id) == b"q"
    fetch(r)
    r.execute_command("ENQUEUE", job_id)  # 2: dead letter
    assert queue_of(r, job_id) == b"dlq"
    assert counters(r, job_id) == (0, 2)


def test_nacks_and_deliveries_add_up(dlq: redis.Redis) -> None:
    r = dlq
    job_id = add(r)
    fetch(r)
    r.execute_command("NACK", job_id)
    fetch(r)
    r.execute_command("ENQUEUE", job_id)
    assert queue_of(r, job_id) == b"dlq"
    assert counters(r, job_id) == (1, 1)


def test_first_queueing_never_dead_letters(r: redis.Redis) -> None:
    r.execute_command("CONFIG", "SET", "max-deliveries", "1")
    r.execute_command("CONFIG", "SET", "deadletter-queue", "dlq")
    try:
        job_id = add(r)
        assert queue_of(r, job_id) == b"q"
        delayed = add(r, "DELAY", "100")
        assert r.execute_command("ENQUEUE", delayed) == 1  # its first queueing
        assert queue_of(r, delayed) == b"q"
        fetch(r)
        r.execute_command("NACK", job_id)  # the first re-queue already reaches 1
        assert queue_of(r, job_id) == b"dlq"
    finally:
        r.execute_command("CONFIG", "SET", "max-deliveries", "0")
        r.execute_command("CONFIG", "SET", "deadletter-queue", "")


def test_retry_requeues_reach_the_limit(dlq: redis.Redis) -> None:
    r = dlq
    job_id = add(r, "RETRY", "1")
    fetch(r)
    wait_until(lambda: r.execute_command("QLEN", "q") == 1, timeout_s=5)
    assert counters(r, job_id) == (0, 1)
    fetch(r)
    wait_until(lambda: r.execute_command("QLEN", "dlq") == 1, timeout_s=5)
    assert r.execute_command("QLEN", "q") == 0
    assert counters(r, job_id) == (0, 2)
    assert queue_of(r, job_id) == b"dlq"


def test_delayed_nack_reaching_the_limit(dlq: redis.Redis) -> None:
    r = dlq
    job_id = add(r)
    fetch(r)
    r.execute_command("NACK", job_id)
    fetch(r)
    assert r.execute_command("NACK", job_id, "DELAY", "1") == 1
    assert counters(r, job_id) == (2, 0)
    assert r.execute_command("QLEN", "dlq") == 0
    wait_until(lambda: r.execute_command("QLEN", "dlq") == 1, timeout_s=5)
    assert r.execute_command("QLEN", "q") == 0
    assert counters(r, job_id) == (2, 0)


def test_disabled_without_max_deliveries(r: redis.Redis) -> None:
    r.execute_command("CONFIG", "SET", "deadletter-queue", "dlq")
    try:
        job_id = add(r)
        for _ in range(5):
            fetch(r)
            r.execute_command("NACK", job_id)
        assert queue_of(r, job_id) == b"q"
        assert r.execute_command("QLEN", "dlq") == 0
    finally:
        r.execute_command("CONFIG", "SET", "deadletter-queue", "")


def test_disabled_without_a_dead_letter_queue(r: redis.Redis) -> None:
    r.execute_command("CONFIG", "SET", "max-deliveries", "1")
    try:
        job_id = add(r)
        for _ in range(3):
            fetch(r)
            r.execute_command("NACK", job_id)
        assert queue_of(r, job_id) == b"q"
        assert counters(r, job_id) == (3, 0)
    finally:
        r.execute_command("CONFIG", "SET", "max-deliveries", "0")


def test_dead_letter_wakes_a_client_blocked_on_the_dlq(node: NodeProcess, dlq: redis.Redis) -> None:
    r = dlq
    job_id = add(r)
    fetch(r)
    r.execute_command("NACK", job_id)
    fetch(r)
    client = strict_client(node, socket_timeout=15)
    results: list[object] = []
    thread = threading.Thread(
        target=lambda: results.append(
            client.execute_command("GETJOB", "TIMEOUT", "10000", "FROM", "dlq")
        ),
        daemon=True,
    )
    thread.start()
    try:
        wait_blocked(r, "dlq", 1)
        r.execute_command("NACK", job_id)
        thread.join(10)
        assert results == [[[b"dlq", job_id, b"body"]]]
    finally:
        thread.join(10)
        client.close()


def test_dead_letter_with_a_paused_dead_letter_queue(dlq: redis.Redis) -> None:
    r = dlq
    r.execute_command("PAUSE", "dlq", "in")
    job_id = add(r)
    for _ in range(2):
        fetch(r)
        r.execute_command("NACK", job_id)
    # the job is not lost: it is somewhere a client can get it or see it
    fields = show(r, job_id)
    assert fields is not None
    assert fields[b"state"] == b"queued"
    assert r.execute_command("QLEN", fields[b"queue"]) == 1


def test_configured_at_startup(tmp_path: Path) -> None:
    with running_node(
        tmp_path / "node", "--max-deliveries", "1", "--deadletter-queue", "dead"
    ) as node:
        client = strict_client(node)
        try:
            job_id = client.execute_command("ADDJOB", "q", "x", "0")
            client.execute_command("GETJOB", "FROM", "q")
            assert client.execute_command("NACK", job_id) == 1
            assert client.execute_command("QLEN", "dead") == 1
        finally:
            client.close()
