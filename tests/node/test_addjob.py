"""ADDJOB: reply type, job ID format, defaults, option validation and its order."""

from __future__ import annotations

import time

import pytest
import redis

from tests.node.helpers import (
    BAD_NUMBERS,
    JOB_ID_RE,
    SYNTAX,
    RawClient,
    arity_error,
    debug_jobs,
    error_of,
    show,
)

REPLICATE_RANGE = "ERR REPLICATE must be between 1 and 65535"
TTL_POSITIVE = "ERR TTL must be a number > 0"
RETRY_NON_NEGATIVE = "ERR RETRY time must be a non negative number"
DELAY_NON_NEGATIVE = "ERR DELAY time must be a non negative number"
MAXLEN_POSITIVE = "ERR MAXLEN must be a positive number"
TIMEOUT_NOT_INTEGER = "ERR timeout is not an integer or out of range"
TIMEOUT_NEGATIVE = "ERR timeout is negative"
RETRY0_REPLICATE = (
    "ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once delivery)"
)
DELAY_TOO_LONG = (
    "ERR The specified DELAY is greater than TTL. Job refused since would never be delivered"
)
NOREPL = "NOREPL Not enough reachable nodes for the requested replication level"


def test_reply_is_a_status_reply_carrying_the_id(raw: RawClient) -> None:
    reply = raw.call_raw("ADDJOB", "q", "body", "0")
    assert reply.startswith(b"+D-") and reply.endswith(b"\r\n")
    assert JOB_ID_RE.match(reply[1:-2])


def test_id_format_uses_node_id_prefix(r: redis.Redis) -> None:
    job_id = r.execute_command("ADDJOB", "q", "body", "0")
    assert isinstance(job_id, bytes)
    assert len(job_id) == 40
    assert JOB_ID_RE.match(job_id), job_id
    my_id = r.execute_command("CLUSTER", "MYID")
    assert job_id[2:10] == my_id[:8]


@pytest.mark.parametrize(
    ("options", "digits"),
    [
        ((), b"05a1"),  # TTL 86400, retry > 0: odd
        (("RETRY", "0"), b"05a0"),  # RETRY 0: even
        (("TTL", "100", "RETRY", "5"), b"0001"),
        (("TTL", "1", "RETRY", "0"), b"0000"),
        (("TTL", "1"), b"0001"),  # default RETRY is raised to 1
        (("TTL", "7200", "RETRY", "0"), b"0078"),
        (("TTL", "7260"), b"0079"),  # 121 minutes, already odd
        (("TTL", "99999999"), b"ffff"),  # capped at 65535 minutes
        (("TTL", "99999999", "RETRY", "0"), b"fffe"),
    ],
)
def test_id_ttl_digits(r: redis.Redis, options: tuple[str, ...], digits: bytes) -> None:
    job_id = r.execute_command("ADDJOB", "q", "body", "0", *options)
    assert job_id[36:] == digits


def test_ids_are_unique(r: redis.Redis) -> None:
    pipe = r.pipeline(transaction=False)
    for _ in range(300):
        pipe.execute_command("ADDJOB", "q", "x", "0")
    ids = pipe.execute()
    assert len(set(ids)) == 300
    assert all(JOB_ID_RE.match(job_id) for job_id in ids)
    assert r.execute_command("QLEN", "q") == 300


def test_defaults(r: redis.Redis) -> None:
    before_ms = int(time.time() * 1000)
    job_id = r.execute_command("ADDJOB", "q", "body", "0")
    after_ms = int(time.time() * 1000)
    fields = show(r, job_id)
    assert fields is not None
    assert fields[b"queue"] == b"q"
    assert fields[b"state"] == b"queued"
    assert fields[b"repl"] == 1
    assert 86398 <= fields[b"ttl"] <= 86400
    assert fields[b"retry"] == 300
    assert fields[b"delay"] == 0
    assert fields[b"nacks"] == 0
    assert fields[b"additional-deliveries"] == 0
    assert fields[b"body"] == b"body"
    assert before_ms - 5 <= fields[b"ctime"] // 1_000_000 <= after_ms + 5


@pytest.mark.parametrize(
    ("ttl", "retry"), [("100", 10), ("5", 1), ("20", 2), ("3000", 300), ("9", 1), ("10", 1)]
)
def test_default_retry_derives_from_ttl(r: redis.Redis, ttl: str, retry: int) -> None:
    job_id = r.execute_command("ADDJOB", "q", "body", "0", "TTL", ttl)
    fields = show(r, job_id)
    assert fields is not None
    assert fields[b"retry"] == retry
    assert fields[b"ttl"] <= int(ttl)


def test_explicit_options_are_kept(r: redis.Redis) -> None:
    job_id = r.execute_command(
        "ADDJOB", "q", "body", "5000", "REPLICATE", "1", "DELAY", "30", "RETRY", "7",
        "TTL", "600", "MAXLEN", "10", "ASYNC",
    )  # fmt: skip
    fields = show(r, job_id)
    assert fields is not None
    assert fields[b"delay"] == 30
    assert fields[b"retry"] == 7
    assert 598 <= fields[b"ttl"] <= 600
    assert fields[b"state"] == b"active"  # delayed: not queued yet
    assert r.execute_command("QLEN", "q") == 0


def test_options_are_case_insensitive(r: redis.Redis) -> None:
    job_id = r.execute_command("addjob", "q", "b", "0", "ttl", "100", "retry", "3", "async")
    fields = show(r, job_id)
    assert fields is not None and fields[b"retry"] == 3


def test_ctime_strictly_increases(r: redis.Redis) -> None:
    pipe = r.pipeline(transaction=False)
    for _ in range(50):
        pipe.execute_command("ADDJOB", "q", "x", "0")
    ids = pipe.execute()
    ctimes = [show(r, job_id)[b"ctime"] for job_id in ids]  # type: ignore[index]
    assert ctimes == sorted(ctimes)
    assert len(set(ctimes)) == len(ctimes)


@pytest.mark.parametrize(
    "body", [b"", b"\x00\r\n\xff" * 100, bytes(range(256)), b"x" * 1_000_000, "héllo".encode()]
)
def test_binary_bodies_round_trip(r: redis.Redis, body: bytes) -> None:
    job_id = r.execute_command("ADDJOB", "q", body, "0")
    assert r.execute_command("GETJOB", "FROM", "q") == [[b"q", job_id, body]]


def test_binary_queue_name(r: redis.Redis) -> None:
    queue = b"\x00q \r\n\xff"
    job_id = r.execute_command("ADDJOB", queue, "body", "0")
    assert r.execute_command("QLEN", queue) == 1
    assert r.execute_command("GETJOB", "FROM", queue) == [[queue, job_id, b"body"]]


@pytest.mark.parametrize("argv", [("ADDJOB",), ("ADDJOB", "q"), ("ADDJOB", "q", "body")])
def test_wrong_arity(r: redis.Redis, argv: tuple[str, ...]) -> None:
    assert error_of(r, *argv) == arity_error("addjob")
    assert debug_jobs(r) == [0, 0]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (("REPLICATE", "0"), REPLICATE_RANGE),
        (("REPLICATE", "65536"), REPLICATE_RANGE),
        (("REPLICATE", "-1"), REPLICATE_RANGE),
        *[(("REPLICATE", bad), REPLICATE_RANGE) for bad in BAD_NUMBERS],
        (("TTL", "0"), TTL_POSITIVE),
        (("TTL", "-5"), TTL_POSITIVE),
        *[(("TTL", bad), TTL_POSITIVE) for bad in BAD_NUMBERS],
        (("RETRY", "-1"), RETRY_NON_NEGATIVE),
        *[(("RETRY", bad), RETRY_NON_NEGATIVE) for bad in BAD_NUMBERS],
        (("DELAY", "-1"), DELAY_NON_NEGATIVE),
        *[(("DELAY", bad), DELAY_NON_NEGATIVE) for bad in BAD_NUMBERS],
        (("MAXLEN", "0"), MAXLEN_POSITIVE),
        (("MAXLEN", "-1"), MAXLEN_POSITIVE),
        *[(("MAXLEN", bad), MAXLEN_POSITIVE) for bad in BAD_NUMBERS],
        (("BOGUS",), SYNTAX),
        (("BOGUS", "1"), SYNTAX),
        (("TTL",), SYNTAX),  # a value option as the last word is an unknown word
        (("RETRY",), SYNTAX),
        (("DELAY",), SYNTAX),
        (("MAXLEN",), SYNTAX),
        (("REPLICATE",), SYNTAX),
        (("TTL", "100", "RETRY"), SYNTAX),
        (("ASYNC", "ASYNC", "NOPE"), SYNTAX),
        # the first bad option, left to right, decides
        (("TTL", "0", "RETRY", "-1"), TTL_POSITIVE),
        (("RETRY", "-1", "TTL", "0"), RETRY_NON_NEGATIVE),
        (("BOGUS", "TTL", "0"), SYNTAX),
        (("DELAY", "x", "MAXLEN", "0"), DELAY_NON_NEGATIVE),
    ],
)
def test_bad_options(r: redis.Redis, options: tuple[str, ...], expected: str) -> None:
    assert error_of(r, "ADDJOB", "q", "body", "0", *options) == expected
    assert debug_jobs(r) == [0, 0]


@pytest.mark.parametrize(
    ("timeout", "expected"),
    [
        *[(bad, TIMEOUT_NOT_INTEGER) for bad in BAD_NUMBERS],
        ("-1", TIMEOUT_NEGATIVE),
        ("-99999", TIMEOUT_NEGATIVE),
    ],
)
def test_bad_timeout(r: redis.Redis, timeout: str, expected: str) -> None:
    assert error_of(r, "ADDJOB", "q", "body", timeout) == expected
    assert debug_jobs(r) == [0, 0]


def test_options_are_checked_before_the_timeout(r: redis.Redis) -> None:
    assert error_of(r, "ADDJOB", "q", "body", "abc", "TTL", "0") == TTL_POSITIVE
    assert error_of(r, "ADDJOB", "q", "body", "-1", "BOGUS") == SYNTAX
    assert error_of(r, "ADDJOB", "q", "body", "-1", "TTL", "10") == TIMEOUT_NEGATIVE


def test_timeout_is_checked_before_semantic_errors(r: redis.Redis) -> None:
    args = ("ADDJOB", "q", "body", "abc", "REPLICATE", "2", "RETRY", "0")
    assert error_of(r, *args) == TIMEOUT_NOT_INTEGER


def test_replicate_with_retry_zero(r: redis.Redis) -> None:
    # Checked before the replication level can be refused for lack of nodes.
    args = ("ADDJOB", "q", "body", "0", "REPLICATE", "2", "RETRY", "0")
    assert error_of(r, *args) == RETRY0_REPLICATE
    job_id = r.execute_command("ADDJOB", "q", "body", "0", "REPLICATE", "1", "RETRY", "0")
    assert job_id[36:] == b"05a0"


@pytest.mark.parametrize("repl", ["2", "3", "65535"])
def test_replication_beyond_a_single_node(r: redis.Redis, repl: str) -> None:
    assert error_of(r, "ADDJOB", "q", "body", "0", "REPLICATE", repl) == NOREPL
    assert error_of(r, "ADDJOB", "q", "body", "0", "REPLICATE", repl, "ASYNC") == NOREPL
    assert debug_jobs(r) == [0, 0]


@pytest.mark.parametrize(
    "options",
    [
        ("DELAY", "10", "TTL", "10"),
        ("DELAY", "11", "TTL", "10"),
        ("DELAY", "86400"),  # the default TTL counts
        ("TTL", "5", "DELAY", "99999999999"),
    ],
)
def test_delay_not_below_ttl(r: redis.Redis, options: tuple[str, ...]) -> None:
    assert error_of(r, "ADDJOB", "q", "body", "0", *options) == DELAY_TOO_LONG
    assert debug_jobs(r) == [0, 0]


def test_delay_just_below_ttl_is_accepted(r: redis.Redis) -> None:
    job_id = r.execute_command("ADDJOB", "q", "body", "0", "DELAY", "86399")
    assert show(r, job_id)[b"delay"] == 86399  # type: ignore[index]
    assert r.execute_command("QLEN", "q") == 0


def test_maxlen(r: redis.Redis) -> None:
    for _ in range(2):
        r.execute_command("ADDJOB", "q", "x", "0")
    expected = "MAXLEN Queue is already longer than the specified MAXLEN count"
    assert error_of(r, "ADDJOB", "q", "x", "0", "MAXLEN", "2") == expected
    assert error_of(r, "ADDJOB", "q", "x", "0", "MAXLEN", "1") == expected
    assert r.execute_command("QLEN", "q") == 2
    r.execute_command("ADDJOB", "q", "x", "0", "MAXLEN", "3")
    assert r.execute_command("QLEN", "q") == 3
    # MAXLEN on a queue that does not exist yet is no obstacle
    r.execute_command("ADDJOB", "other", "x", "0", "MAXLEN", "1")
    assert r.execute_command("QLEN", "other") == 1


def test_paused_queue_refuses_jobs(r: redis.Redis) -> None:
    r.execute_command("ADDJOB", "q", "x", "0")
    assert r.execute_command("PAUSE", "q", "in") == b"in"
    assert error_of(r, "ADDJOB", "q", "y", "0") == "PAUSED Queue paused in input, try later"
    assert r.execute_command("QLEN", "q") == 1
    assert debug_jobs(r) == [1, 1]
    r.execute_command("PAUSE", "q", "none")
    r.execute_command("ADDJOB", "q", "y", "0")
    assert r.execute_command("QLEN", "q") == 2


def test_pause_out_still_accepts_jobs(r: redis.Redis) -> None:
    r.execute_command("PAUSE", "q", "out")
    r.execute_command("ADDJOB", "q", "x", "0")
    assert r.execute_command("QLEN", "q") == 1


def test_errors_leave_other_jobs_untouched(r: redis.Redis) -> None:
    job_id = r.execute_command("ADDJOB", "q", "keep", "0")
    error_of(r, "ADDJOB", "q", "x", "0", "TTL", "abc")
    error_of(r, "ADDJOB", "q", "x", "abc")
    error_of(r, "ADDJOB", "q", "x", "0", "REPLICATE", "5")
    assert debug_jobs(r) == [1, 1]
    assert r.execute_command("QPEEK", "q", "10") == [[b"q", job_id, b"keep"]]


def test_leaving_node_refuses_jobs(r: redis.Redis) -> None:
    r.execute_command("CLUSTER", "LEAVING", "yes")
    try:
        expected = (
            "NOREPL Not enough reachable nodes for the requested replication level, "
            "since I'm unable to hold a copy of the message for the following reason: "
            "I'm leaving the cluster"
        )
        assert error_of(r, "ADDJOB", "q", "x", "0") == expected
        assert debug_jobs(r) == [0, 0]
    finally:
        r.execute_command("CLUSTER", "LEAVING", "no")
    r.execute_command("ADDJOB", "q", "x", "0")
