"""Issue 9 (hardening), memory: keepalive values the kernel refuses, client output and
query buffer limits, and client buffers counted in used_memory and maxmemory.

Real node processes on 127.0.0.1; every load loop is bounded in count and time.
"""

from __future__ import annotations

import logging
import random
import re
import socket
import time
from pathlib import Path

import pytest
import redis

from conveyor.node import keepalive as keepalive_module
from conveyor.node.config import Config
from conveyor.node.connection import Connection
from conveyor.node.server import Server
from tests.node.helpers import encode_command, error_of, info, strict_client, wait_until
from tests.servers import NodeProcess, running_node

OOM = "OOM command not allowed when used memory > 'maxmemory'."
MB = 1024 * 1024
QPEEK = encode_command("QPEEK", "q", 10)
OUTPUT_LIMIT_LOG = "scheduled to be closed ASAP for overcoming of output buffer limits."


def rss(node: NodeProcess) -> int:
    with open(f"/proc/{node.process.pid}/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def slow_reader(port: int) -> socket.socket:
    """A client with a tiny receive window that never reads."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(5)
    sock.connect(("127.0.0.1", port))
    return sock


def pipeline_unread(
    sock: socket.socket,
    request: bytes,
    max_requests: int,
    max_s: float = 20.0,
    until: object = None,
) -> tuple[int, bool]:
    """Send `request` in batches of 100 without reading the replies: at most max_requests,
    for at most max_s seconds, or until `until()` (asked after each batch) is true.
    Returns (requests sent, whether the node closed the connection)."""
    batch = request * 100
    deadline = time.monotonic() + max_s
    sent = 0
    while sent < max_requests and time.monotonic() < deadline:
        try:
            sock.sendall(batch)
        except OSError:
            return sent, True
        sent += 100
        if until is not None and until():  # type: ignore[operator]
            break
    return sent, False


def closed_by_node(sock: socket.socket, timeout_s: float = 5.0) -> bool:
    """True once the node has closed sock (reset, or EOF after any unread replies)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            if not sock.recv(1 << 20):
                return True
        except TimeoutError:
            return False
        except OSError:
            return True
    return False


def fill_queue(client: redis.Redis, body_size: int, count: int = 10) -> None:
    body = random.Random(1).randbytes(body_size)
    for _ in range(count):
        client.execute_command("ADDJOB", "q", body, "0")


# -- 1. tcp-keepalive values Linux refuses ------------------------------------------------


class _Transport:
    """Just what Connection.connection_made asks of a transport, around a real socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def get_extra_info(self, name: str) -> object:
        return {
            "socket": self.sock,
            "peername": ("127.0.0.1", 1),
            "sockname": ("127.0.0.1", 2),
        }.get(name)


def _server(tmp_path: Path) -> Server:
    config = Config()
    config.set("dir", str(tmp_path))
    return Server(config, "c" * 40, b"c" * 20, random.Random(1))


@pytest.mark.parametrize(
    ("seconds", "idle", "interval"),
    [(300, 300, 100), (32767, 32767, 10922), (32768, 32767, 10922), (40000, 32767, 10922),
     (2**31, 32767, 10922), (2**40, 32767, 10922), (1, 1, 1)],
)  # fmt: skip
def test_keepalive_values_linux_refuses_are_clamped(
    tmp_path: Path, seconds: int, idle: int, interval: int
) -> None:
    # Bypasses the directive's range check (the config file or an older node may give
    # any value): connection_made must still accept the connection, never raise.
    server = _server(tmp_path)
    server.config.values["tcp-keepalive"] = seconds
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        conn = Connection(server)
        conn.connection_made(_Transport(sock))  # type: ignore[arg-type]
        assert conn.id in server.clients
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == idle
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == interval
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3


def test_a_socket_refusing_keepalive_keeps_the_connection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = _server(tmp_path)
    server.config.values["tcp-keepalive"] = 60
    # Warnings are once per value per process: forget what earlier tests logged.
    monkeypatch.setattr(keepalive_module, "_keepalive_warned", set())
    caplog.set_level(logging.WARNING, logger="conveyor")  # whatever earlier tests set
    closed = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    closed.close()  # setsockopt on it fails with EBADF
    for _ in range(3):
        conn = Connection(server)
        conn.connection_made(_Transport(closed))  # type: ignore[arg-type]
        assert conn.id in server.clients
    warnings = [r for r in caplog.records if "Unable to set TCP keepalive" in r.getMessage()]
    assert len(warnings) == 1  # logged once, not per connection


# -- 4. output buffer limits --------------------------------------------------------------


def test_default_limits(tmp_path: Path) -> None:
    with running_node(tmp_path / "node") as node:
        client = strict_client(node)
        assert client.execute_command("CONFIG", "GET", "client-*-buffer-limit") == [
            b"client-output-buffer-limit",
            b"normal 268435456 67108864 60",
            b"client-query-buffer-limit",
            b"1073741824",
        ]
        fields = info(client, "all")
        for name in (
            "used_memory_clients",
            "mem_clients_normal",
            "client_recent_max_input_buffer",
            "client_recent_max_output_buffer",
            "client_query_buffer_limit_disconnections",
            "client_output_buffer_limit_disconnections",
        ):
            assert fields[name] == "0", name
        assert client.execute_command("CONFIG", "SET", "client-query-buffer-limit", "2mb")
        assert client.execute_command("CONFIG", "GET", "client-query-buffer-limit") == [
            b"client-query-buffer-limit",
            b"2097152",
        ]
        # Below Redis' minimum (1mb): refused.
        refused = error_of(client, "CONFIG", "SET", "client-query-buffer-limit", "1000")
        assert refused.startswith("ERR Invalid argument '1000'"), refused
        client.close()


def test_slow_reader_is_cut_at_the_hard_limit(tmp_path: Path) -> None:
    # The reported probe, scaled down: pipelined QPEEK q 10 never read (each reply ~10 KB).
    limit = 16 * MB
    with running_node(tmp_path / "node") as node:
        client = strict_client(node)
        # Set at run time: applies to connections already open too.
        reader = slow_reader(node.port)
        assert client.execute_command(
            "CONFIG", "SET", "client-output-buffer-limit", "normal 16mb 0 0"
        )
        fill_queue(client, 1000)
        start = rss(node)
        try:
            # Without the limit, 20,000 requests would pile up ~200 MB of replies.
            sent, reset = pipeline_unread(reader, QPEEK, 20_000)
            # The kernel takes the requests faster than a busy node runs them: wait for the
            # cut without reading, as reading now would drain the replies below the limit.
            wait_until(
                lambda: info(client, "stats")["client_output_buffer_limit_disconnections"] == "1",
                timeout_s=30.0,
            )
            assert reset or closed_by_node(reader), f"not cut after {sent} requests"
        finally:
            reader.close()
        fields = info(client, "all")
        assert fields["client_output_buffer_limit_disconnections"] == "1"
        assert fields["used_memory_clients"] == "0"
        assert client.execute_command(b"PING") == b"PONG"  # others unaffected
        assert rss(node) < start + 2 * limit + 16 * MB
        log = node.log_path.read_text()
        assert OUTPUT_LIMIT_LOG in log
        assert f"omem={limit}" not in log  # the size is the real one, over the limit
        client.close()


def test_one_read_of_big_replies_is_cut_at_the_limit_too(tmp_path: Path) -> None:
    # 300 QPEEK q 10 in one read, 1 MB of replies each: the node must not build all
    # 300 MB before its first write; it is cut once past 16 MB.
    with running_node(
        tmp_path / "node", "--client-output-buffer-limit", "normal", "16mb", "0", "0"
    ) as node:
        client = strict_client(node)
        fill_queue(client, 100_000)
        reader = slow_reader(node.port)
        try:
            reader.sendall(QPEEK * 300)
            wait_until(
                lambda: info(client, "stats")["client_output_buffer_limit_disconnections"] == "1"
            )
        finally:
            reader.close()
        omem = re.search(r"omem=(\d+) scheduled to be closed", node.log_path.read_text())
        assert omem is not None
        assert 16 * MB < int(omem.group(1)) < 20 * MB
        client.close()


def test_soft_limit_cuts_after_its_seconds_without_more_writes(tmp_path: Path) -> None:
    with running_node(
        tmp_path / "node", "--client-output-buffer-limit", "normal", "0", "2mb", "1"
    ) as node:
        client = strict_client(node)
        fill_queue(client, 1000)
        reader = slow_reader(node.port)
        try:
            # ~5 MB of replies, over the soft limit, then nothing more: the node's own
            # once-a-second check has to notice that the soft limit lasted its second.
            _, reset = pipeline_unread(reader, QPEEK, 500)
            assert not reset
            time.sleep(0.2)
            assert int(info(client, "clients")["client_recent_max_output_buffer"]) > 2 * MB
            # Not reading meanwhile: reading would drain the buffer below the soft limit.
            wait_until(
                lambda: info(client, "stats")["client_output_buffer_limit_disconnections"] == "1",
                timeout_s=6.0,
            )
            assert closed_by_node(reader)
        finally:
            reader.close()
        assert OUTPUT_LIMIT_LOG in node.log_path.read_text()
        client.close()


def test_a_client_reading_its_replies_is_never_cut(tmp_path: Path) -> None:
    # 60 MB of replies through a 4 MB hard limit: each reply is read before the next.
    with running_node(
        tmp_path / "node", "--client-output-buffer-limit", "normal", "4mb", "1mb", "1"
    ) as node:
        client = strict_client(node)
        fill_queue(client, 100_000)
        for _ in range(60):
            assert len(client.execute_command("QPEEK", "q", 10)) == 10
        pipe = client.pipeline(transaction=False)
        for _ in range(3):
            pipe.execute_command("QPEEK", "q", 10)
        assert [len(reply) for reply in pipe.execute()] == [10, 10, 10]
        assert info(client, "stats")["client_output_buffer_limit_disconnections"] == "0"
        client.close()


def test_used_memory_counts_a_slow_readers_output(tmp_path: Path) -> None:
    """used_memory tracks the real RSS within 20 % while a slow reader fills its buffer,
    and maxmemory counts the buffer (ADDJOB refused), until the reader is gone."""
    with running_node(tmp_path / "node") as node:  # default limits: 256mb hard
        client = strict_client(node)
        fill_queue(client, 10_000)  # QPEEK q 10: 100 KB a reply
        before = int(info(client, "memory")["used_memory"])
        reader = slow_reader(node.port)
        try:

            def buffered() -> int:
                return int(info(client, "memory")["used_memory_clients"])

            _, reset = pipeline_unread(reader, QPEEK, 2_500, until=lambda: buffered() > 150 * MB)
            assert not reset
            wait_until(lambda: buffered() > 150 * MB, timeout_s=10)
            samples = []
            for _ in range(3):
                fields = info(client, "memory")
                real = rss(node)
                samples.append((int(fields["used_memory"]), real))
                assert abs(int(fields["used_memory"]) - real) <= 0.2 * real, samples
                time.sleep(0.1)
            assert int(info(client, "clients")["client_recent_max_output_buffer"]) > 150 * MB
            # The buffer counts against maxmemory: no room for a new job...
            headroom = before + 64 * MB
            assert client.execute_command("CONFIG", "SET", "maxmemory", str(headroom))
            assert error_of(client, "ADDJOB", "q2", "x", "0") == OOM
        finally:
            reader.close()
        # ... until the reader is gone.
        wait_until(lambda: info(client, "memory")["used_memory_clients"] == "0", 10)
        assert client.execute_command("ADDJOB", "q2", "x", "0").startswith(b"D-")
        client.close()


# -- 9. unfinished requests: per client and in total --------------------------------------


def test_query_buffer_limit_per_client(tmp_path: Path) -> None:
    with running_node(tmp_path / "node") as node:
        client = strict_client(node)
        assert client.execute_command("CONFIG", "SET", "client-query-buffer-limit", "1mb")
        with socket.create_connection(("127.0.0.1", node.port), timeout=5) as sock:
            sock.sendall(b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$3000000\r\n")
            try:
                for _ in range(30):  # 1.5 MB of the announced 3 MB
                    sock.sendall(b"x" * 50_000)
                    time.sleep(0.005)
            except OSError:
                pass
            assert closed_by_node(sock)
        fields = info(client, "all")
        assert fields["client_query_buffer_limit_disconnections"] == "1"
        assert fields["used_memory_clients"] == "0"
        assert "Closing client that reached max query buffer length" in (node.log_path.read_text())
        # As in Redis, a request larger than the limit can't be sent; smaller ones, in
        # several reads or many per read, go through.
        assert client.execute_command("ADDJOB", "q", b"y" * 900_000, "0").startswith(b"D-")
        pipe = client.pipeline(transaction=False)
        for _ in range(20):
            pipe.execute_command("ADDJOB", "q", b"y" * 200_000, "0")
        assert len(pipe.execute()) == 20
        client.close()


def test_half_sent_requests_are_counted_and_capped_in_total(tmp_path: Path) -> None:
    # Unfinished requests of all clients may hold 25 % of maxmemory: 24 MB here.
    with running_node(tmp_path / "node", "--maxmemory", "96mb") as node:
        client = strict_client(node)
        socks = []
        try:
            for _ in range(40):
                sock = socket.create_connection(("127.0.0.1", node.port), timeout=5)
                socks.append(sock)
                try:
                    sock.sendall(b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$2097152\r\n")
                    sock.sendall(b"z" * MB)
                except OSError:
                    pass
            time.sleep(0.3)
            fields = info(client, "all")
            held = int(fields["used_memory_clients"])
            assert 20 * MB <= held <= 25 * MB, held
            assert MB <= int(fields["client_biggest_input_buf"]) <= MB + 65536
            assert int(fields["client_query_buffer_limit_disconnections"]) >= 15
            assert int(fields["used_memory"]) >= held
            assert client.execute_command(b"PING") == b"PONG"
        finally:
            for sock in socks:
                sock.close()
        wait_until(lambda: info(client, "memory")["used_memory_clients"] == "0", 10)
        client.close()


def test_requests_behind_a_blocked_getjob_count_as_query_buffer(tmp_path: Path) -> None:
    with running_node(tmp_path / "node", "--client-query-buffer-limit", "1mb") as node:
        client = strict_client(node)
        with socket.create_connection(("127.0.0.1", node.port), timeout=5) as sock:
            sock.sendall(encode_command("GETJOB", "FROM", "empty"))
            wait_until(lambda: info(client, "clients")["blocked_clients"] == "1")
            held = encode_command("ADDJOB", "other", b"w" * 10_000, "0")
            sock.sendall(held * 50)  # 0.5 MB waits behind the GETJOB
            wait_until(lambda: int(info(client, "memory")["used_memory_clients"]) > 400_000)
            try:
                sock.sendall(held * 60)  # and 0.6 MB more: over 1 MB
            except OSError:
                pass
            assert closed_by_node(sock)
        assert info(client, "stats")["client_query_buffer_limit_disconnections"] == "1"
        assert client.execute_command("QLEN", "other") == 0  # none of them ran
        wait_until(lambda: info(client, "memory")["used_memory_clients"] == "0")
        client.close()


def test_memory_of_many_half_sent_requests_goes_back_once_they_close(tmp_path: Path) -> None:
    # 200 clients each leave with just under 1 MiB unfinished: no single one is big, but
    # together they freed 200 MiB, which must go back to the OS (malloc_trim): glibc
    # serves such buffers from its heap once it has freed a large mmapped one, and keeps
    # the pages of a heap whose top is pinned. (Fewer than the 256 disconnections that
    # trim on their own.)
    with running_node(tmp_path / "node") as node:
        client = strict_client(node)
        start = rss(node)
        socks = []
        try:
            for _ in range(200):
                sock = socket.create_connection(("127.0.0.1", node.port), timeout=5)
                socks.append(sock)
                sock.sendall(b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$1048576\r\n")
                sock.sendall(b"z" * (MB - 64))
            wait_until(lambda: int(info(client, "memory")["used_memory_clients"]) > 190 * MB, 10)
            assert rss(node) > start + 190 * MB
        finally:
            for sock in socks:
                sock.close()
        wait_until(lambda: info(client, "memory")["used_memory_clients"] == "0", 10)
        time.sleep(1.0)  # the trim comes 0.5 s after the last of them left
        assert rss(node) < start + 8 * MB, (start, rss(node))
        client.close()
