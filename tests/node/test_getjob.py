"""GETJOB: fetch order, options and their errors, blocking and waking."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis

from tests.node.helpers import (
    BAD_NUMBERS,
    SYNTAX,
    RawClient,
    arity_error,
    debug_jobs,
    error_of,
    info,
    qstat,
    show,
    strict_client,
    wait_blocked,
    wait_until,
)
from tests.servers import NodeProcess

COUNT_POSITIVE = "ERR COUNT must be a number greater than zero"


def add(r: redis.Redis, queue: str, body: str, *options: str) -> bytes:
    return r.execute_command("ADDJOB", queue, body, "0", *options)


class BlockedGet:
    """A GETJOB run in a thread on its own connection."""

    def __init__(self, node: NodeProcess, *args: str) -> None:
        self.client = strict_client(node, socket_timeout=30)
        self.result: Any = None
        self.error: BaseException | None = None
        self.returned_at = 0.0
        self.thread = threading.Thread(target=self._run, args=args, daemon=True)
        self.thread.start()

    def _run(self, *args: str) -> None:
        try:
            self.result = self.client.execute_command("GETJOB", *args)
        except BaseException as exc:  # reported by join()
            self.error = exc
        self.returned_at = time.monotonic()

    def join(self, timeout_s: float = 10.0) -> Any:
        self.thread.join(timeout_s)
        try:
            assert not self.thread.is_alive(), "GETJOB did not return"
        finally:
            self.client.close()
        if self.error is not None:
            raise self.error
        return self.result


# -- immediate fetches --------------------------------------------------------------------


def test_fifo_within_a_queue(r: redis.Redis) -> None:
    ids = [add(r, "q", f"job{i}") for i in range(5)]
    got = [r.execute_command("GETJOB", "FROM", "q")[0][1] for _ in range(5)]
    assert got == ids
    assert r.execute_command("QLEN", "q") == 0


def test_count_returns_oldest_first(r: redis.Redis) -> None:
    ids = [add(r, "q", f"job{i}") for i in range(5)]
    reply = r.execute_command("GETJOB", "COUNT", "3", "FROM", "q")
    assert reply == [[b"q", ids[i], f"job{i}".encode()] for i in range(3)]
    assert r.execute_command("QLEN", "q") == 2
    reply = r.execute_command("GETJOB", "COUNT", "10", "FROM", "q")
    assert [job[1] for job in reply] == ids[3:]


def test_reply_shape_is_bulk_strings(raw: RawClient, r: redis.Redis) -> None:
    job_id = add(r, "q", "body")
    reply = raw.call_raw("GETJOB", "FROM", "q")
    assert reply == b"*1\r\n*3\r\n$1\r\nq\r\n$40\r\n%s\r\n$4\r\nbody\r\n" % job_id


def test_queues_scanned_round_robin_in_given_order(r: redis.Redis) -> None:
    a = [add(r, "qa", f"a{i}") for i in range(3)]
    b = [add(r, "qb", "b0")]
    c = [add(r, "qc", f"c{i}") for i in range(2)]
    reply = r.execute_command("GETJOB", "COUNT", "10", "FROM", "qa", "qempty", "qb", "qc")
    assert [job[1] for job in reply] == [a[0], b[0], c[0], a[1], c[1], a[2]]
    assert [job[0] for job in reply] == [b"qa", b"qb", b"qc", b"qa", b"qc", b"qa"]


def test_first_listed_queue_wins(r: redis.Redis) -> None:
    first = add(r, "q1", "x")
    second = add(r, "q2", "y")
    assert r.execute_command("GETJOB", "FROM", "q2", "q1")[0][1] == second
    assert r.execute_command("GETJOB", "FROM", "q2", "q1")[0][1] == first


def test_count_stops_mid_pass(r: redis.Redis) -> None:
    add(r, "q1", "a")
    add(r, "q2", "b")
    add(r, "q3", "c")
    reply = r.execute_command("GETJOB", "COUNT", "2", "FROM", "q1", "q2", "q3")
    assert [job[0] for job in reply] == [b"q1", b"q2"]
    assert r.execute_command("QLEN", "q3") == 1


def test_same_queue_twice_does_not_duplicate_jobs(r: redis.Redis) -> None:
    ids = [add(r, "q", f"j{i}") for i in range(3)]
    reply = r.execute_command("GETJOB", "COUNT", "10", "FROM", "q", "q")
    assert sorted(job[1] for job in reply) == sorted(ids)
    assert len(reply) == 3


def test_withcounters(r: redis.Redis) -> None:
    job_id = add(r, "q", "body")
    reply = r.execute_command("GETJOB", "WITHCOUNTERS", "FROM", "q")
    assert reply == [[b"q", job_id, b"body", b"nacks", 0, b"additional-deliveries", 0]]
    assert r.execute_command("NACK", job_id) == 1
    reply = r.execute_command("GETJOB", "withcounters", "FROM", "q")
    assert reply == [[b"q", job_id, b"body", b"nacks", 1, b"additional-deliveries", 0]]
    assert r.execute_command("ENQUEUE", job_id) == 1
    reply = r.execute_command("GETJOB", "NOHANG", "WITHCOUNTERS", "COUNT", "5", "FROM", "q")
    assert reply == [[b"q", job_id, b"body", b"nacks", 1, b"additional-deliveries", 1]]


def test_withcounters_types_on_the_wire(raw: RawClient, r: redis.Redis) -> None:
    add(r, "q", "b")
    reply = raw.call_raw("GETJOB", "WITHCOUNTERS", "FROM", "q")
    assert reply.startswith(b"*1\r\n*7\r\n$1\r\nq\r\n$40\r\n")
    assert reply.endswith(b"$1\r\nb\r\n$5\r\nnacks\r\n:0\r\n$21\r\nadditional-deliveries\r\n:0\r\n")


def test_fetched_job_becomes_active(r: redis.Redis) -> None:
    job_id = add(r, "q", "x")
    r.execute_command("GETJOB", "FROM", "q")
    fields = show(r, job_id)
    assert fields is not None and fields[b"state"] == b"active"
    assert r.execute_command("QLEN", "q") == 0
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "q") is None


def test_nohang_on_empty_queue_is_a_null_array(raw: RawClient) -> None:
    assert raw.call_raw("GETJOB", "NOHANG", "FROM", "q") == b"*-1\r\n"


def test_getjob_creates_the_queue(r: redis.Redis) -> None:
    assert qstat(r, "newq") is None
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "newq", "other") is None
    stat = qstat(r, "newq")
    assert stat is not None and stat[b"len"] == 0
    assert qstat(r, "other") is not None
    assert debug_jobs(r) == [0, 2]


def test_options_after_from_are_queue_names(r: redis.Redis) -> None:
    add(r, "COUNT", "x")
    reply = r.execute_command("GETJOB", "NOHANG", "FROM", "q", "COUNT", "5")
    assert reply is not None and reply[0][0] == b"COUNT"
    assert qstat(r, "5") is not None


def test_paused_out_queue_is_skipped(r: redis.Redis) -> None:
    add(r, "q1", "paused")
    other = add(r, "q2", "free")
    r.execute_command("PAUSE", "q1", "out")
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "q1") is None
    assert r.execute_command("GETJOB", "NOHANG", "COUNT", "5", "FROM", "q1", "q2") == [
        [b"q2", other, b"free"]
    ]
    assert r.execute_command("QLEN", "q1") == 1
    r.execute_command("PAUSE", "q1", "none")
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "q1")[0][2] == b"paused"


# -- bad input ----------------------------------------------------------------------------


def test_arity(r: redis.Redis) -> None:
    assert error_of(r, "GETJOB") == arity_error("getjob")


@pytest.mark.parametrize(
    "argv",
    [
        ("NOHANG",),
        ("FROM",),
        ("NOHANG", "FROM"),
        ("COUNT", "1"),
        ("COUNT",),
        ("TIMEOUT",),
        ("BOGUS", "FROM", "q"),
        ("NOHANG", "q"),
        ("q",),
        ("WITHCOUNTERS", "NOHANG"),
    ],
)
def test_syntax_errors(r: redis.Redis, argv: tuple[str, ...]) -> None:
    assert error_of(r, "GETJOB", *argv) == SYNTAX
    assert debug_jobs(r) == [0, 0]


@pytest.mark.parametrize("count", ["0", "-1", "-99", *BAD_NUMBERS])
def test_bad_count(r: redis.Redis, count: str) -> None:
    add(r, "q", "x")
    assert error_of(r, "GETJOB", "COUNT", count, "FROM", "q") == COUNT_POSITIVE
    assert r.execute_command("QLEN", "q") == 1


@pytest.mark.parametrize(
    ("timeout", "expected"),
    [
        *[(bad, "ERR timeout is not an integer or out of range") for bad in BAD_NUMBERS],
        ("FROM", "ERR timeout is not an integer or out of range"),
        ("-1", "ERR timeout is negative"),
    ],
)
def test_bad_timeout(r: redis.Redis, timeout: str, expected: str) -> None:
    add(r, "q", "x")
    assert error_of(r, "GETJOB", "TIMEOUT", timeout, "FROM", "q") == expected
    assert r.execute_command("QLEN", "q") == 1


def test_leaving_node_does_not_block(r: redis.Redis) -> None:
    r.execute_command("CLUSTER", "LEAVING", "yes")
    try:
        expected = "LEAVING This node is leaving the cluster, please connect to a different one"
        assert error_of(r, "GETJOB", "TIMEOUT", "5000", "FROM", "q") == expected
        assert r.execute_command("GETJOB", "NOHANG", "FROM", "q") is None
        # Refused without creating the queue it will never serve.
        assert r.execute_command("QSTAT", "q") is None
    finally:
        r.execute_command("CLUSTER", "LEAVING", "no")


def test_leaving_node_still_hands_out_queued_jobs(r: redis.Redis) -> None:
    job_id = add(r, "q", "x")
    r.execute_command("CLUSTER", "LEAVING", "yes")
    try:
        assert r.execute_command("GETJOB", "FROM", "q")[0][1] == job_id
    finally:
        r.execute_command("CLUSTER", "LEAVING", "no")


# -- blocking -----------------------------------------------------------------------------


def test_timeout_returns_null_after_about_the_timeout(r: redis.Redis) -> None:
    started = time.monotonic()
    assert r.execute_command("GETJOB", "TIMEOUT", "300", "FROM", "q") is None
    elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < 5.0
    assert qstat(r, "q")[b"blocked"] == 0  # type: ignore[index]


def test_timeout_null_is_a_null_array(raw: RawClient) -> None:
    assert raw.call_raw("GETJOB", "TIMEOUT", "100", "FROM", "q") == b"*-1\r\n"


def test_blocked_client_woken_by_addjob(node: NodeProcess, r: redis.Redis) -> None:
    getter = BlockedGet(node, "TIMEOUT", "20000", "FROM", "q")
    wait_blocked(r, "q", 1)
    assert info(r)["blocked_clients"] == "1"
    added_at = time.monotonic()
    job_id = add(r, "q", "wake")
    assert getter.join() == [[b"q", job_id, b"wake"]]
    # Woken by the job, far before the 20 s timeout.
    assert getter.returned_at - added_at < 10.0
    assert info(r)["blocked_clients"] == "0"
    assert qstat(r, "q")[b"blocked"] == 0  # type: ignore[index]
    assert r.execute_command("QLEN", "q") == 0


def test_blocked_without_timeout_waits_for_a_job(node: NodeProcess, r: redis.Redis) -> None:
    getter = BlockedGet(node, "FROM", "q")
    wait_blocked(r, "q", 1)
    time.sleep(0.3)
    assert getter.thread.is_alive()
    job_id = add(r, "q", "late")
    assert getter.join() == [[b"q", job_id, b"late"]]


def test_blocked_clients_are_served_in_arrival_order(node: NodeProcess, r: redis.Redis) -> None:
    first = BlockedGet(node, "TIMEOUT", "20000", "FROM", "q")
    wait_blocked(r, "q", 1)
    second = BlockedGet(node, "TIMEOUT", "20000", "FROM", "other", "q")
    wait_blocked(r, "q", 2)
    third = BlockedGet(node, "TIMEOUT", "20000", "FROM", "q")
    wait_blocked(r, "q", 3)
    ids = [add(r, "q", f"job{i}") for i in range(3)]
    assert first.join() == [[b"q", ids[0], b"job0"]]
    assert second.join() == [[b"q", ids[1], b"job1"]]
    assert third.join() == [[b"q", ids[2], b"job2"]]


def test_blocked_on_several_queues_woken_by_any(node: NodeProcess, r: redis.Redis) -> None:
    getter = BlockedGet(node, "TIMEOUT", "20000", "FROM", "q1", "q2", "q3")
    wait_blocked(r, "q3", 1)
    job_id = add(r, "q3", "third")
    assert getter.join() == [[b"q3", job_id, b"third"]]
    for queue in ("q1", "q2", "q3"):
        assert qstat(r, queue)[b"blocked"] == 0  # type: ignore[index]
    # the client is no longer registered anywhere: the next job stays queued
    add(r, "q1", "stays")
    assert r.execute_command("QLEN", "q1") == 1


def test_blocked_withcounters(node: NodeProcess, r: redis.Redis) -> None:
    getter = BlockedGet(node, "WITHCOUNTERS", "TIMEOUT", "20000", "FROM", "q")
    wait_blocked(r, "q", 1)
    job_id = add(r, "q", "x")
    assert getter.join() == [[b"q", job_id, b"x", b"nacks", 0, b"additional-deliveries", 0]]


def test_woken_getjob_returns_up_to_count(node: NodeProcess, r: redis.Redis) -> None:
    r.execute_command("PAUSE", "q", "out")
    getter = BlockedGet(node, "COUNT", "3", "TIMEOUT", "20000", "FROM", "q")
    wait_blocked(r, "q", 1)
    ids = [add(r, "q", f"j{i}") for i in range(5)]
    time.sleep(0.1)
    assert getter.thread.is_alive()  # the queue is paused for output
    assert r.execute_command("PAUSE", "q", "none") == b"none"
    reply = getter.join()
    assert 1 <= len(reply) <= 3
    assert [job[1] for job in reply] == ids[: len(reply)]
    assert r.execute_command("QLEN", "q") == 5 - len(reply)


def test_woken_by_nack(node: NodeProcess, r: redis.Redis) -> None:
    job_id = add(r, "q", "x")
    r.execute_command("GETJOB", "FROM", "q")
    getter = BlockedGet(node, "WITHCOUNTERS", "TIMEOUT", "20000", "FROM", "q")
    wait_blocked(r, "q", 1)
    assert r.execute_command("NACK", job_id) == 1
    assert getter.join() == [[b"q", job_id, b"x", b"nacks", 1, b"additional-deliveries", 0]]


@pytest.mark.parametrize("flush", [("DEBUG", "FLUSHALL"), ("CLUSTER", "RESET")])
def test_flush_answers_blocked_clients_with_null(
    node: NodeProcess, r: redis.Redis, flush: tuple[str, str]
) -> None:
    getters = [BlockedGet(node, "TIMEOUT", "20000", "FROM", "q", "other") for _ in range(3)]
    wait_blocked(r, "q", 3)
    assert r.execute_command(*flush) == b"OK"
    assert [getter.join(3.0) for getter in getters] == [None, None, None]
    assert info(r)["blocked_clients"] == "0"
    assert debug_jobs(r) == [0, 0]


def test_client_disconnecting_while_blocked(node: NodeProcess, r: redis.Redis) -> None:
    gone = RawClient(node.port)
    gone.send_command("GETJOB", "FROM", "q")
    wait_blocked(r, "q", 1)
    waiting = BlockedGet(node, "TIMEOUT", "20000", "FROM", "q")
    wait_blocked(r, "q", 2)
    gone.close()
    wait_blocked(r, "q", 1)
    job_id = add(r, "q", "for the living")
    assert waiting.join() == [[b"q", job_id, b"for the living"]]
    wait_until(lambda: info(r)["blocked_clients"] == "0")
    # Later deliveries are not swallowed by the dead client either.
    second = add(r, "q", "next")
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "q") == [[b"q", second, b"next"]]


def test_disconnected_blocked_client_alone(node: NodeProcess, r: redis.Redis) -> None:
    gone = RawClient(node.port)
    gone.send_command("GETJOB", "TIMEOUT", "0", "FROM", "q1", "q2")
    wait_blocked(r, "q2", 1)
    gone.close()
    wait_blocked(r, "q1", 0)
    wait_blocked(r, "q2", 0)
    job_id = add(r, "q2", "x")
    assert r.execute_command("QLEN", "q2") == 1
    assert r.execute_command("GETJOB", "FROM", "q2")[0][1] == job_id


def test_pipelined_commands_wait_behind_a_blocked_getjob(node: NodeProcess, r: redis.Redis) -> None:
    with RawClient(node.port) as client:
        client.send(
            b"*3\r\n$6\r\nGETJOB\r\n$4\r\nFROM\r\n$1\r\nq\r\n"
            b"*1\r\n$4\r\nPING\r\n"
            b"*2\r\n$4\r\nQLEN\r\n$1\r\nq\r\n"
            b"ECHO inline\r\n"
        )
        wait_blocked(r, "q", 1)
        assert client.nothing_to_read(0.3)
        job_id = add(r, "q", "first")
        assert client.read_reply() == [[b"q", job_id, b"first"]]
        assert client.read_reply() == b"PONG"
        assert client.read_reply() == 0
        assert client.read_reply() == b"inline"
        # and the connection is back to normal
        client.send_command("PING")
        assert client.read_reply() == b"PONG"


def test_pipelined_getjob_behind_a_blocked_getjob(node: NodeProcess, r: redis.Redis) -> None:
    with RawClient(node.port) as client:
        client.send(
            b"*3\r\n$6\r\nGETJOB\r\n$4\r\nFROM\r\n$1\r\nq\r\n"
            b"*3\r\n$6\r\nGETJOB\r\n$4\r\nFROM\r\n$1\r\nq\r\n"
            b"*1\r\n$4\r\nPING\r\n"
        )
        wait_blocked(r, "q", 1)
        first = add(r, "q", "one")
        assert client.read_reply() == [[b"q", first, b"one"]]
        # the second GETJOB blocks in turn; PING waits behind it
        wait_blocked(r, "q", 1)
        assert client.nothing_to_read(0.2)
        second = add(r, "q", "two")
        assert client.read_reply() == [[b"q", second, b"two"]]
        assert client.read_reply() == b"PONG"


def test_pipelined_commands_behind_a_timed_out_getjob(node: NodeProcess, r: redis.Redis) -> None:
    with RawClient(node.port) as client:
        client.send(
            b"*5\r\n$6\r\nGETJOB\r\n$7\r\nTIMEOUT\r\n$3\r\n200\r\n$4\r\nFROM\r\n$1\r\nq\r\n"
            b"*1\r\n$4\r\nPING\r\n"
        )
        assert client.read_reply() is None
        assert client.read_reply() == b"PONG"


def test_many_blocked_clients_each_get_one_job(node: NodeProcess, r: redis.Redis) -> None:
    clients = [RawClient(node.port) for _ in range(20)]
    try:
        for client in clients:
            client.send_command("GETJOB", "TIMEOUT", "20000", "FROM", "q")
        wait_blocked(r, "q", 20)
        ids = [add(r, "q", f"j{i}") for i in range(20)]
        got = [client.read_reply()[0][1] for client in clients]
        assert got == ids
    finally:
        for client in clients:
            client.close()
    assert debug_jobs(r) == [20, 1]


def test_requests_pipelined_behind_a_woken_getjob_can_wake_another_client(
    node: NodeProcess,
) -> None:
    # A blocks on q1 with an ADDJOB for q2 pipelined behind its GETJOB; B blocks on q2.
    # Serving A runs that ADDJOB, which must reach B at once, not at the next I/O.
    with RawClient(node.port) as a, RawClient(node.port) as b:
        b.send(b"GETJOB TIMEOUT 5000 FROM q2-chain\r\n")
        a.send(b"GETJOB TIMEOUT 5000 FROM q1-chain\r\nADDJOB q2-chain hop 0\r\n")
        time.sleep(0.2)
        with RawClient(node.port) as c:
            assert c.call_raw("ADDJOB", "q1-chain", "start", "0").startswith(b"+D-")
        started = time.monotonic()
        reply = b.read_reply()
        assert time.monotonic() - started < 2
        assert reply[0][0] == b"q2-chain" and reply[0][2] == b"hop"
