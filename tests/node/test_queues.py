"""QLEN, QPEEK, QSTAT, QSCAN, PAUSE."""

from __future__ import annotations

import threading

import pytest
import redis

from tests.node.helpers import (
    BAD_NUMBERS,
    NOT_INTEGER,
    SYNTAX,
    RawClient,
    arity_error,
    debug_jobs,
    error_of,
    qstat,
    strict_client,
    wait_blocked,
)
from tests.servers import NodeProcess

QSTAT_KEYS = [
    b"name", b"len", b"age", b"idle", b"blocked", b"import-from", b"import-rate",
    b"jobs-in", b"jobs-out", b"pause",
]  # fmt: skip


def add(r: redis.Redis, queue: str = "q", body: str = "body") -> bytes:
    return r.execute_command("ADDJOB", queue, body, "0")


# -- QLEN -----------------------------------------------------------------------------------


def test_qlen(raw: RawClient, r: redis.Redis) -> None:
    assert raw.call_raw("QLEN", "q") == b":0\r\n"
    assert debug_jobs(r) == [0, 0]  # QLEN does not create the queue
    for _ in range(3):
        add(r)
    assert raw.call_raw("QLEN", "q") == b":3\r\n"
    r.execute_command("GETJOB", "FROM", "q")
    assert r.execute_command("QLEN", "q") == 2


@pytest.mark.parametrize("argv", [("QLEN",), ("QLEN", "a", "b")])
def test_qlen_arity(r: redis.Redis, argv: tuple[str, ...]) -> None:
    assert error_of(r, *argv) == arity_error("qlen")


# -- QPEEK ----------------------------------------------------------------------------------


def test_qpeek_oldest_first_and_jobs_stay(r: redis.Redis) -> None:
    ids = [add(r, "q", f"b{i}") for i in range(4)]
    assert r.execute_command("QPEEK", "q", "2") == [[b"q", ids[0], b"b0"], [b"q", ids[1], b"b1"]]
    assert r.execute_command("QPEEK", "q", "100") == [
        [b"q", job_id, f"b{i}".encode()] for i, job_id in enumerate(ids)
    ]
    assert r.execute_command("QLEN", "q") == 4
    assert r.execute_command("GETJOB", "FROM", "q")[0][1] == ids[0]


def test_qpeek_negative_is_newest_first(r: redis.Redis) -> None:
    ids = [add(r, "q", f"b{i}") for i in range(4)]
    assert [job[1] for job in r.execute_command("QPEEK", "q", "-2")] == [ids[3], ids[2]]
    assert [job[1] for job in r.execute_command("QPEEK", "q", "-10")] == ids[::-1]


def test_qpeek_skips_jobs_no_longer_queued(r: redis.Redis) -> None:
    ids = [add(r) for _ in range(4)]
    r.execute_command("DEQUEUE", ids[1])
    r.execute_command("ACKJOB", ids[2])
    assert [job[1] for job in r.execute_command("QPEEK", "q", "10")] == [ids[0], ids[3]]
    assert [job[1] for job in r.execute_command("QPEEK", "q", "1")] == [ids[0]]


def test_qpeek_empty_and_zero(raw: RawClient, r: redis.Redis) -> None:
    assert raw.call_raw("QPEEK", "nosuch", "5") == b"*0\r\n"
    add(r)
    assert raw.call_raw("QPEEK", "q", "0") == b"*0\r\n"
    assert debug_jobs(r) == [1, 1]


@pytest.mark.parametrize("count", BAD_NUMBERS)
def test_qpeek_bad_count(r: redis.Redis, count: str) -> None:
    add(r)
    assert error_of(r, "QPEEK", "q", count) == NOT_INTEGER
    assert r.execute_command("QLEN", "q") == 1


@pytest.mark.parametrize("argv", [("QPEEK",), ("QPEEK", "q"), ("QPEEK", "q", "1", "2")])
def test_qpeek_arity(r: redis.Redis, argv: tuple[str, ...]) -> None:
    assert error_of(r, *argv) == arity_error("qpeek")


# -- QSTAT ----------------------------------------------------------------------------------


def test_qstat_unknown_queue_is_null_array(raw: RawClient, r: redis.Redis) -> None:
    assert raw.call_raw("QSTAT", "nosuch") == b"*-1\r\n"
    assert debug_jobs(r) == [0, 0]


def test_qstat_fields_in_order(r: redis.Redis) -> None:
    for _ in range(3):
        add(r)
    r.execute_command("GETJOB", "FROM", "q")
    reply = r.execute_command("QSTAT", "q")
    assert len(reply) == 20
    assert reply[::2] == QSTAT_KEYS
    stat = dict(zip(reply[::2], reply[1::2], strict=True))
    assert stat[b"name"] == b"q"
    assert stat[b"len"] == 2
    assert isinstance(stat[b"age"], int) and 0 <= stat[b"age"] <= 5
    assert isinstance(stat[b"idle"], int) and 0 <= stat[b"idle"] <= 5
    assert stat[b"blocked"] == 0
    assert stat[b"import-from"] == []
    assert stat[b"import-rate"] == 0
    assert stat[b"jobs-in"] == 3
    assert stat[b"jobs-out"] == 1
    assert stat[b"pause"] == b"none"


def test_qstat_counts_requeues(r: redis.Redis) -> None:
    job_id = add(r)
    r.execute_command("GETJOB", "FROM", "q")
    r.execute_command("NACK", job_id)
    r.execute_command("GETJOB", "FROM", "q")
    stat = qstat(r, "q")
    assert stat is not None
    assert (stat[b"jobs-in"], stat[b"jobs-out"], stat[b"len"]) == (2, 2, 0)


def test_qstat_blocked_and_pause(node: NodeProcess, r: redis.Redis) -> None:
    r.execute_command("PAUSE", "q", "out")
    client = strict_client(node, socket_timeout=10)
    results: list[object] = []
    thread = threading.Thread(
        target=lambda: results.append(client.execute_command("GETJOB", "FROM", "q")),
        daemon=True,
    )
    thread.start()
    try:
        wait_blocked(r, "q", 1)
        stat = qstat(r, "q")
        assert stat is not None and stat[b"pause"] == b"out" and stat[b"blocked"] == 1
    finally:
        add(r)
        r.execute_command("PAUSE", "q", "none")
        thread.join(10)
        client.close()
    assert len(results) == 1


@pytest.mark.parametrize("argv", [("QSTAT",), ("QSTAT", "a", "b")])
def test_qstat_arity(r: redis.Redis, argv: tuple[str, ...]) -> None:
    assert error_of(r, *argv) == arity_error("qstat")


# -- QSCAN ----------------------------------------------------------------------------------


def scan_all(r: redis.Redis, *options: str) -> list[bytes]:
    names: list[bytes] = []
    cursor = b"0"
    for _ in range(1000):
        cursor, batch = r.execute_command("QSCAN", cursor, *options)
        assert isinstance(cursor, bytes)
        names.extend(batch)
        if cursor == b"0":
            return names
    raise AssertionError("QSCAN did not finish")


def test_qscan_reply_shape(raw: RawClient, r: redis.Redis) -> None:
    add(r, "only")
    assert raw.call_raw("QSCAN") == b"*2\r\n$1\r\n0\r\n*1\r\n$4\r\nonly\r\n"
    assert raw.call_raw("QSCAN", "0") == b"*2\r\n$1\r\n0\r\n*1\r\n$4\r\nonly\r\n"


def test_qscan_empty(r: redis.Redis) -> None:
    assert r.execute_command("QSCAN") == [b"0", []]


def test_qscan_iterates_every_queue_once(r: redis.Redis) -> None:
    names = {f"queue-{i}".encode() for i in range(25)}
    for name in names:
        add(r, name.decode())
    found = scan_all(r, "COUNT", "3")
    assert sorted(found) == sorted(names)
    assert len(found) == len(names)


def test_qscan_count_limits_a_call(r: redis.Redis) -> None:
    for i in range(10):
        add(r, f"q{i}")
    cursor, batch = r.execute_command("QSCAN", "COUNT", "4")
    assert cursor != b"0"
    assert 1 <= len(batch) <= 4


def test_qscan_busyloop_returns_everything(r: redis.Redis) -> None:
    for i in range(130):
        add(r, f"q{i}")
    cursor, batch = r.execute_command("QSCAN", "BUSYLOOP", "COUNT", "1000")
    assert cursor == b"0"
    assert len(batch) == 130
    # As in Disque, BUSYLOOP scans to the end whatever COUNT (default 100) says.
    for count in ((), ("COUNT", "10")):
        cursor, batch = r.execute_command("QSCAN", "BUSYLOOP", *count)
        assert (cursor, len(batch)) == (b"0", 130)


def test_qscan_minlen_maxlen(r: redis.Redis) -> None:
    for name, length in (("empty", 0), ("one", 1), ("three", 3), ("five", 5)):
        if length == 0:
            r.execute_command("GETJOB", "NOHANG", "FROM", name)  # creates it empty
        for _ in range(length):
            add(r, name)
    assert sorted(scan_all(r)) == [b"empty", b"five", b"one", b"three"]
    assert sorted(scan_all(r, "MINLEN", "1")) == [b"five", b"one", b"three"]
    assert sorted(scan_all(r, "MINLEN", "3")) == [b"five", b"three"]
    assert sorted(scan_all(r, "MAXLEN", "1")) == [b"empty", b"one"]
    assert sorted(scan_all(r, "MINLEN", "1", "MAXLEN", "3")) == [b"one", b"three"]
    assert scan_all(r, "MINLEN", "6") == []
    assert sorted(scan_all(r, "IMPORTRATE", "0")) == [b"empty", b"five", b"one", b"three"]
    assert scan_all(r, "IMPORTRATE", "1") == []


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("foo",), "ERR invalid cursor or option name"),
        (("-1",), "ERR invalid cursor or option name"),
        (("1.5",), "ERR invalid cursor or option name"),
        (("+1",), "ERR invalid cursor or option name"),
        (("18446744073709551616",), "ERR invalid cursor or option name"),
        (("COUNT",), "ERR invalid cursor or option name"),  # option without its value
        (("0", "0"), SYNTAX),
        (("0", "COUNT", "5", "7"), SYNTAX),
        *[(("COUNT", bad), NOT_INTEGER) for bad in BAD_NUMBERS],
        *[(("MINLEN", bad), NOT_INTEGER) for bad in BAD_NUMBERS],
        *[(("MAXLEN", bad), NOT_INTEGER) for bad in BAD_NUMBERS],
        *[(("IMPORTRATE", bad), NOT_INTEGER) for bad in BAD_NUMBERS],
        # A bad value is refused even when the option comes again (it used to be
        # dropped unread: only the last value was parsed).
        *[((name, "abc", name, "1"), NOT_INTEGER) for name in ("MINLEN", "MAXLEN", "IMPORTRATE")],
    ],
)
def test_qscan_errors(r: redis.Redis, argv: tuple[str, ...], expected: str) -> None:
    add(r)
    assert error_of(r, "QSCAN", *argv) == expected


@pytest.mark.parametrize("count", ["0", "-1"])
def test_qscan_count_must_be_positive(r: redis.Redis, count: str) -> None:
    with pytest.raises(redis.ResponseError):
        r.execute_command("QSCAN", "COUNT", count)


# -- PAUSE ----------------------------------------------------------------------------------


def test_pause_replies_are_status(raw: RawClient) -> None:
    assert raw.call_raw("PAUSE", "q", "in") == b"+in\r\n"
    assert raw.call_raw("PAUSE", "q", "state") == b"+in\r\n"
    assert raw.call_raw("PAUSE", "q", "none") == b"+none\r\n"


@pytest.mark.parametrize(
    ("options", "result"),
    [
        (("in",), b"in"),
        (("out",), b"out"),
        (("all",), b"all"),
        (("in", "out"), b"all"),
        (("IN", "Out"), b"all"),
        (("in", "none"), b"none"),
        (("in", "none", "out"), b"out"),
        (("all", "bcast"), b"all"),
        (("none",), b"none"),
        (("state",), b"none"),
        (("bcast",), b"none"),
    ],
)
def test_pause_option_combinations(r: redis.Redis, options: tuple[str, ...], result: bytes) -> None:
    assert r.execute_command("PAUSE", "q", *options) == result
    assert qstat(r, "q")[b"pause"] == result  # type: ignore[index]
    assert r.execute_command("PAUSE", "q", "state") == result


def test_pause_state_keeps_the_current_value(r: redis.Redis) -> None:
    r.execute_command("PAUSE", "q", "out")
    assert r.execute_command("PAUSE", "q", "state") == b"out"
    assert r.execute_command("PAUSE", "q", "bcast") == b"out"
    # a new set of flags replaces the old one
    assert r.execute_command("PAUSE", "q", "in") == b"in"


def test_pause_creates_the_queue(r: redis.Redis) -> None:
    assert r.execute_command("PAUSE", "newq", "state") == b"none"
    assert qstat(r, "newq") is not None
    assert debug_jobs(r) == [0, 1]


@pytest.mark.parametrize("options", [("bogus",), ("in", "bogus"), ("",), ("in", "out", "x")])
def test_pause_bad_option(r: redis.Redis, options: tuple[str, ...]) -> None:
    assert error_of(r, "PAUSE", "q", *options) == SYNTAX
    assert qstat(r, "q") is None  # nothing created


def test_pause_bad_option_leaves_state(r: redis.Redis) -> None:
    r.execute_command("PAUSE", "q", "in")
    assert error_of(r, "PAUSE", "q", "out", "wrong") == SYNTAX
    assert r.execute_command("PAUSE", "q", "state") == b"in"


@pytest.mark.parametrize("argv", [("PAUSE",), ("PAUSE", "q")])
def test_pause_arity(r: redis.Redis, argv: tuple[str, ...]) -> None:
    assert error_of(r, *argv) == arity_error("pause")


def test_pause_in_blocks_producers_only(r: redis.Redis) -> None:
    job_id = add(r)
    r.execute_command("PAUSE", "q", "in")
    assert error_of(r, "ADDJOB", "q", "x", "0") == "PAUSED Queue paused in input, try later"
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "q")[0][1] == job_id
    # NACK is not producing: the job goes back
    assert r.execute_command("NACK", job_id) == 1
    assert r.execute_command("QLEN", "q") == 1


def test_pause_all_blocks_both_ways(r: redis.Redis) -> None:
    add(r)
    r.execute_command("PAUSE", "q", "all")
    assert error_of(r, "ADDJOB", "q", "x", "0") == "PAUSED Queue paused in input, try later"
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "q") is None
    assert r.execute_command("QLEN", "q") == 1
    assert len(r.execute_command("QPEEK", "q", "5")) == 1  # peeking is not consuming


def test_unpausing_out_serves_blocked_clients(node: NodeProcess, r: redis.Redis) -> None:
    r.execute_command("PAUSE", "q", "all")
    client = RawClient(node.port)
    try:
        client.send_command("GETJOB", "TIMEOUT", "20000", "FROM", "q")
        wait_blocked(r, "q", 1)
        r.execute_command("PAUSE", "q", "out")
        job_id = add(r)
        assert client.nothing_to_read(0.2)
        assert r.execute_command("PAUSE", "q", "in") == b"in"  # out cleared
        assert client.read_reply() == [[b"q", job_id, b"body"]]
    finally:
        client.close()


def test_paused_queue_survives_while_empty(r: redis.Redis) -> None:
    r.execute_command("PAUSE", "q", "in")
    r.execute_command("DEBUG", "JOBS")
    assert r.execute_command("PAUSE", "q", "state") == b"in"
    assert scan_all(r) == [b"q"]
