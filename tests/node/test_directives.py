"""Directives that change how the node runs: rename-command, timeout, pidfile, unixsocket."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import redis

from tests.servers import running_node


def test_rename_command_renames_and_disables(tmp_path: Path) -> None:
    config = tmp_path / "node.conf"
    config.write_text('rename-command CONFIG ""\nrename-command DEBUG secret-debug\n')
    with running_node(tmp_path / "n", config_file=config) as node:
        client = node.client()
        for name in ("CONFIG", "config", "DEBUG"):
            try:
                client.execute_command(name, "GET", "port")
                raise AssertionError(f"{name} still answers")
            except redis.ResponseError as exc:
                assert str(exc).startswith(f"unknown command '{name}'")
        assert client.execute_command("SECRET-DEBUG", "JOBS") == [0, 0]
        assert client.execute_command("PING") is True


def test_command_lists_commands_under_the_names_they_answer_to(tmp_path: Path) -> None:
    # COMMAND used to list the original names: a renamed command under a name that is
    # an unknown command, and not under the one it answers to.
    config = tmp_path / "node.conf"
    config.write_text('rename-command CONFIG ""\nrename-command DEBUG secret-debug\n')
    with running_node(tmp_path / "n", config_file=config) as node:
        client = node.client()
        # b"COMMAND": redis-py's own parsing of COMMAND replies stays out of the way.
        names = client.execute_command(b"COMMAND", "LIST")
        assert b"secret-debug" in names and b"ping" in names
        assert b"debug" not in names and b"config" not in names
        assert client.execute_command(b"COMMAND", "COUNT") == len(names)
        info = client.execute_command(b"COMMAND", "INFO", "SECRET-DEBUG", "debug")
        assert info[0][:2] == [b"secret-debug", -2] and info[1] is None
        entries = client.execute_command(b"COMMAND")
        assert sorted(entry[0] for entry in entries) == sorted(names)


def test_timeout_closes_idle_clients_but_not_blocked_ones(tmp_path: Path) -> None:
    with running_node(tmp_path / "n", "--timeout", "1") as node:
        idle = socket.create_connection(("127.0.0.1", node.port))
        blocked = socket.create_connection(("127.0.0.1", node.port))
        blocked.sendall(b"GETJOB TIMEOUT 10000 FROM nothing-here\r\n")
        idle.settimeout(5)
        started = time.monotonic()
        assert idle.recv(10) == b""  # closed by the node
        assert 0.9 < time.monotonic() - started < 5
        time.sleep(1.2)
        node.client().execute_command("ADDJOB", "nothing-here", "x", "0")
        blocked.settimeout(5)
        assert blocked.recv(200).startswith(b"*1\r\n*3\r\n")
        idle.close()
        blocked.close()


def test_pidfile_is_written_and_removed(tmp_path: Path) -> None:
    pidfile = tmp_path / "conveyor.pid"
    node_dir = tmp_path / "n"
    with running_node(node_dir, "--pidfile", str(pidfile)) as node:
        assert pidfile.read_text().strip() == str(node.process.pid)
    assert not pidfile.exists()


def test_unixsocket_serves_clients(tmp_path: Path) -> None:
    path = tmp_path / "conveyor.sock"
    with running_node(tmp_path / "n", "--unixsocket", str(path), "--unixsocketperm", "700"):
        assert oct(os.stat(path).st_mode & 0o777) == "0o700"
        client = redis.Redis(unix_socket_path=str(path), protocol=2)
        job_id = client.execute_command("ADDJOB", "q", "over unix", "0")
        assert client.execute_command("GETJOB", "FROM", "q") == [[b"q", job_id, b"over unix"]]
        client.close()


def test_timeout_counts_a_reply_as_activity(tmp_path: Path) -> None:
    with running_node(tmp_path / "n", "--timeout", "1") as node:
        consumer = socket.create_connection(("127.0.0.1", node.port))
        consumer.settimeout(5)
        consumer.sendall(b"GETJOB FROM late\r\n")
        time.sleep(2.2)  # blocked longer than the idle limit: blocked clients are not idle
        node.client().execute_command("ADDJOB", "late", "x", "0")
        assert consumer.recv(200).startswith(b"*1\r\n*3\r\n")
        time.sleep(0.6)  # less than the limit since the reply
        consumer.sendall(b"PING\r\n")
        assert consumer.recv(20) == b"+PONG\r\n"
        consumer.close()


def test_clearing_requirepass_frees_connections_opened_under_it(tmp_path: Path) -> None:
    with running_node(tmp_path / "n", "--requirepass", "s3cret") as node:
        before = socket.create_connection(("127.0.0.1", node.port))
        before.settimeout(5)
        before.sendall(b"PING\r\n")
        assert before.recv(100) == b"-NOAUTH Authentication required.\r\n"
        admin = node.client(password="s3cret")
        assert admin.execute_command("CONFIG", "SET", "requirepass", "") == b"OK"
        before.sendall(b"PING\r\n")
        assert before.recv(100) == b"+PONG\r\n"
        before.close()
        admin.close()
