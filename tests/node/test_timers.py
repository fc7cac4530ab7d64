"""Time-driven behaviour: DELAY, RETRY requeues, NACK DELAY, WORKING, TTL expiry.

Short TTL/RETRY values (1-2 s) and bounded polls keep this quick.
"""

from __future__ import annotations

import time

import redis

from tests.node.helpers import (
    RawClient,
    counters,
    debug_jobs,
    error_of,
    info,
    show,
    wait_blocked,
    wait_until,
)
from tests.servers import NodeProcess


def add(r: redis.Redis, queue: str = "q", body: str = "body", *options: str) -> bytes:
    return r.execute_command("ADDJOB", queue, body, "0", *options)


def qlen(r: redis.Redis, queue: str = "q") -> int:
    return r.execute_command("QLEN", queue)


def test_delay_queues_the_job_later(r: redis.Redis) -> None:
    started = time.monotonic()
    job_id = add(r, "q", "later", "DELAY", "1")
    assert qlen(r) == 0
    fields = show(r, job_id)
    assert fields is not None and fields[b"state"] == b"active"
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "q") is None
    wait_until(lambda: qlen(r) == 1, timeout_s=5)
    assert time.monotonic() - started >= 0.9
    assert show(r, job_id)[b"state"] == b"queued"  # type: ignore[index]
    # the first queueing is not a re-delivery
    assert counters(r, job_id) == (0, 0)
    assert r.execute_command("GETJOB", "FROM", "q") == [[b"q", job_id, b"later"]]


def test_delayed_job_wakes_a_blocked_client(node: NodeProcess, r: redis.Redis) -> None:
    job_id = add(r, "q", "x", "DELAY", "1")
    started = time.monotonic()
    reply = r.execute_command("GETJOB", "TIMEOUT", "10000", "FROM", "q")
    assert reply == [[b"q", job_id, b"x"]]
    assert 0.8 <= time.monotonic() - started < 8


def test_retry_requeues_an_unacknowledged_job(r: redis.Redis) -> None:
    job_id = add(r, "q", "x", "RETRY", "1")
    started = time.monotonic()
    assert r.execute_command("GETJOB", "FROM", "q")[0][1] == job_id
    assert qlen(r) == 0
    wait_until(lambda: qlen(r) == 1, timeout_s=5)
    assert time.monotonic() - started >= 0.7  # 1 s - 250 ms of jitter
    reply = r.execute_command("GETJOB", "WITHCOUNTERS", "FROM", "q")
    assert reply == [[b"q", job_id, b"x", b"nacks", 0, b"additional-deliveries", 1]]
    # and again
    wait_until(lambda: qlen(r) == 1, timeout_s=5)
    assert counters(r, job_id) == (0, 2)
    assert r.execute_command("ACKJOB", job_id) == 1


def test_requeue_wakes_a_blocked_client(r: redis.Redis) -> None:
    job_id = add(r, "q", "x", "RETRY", "1")
    r.execute_command("GETJOB", "FROM", "q")
    reply = r.execute_command("GETJOB", "TIMEOUT", "10000", "WITHCOUNTERS", "FROM", "q")
    assert reply == [[b"q", job_id, b"x", b"nacks", 0, b"additional-deliveries", 1]]


def test_requeue_clock_starts_at_delivery(r: redis.Redis) -> None:
    job_id = add(r, "q", "x", "RETRY", "1")
    time.sleep(1.4)  # longer than RETRY while still queued
    assert counters(r, job_id) == (0, 0)
    assert r.execute_command("GETJOB", "FROM", "q")[0][1] == job_id
    fields = show(r, job_id)
    assert fields is not None
    assert fields[b"state"] == b"active"
    # a fresh RETRY (750-1250 ms), not one already spent (which would requeue it at once)
    assert fields[b"next-requeue-within"] >= 300
    assert qlen(r) == 0
    wait_until(lambda: qlen(r) == 1, timeout_s=5)


def test_acked_job_is_not_requeued(r: redis.Redis) -> None:
    job_id = add(r, "q", "x", "RETRY", "1")
    r.execute_command("GETJOB", "FROM", "q")
    r.execute_command("ACKJOB", job_id)
    time.sleep(1.5)
    assert qlen(r) == 0
    assert debug_jobs(r)[0] == 0


def test_retry_zero_is_never_requeued(r: redis.Redis) -> None:
    job_id = add(r, "q", "x", "RETRY", "0")
    r.execute_command("GETJOB", "FROM", "q")
    time.sleep(1.5)
    assert qlen(r) == 0
    fields = show(r, job_id)
    assert fields is not None
    assert fields[b"state"] == b"active"
    assert fields[b"next-requeue-within"] is None


def test_working_postpones_the_requeue(r: redis.Redis) -> None:
    job_id = add(r, "q", "x", "RETRY", "2")
    r.execute_command("GETJOB", "FROM", "q")
    time.sleep(1.0)
    before = show(r, job_id)[b"next-requeue-within"]  # type: ignore[index]
    assert before <= 1300
    assert r.execute_command("WORKING", job_id) == 2
    after = show(r, job_id)[b"next-requeue-within"]  # type: ignore[index]
    assert after >= 1500
    assert qlen(r) == 0
    wait_until(lambda: qlen(r) == 1, timeout_s=6)
    assert counters(r, job_id) == (0, 1)


def test_working_too_late(r: redis.Redis) -> None:
    job_id = add(r, "q", "x", "TTL", "2", "RETRY", "1")
    r.execute_command("GETJOB", "FROM", "q")
    assert r.execute_command("WORKING", job_id) == 1
    time.sleep(1.1)  # more than half of the 2 s TTL
    expected = (
        "TOOLATE Half of job TTL already elapsed, you are no longer allowed to postpone "
        "the next delivery."
    )
    assert error_of(r, "WORKING", job_id) == expected


def test_nack_delay(r: redis.Redis) -> None:
    job_id = add(r)
    r.execute_command("GETJOB", "FROM", "q")
    started = time.monotonic()
    assert r.execute_command("NACK", job_id, "DELAY", "1") == 1
    assert counters(r, job_id) == (1, 0)  # counted at once
    assert qlen(r) == 0
    wait_until(lambda: qlen(r) == 1, timeout_s=5)
    assert time.monotonic() - started >= 0.9
    # counted once, not again when it went back
    reply = r.execute_command("GETJOB", "WITHCOUNTERS", "FROM", "q")
    assert reply == [[b"q", job_id, b"body", b"nacks", 1, b"additional-deliveries", 0]]


def test_nack_delay_then_ack_before_it_comes_back(r: redis.Redis) -> None:
    job_id = add(r)
    r.execute_command("GETJOB", "FROM", "q")
    r.execute_command("NACK", job_id, "DELAY", "1")
    assert r.execute_command("ACKJOB", job_id) == 1
    time.sleep(1.3)
    assert qlen(r) == 0
    assert debug_jobs(r)[0] == 0


def test_ttl_expiry_of_a_queued_job(r: redis.Redis) -> None:
    expired_before = int(info(r, "jobs")["expired_jobs"])
    started = time.monotonic()
    job_id = add(r, "q", "x", "TTL", "1")
    keep = add(r, "q", "keep")
    wait_until(lambda: show(r, job_id) is None, timeout_s=5)
    assert time.monotonic() - started >= 0.9
    assert qlen(r) == 1
    assert r.execute_command("QPEEK", "q", "10") == [[b"q", keep, b"keep"]]
    assert int(info(r, "jobs")["expired_jobs"]) == expired_before + 1
    assert debug_jobs(r)[0] == 1


def test_ttl_expiry_of_an_active_job(r: redis.Redis) -> None:
    job_id = add(r, "q", "x", "TTL", "1", "RETRY", "0")
    r.execute_command("GETJOB", "FROM", "q")
    wait_until(lambda: show(r, job_id) is None, timeout_s=5)
    assert r.execute_command("ACKJOB", job_id) == 0
    assert debug_jobs(r)[0] == 0


def test_ttl_expiry_of_a_delayed_job(r: redis.Redis) -> None:
    job_id = add(r, "q", "x", "TTL", "2", "DELAY", "1")
    wait_until(lambda: qlen(r) == 1, timeout_s=5)
    wait_until(lambda: show(r, job_id) is None, timeout_s=5)
    assert qlen(r) == 0


def test_ttl_shown_counts_down(r: redis.Redis) -> None:
    job_id = add(r, "q", "x", "TTL", "3")
    first = show(r, job_id)[b"ttl"]  # type: ignore[index]
    wait_until(lambda: show(r, job_id)[b"ttl"] < first, timeout_s=3)  # type: ignore[index]


def test_paused_in_queue_postpones_requeue(r: redis.Redis) -> None:
    job_id = add(r, "q", "x", "RETRY", "1")
    r.execute_command("GETJOB", "FROM", "q")
    r.execute_command("PAUSE", "q", "in")
    # due after 750-1250 ms, then postponed by RETRY (1 s) while paused
    time.sleep(1.35)
    assert qlen(r) == 0
    assert show(r, job_id)[b"state"] == b"active"  # type: ignore[index]
    r.execute_command("PAUSE", "q", "none")
    wait_until(lambda: qlen(r) == 1, timeout_s=5)


def test_getjob_timeout_and_a_late_job(node: NodeProcess, r: redis.Redis) -> None:
    with RawClient(node.port) as client:
        client.send_command("GETJOB", "TIMEOUT", "1000", "FROM", "q")
        wait_blocked(r, "q", 1)
        assert client.read_reply() is None
        job_id = add(r)
        assert qlen(r) == 1  # the timed-out client does not take it
        client.send_command("GETJOB", "FROM", "q")
        assert client.read_reply() == [[b"q", job_id, b"body"]]


def test_info_counts_deliveries_acks_nacks_and_requeues(node: NodeProcess) -> None:
    r = node.client()

    def totals() -> dict[str, int]:
        fields = info(r, "jobs")
        return {name: int(fields[name]) for name in
                ("delivered_jobs", "acked_jobs", "nacked_jobs", "requeued_jobs")}  # fmt: skip

    before = totals()
    first = r.execute_command("ADDJOB", "q", "a", "0")
    second = r.execute_command("ADDJOB", "q", "b", "0")
    r.execute_command("GETJOB", "COUNT", "2", "FROM", "q")
    r.execute_command("NACK", second)  # queued again at once
    r.execute_command("GETJOB", "FROM", "q")
    r.execute_command("ACKJOB", first, second)
    after = totals()
    assert {name: after[name] - before[name] for name in after} == {
        "delivered_jobs": 3,
        "acked_jobs": 2,
        "nacked_jobs": 1,
        "requeued_jobs": 1,
    }
