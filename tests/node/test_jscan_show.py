"""SHOW and JSCAN."""

from __future__ import annotations

import time

import pytest
import redis

from tests.node.helpers import (
    BAD_NUMBERS,
    BADID,
    NOT_INTEGER,
    SYNTAX,
    UNKNOWN_ID,
    RawClient,
    arity_error,
    error_of,
    show,
)

SHOW_KEYS = [
    b"id", b"queue", b"state", b"repl", b"ttl", b"ctime", b"delay", b"retry", b"nacks",
    b"additional-deliveries", b"nodes-delivered", b"nodes-confirmed",
    b"next-requeue-within", b"next-awake-within", b"body",
]  # fmt: skip


def add(r: redis.Redis, queue: str = "q", body: str = "body", *options: str) -> bytes:
    return r.execute_command("ADDJOB", queue, body, "0", *options)


# -- SHOW -----------------------------------------------------------------------------------


def test_show_unknown_is_null_bulk(raw: RawClient) -> None:
    assert raw.call_raw("SHOW", UNKNOWN_ID) == b"$-1\r\n"


@pytest.mark.parametrize("argv", [("SHOW",), ("SHOW", UNKNOWN_ID, UNKNOWN_ID)])
def test_show_arity(r: redis.Redis, argv: tuple[bytes, ...]) -> None:
    assert error_of(r, *argv) == arity_error("show")


def test_show_bad_id(r: redis.Redis) -> None:
    assert error_of(r, "SHOW", "D-123") == BADID


def test_show_queued_job(r: redis.Redis) -> None:
    job_id = add(r, "q", "the body", "TTL", "3600", "RETRY", "60")
    reply = r.execute_command("SHOW", job_id)
    assert len(reply) == 30
    assert reply[::2] == SHOW_KEYS
    fields = dict(zip(reply[::2], reply[1::2], strict=True))
    my_id = r.execute_command("CLUSTER", "MYID")
    assert fields[b"id"] == job_id
    assert fields[b"queue"] == b"q"
    assert fields[b"state"] == b"queued"
    assert fields[b"repl"] == 1
    assert 3598 <= fields[b"ttl"] <= 3600
    assert isinstance(fields[b"ctime"], int)
    assert abs(fields[b"ctime"] // 1_000_000 - time.time() * 1000) < 60_000
    assert fields[b"delay"] == 0
    assert fields[b"retry"] == 60
    assert fields[b"nacks"] == 0
    assert fields[b"additional-deliveries"] == 0
    assert fields[b"nodes-delivered"] == [my_id]
    assert fields[b"nodes-confirmed"] == [my_id]
    # queued: the requeue clock only starts at delivery
    assert fields[b"next-requeue-within"] is None
    assert isinstance(fields[b"next-awake-within"], int)
    assert fields[b"body"] == b"the body"


def test_show_wire_types(raw: RawClient, r: redis.Redis) -> None:
    job_id = add(r, "q", "b", "RETRY", "0")
    reply = raw.call_raw("SHOW", job_id)
    assert reply.startswith(
        b"*30\r\n$2\r\nid\r\n$40\r\n" + job_id + b"\r\n$5\r\nqueue\r\n$1\r\nq\r\n"
    )
    assert b"$5\r\nstate\r\n$6\r\nqueued\r\n$4\r\nrepl\r\n:1\r\n$3\r\nttl\r\n:" in reply
    assert b"$15\r\nnodes-delivered\r\n*1\r\n$40\r\n" in reply
    assert b"$19\r\nnext-requeue-within\r\n$-1\r\n" in reply
    assert reply.endswith(b"$4\r\nbody\r\n$1\r\nb\r\n")


def test_show_active_job_has_requeue_time(r: redis.Redis) -> None:
    job_id = add(r, "q", "b", "RETRY", "30")
    r.execute_command("GETJOB", "FROM", "q")
    fields = show(r, job_id)
    assert fields is not None
    assert fields[b"state"] == b"active"
    assert 29_000 <= fields[b"next-requeue-within"] <= 30_250
    assert fields[b"next-awake-within"] <= 30_250


def test_show_at_most_once_active_job_never_requeues(r: redis.Redis) -> None:
    job_id = add(r, "q", "b", "RETRY", "0", "TTL", "100")
    r.execute_command("GETJOB", "FROM", "q")
    fields = show(r, job_id)
    assert fields is not None
    assert fields[b"state"] == b"active"
    assert fields[b"retry"] == 0
    assert fields[b"next-requeue-within"] is None
    assert 98_000 <= fields[b"next-awake-within"] <= 100_000


def test_show_delayed_job(r: redis.Redis) -> None:
    job_id = add(r, "q", "b", "DELAY", "50")
    fields = show(r, job_id)
    assert fields is not None
    assert fields[b"state"] == b"active"
    assert fields[b"delay"] == 50
    assert 49_000 <= fields[b"next-awake-within"] <= 50_000


def test_show_does_not_change_anything(r: redis.Redis) -> None:
    job_id = add(r)
    for _ in range(3):
        show(r, job_id)
    assert r.execute_command("QLEN", "q") == 1
    assert show(r, job_id)[b"state"] == b"queued"  # type: ignore[index]


# -- JSCAN ----------------------------------------------------------------------------------


def jscan_all(r: redis.Redis, *options: str) -> list[object]:
    items: list[object] = []
    cursor = b"0"
    for _ in range(1000):
        cursor, batch = r.execute_command("JSCAN", cursor, *options)
        assert isinstance(cursor, bytes)
        items.extend(batch)
        if cursor == b"0":
            return items
    raise AssertionError("JSCAN did not finish")


def test_jscan_reply_shape(raw: RawClient, r: redis.Redis) -> None:
    job_id = add(r)
    # cursor as a bulk string, IDs as status replies
    assert raw.call_raw("JSCAN") == b"*2\r\n$1\r\n0\r\n*1\r\n+" + job_id + b"\r\n"
    assert raw.call_raw("JSCAN", "0", "REPLY", "id") == (
        b"*2\r\n$1\r\n0\r\n*1\r\n+" + job_id + b"\r\n"
    )


def test_jscan_empty(r: redis.Redis) -> None:
    assert r.execute_command("JSCAN") == [b"0", []]


def test_jscan_iterates_every_job_once(r: redis.Redis) -> None:
    ids = {add(r, f"q{i % 3}") for i in range(40)}
    found = jscan_all(r, "COUNT", "7")
    assert len(found) == 40
    assert set(found) == ids


def test_jscan_count_limits_a_call(r: redis.Redis) -> None:
    for _ in range(10):
        add(r)
    cursor, batch = r.execute_command("JSCAN", "COUNT", "3")
    assert cursor != b"0"
    assert 1 <= len(batch) <= 3


def test_jscan_busyloop(r: redis.Redis) -> None:
    for _ in range(130):
        add(r)
    cursor, batch = r.execute_command("JSCAN", "BUSYLOOP", "COUNT", "1000")
    assert cursor == b"0"
    assert len(batch) == 130
    # As in Disque, BUSYLOOP scans to the end whatever COUNT (default 100) says.
    for count in ((), ("COUNT", "10")):
        cursor, batch = r.execute_command("JSCAN", "BUSYLOOP", *count)
        assert (cursor, len(batch)) == (b"0", 130)


def test_jscan_queue_filter(r: redis.Redis) -> None:
    mine = {add(r, "mine") for _ in range(5)}
    for _ in range(5):
        add(r, "other")
    assert set(jscan_all(r, "QUEUE", "mine")) == mine
    assert jscan_all(r, "QUEUE", "nosuch") == []


def test_jscan_state_filter(r: redis.Redis) -> None:
    queued = add(r)
    active = add(r)
    delayed = add(r, "q", "b", "DELAY", "100")
    r.execute_command("DEQUEUE", active)
    assert jscan_all(r, "STATE", "queued") == [queued]
    assert sorted(jscan_all(r, "STATE", "active")) == sorted([active, delayed])
    assert sorted(jscan_all(r, "STATE", "queued", "STATE", "active")) == sorted(
        [queued, active, delayed]
    )
    assert jscan_all(r, "STATE", "acked") == []
    assert jscan_all(r, "STATE", "wait-repl") == []
    assert jscan_all(r, "STATE", "QUEUED", "QUEUE", "q") == [queued]
    assert jscan_all(r, "STATE", "queued", "QUEUE", "other") == []


def test_jscan_reply_all(r: redis.Redis) -> None:
    job_id = add(r, "q", "payload")
    cursor, items = r.execute_command("JSCAN", "REPLY", "all")
    assert cursor == b"0"
    assert len(items) == 1
    assert len(items[0]) == 30
    assert items[0][::2] == SHOW_KEYS
    shown = r.execute_command("SHOW", job_id)
    for index in range(0, 30, 2):
        if items[0][index] not in (b"ttl", b"next-awake-within"):  # these tick
            assert items[0][index + 1] == shown[index + 1], items[0][index]
    cursor, items = r.execute_command("JSCAN", "REPLY", "ALL", "STATE", "queued")
    assert items[0][1] == job_id


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("STATE", "bogus"), "ERR Invalid job state name"),
        (("STATE", "deleted"), "ERR Invalid job state name"),
        (("REPLY", "bogus"), "ERR Invalid REPLY type, try ID or ALL"),
        (("REPLY", ""), "ERR Invalid REPLY type, try ID or ALL"),
        (("foo",), "ERR invalid cursor or option name"),
        (("-1",), "ERR invalid cursor or option name"),
        (("+1",), "ERR invalid cursor or option name"),
        (("18446744073709551616",), "ERR invalid cursor or option name"),
        (("STATE",), "ERR invalid cursor or option name"),
        (("0", "0"), SYNTAX),
        (("0", "QUEUE", "q", "5"), SYNTAX),
        *[(("COUNT", bad), NOT_INTEGER) for bad in BAD_NUMBERS],
    ],
)
def test_jscan_errors(r: redis.Redis, argv: tuple[str, ...], expected: str) -> None:
    add(r)
    assert error_of(r, "JSCAN", *argv) == expected


@pytest.mark.parametrize("count", ["0", "-1"])
def test_jscan_count_must_be_positive(r: redis.Redis, count: str) -> None:
    with pytest.raises(redis.ResponseError):
        r.execute_command("JSCAN", "COUNT", count)


def test_jscan_skips_jobs_removed_during_the_scan(r: redis.Redis) -> None:
    ids = [add(r) for _ in range(20)]
    cursor, first = r.execute_command("JSCAN", "COUNT", "5")
    assert cursor != b"0"
    remaining = [job_id for job_id in ids if job_id not in first]
    gone = remaining[:5]
    r.execute_command("ACKJOB", *gone)
    rest: list[bytes] = []
    for _ in range(100):
        cursor, batch = r.execute_command("JSCAN", cursor, "COUNT", "5")
        rest.extend(batch)
        if cursor == b"0":
            break
    assert cursor == b"0"
    assert not set(rest) & set(gone)
    assert set(first) | set(rest) == set(ids) - set(gone)


INT64_MAX = 2**63 - 1


def test_show_with_the_largest_accepted_times(r: redis.Redis) -> None:
    big = str(INT64_MAX)
    job_id = add(r, "q", "b", "TTL", big, "RETRY", big)
    assert job_id[36:] == b"ffff"
    fields = show(r, job_id)
    assert fields is not None
    assert fields[b"ttl"] >= INT64_MAX - 5
    assert fields[b"retry"] == INT64_MAX
    assert 0 < fields[b"next-awake-within"] <= INT64_MAX
    r.execute_command("GETJOB", "FROM", "q")
    fields = show(r, job_id)
    assert fields is not None
    assert 0 < fields[b"next-requeue-within"] <= INT64_MAX
    other = add(r)
    r.execute_command("GETJOB", "FROM", "q")
    assert r.execute_command("NACK", other, "DELAY", big) == 1
    assert 0 < show(r, other)[b"next-requeue-within"] <= INT64_MAX  # type: ignore[index]
    assert len(r.execute_command("JSCAN", "REPLY", "all")[1]) == 2
    assert r.execute_command("WORKING", job_id) == INT64_MAX
