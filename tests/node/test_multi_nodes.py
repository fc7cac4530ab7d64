"""`conveyor server --nodes N`: N nodes on consecutive ports forming one cluster, supervised
(conveyor/node/multi.py). Real processes on 127.0.0.1."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from conveyor.node.cli import build_config
from conveyor.node.multi import NodeSupervisor, node_arguments, split_nodes_option

COUNT = 3


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_run(count: int) -> int:
    """A base port such that base..base+count-1 and their bus ports were free just now.
    Client ports stay below Linux's ephemeral range (32768 up), where connections made
    meanwhile (the supervisor's PINGs) could take one before its node binds it."""
    rand = random.Random()
    for _ in range(200):
        base = rand.randrange(20000, 32768 - count)
        ports = [base + i for i in range(count)]
        if all(_bindable(p) and _bindable(p + 10000) for p in ports):
            return base
    raise RuntimeError("no run of free ports")


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"not reached in {timeout_s:g} s: {what}")


def client(port: int) -> redis.Redis:
    return redis.Redis(port=port, protocol=2, socket_timeout=5)


@pytest.fixture
def supervised(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes], Path]]:
    base = free_port_run(COUNT)
    log = tmp_path / "supervisor.log"
    with open(log, "wb") as out:
        command = [sys.executable, "-m", "conveyor.cli", "server", "--nodes", str(COUNT)]
        command += ["--port", str(base), "--dir", str(tmp_path / "data")]
        command += ["--cluster-node-timeout", "1000"]
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90  # three node starts and a MEET, on a loaded CI
        while b"one cluster" not in log.read_bytes():
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no ready line; the supervisor said:\n{log.read_text()}")
            time.sleep(0.1)
        yield base, process, log
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def test_n_nodes_form_one_cluster(
    supervised: tuple[int, subprocess.Popen[bytes], Path], tmp_path: Path
) -> None:
    base, _, log = supervised
    assert f"{COUNT} nodes on 127.0.0.1:{base}-{base + COUNT - 1}".encode() in log.read_bytes()
    hello = client(base).execute_command("HELLO")
    assert sorted(int(node[2]) for node in hello[2:]) == [base + i for i in range(COUNT)]
    job_id = client(base + 2).execute_command("ADDJOB", "q", "body", 0, "REPLICATE", COUNT)
    # Synchronous replication to all three: every node holds a copy when ADDJOB answers.
    for index in range(COUNT):
        assert client(base + index).execute_command("SHOW", job_id) is not None
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [
        f"node-{base + i}" for i in range(COUNT)
    ]


def test_a_killed_node_is_started_again_and_rejoins(
    supervised: tuple[int, subprocess.Popen[bytes], Path],
) -> None:
    base, _, log = supervised
    victim = base + 1
    pid = int(client(victim).info("server")["process_id"])
    os.kill(pid, signal.SIGKILL)
    wait_until(
        lambda: int(client(victim).info("server")["process_id"]) != pid, "a new node process"
    )
    assert f"node on port {victim} exited with -9".encode() in log.read_bytes()

    def rejoined() -> bool:
        info = client(victim).execute_command("CLUSTER", "INFO").decode()
        known, reachable = f"cluster_known_nodes:{COUNT}", f"cluster_reachable_nodes:{COUNT - 1}"
        return known in info and reachable in info

    wait_until(rejoined, "the restarted node knows the cluster again (nodes.conf)")


def test_sigterm_stops_every_node(supervised: tuple[int, subprocess.Popen[bytes], Path]) -> None:
    base, process, _ = supervised
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    for index in range(COUNT):
        with pytest.raises(redis.ConnectionError):
            client(base + index).ping()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes"], "--nodes needs a count"),
        (["--nodes", "0"], "--nodes takes a count from 1 to 64, not '0'"),
        (["--nodes", "x"], "--nodes takes a count from 1 to 64, not 'x'"),
        (["--nodes", "65"], "--nodes takes a count from 1 to 64, not '65'"),
    ],
)
def test_bad_counts_are_refused_before_anything_starts(
    args: list[str], message: str, tmp_path: Path
) -> None:
    command = [sys.executable, "-m", "conveyor.cli", "server", "--dir", str(tmp_path), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_per_node_directives() -> None:
    argv = ["--port", "7000", "--dir", "/d", "--logfile", "x/node.log", "--tls-port", "9000"]
    argv += ["--pidfile", "/run/conveyor"]
    count, words = split_nodes_option(["--nodes", "2", *argv])
    assert count == 2 and words == argv
    config = build_config(words)
    assert node_arguments(config, words, 1)[len(argv) :] == [
        "--port", "7001", "--dir", "/d/node-7001", "--tls-port", "9001",
        "--logfile", "x/node-7001.log", "--pidfile", "/run/conveyor-7001",
    ]  # fmt: skip


def test_a_node_gone_while_the_cluster_forms_is_supervised_not_orphaned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A node that dies between its first PONG and the MEETs used to end the supervisor
    # with a traceback (connection refused), leaving the other nodes running unsupervised.
    config = build_config(["--port", "7000", "--dir", "/nonexistent"])
    supervisor = NodeSupervisor(config, [], 2)
    supervised: list[bool] = []

    def refused(*words: str) -> bytes:
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(signal, "signal", lambda *args: None)  # pytest's own stay
    monkeypatch.setattr(supervisor, "start", lambda index: None)
    monkeypatch.setattr(supervisor, "_wait_ready", lambda: True)
    monkeypatch.setattr(supervisor, "_call", refused)
    monkeypatch.setattr(supervisor, "_supervise", lambda: supervised.append(True) or 0)
    assert supervisor.run() == 0
    assert supervised == [True]
