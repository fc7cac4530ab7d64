"""RESP parsing under abuse: inline commands, garbage, half requests, oversized bulks.

After each abuse the node must keep serving other clients with its state unchanged.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator

import pytest
import redis

from tests.node.helpers import RawClient, debug_jobs, encode_command, info, wait_until
from tests.servers import NodeProcess


@pytest.fixture
def state(r: redis.Redis) -> Iterator[list[int]]:
    """Some jobs and queues; after the test they must all still be there."""
    ids = [r.execute_command("ADDJOB", f"q{i % 2}", f"job{i}", "0") for i in range(3)]
    before = debug_jobs(r)
    assert before == [3, 2]
    yield before
    assert r.execute_command(b"PING") == b"PONG"
    assert debug_jobs(r) == before
    assert r.execute_command("QLEN", "q0") == 2
    assert r.execute_command("SHOW", ids[0])[5] == b"queued"


def test_inline_ping(raw: RawClient, state: list[int]) -> None:
    raw.send(b"PING\r\n")
    assert raw.read_raw() == b"+PONG\r\n"
    raw.send(b"ping\n")  # a bare \n ends an inline command too
    assert raw.read_raw() == b"+PONG\r\n"


def test_inline_commands_with_quotes(raw: RawClient, r: redis.Redis) -> None:
    raw.send(b'ADDJOB q "hello world\\r\\n" 0 TTL 100\r\n')
    reply = raw.read_raw()
    assert reply.startswith(b"+D-") and reply.endswith(b"-0001\r\n")
    job_id = reply[1:-2]
    raw.send(b"GETJOB FROM 'q'\r\n")
    assert raw.read_reply() == [[b"q", job_id, b"hello world\r\n"]]
    raw.send(b'ECHO "\\x41\\x00B"\r\n')
    assert raw.read_reply() == b"A\x00B"


def test_inline_empty_lines_are_ignored(raw: RawClient, state: list[int]) -> None:
    raw.send(b"\r\n\r\n  \r\nPING\r\n")
    assert raw.read_raw() == b"+PONG\r\n"


def test_inline_and_multibulk_mixed_in_one_write(raw: RawClient, state: list[int]) -> None:
    raw.send(
        b"PING\r\n" + encode_command("ECHO", "a") + b"ECHO b\r\n" + encode_command("QLEN", "q0")
    )
    assert [raw.read_reply() for _ in range(4)] == [b"PONG", b"a", b"b", 2]


def test_inline_unbalanced_quotes(node: NodeProcess, raw: RawClient, state: list[int]) -> None:
    raw.send(b'ECHO "oops\r\n')
    assert raw.read_raw() == b"-ERR Protocol error: unbalanced quotes in request\r\n"
    assert raw.is_closed_by_peer()


def test_request_sent_byte_by_byte(raw: RawClient, state: list[int]) -> None:
    for byte in encode_command("ECHO", "slowly"):
        raw.send(bytes([byte]))
    assert raw.read_raw() == b"$6\r\nslowly\r\n"
    for byte in b"PING\r\n":
        raw.send(bytes([byte]))
    assert raw.read_raw() == b"+PONG\r\n"


def test_pipeline_of_many_commands(raw: RawClient, r: redis.Redis) -> None:
    raw.send(b"".join(encode_command("ADDJOB", "p", f"job{i}", "0") for i in range(500)))
    replies = [raw.read_reply() for _ in range(500)]
    assert len(set(replies)) == 500
    assert r.execute_command("QLEN", "p") == 500
    raw.send(b"".join(encode_command("GETJOB", "FROM", "p") for _ in range(500)))
    bodies = [raw.read_reply()[0][2] for _ in range(500)]
    assert bodies == [f"job{i}".encode() for i in range(500)]


def test_errors_in_a_pipeline_do_not_close(raw: RawClient, state: list[int]) -> None:
    raw.send(
        encode_command("NOSUCH")
        + encode_command("ADDJOB", "q")
        + encode_command("ACKJOB", "bad")
        + encode_command("PING")
    )
    assert str(raw.read_reply()) == "ERR unknown command 'NOSUCH'"
    assert str(raw.read_reply()) == "ERR wrong number of arguments for 'addjob' command"
    assert str(raw.read_reply()) == "BADID Invalid Job ID format."
    assert raw.read_reply() == b"PONG"


@pytest.mark.parametrize(
    ("garbage", "expected"),
    [
        (b"*abc\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
        (b"*1\r\n$abc\r\nPING\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
        (b"*1\r\n$-5\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
        (b"*2\r\n$4\r\nECHO\r\n:12\r\n", b"-ERR Protocol error: expected '$', got ':'\r\n"),
        (b"*2\r\n$4\r\nECHO\r\n*0\r\n", b"-ERR Protocol error: expected '$', got '*'\r\n"),
        (b"*2\r\n$4\r\nECHO\r\n-ERR x\r\n", b"-ERR Protocol error: expected '$', got '-'\r\n"),
        (b"*2\r\n$4\r\nECHO\r\n$-1\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
        # RESP3 aggregates keyed by aggregates: hiredis raised TypeError on these.
        (
            b"*1\r\n%1\r\n*1\r\n$1\r\na\r\n$1\r\nb\r\n",
            b"-ERR Protocol error: expected '$', got '%'\r\n",
        ),
        (
            b"*2\r\n$4\r\nECHO\r\n%1\r\n%1\r\n:1\r\n:2\r\n:3\r\n",
            b"-ERR Protocol error: expected '$', got '%'\r\n",
        ),
    ],
)
def test_garbage_gets_a_protocol_error_then_close(
    node: NodeProcess, raw: RawClient, state: list[int], garbage: bytes, expected: bytes
) -> None:
    raw.send(garbage)
    assert raw.read_raw() == expected
    assert raw.is_closed_by_peer()
    with RawClient(node.port) as other:
        assert other.call_raw("PING") == b"+PONG\r\n"


def test_garbage_after_a_good_command(raw: RawClient, state: list[int]) -> None:
    raw.send(encode_command("PING") + b"*x\r\n" + encode_command("ADDJOB", "q0", "x", "0"))
    assert raw.read_reply() == b"PONG"
    assert raw.read_raw() == b"-ERR Protocol error: invalid multibulk length\r\n"
    assert raw.is_closed_by_peer()  # and the ADDJOB after the garbage was not run


def test_too_big_inline_request(raw: RawClient, state: list[int]) -> None:
    try:
        raw.send(b"ECHO " + b"x" * (200 * 1024))
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert raw.read_raw() == b"-ERR Protocol error: too big inline request\r\n"
    assert raw.is_closed_by_peer()


def test_absurd_multibulk_count(raw: RawClient, state: list[int]) -> None:
    raw.send(b"*99999999\r\n")
    assert raw.read_raw(2) == b"-ERR Protocol error: invalid multibulk length\r\n"
    assert raw.is_closed_by_peer()


@pytest.mark.parametrize(
    "partial",
    [
        b"*3\r\n$6\r\nADDJOB\r\n$1\r\nq0",
        b"*4\r\n$6\r\nADDJOB\r\n$2\r\nq0\r\n$1000\r\nabc",
        b"*4\r\n$6\r\nADDJOB\r\n$2\r\nq0\r\n$3\r\nabc\r\n",  # 3 of 4 arguments
        b"*2\r\n$6\r\nACKJOB\r\n",
        b"AD",  # half an inline command
        b"*",
    ],
)
def test_disconnect_mid_command(
    node: NodeProcess, r: redis.Redis, state: list[int], partial: bytes
) -> None:
    # only `r` is connected once earlier tests' sockets are gone
    wait_until(lambda: info(r)["connected_clients"] == "1")
    connections = 1
    with RawClient(node.port) as client:
        client.send(partial)
        wait_until(lambda: int(info(r)["connected_clients"]) == connections + 1)
    wait_until(lambda: int(info(r)["connected_clients"]) == connections)
    with RawClient(node.port) as other:
        assert other.call_raw("PING") == b"+PONG\r\n"


def test_half_request_then_abrupt_reset(
    node: NodeProcess, r: redis.Redis, state: list[int]
) -> None:
    sock = socket.create_connection(("127.0.0.1", node.port))
    sock.sendall(b"*4\r\n$6\r\nADDJOB\r\n$2\r\nq0\r\n$100\r\nhalf")
    # SO_LINGER 0: close with a TCP RST instead of a FIN
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()
    with RawClient(node.port) as other:
        assert other.call_raw("PING") == b"+PONG\r\n"


def test_client_closing_before_reading_its_reply(
    node: NodeProcess, r: redis.Redis, state: list[int]
) -> None:
    with RawClient(node.port) as client:
        client.send(encode_command("QPEEK", "q0", "100") * 50)
    assert r.execute_command("QLEN", "q0") == 2


def test_other_clients_unaffected_by_a_slow_sender(
    node: NodeProcess, r: redis.Redis, state: list[int]
) -> None:
    with RawClient(node.port) as slow:
        slow.send(b"*3\r\n$4\r\nECHO\r\n")  # stalls mid-request (and has a wrong count)
        assert r.execute_command("QLEN", "q0") == 2
        with RawClient(node.port) as other:
            assert other.call_raw("PING") == b"+PONG\r\n"
        slow.send(b"$2\r\nhi\r\n")
        assert slow.nothing_to_read(0.2)  # still waiting for the third argument
        slow.send(b"$2\r\nho\r\n")
        assert slow.read_raw() == b"-ERR wrong number of arguments for 'echo' command\r\n"


def test_many_connections(node: NodeProcess, r: redis.Redis, state: list[int]) -> None:
    clients = [RawClient(node.port) for _ in range(50)]
    try:
        for i, client in enumerate(clients):
            client.send_command("ECHO", str(i))
        for i, client in enumerate(clients):
            assert client.read_reply() == str(i).encode()
        assert int(info(r)["connected_clients"]) >= 51
    finally:
        for client in clients:
            client.close()


# -- proto-max-bulk-len ---------------------------------------------------------------------


@pytest.fixture
def small_bulk_limit(r: redis.Redis) -> Iterator[None]:
    assert r.execute_command("CONFIG", "SET", "proto-max-bulk-len", "1mb") == b"OK"
    yield
    r.execute_command("CONFIG", "SET", "proto-max-bulk-len", "512mb")


def test_bulk_over_the_limit_in_first_position(
    node: NodeProcess, small_bulk_limit: None, state: list[int]
) -> None:
    with RawClient(node.port) as client:
        client.send(b"*1\r\n$2000000\r\n")
        assert client.read_raw() == b"-ERR Protocol error: invalid bulk length\r\n"
        assert client.is_closed_by_peer()


def test_bulk_over_the_limit_after_the_command_name(
    node: NodeProcess, r: redis.Redis, small_bulk_limit: None
) -> None:
    with RawClient(node.port) as client:
        client.send(b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$2000000\r\n" + b"x" * 1000)
        assert client.read_raw() == b"-ERR Protocol error: invalid bulk length\r\n"
        assert client.is_closed_by_peer()
    assert r.execute_command("QLEN", "q") == 0
    assert debug_jobs(r) == [0, 0]


def test_bulk_over_the_limit_in_a_later_read(
    node: NodeProcess, r: redis.Redis, small_bulk_limit: None
) -> None:
    with RawClient(node.port) as client:
        client.send(b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$4\r\nbody")
        assert client.nothing_to_read(0.1)
        client.send(b"\r\n$2000000\r\n0000")
        assert client.read_raw() == b"-ERR Protocol error: invalid bulk length\r\n"
        assert client.is_closed_by_peer()
    assert debug_jobs(r) == [0, 0]


def test_bulk_under_the_limit_is_fine(
    node: NodeProcess, r: redis.Redis, small_bulk_limit: None
) -> None:
    with RawClient(node.port) as client:
        body = b"y" * 500_000
        client.send_command("ECHO", body)
        assert client.read_reply() == body


# -- redis-cli ------------------------------------------------------------------------------


def test_redis_cli(node: NodeProcess, r: redis.Redis) -> None:
    def cli(*args: str) -> str:
        result = subprocess.run(
            ["redis-cli", "-p", str(node.port), *args], capture_output=True, timeout=30
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.decode()

    job_id = cli("ADDJOB", "q", "hello", "0").strip()
    assert len(job_id) == 40 and job_id.startswith("D-")
    assert cli("QLEN", "q").strip() == "1"
    assert cli("GETJOB", "FROM", "q").split() == ["q", job_id, "hello"]
    assert cli("ACKJOB", job_id).strip() == "1"
    assert cli("PING").strip() == "PONG"
    assert "ERR unknown command" in cli("NOSUCH")
    assert debug_jobs(r) == [0, 1]


def test_a_simple_string_element_is_read_as_a_string(raw: RawClient) -> None:
    # Redis refuses '+' elements inside a request; Conveyor's hiredis reader can't tell them
    # from bulk strings, and reading them as the string they carry loses nothing.
    raw.send(b"*1\r\n+PING\r\n")
    assert raw.read_raw() == b"+PONG\r\n"
    assert raw.call_raw("PING") == b"+PONG\r\n"
