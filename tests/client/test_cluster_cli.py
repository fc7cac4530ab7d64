"""`conveyor cluster status` and `drain` on real nodes: nodes down, bad addresses, passwords."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import free_cluster_port
from tests.servers import NodeProcess


def conveyor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conveyor.cli", *args], capture_output=True, text=True, timeout=60
    )


def met(node: NodeProcess) -> bool:
    """Both nodes known by ID, the handshake over."""
    client = node.client()
    return len(client.execute_command("HELLO")) == 4 and b"handshake" not in (
        client.execute_command("CLUSTER", "NODES")
    )


def test_status_with_a_node_down_names_it_and_exits_1(tmp_path: Path) -> None:
    first = NodeProcess(tmp_path / "a", pick_port=free_cluster_port)
    second = NodeProcess(tmp_path / "b", pick_port=free_cluster_port)
    try:
        first.client().execute_command("CLUSTER", "MEET", "127.0.0.1", second.port)
        deadline = time.monotonic() + 30
        while not met(first):
            assert time.monotonic() < deadline, "the MEET never completed"
            time.sleep(0.05)
        assert conveyor("cluster", "status", f"127.0.0.1:{first.port}").returncode == 0
        second.stop()
        result = conveyor("cluster", "status", f"127.0.0.1:{first.port}")
    finally:
        second.stop()
        first.stop()
    assert result.returncode == 1
    rows = result.stdout.splitlines()[1:]
    assert len(rows) == 2
    down = [row for row in rows if f"127.0.0.1:{second.port} " in row]
    assert len(down) == 1 and "unreachable" in down[0]
    # One line, naming the node that did not answer; no traceback.
    error = result.stderr.strip()
    assert "\n" not in error
    assert error.startswith(f"Error: no answer from 1 node(s): 127.0.0.1:{second.port} (")


def test_status_of_a_lone_node_reaches_it_at_the_address_given(tmp_path: Path) -> None:
    # Before any MEET its HELLO has no IP for itself: the row must not fall back to
    # the default host (another node, or none, when ADDRESS is not 127.0.0.1).
    node = NodeProcess(tmp_path / "a")
    try:
        node.client().execute_command("ADDJOB", "q", "body", "0")
        result = conveyor("cluster", "status", f"127.0.0.1:{node.port}")
    finally:
        node.stop()
    assert result.returncode == 0, result.stderr
    (row,) = result.stdout.splitlines()[1:]
    assert row.split()[1:3] == [f"127.0.0.1:{node.port}", "myself"]
    assert row.split()[-2:] == ["1", "1"]  # one job, one queue


def test_status_with_a_password_that_is_not_utf8_is_a_one_line_error(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "a")
    try:
        password = os.fsdecode(b"p\xff")  # as argv hands such bytes over
        result = conveyor("cluster", "status", f"127.0.0.1:{node.port}", "-a", password)
    finally:
        node.stop()
    assert result.returncode == 1
    assert result.stderr == (
        f"Error: 127.0.0.1:{node.port}: Client sent AUTH, but no password is set\n"
    )


@pytest.mark.parametrize("command", ["status", "drain"])
@pytest.mark.parametrize("host", ["a" * 64, os.fsdecode(b"h\xff")])
def test_an_address_whose_host_is_no_host_name_is_refused(command: str, host: str) -> None:
    result = conveyor("cluster", command, f"{host}:7711")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith(
        "Error: Invalid value: invalid host in node address "
    )


@pytest.mark.parametrize(
    ("timeout", "reason"),
    [("nan", "nan is not a number of seconds."), ("-1", "-1.0 is not in the range x>=0.")],
)
def test_a_drain_timeout_that_is_no_duration_is_refused(timeout: str, reason: str) -> None:
    """Refused before connecting (port 1 has no node): a NaN deadline is never reached, so
    the drain would have waited forever."""
    result = conveyor("cluster", "drain", "127.0.0.1:1", "--timeout", timeout)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == f"Error: Invalid value for '--timeout': {reason}"
