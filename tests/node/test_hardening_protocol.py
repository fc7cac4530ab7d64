"""Issue 9, defects 2, 5 and 6, reproduced against a real node: RESP headers that used to
stall the node, bulks past `proto-max-bulk-len`, inline commands behind big requests.

Stalls are not asserted in time (the machine is shared): each probe checks the exact
reply Redis gives, that the connection is closed, and that another client, connected
before the probe, is still served afterwards and while the probe is handled. The stall
itself is measured by `make bench-abuse` (and was 0.6 s to 5 s before the fix).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.node.helpers import RawClient, debug_jobs, encode_command
from tests.servers import NodeProcess, running_node

INVALID_MULTIBULK = b"-ERR Protocol error: invalid multibulk length\r\n"
INVALID_BULK = b"-ERR Protocol error: invalid bulk length\r\n"


def assert_refused(node: NodeProcess, payload: bytes, reply: bytes, password: str = "") -> None:
    """payload gets exactly `reply`, then the node closes that connection; a client that
    was connected before keeps being served."""
    with RawClient(node.port) as other, RawClient(node.port) as bad:
        if password:
            assert other.call_raw("AUTH", password) == b"+OK\r\n"
        assert other.call_raw("PING") == b"+PONG\r\n"
        bad.send(payload)
        other.send(b"PING\r\n")  # queued behind the bad request in the node's loop
        assert bad.read_raw() == reply
        assert bad.is_closed_by_peer()
        assert other.read_raw() == b"+PONG\r\n"
        assert other.call_raw("ECHO", "still here") == b"$10\r\nstill here\r\n"


@pytest.mark.parametrize(
    "count", [b"2147483647", b"1073741824", b"268435456", b"4294967295", b"1048577"]
)
def test_huge_multibulk_count_is_refused_at_once(
    node: NodeProcess, r: redis.Redis, count: bytes
) -> None:
    # Defect 2: 15 bytes made hiredis allocate 2^31 list slots (freeing them stalled every
    # client for ~4.6 s), and 2^32 - 1 raised MemoryError: no reply, dropped connection.
    assert_refused(node, b"*" + count + b"\r\n", INVALID_MULTIBULK)
    assert r.execute_command(b"PING") == b"PONG"


def test_huge_count_cut_across_reads(node: NodeProcess, r: redis.Redis) -> None:
    with RawClient(node.port) as bad:
        bad.send(b"*21474")
        assert bad.nothing_to_read(0.2)
        bad.send(b"83647\r\n")
        assert bad.read_raw() == INVALID_MULTIBULK
        assert bad.is_closed_by_peer()
    assert r.execute_command(b"PING") == b"PONG"


def test_nested_huge_counts_are_refused(node: NodeProcess, r: redis.Redis) -> None:
    assert_refused(
        node, b"*1\r\n*2147483647\r\n", b"-ERR Protocol error: expected '$', got '*'\r\n"
    )
    assert_refused(
        node, b"*1\r\n~2147483647\r\n", b"-ERR Protocol error: expected '$', got '~'\r\n"
    )


def test_requests_before_the_bad_header_are_run(node: NodeProcess, r: redis.Redis) -> None:
    with RawClient(node.port) as client:
        client.send(encode_command("ADDJOB", "q", "kept", "0") + b"PING\r\n" + b"*2147483647\r\n")
        assert client.read_raw().startswith(b"+D-")
        assert client.read_raw() == b"+PONG\r\n"
        assert client.read_raw() == INVALID_MULTIBULK
        assert client.is_closed_by_peer()
    assert r.execute_command("QLEN", "q") == 1


# -- proto-max-bulk-len: every bulk header of every request ----------------------------------


@pytest.fixture
def limited_node(tmp_path: Path) -> Iterator[NodeProcess]:
    with running_node(tmp_path / "node", "--proto-max-bulk-len", "1mb") as process:
        yield process


def test_big_bulk_behind_a_70kb_one_is_refused(limited_node: NodeProcess) -> None:
    # Defect 5: only the first 64 KiB of a request were checked, so a 5 MB bulk behind a
    # 70 KB one was accepted with a 1 MB limit. Refused at its header, before its payload.
    head = b"*4\r\n$6\r\nADDJOB\r\n$70000\r\n" + b"q" * 70_000 + b"\r\n$5000000\r\n"
    for first_read in (len(head), 68_000, 66_000, 30_000):
        with RawClient(limited_node.port) as client:
            # The node reads the first part on its own (more than 64 KiB of one request:
            # where the old check stopped), then the header of the big bulk arrives.
            client.send(head[:first_read])
            if first_read < len(head):
                assert client.nothing_to_read(0.3)
                client.send(head[first_read:])
            assert client.read_raw() == INVALID_BULK
            assert client.is_closed_by_peer()
    client_ok = limited_node.client()
    assert debug_jobs(client_ok) == [0, 0]
    assert client_ok.execute_command("ECHO", b"x" * 1024 * 1024) == b"x" * 1024 * 1024
    client_ok.close()


def test_big_bulk_in_the_tenth_request_of_a_read_is_refused(limited_node: NodeProcess) -> None:
    ok = encode_command("ECHO", b"a" * 600_000)
    with RawClient(limited_node.port) as client:
        client.send(ok * 9 + encode_command("ECHO", b"b" * (1024 * 1024 + 1)) + ok)
        for _ in range(9):
            assert client.read_reply() == b"a" * 600_000
        assert client.read_raw() == INVALID_BULK
        assert client.is_closed_by_peer()


# -- inline commands after big multi-bulk requests --------------------------------------------


def test_inline_after_a_140kb_multibulk_in_the_same_read(node: NodeProcess, r: redis.Redis) -> None:
    # Defect 6: 20/20 got `-ERR Protocol error ... got "P" as reply type byte` and were
    # disconnected.
    body = b"z" * 140_000
    with RawClient(node.port) as client:
        for _ in range(20):
            client.send(encode_command("ECHO", body) + b"PING\r\n")
            assert client.read_reply() == body
            assert client.read_raw() == b"+PONG\r\n"
    for size in (70_000, 1_000_000):
        with RawClient(node.port) as client:
            client.send(encode_command("ECHO", b"y" * size) + b"ECHO hi\r\nPING\r\n")
            assert client.read_reply() == b"y" * size
            assert client.read_raw() == b"$2\r\nhi\r\n"
            assert client.read_raw() == b"+PONG\r\n"


# -- before AUTH: Redis 7's limits for strangers ---------------------------------------------


@pytest.fixture
def password_node(tmp_path: Path) -> Iterator[NodeProcess]:
    with running_node(tmp_path / "node", "--requirepass", "s3cret") as process:
        yield process


def test_unauthenticated_limits(password_node: NodeProcess) -> None:
    unauth_count = b"-ERR Protocol error: unauthenticated multibulk length\r\n"
    unauth_bulk = b"-ERR Protocol error: unauthenticated bulk length\r\n"
    assert_refused(password_node, b"*11\r\n", unauth_count, "s3cret")
    assert_refused(password_node, b"*2147483647\r\n", INVALID_MULTIBULK, "s3cret")
    assert_refused(password_node, b"*2\r\n$4\r\nAUTH\r\n$16385\r\n", unauth_bulk, "s3cret")
    with RawClient(password_node.port) as client:
        # Within the limits: answered (NOAUTH, wrong password), not cut off.
        assert client.call_raw("ECHO", b"x" * 16384).startswith(b"-NOAUTH")
        assert client.call_raw("AUTH", "wrong") == b"-ERR invalid password\r\n"
        assert client.call_raw("AUTH", "s3cret") == b"+OK\r\n"
        # Authenticated: the ordinary limits.
        many = ["ACKJOB", *(f"D-{i:08x}-AAAAAAAAAAAAAAAAAAAAAAAA-05a1" for i in range(20))]
        assert client.call_raw(*many) == b":0\r\n"
        assert client.call_raw("ECHO", b"y" * 100_000) == b"$100000\r\n" + b"y" * 100_000 + b"\r\n"
