"""Node benchmark: Conveyor beside redis-server, measured in one run on this machine.

Prints, side by side:
- ADDJOB ops/s at pipeline 1 and 16, against redis LPUSH (redis-benchmark, 50 clients,
  100-byte bodies), and GETJOB NOHANG at pipeline 16 against RPOP;
- end-to-end jobs/s: one producer and one consumer process, batches of 100, ACKJOB;
- p50/p99 add-to-receive latency at 2,000 jobs/s;
- resident bytes per queued 100-byte job at 1,000,000 jobs;
- idle CPU of a node holding one job;
- a py-spy profile (self time by function) of the node during ADDJOB and GETJOB;
- with `--only eventlog`: ADDJOB -P 1 and -P 16 with the job-event log off and on,
  alternating fresh nodes for several rounds, and the on/off ratio (target >= 0.90);
- `blocked-cycle`: node RSS while one client stays blocked in `GETJOB TIMEOUT 0 FROM q` and
  200 others loop `GETJOB TIMEOUT 20 FROM q` on the same empty queue (60 s by default),
  sampled at 0, 30, 60 s and 2 s after the load stops, with GETJOBs/s and a flatness verdict
  (a leak of timed-out waiters shows as RSS growing and staying up);
- with `--only addjob-instr`: the node's user-space instructions per ADDJOB at -P 1 and -P 16,
  counted by valgrind's callgrind (for VMs whose perf has no hardware counters), N rounds.

The machine is shared and noisy: compare ratios measured in the same run, not absolute
figures across runs. Every phase is bounded in count and time.
Usage: python -m bench.node_bench [--quick] [--json FILE] [--only PHASES] [--rounds N]
       [--cycle-seconds S] [--cycle-clients N] [--cycle-timeout-ms MS]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import multiprocessing
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import redis

from conveyor.client import Client

BODY = b"x" * 100
BENCH_CLIENTS = 50

# C Disque on this machine kind, as ratios to redis in the same run (performance-anchors.md).
DISQUE_RATIOS = {"addjob_p1": 0.82, "addjob_p16": 0.31, "getjob_p16": 0.20}
TARGETS = {
    "end_to_end_jobs_per_s": 77_000,
    "latency_p99_ms": 1.5,
    "bytes_per_job": 600,
    "idle_cpu_percent": 0.5,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
def conveyor_node(workdir: Path, *extra: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    data = workdir / f"node-{port}"
    data.mkdir(parents=True)
    command = [sys.executable, "-m", "conveyor.cli", "server"]
    command += ["--port", str(port), "--dir", str(data), *extra]
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_ping(port)
        yield port, process
    finally:
        process.terminate()
        process.wait(10)


@contextmanager
def redis_server(workdir: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for_ping(port)
        yield port, process
    finally:
        process.terminate()
        process.wait(10)


_RPS = re.compile(rb"([0-9.]+) requests per second")


def redis_benchmark(port: int, requests: int, pipeline: int, *command: bytes) -> float:
    output = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-c", str(BENCH_CLIENTS), "-n", str(requests),
         "-P", str(pipeline), "-q", *command],
        capture_output=True,
        timeout=300,
        check=True,
    ).stdout  # fmt: skip
    matches = _RPS.findall(output)
    if not matches:
        raise RuntimeError(f"redis-benchmark printed no figure: {output[-300:]!r}")
    return float(matches[-1])


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


# -- end to end --------------------------------------------------------------------------
def _producer(port: int, total: int, batch: int, ready: multiprocessing.Event) -> None:
    # add_jobs packs each batch by hand: about half the client CPU of a redis-py pipeline.
    with Client([f"127.0.0.1:{port}"]) as client:
        client.connect()
        ready.wait(30)
        sent = 0
        while sent < total:
            count = min(batch, total - sent)
            client.add_jobs("e2e", [BODY] * count)
            sent += count


def _consumer(
    port: int, total: int, batch: int, ready: multiprocessing.Event, result: multiprocessing.Queue
) -> None:
    # Plain redis-py rather than Client.get_jobs + Client.ack: building Job objects and
    # decoding IDs costs the Client path about twice the client CPU per job.
    client = redis.Redis(port=port, protocol=2, socket_timeout=30)
    ready.wait(30)
    started = time.perf_counter()
    received = 0
    deadline = time.monotonic() + 120
    while received < total and time.monotonic() < deadline:
        jobs = client.execute_command("GETJOB", "TIMEOUT", 1000, "COUNT", batch, "FROM", "e2e")
        if not jobs:
            continue
        client.execute_command("ACKJOB", *[job[1] for job in jobs])
        received += len(jobs)
    result.put((received, time.perf_counter() - started))
    client.close()


def end_to_end(port: int, total: int, batch: int = 100) -> float:
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    result: multiprocessing.Queue = ctx.Queue()
    consumer = ctx.Process(target=_consumer, args=(port, total, batch, ready, result))
    producer = ctx.Process(target=_producer, args=(port, total, batch, ready))
    consumer.start()
    producer.start()
    time.sleep(1.0)  # both processes import and connect before the clock starts
    ready.set()
    received, elapsed = result.get(timeout=180)
    producer.join(30)
    consumer.join(30)
    if received < total:
        raise RuntimeError(f"end to end: only {received} of {total} jobs arrived")
    return total / elapsed


# -- latency at a fixed rate -------------------------------------------------------------------
def _paced_producer(port: int, rate: int, total: int, ready: multiprocessing.Event) -> None:
    client = redis.Redis(port=port, protocol=2)
    ready.wait(30)
    interval = 1.0 / rate
    next_send = time.perf_counter()
    for _ in range(total):
        now = time.perf_counter()
        if now < next_send:
            time.sleep(next_send - now)
        stamp = str(time.time_ns()).encode().ljust(100, b"-")
        client.execute_command("ADDJOB", "lat", stamp, 0)
        next_send += interval
    client.close()


def _latency_consumer(
    port: int, total: int, ready: multiprocessing.Event, result: multiprocessing.Queue
) -> None:
    client = redis.Redis(port=port, protocol=2, socket_timeout=30)
    ready.wait(30)
    latencies: list[float] = []
    deadline = time.monotonic() + 60
    while len(latencies) < total and time.monotonic() < deadline:
        jobs = client.execute_command("GETJOB", "TIMEOUT", 1000, "COUNT", 100, "FROM", "lat")
        if not jobs:
            continue
        received_ns = time.time_ns()
        for job in jobs:
            latencies.append((received_ns - int(job[2].rstrip(b"-"))) / 1e6)
        client.execute_command("ACKJOB", *[job[1] for job in jobs])
    result.put(latencies)
    client.close()


def latency_at_rate(port: int, rate: int, total: int) -> tuple[float, float]:
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    result: multiprocessing.Queue = ctx.Queue()
    consumer = ctx.Process(target=_latency_consumer, args=(port, total, ready, result))
    producer = ctx.Process(target=_paced_producer, args=(port, rate, total, ready))
    consumer.start()
    producer.start()
    time.sleep(1.0)
    ready.set()
    latencies = result.get(timeout=120)
    producer.join(30)
    consumer.join(30)
    latencies.sort()
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return p50, p99


# -- memory and idle CPU -----------------------------------------------------------------------
def bytes_per_job(port: int, pid: int, jobs: int) -> tuple[float, float]:
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


# -- blocked-cycle: waiters that time out behind one that never does --------------------------
CYCLE_NULL_REPLY = b"*-1\r\n"
CYCLE_RSS_FLAT = 1.05


def rss_of(pid: int) -> int:
    """Resident bytes of a process, from /proc/<pid>/statm (no psutil call per sample)."""
    with open(f"/proc/{pid}/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _resp_command(*parts: bytes) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(part), part))
    return b"".join(out)


class _CycleState:
    def __init__(self) -> None:
        self.running = True
        self.completed = 0  # null replies received, i.e. GETJOBs that timed out
        self.unexpected = 0  # anything else (a job, an error): should stay 0
        self.first_unexpected = b""
        self.lost = 0  # connections the node closed


class _CycleClient(asyncio.Protocol):
    """One connection, one GETJOB in flight: each null reply is answered with the next one.

    The request is pre-encoded and the expected reply is five fixed bytes, so a reply costs
    the driver one callback and one write: 200 of these in one event loop keep up with the
    node (the driver's own CPU is reported beside the figure).
    """

    def __init__(self, request: bytes, state: _CycleState) -> None:
        self.request = request
        self.state = state
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.idle: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self) -> None:
        assert self.transport is not None
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        state = self.state
        if buffer == CYCLE_NULL_REPLY:
            state.completed += 1
        elif len(buffer) < len(CYCLE_NULL_REPLY) and CYCLE_NULL_REPLY.startswith(buffer):
            self.buffer = buffer  # a split reply: wait for the rest
            return
        else:
            # Nothing should arrive on this queue; count it, keep a sample, go on. A reply
            # split so that it ends mid-line is treated as ended: the count is a signal only.
            state.unexpected += 1
            if not state.first_unexpected:
                state.first_unexpected = buffer[:200]
        self.buffer = b""
        if state.running:
            self.send()
        elif not self.idle.done():
            self.idle.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.state.running:
            self.state.lost += 1
        if not self.idle.done():
            self.idle.set_result(None)


async def _blocked_cycle_load(
    port: int, pid: int, clients: int, timeout_ms: int, seconds: float
) -> dict[str, object]:
    loop = asyncio.get_running_loop()
    state = _CycleState()
    queue = b"q"
    node = psutil.Process(pid)
    # The client that blocks forever: registered first, so it heads the queue's waiters.
    blocked = _CycleClient(_resp_command(b"GETJOB", b"TIMEOUT", b"0", b"FROM", queue), state)
    await loop.create_connection(lambda: blocked, "127.0.0.1", port)
    blocked.send()
    await asyncio.sleep(0.2)
    request = _resp_command(b"GETJOB", b"TIMEOUT", str(timeout_ms).encode(), b"FROM", queue)
    cyclers: list[_CycleClient] = []
    for _ in range(clients):
        client = _CycleClient(request, state)
        await loop.create_connection(lambda client=client: client, "127.0.0.1", port)
        cyclers.append(client)
    await asyncio.sleep(0.2)

    samples: list[tuple[str, float, int]] = []  # (label, seconds, rss bytes)
    trace: list[tuple[float, int, int]] = []  # (seconds, rss, completed), every second
    started = time.monotonic()
    driver_cpu0 = time.process_time()
    node_cpu0 = sum(node.cpu_times()[:2])
    samples.append(("0 s", 0.0, rss_of(pid)))
    print(f"blocked-cycle: t=0s rss={samples[0][2] / 2**20:.1f} MB", flush=True)
    for client in cyclers:
        client.send()
    checkpoints = [seconds / 2, seconds]
    next_trace = 1.0
    while True:
        now = time.monotonic() - started
        if checkpoints and now >= checkpoints[0]:
            mark = checkpoints.pop(0)
            samples.append((f"{mark:g} s", now, rss_of(pid)))
        if now >= next_trace:
            trace.append((now, rss_of(pid), state.completed))
            if int(next_trace) % 10 == 0 or not checkpoints:
                rate = (trace[-1][2] - (trace[-11][2] if len(trace) > 10 else 0)) / min(10.0, now)
                print(
                    f"blocked-cycle: t={now:.0f}s rss={trace[-1][1] / 2**20:.1f} MB "
                    f"getjob/s (last 10 s)={rate:,.0f}",
                    flush=True,
                )
            next_trace += 1.0
        if not checkpoints:
            break
        await asyncio.sleep(min(0.05, max(0.0, min(checkpoints[0], next_trace) - now)))
    elapsed = time.monotonic() - started
    completed = state.completed
    driver_cpu = time.process_time() - driver_cpu0
    node_cpu = sum(node.cpu_times()[:2]) - node_cpu0

    # Stop: each client finishes its GETJOB in flight (<= timeout_ms), then all close.
    state.running = False
    await asyncio.wait([c.idle for c in cyclers], timeout=timeout_ms / 1000 + 10)
    blocked_now = -1
    try:
        info = redis.Redis(port=port, protocol=2, socket_timeout=5).info("clients")
        blocked_now = int(info.get("blocked_clients", -1))
    except redis.RedisError:
        pass
    for client in cyclers:
        if client.transport is not None:
            client.transport.close()
    # Informational, outside the verdict: what the forever-blocked client still pins.
    await asyncio.sleep(2.0)
    held = rss_of(pid)
    if blocked.transport is not None:
        blocked.transport.close()  # releases the forever-blocked client
    await asyncio.sleep(2.0)
    samples.append(("after", time.monotonic() - started, rss_of(pid)))
    return {
        "samples": samples,
        "trace": trace,
        "elapsed": elapsed,
        "completed": completed,
        "unexpected": state.unexpected,
        "first_unexpected": state.first_unexpected,
        "lost": state.lost,
        "driver_cpu_percent": 100.0 * driver_cpu / elapsed,
        "node_cpu_percent": 100.0 * node_cpu / elapsed,
        "blocked_clients_at_stop": blocked_now,
        "rss_held": held,
    }


def run_blocked_cycle(
    workdir: Path, results: dict[str, object], seconds: float, clients: int, timeout_ms: int
) -> None:
    """RSS of a fresh node while timed-out GETJOBs cycle behind one that never times out."""
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency of the node
        runner = asyncio.run
    print(
        f"blocked-cycle: 1 client in GETJOB TIMEOUT 0 FROM q, {clients} clients looping "
        f"GETJOB TIMEOUT {timeout_ms} FROM q for {seconds:g} s "
        f"(ideal {clients * 1000 / timeout_ms:,.0f} GETJOB/s)",
        flush=True,
    )
    with conveyor_node(workdir) as (port, process):
        load = _blocked_cycle_load(port, process.pid, clients, timeout_ms, seconds)
        out = runner(asyncio.wait_for(load, timeout=seconds + 60))
    samples = out["samples"]
    rates = out["completed"] / out["elapsed"]
    rss_values = [rss for _, _, rss in samples]
    spread = max(rss_values) / min(rss_values)
    flat = spread <= CYCLE_RSS_FLAT
    print(
        "blocked-cycle: RSS "
        + ", ".join(f"{label} {rss / 2**20:.1f} MB" for label, _, rss in samples)
        + " ('after' = 2 s after the looping clients and the blocked one closed; 2 s after"
        + f" only the looping clients closed: {out['rss_held'] / 2**20:.1f} MB)",
        flush=True,
    )
    print(
        f"blocked-cycle: {out['completed']:,} GETJOBs in {out['elapsed']:.1f} s = "
        f"{rates:,.0f}/s (ideal {clients * 1000 / timeout_ms:,.0f}/s); "
        f"node CPU {out['node_cpu_percent']:.0f}%, driver CPU {out['driver_cpu_percent']:.0f}%; "
        f"unexpected replies {out['unexpected']}, connections lost {out['lost']}, "
        f"blocked_clients at stop {out['blocked_clients_at_stop']}",
        flush=True,
    )
    if out["first_unexpected"]:
        print(f"blocked-cycle: first unexpected reply {out['first_unexpected']!r}", flush=True)
    verdict = f"RSS flat within 5%: {'yes' if flat else 'no'} (max/min = {spread:.2f})"
    print(verdict, flush=True)
    results["blocked_cycle_rss_samples_mb"] = [
        (label, round(rss / 2**20, 1)) for label, _, rss in samples
    ]
    results["blocked_cycle_held_rss_mb"] = out["rss_held"] / 2**20
    results["blocked_cycle_getjob_per_s"] = rates
    results["blocked_cycle_node_cpu_percent"] = out["node_cpu_percent"]
    results["blocked_cycle_driver_cpu_percent"] = out["driver_cpu_percent"]
    results["blocked_cycle_unexpected_replies"] = out["unexpected"]
    results["blocked_cycle_rss_max_over_min"] = spread
    results["blocked_cycle_verdict"] = verdict
    results["blocked_cycle_rss_trace_mb"] = [
        (round(t, 1), round(rss / 2**20, 1)) for t, rss, _ in out["trace"]
    ]


# -- report ----------------------------------------------------------------------------------
def print_report(results: dict[str, object]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    ops = Table(title="Throughput beside redis-server (same run, redis-benchmark -c 50, 100 B)")
    for column in ("figure", "conveyor ops/s", "redis ops/s", "ratio", "C Disque ratio", "target"):
        ops.add_column(column)
    for key, label, redis_label in (
        ("addjob_p1", "ADDJOB -P 1", "LPUSH"),
        ("addjob_p16", "ADDJOB -P 16", "LPUSH"),
        ("getjob_p16", "GETJOB NOHANG -P 16", "RPOP"),
    ):
        ours = results[f"{key}_ops"]
        theirs = results[f"{key}_redis_ops"]
        ratio = ours / theirs
        target = DISQUE_RATIOS[key]
        ops.add_row(
            label, f"{ours:,.0f}", f"{theirs:,.0f} ({redis_label})", f"{ratio:.2f}x",
            f"{target:.2f}x", "met" if ratio >= target else "MISSED",
        )  # fmt: skip
    console.print(ops)
    other = Table(title="End to end, latency, memory, idle")
    for column in ("figure", "conveyor", "target", ""):
        other.add_column(column)
    rows = (
        ("end-to-end jobs/s (1 producer + 1 consumer, batches of 100, ACKJOB)",
         results["end_to_end_jobs_per_s"], ">= 77,000", "end_to_end_jobs_per_s", True),
        ("add-to-receive latency p50 ms at 2,000 jobs/s", results["latency_p50_ms"], "",
         None, False),
        ("add-to-receive latency p99 ms at 2,000 jobs/s", results["latency_p99_ms"], "<= 1.5",
         "latency_p99_ms", False),
        (f"resident bytes per queued 100-byte job ({results['memory_jobs']:,} jobs)",
         results["bytes_per_job"], "<= 600", "bytes_per_job", False),
        ("idle CPU % holding 1 job", results["idle_cpu_percent"], "<= 0.5",
         "idle_cpu_percent", False),
    )  # fmt: skip
    for label, value, target_text, key, higher_is_better in rows:
        verdict = ""
        if key:
            goal = TARGETS[key]
            verdict = "met" if (value >= goal if higher_is_better else value <= goal) else "MISSED"
        other.add_row(label, f"{value:,.2f}", target_text, verdict)
    console.print(other)
    if "blocked_cycle_verdict" in results:
        cycle = Table(title="blocked-cycle: node RSS, 1 GETJOB TIMEOUT 0 + looping TIMEOUT 20")
        samples = results["blocked_cycle_rss_samples_mb"]
        for label, _ in samples:  # type: ignore[attr-defined]
            cycle.add_column(f"RSS {label}")
        for column in ("GETJOB/s", "verdict"):
            cycle.add_column(column)
        cycle.add_row(
            *(f"{value:.1f} MB" for _, value in samples),  # type: ignore[attr-defined]
            f"{results['blocked_cycle_getjob_per_s']:,.0f}",
            str(results["blocked_cycle_verdict"]),
        )
        console.print(cycle)
    for phase in ("addjob", "getjob"):
        profile = results.get(f"profile_{phase}") or []
        if not profile:
            console.print(f"(no py-spy profile for {phase})")
            continue
        table = Table(title=f"py-spy: node self time during {phase.upper()} -P 16")
        table.add_column("function (file)")
        table.add_column("% samples", justify="right")
        for name, share in profile:
            table.add_row(name, f"{share:.1f}")
        console.print(table)


PHASES = ("ops", "e2e", "latency", "memory", "blocked-cycle")
# Not part of the default run: compares the node with itself.
EXTRA_PHASES = ("eventlog", "addjob-instr")
EVENT_LOG_TARGET = 0.90


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--only",
        default=",".join(PHASES),
        help=f"comma-separated phases of {PHASES + EXTRA_PHASES}",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="eventlog: off/on node pairs; addjob-instr: fresh nodes (default 3)",
    )
    parser.add_argument(
        "--cycle-seconds",
        type=float,
        help="blocked-cycle: seconds of load (default 60, 6 with --quick)",
    )
    parser.add_argument(
        "--cycle-clients", type=int, default=200, help="blocked-cycle: looping clients (200)"
    )
    parser.add_argument(
        "--cycle-timeout-ms", type=int, default=20, help="blocked-cycle: GETJOB TIMEOUT (20)"
    )
    options = parser.parse_args()
    phases = set(options.only.split(","))
    unknown = phases - set(PHASES) - set(EXTRA_PHASES)
    if unknown:
        parser.error(f"unknown phases: {', '.join(sorted(unknown))}")
    scale = 10 if options.quick else 1
    requests_p1 = 100_000 // scale
    requests_p16 = 400_000 // scale
    memory_jobs = 1_000_000 // scale
    results: dict[str, object] = {"memory_jobs": memory_jobs}

    with tempfile.TemporaryDirectory(prefix="conveyor-bench-") as tmp:
        workdir = Path(tmp)
        if "ops" in phases:
            run_ops(workdir, results, requests_p1, requests_p16)
        if "e2e" in phases:
            with conveyor_node(workdir) as (port, _):
                results["end_to_end_jobs_per_s"] = end_to_end(port, 300_000 // scale)
        if "latency" in phases:
            with conveyor_node(workdir) as (port, _):
                p50, p99 = latency_at_rate(port, 2000, 10_000 // scale)
                results["latency_p50_ms"], results["latency_p99_ms"] = p50, p99
        if "addjob-instr" in phases:
            run_addjob_instructions(workdir, results, options.rounds, 20_000 // scale)
        if "eventlog" in phases:
            run_event_log(workdir, results, requests_p1, requests_p16, options.rounds)
        if "memory" in phases:
            with conveyor_node(workdir) as (port, process):
                results["idle_cpu_percent"] = idle_cpu_percent(port, process.pid, 20.0 / scale)
                per_job, rate = bytes_per_job(port, process.pid, memory_jobs)
                results["bytes_per_job"] = per_job
                results["memory_fill_jobs_per_s"] = rate
        if "blocked-cycle" in phases:
            seconds = options.cycle_seconds or (60.0 / scale)
            run_blocked_cycle(
                workdir, results, seconds, options.cycle_clients, options.cycle_timeout_ms
            )

    if phases == set(PHASES):
        print_report(results)
    else:
        for key, value in results.items():
            if not key.startswith("profile_") and not key.endswith("_trace_mb"):
                print(f"{key}: {value:,.2f}" if isinstance(value, float) else f"{key}: {value}")
    if options.json:
        options.json.write_text(json.dumps(results, indent=2))


@contextmanager
def counting_instructions(pid: int, out: Path) -> Iterator[dict[str, int]]:
    """Instructions the process runs inside the block, as {"instructions:u": n, ...}.

    Far steadier than ops/s on a shared VM. Empty when perf is missing or not allowed.
    """
    counts: dict[str, int] = {}
    perf = shutil.which("perf")
    if perf is None:
        yield counts
        return
    process = subprocess.Popen(
        [perf, "stat", "-x", ",", "-e", "instructions:u,instructions:k", "-p", str(pid),
         "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(0.3)  # attached before the load starts
    try:
        yield counts
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(10)
        for line in out.read_text().splitlines() if out.exists() else ():
            fields = line.split(",")
            if len(fields) > 2 and fields[0].isdigit():
                counts[fields[2]] = int(fields[0])


# -- addjob-instr: instructions per ADDJOB without hardware counters ---------------------------
@contextmanager
def callgrind_node(workdir: Path) -> Iterator[tuple[int, int, Path]]:
    """A node under valgrind's callgrind, instrumentation off until asked for."""
    port = free_port()
    data = workdir / f"node-{port}"
    data.mkdir(parents=True)
    out_dir = workdir / f"callgrind-{port}"
    out_dir.mkdir()
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
               f"--callgrind-out-file={out_dir}/cg.%p.out",
               sys.executable, "-m", "conveyor.cli", "server", "--port", str(port),
               "--dir", str(data)]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_ping(port, timeout_s=120.0)
        yield port, process.pid, out_dir  # valgrind runs the node in its own pid
    finally:
        process.terminate()
        process.wait(60)


def _callgrind_control(pid: int, *args: str) -> None:
    subprocess.run(
        ["callgrind_control", *args, str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
        check=True,
    )


@contextmanager
def callgrind_window(pid: int, out_dir: Path) -> Iterator[dict[str, int]]:
    """User-space instructions (callgrind's Ir) the node runs inside the block."""
    counts: dict[str, int] = {}
    _callgrind_control(pid, "-z")
    _callgrind_control(pid, "-i", "on")
    try:
        yield counts
    finally:
        _callgrind_control(pid, "-i", "off")
        _callgrind_control(pid, "-d")
        dumps = sorted(out_dir.glob("cg.*.out.*"), key=lambda path: int(path.suffix[1:]))
        for line in dumps[-1].read_text().splitlines() if dumps else ():
            if line.startswith("totals:"):
                counts["Ir"] = int(line.split()[1])


def run_addjob_instructions(
    workdir: Path, results: dict[str, object], rounds: int, requests: int
) -> None:
    """Node instructions per ADDJOB (100 B, 50 clients) at -P 1 and -P 16, under callgrind.

    perf stat counts nothing on VMs without a virtual PMU ("<not supported>"); callgrind
    counts every user-space instruction the node runs, steady from run to run. Kernel
    instructions are not counted, and under valgrind the node is ~10x slower, so each read
    carries more pipelined commands than at full speed: compare these figures between
    trees, not with perf's user + kernel counts.
    """
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("addjob-instr: valgrind is missing (apt-get install valgrind)", flush=True)
        return
    add = (b"ADDJOB", b"q", BODY, b"0")
    figures: dict[str, list[float]] = collections.defaultdict(list)
    for round_number in range(rounds):
        with callgrind_node(workdir) as (port, pid, out_dir):
            redis_benchmark(port, requests, 16, b"ADDJOB", b"warm-up", BODY, b"0")
            line = []
            for pipeline in (1, 16):
                with callgrind_window(pid, out_dir) as counts:
                    redis_benchmark(port, requests, pipeline, *add)
                per_add = counts["Ir"] / requests
                figures[f"p{pipeline}"].append(per_add)
                line.append(f"P{pipeline} {per_add:,.0f}")
        print(
            f"addjob-instr round {round_number + 1}: node instructions per ADDJOB "
            f"(callgrind, user space, {requests:,} ADDJOBs): " + ", ".join(line),
            flush=True,
        )
    for pipeline in (1, 16):
        values = figures[f"p{pipeline}"]
        results[f"addjob_p{pipeline}_instructions_callgrind"] = statistics.median(values)
        results[f"addjob_p{pipeline}_instructions_callgrind_runs"] = [round(v) for v in values]


def run_event_log(
    workdir: Path, results: dict[str, object], requests_p1: int, requests_p16: int, rounds: int
) -> None:
    """ADDJOB with the job-event log off and on: fresh nodes, alternated, same run.

    The machine drifts by tens of percent between minutes, so off and on are measured
    back to back in each round and the ratio is taken per round, then the median. The
    node's instructions per ADDJOB (user + kernel, perf stat) are the steadier figure.
    """
    add = (b"ADDJOB", b"q", BODY, b"0")
    figures: dict[str, list[float]] = collections.defaultdict(list)
    for round_number in range(rounds):
        for label in ("off", "on"):
            extra = ("--event-log", str(workdir / "events")) if label == "on" else ()
            with conveyor_node(workdir, *extra) as (port, process):
                redis_benchmark(port, 20_000, 16, b"ADDJOB", b"warm-up", BODY, b"0")
                for pipeline, requests in ((1, requests_p1), (16, requests_p16)):
                    perf_out = workdir / f"perf-{port}-{pipeline}.txt"
                    with counting_instructions(process.pid, perf_out) as counts:
                        ops = redis_benchmark(port, requests, pipeline, *add)
                    figures[f"p{pipeline}_{label}"].append(ops)
                    if counts:
                        per_add = sum(counts.values()) / requests
                        figures[f"p{pipeline}_{label}_instr"].append(per_add)
        line = []
        for pipeline in (1, 16):
            key = f"p{pipeline}"
            ratio = figures[f"{key}_on"][-1] / figures[f"{key}_off"][-1]
            figures[f"{key}_ratio"].append(ratio)
            text = (
                f"P{pipeline} off {figures[f'{key}_off'][-1]:,.0f} "
                f"on {figures[f'{key}_on'][-1]:,.0f} ops/s ({ratio:.3f})"
            )
            if figures[f"{key}_on_instr"]:
                cost = figures[f"{key}_on_instr"][-1] / figures[f"{key}_off_instr"][-1] - 1
                figures[f"{key}_instr_cost"].append(cost)
                text += (
                    f", instructions/ADDJOB off {figures[f'{key}_off_instr'][-1]:,.0f} "
                    f"on {figures[f'{key}_on_instr'][-1]:,.0f} ({cost:+.1%})"
                )
            line.append(text)
        print(f"round {round_number + 1}: " + "; ".join(line), flush=True)
    written = sum(path.stat().st_size for path in (workdir / "events").glob("*.jsonl"))
    for pipeline in (1, 16):
        key = f"p{pipeline}"
        for name in ("off", "on", "ratio", "off_instr", "on_instr", "instr_cost"):
            if figures[f"{key}_{name}"]:
                results[f"eventlog_addjob_{key}_{name}"] = statistics.median(
                    figures[f"{key}_{name}"]
                )
        ratio = results[f"eventlog_addjob_{key}_ratio"]
        verdict = "met" if ratio >= EVENT_LOG_TARGET else "MISSED"  # type: ignore[operator]
        results[f"eventlog_addjob_{key}_verdict"] = (
            f"median on/off {ratio:.3f}, target >= {EVENT_LOG_TARGET}: {verdict}"
        )
    results["eventlog_bytes_written"] = written


def run_ops(workdir: Path, results: dict[str, object], requests_p1: int, requests_p16: int) -> None:
    """redis-benchmark against redis-server, then the same against a node, with py-spy."""
    add = (b"ADDJOB", b"q", BODY, b"0")
    with redis_server(workdir) as (redis_port, _):
        results["addjob_p1_redis_ops"] = redis_benchmark(
            redis_port, requests_p1, 1, b"LPUSH", b"q", BODY
        )
        results["addjob_p16_redis_ops"] = redis_benchmark(
            redis_port, requests_p16, 16, b"LPUSH", b"q", BODY
        )
        results["getjob_p16_redis_ops"] = redis_benchmark(
            redis_port, requests_p16, 16, b"RPOP", b"q"
        )
    with conveyor_node(workdir) as (port, process):
        results["addjob_p1_ops"] = redis_benchmark(port, requests_p1, 1, *add)
        profile_out = workdir / "addjob.txt"
        spy = start_profile(process.pid, profile_out, 6)
        results["addjob_p16_ops"] = redis_benchmark(port, requests_p16, 16, *add)
        if spy:
            spy.wait(30)
        results["profile_addjob"] = summarize_profile(profile_out)
        profile_out = workdir / "getjob.txt"
        spy = start_profile(process.pid, profile_out, 4)
        results["getjob_p16_ops"] = redis_benchmark(
            port, requests_p16, 16, b"GETJOB", b"NOHANG", b"FROM", b"q"
        )
        if spy:
            spy.wait(30)
        results["profile_getjob"] = summarize_profile(profile_out)
    for key in ("addjob_p1", "addjob_p16", "getjob_p16"):  # the "ratio to redis" figures
        results[f"{key}_ratio"] = results[f"{key}_ops"] / results[f"{key}_redis_ops"]  # type: ignore[operator]


if __name__ == "__main__":
    main()
