"""What the node benchmarks share: servers to measure, redis-benchmark, py-spy, memory.

`bench.node_bench` re-exports these names (other benches import them from there). The
servers are a Conveyor node, redis-server and C Disque (`DISQUE_SERVER`), each started
fresh on 127.0.0.1 with its data in a scratch directory and stopped on exit.
"""

from __future__ import annotations

import collections
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import redis

BODY = b"x" * 100
BENCH_CLIENTS = 50


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port_pair() -> int:
    """A port whose +10000 is free too, below 55535: C Disque binds its cluster bus there."""
    rand = random.Random()
    for _ in range(200):
        port = rand.randrange(20000, 45000)
        try:
            with socket.socket() as one, socket.socket() as two:
                one.bind(("127.0.0.1", port))
                two.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair")


def wait_for_ping(port: int, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            client = redis.Redis(port=port, protocol=2, socket_timeout=1)
            client.execute_command("PING")
            client.close()
            return
        except redis.ConnectionError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing answers on port {port}")


@contextmanager
def _served(
    command: list[str], port: int, cwd: Path | None = None
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd
    )
    try:
        wait_for_ping(port)
        yield port, process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@contextmanager
def conveyor_node(workdir: Path, *extra: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    data = workdir / f"node-{port}"
    data.mkdir(parents=True)
    command = [sys.executable, "-m", "conveyor.cli", "server"]
    command += ["--port", str(port), "--dir", str(data), *extra]
    with _served(command, port) as served:
        yield served


@contextmanager
def redis_server(workdir: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", str(workdir)]  # fmt: skip
    with _served(command, port) as served:
        yield served


def disque_binary() -> str | None:
    """`DISQUE_SERVER` when it names an executable file, else None (empty counts as unset)."""
    path = os.environ.get("DISQUE_SERVER", "")
    if path and os.path.isfile(path) and os.access(path, os.X_OK):
        return path
    return None


@contextmanager
def disque_node(workdir: Path, binary: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A lone C Disque node (no AOF: its default), as a Conveyor node runs by default."""
    port = free_port_pair()
    data = workdir / f"disque-{port}"
    data.mkdir(parents=True)
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data)]
    # cwd too, so that nothing Disque writes can land where the bench was started.
    with _served(command, port, cwd=data) as served:
        yield served


_RPS = re.compile(rb"([0-9.]+) requests per second")


def redis_benchmark(
    port: int, requests: int, pipeline: int, *command: bytes, clients: int = BENCH_CLIENTS
) -> float:
    output = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-c", str(clients), "-n", str(requests),
         "-P", str(pipeline), "-q", *command],
        capture_output=True,
        timeout=300,
        check=True,
    ).stdout  # fmt: skip
    matches = _RPS.findall(output)
    if not matches:
        raise RuntimeError(f"redis-benchmark printed no figure: {output[-300:]!r}")
    return float(matches[-1])


def rss_of(pid: int) -> int:
    """Resident bytes of a process, from /proc/<pid>/statm (no psutil call per sample)."""
    with open(f"/proc/{pid}/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- py-spy ------------------------------------------------------------------------------
def start_profile(pid: int, out: Path, seconds: int) -> subprocess.Popen[bytes] | None:
    if shutil.which("py-spy") is None and not (Path(sys.executable).parent / "py-spy").exists():
        return None
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen(
        [exe, "record", "-p", str(pid), "-d", str(seconds), "-r", "250", "-f", "raw",
         "-o", str(out), "--nonblocking"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def summarize_profile(path: Path, top: int = 12) -> list[tuple[str, float]]:
    """Self time per function from py-spy's collapsed stacks, as % of samples."""
    if not path.exists():
        return []
    self_time: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        leaf = stack.split(";")[-1]
        # "function (module/path.py:line)" -> "function (path.py)"
        leaf = re.sub(r":\d+\)$", ")", leaf)
        leaf = re.sub(r"\(.*/(conveyor|asyncio|uvloop)/", r"(\1/", leaf)
        self_time[leaf] += count
    if not total:
        return []
    return [(name, 100.0 * count / total) for name, count in self_time.most_common(top)]


def profile_ops(workdir: Path, pid: int, port: int, requests_p16: int) -> dict[str, object]:
    """py-spy self time of a node during ADDJOB -P 16, then GETJOB NOHANG -P 16.

    The figures measured under py-spy are returned too, but py-spy takes CPU from a 2-core
    machine: the Disque comparison profiles on a run of its own, outside its medians.
    """
    results: dict[str, object] = {}
    for phase, seconds, command in (
        ("addjob", 6, (b"ADDJOB", b"q", BODY, b"0")),
        ("getjob", 4, (b"GETJOB", b"NOHANG", b"FROM", b"q")),
    ):
        out = workdir / f"{phase}-{port}.txt"
        spy = start_profile(pid, out, seconds)
        results[f"{phase}_p16_ops"] = redis_benchmark(port, requests_p16, 16, *command)
        if spy:
            spy.wait(30)
        results[f"profile_{phase}"] = summarize_profile(out)
    return results


# -- memory and idle CPU -----------------------------------------------------------------------
def bytes_per_job(port: int, pid: int, jobs: int) -> tuple[float, float]:
    """RSS growth per queued 100-byte job (psutil, the same for every server) and fill rate."""
    process = psutil.Process(pid)
    client = redis.Redis(port=port, protocol=2, socket_timeout=60)
    before = process.memory_info().rss
    started = time.perf_counter()
    batch = 1000
    for offset in range(0, jobs, batch):
        pipe = client.pipeline(transaction=False)
        for _ in range(min(batch, jobs - offset)):
            pipe.execute_command("ADDJOB", "mem", BODY, 0)
        pipe.execute()
    elapsed = time.perf_counter() - started
    if client.execute_command("QLEN", "mem") != jobs:
        raise RuntimeError("not every job was queued")
    after = process.memory_info().rss
    client.close()
    return (after - before) / jobs, jobs / elapsed


def idle_cpu_percent(port: int, pid: int, seconds: float) -> float:
    client = redis.Redis(port=port, protocol=2)
    client.execute_command("ADDJOB", "idle", BODY, 0)
    client.close()
    process = psutil.Process(pid)
    time.sleep(1.0)
    start = process.cpu_times()
    time.sleep(seconds)
    end = process.cpu_times()
    used = (end.user - start.user) + (end.system - start.system)
    return 100.0 * used / seconds
