"""Cluster benchmark: 3 local nodes, REPLICATE 3, beside a single node of the same run.

Phases (`--only` takes their names, comma-separated):
- `throughput`: redis-benchmark (50 clients, 100-byte bodies) of ADDJOB REPLICATE 3
  synchronous at -P 1 and -P 16, ADDJOB ASYNC at -P 16, and one connection pipelining
  synchronous ADDJOBs by batches of 100, three times: from redis-py (`1 conn pipelined`,
  a batch built, sent and read before the next, ~11 µs of the client's CPU a job), from
  redis-benchmark -c 1 -P 100 (`1 conn -P 100`, the same pattern from a C client, as the
  other columns are) and from Conveyor's own client (`1 conn add_jobs`:
  `Client.add_jobs`, the batch API a Python producer of Conveyor uses); the same commands
  on a lone node with REPLICATE 1 for comparison; with DISQUE_SERVER set, the same on a
  3-node C Disque cluster; and the same on the Python floor (bench/floor_node.py: three
  processes that only move the bytes, what Python, uvloop and the sockets cost with no
  node logic). Each figure in jobs/s, then in CPU µs per job spent by all the nodes
  (utime + stime). The two 3-node clusters are up together and run `--rounds` rounds
  (5), alternating run by run, which of them goes first alternating round by round:
  their rows are the median of the rounds, the ratio the median of the rounds' ratios
  (with their range), the CPU figure that of all the rounds. Each of their runs starts
  on nodes emptied of the jobs before (DEBUG FLUSHALL).
- `crash` (bench/cluster_crash.py): producers and consumers for `--crash-seconds` (60
  by default) on 3 nodes with REPLICATE 3 and RETRY 1 while a random node is SIGKILLed
  and restarted every 10 s (no AOF): then every node is back, the rest is drained, and
  the bench counts jobs whose ADDJOB was answered but were never delivered (lost,
  target 0) and jobs delivered more than once.
- `cycle` (bench/cluster_cycle.py): RSS of the three nodes while clients loop a replicated
  ADDJOB of 10 KB, GETJOB and ACKJOB or FASTACK for `--cycle-seconds` (30): flat, and no
  job left on any node once the load stops.

Figures are printed, never asserted; only 127.0.0.1; every loop is bounded in count and
time. Usage:
    python -m bench.cluster_bench [--only PHASES] [--crash-seconds S] [--cycle-seconds S]
                                  [--quick] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import redis

from bench.node_common import free_port_pair, redis_benchmark
from conveyor.client import Client

BODY = "x" * 100
# Three bench/floor_node.py processes: what Python, uvloop and the sockets cost per job
# with no node logic at all (see that module).
FLOOR = "Python floor, 3 nodes (no logic)"
OURS = "Conveyor, 3 nodes, REPLICATE 3"
THEIRS = "C Disque, 3 nodes, REPLICATE 3"
NODE_TIMEOUT_MS = 2000


class Node:
    def __init__(self, command: list[str], data: Path, port: int) -> None:
        self.command, self.data, self.port = command, data, port
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the node: ready once it answers PING."""
        self._spawn(lambda: bool(self.client().ping()))

    def start_listening(self) -> None:
        """Start a process that speaks no RESP: ready once its port takes connections."""
        self._spawn(self._listening)

    def _listening(self) -> bool:
        socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        return True

    def _spawn(self, ready: Callable[[], bool]) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        log = open(self.data / "node.log", "ab")  # noqa: SIM115 - the child keeps it
        self.process = subprocess.Popen(
            self.command, stdout=log, stderr=subprocess.STDOUT, cwd=self.data
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if ready():
                    return
            except (redis.RedisError, OSError):
                time.sleep(0.05)
        raise RuntimeError(f"process on {self.port} did not start: {self.command}")

    def client(self, timeout: float = 5.0) -> redis.Redis:
        return redis.Redis(port=self.port, protocol=2, socket_timeout=timeout)

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def conveyor_command(port: int, data: Path) -> list[str]:
    return [sys.executable, "-m", "conveyor.cli", "server", "--port", str(port), "--dir", str(data),
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--loglevel", "warning"]  # fmt: skip


def disque_command(port: int, data: Path) -> list[str]:
    return [os.environ["DISQUE_SERVER"], "--port", str(port), "--bind", "127.0.0.1",
            "--dir", str(data), "--cluster-node-timeout", str(NODE_TIMEOUT_MS)]  # fmt: skip


@contextmanager
def cluster(kind: Callable[[int, Path], list[str]], count: int) -> Iterator[list[Node]]:
    base = Path(tempfile.mkdtemp(prefix="conveyor-cluster-bench-"))
    nodes = []
    try:
        for index in range(count):
            port = free_port_pair()
            nodes.append(Node(kind(port, base / f"n{index}"), base / f"n{index}", port))
            nodes[-1].start()
        for node in nodes[1:]:
            node.client().execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[0].port)
        wait_formed(nodes)
        yield nodes
    finally:
        for node in nodes:
            node.stop()
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def floor_cluster() -> Iterator[list[Node]]:
    """The Python floor (bench/floor_node.py): an origin first, then its two replicas.

    Its ports are picked free, then bound by the processes a moment later: another
    process on the machine (a test suite's other worker) may take one in between. Such a
    start is tried again on new ports, twice at most, saying why each one failed."""
    failures: list[str] = []
    for _ in range(3):
        base = Path(tempfile.mkdtemp(prefix="conveyor-floor-bench-"))
        nodes = _floor_nodes(base)
        try:
            try:
                for replica in nodes[1:]:
                    replica.start_listening()
                nodes[0].start()
            except RuntimeError as exc:
                logs = [(n.data / "node.log").read_text(errors="replace")[-300:] for n in nodes
                        if (n.data / "node.log").exists()]  # fmt: skip
                failures.append(f"{exc}; logs: {logs}")
                continue
            yield nodes
            return
        finally:
            for each in nodes:
                each.stop()
            shutil.rmtree(base, ignore_errors=True)
    raise RuntimeError("the Python floor did not start: " + " | ".join(failures))


def _floor_nodes(base: Path) -> list[Node]:
    ports = [free_port_pair() for _ in range(3)]
    script = [sys.executable, str(Path(__file__).with_name("floor_node.py"))]
    commands = [[*script, "origin", *map(str, ports)]]
    commands += [[*script, "replica", str(port)] for port in ports[1:]]
    return [
        Node(command, base / f"n{index}", port)
        for index, (command, port) in enumerate(zip(commands, ports, strict=True))
    ]


def wait_formed(nodes: list[Node], deadline_s: float = 20.0) -> None:
    want = f"cluster_reachable_nodes:{len(nodes) - 1}\r\n"
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            infos = [n.client().execute_command("CLUSTER", "INFO").decode() for n in nodes]
            if all(want in info for info in infos):
                return
        except redis.RedisError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the cluster did not form")


# -- throughput -------------------------------------------------------------------------------
def pipelined_one_connection(port: int, jobs: int, repl: int) -> float:
    client = redis.Redis(port=port, protocol=2, socket_timeout=60)
    started = time.perf_counter()
    for _ in range(jobs // 100):
        pipe = client.pipeline(transaction=False)
        for _ in range(100):
            pipe.execute_command("ADDJOB", "p", BODY, "5000", "REPLICATE", str(repl))
        pipe.execute()
    return jobs / (time.perf_counter() - started)


def add_jobs_one_connection(port: int, jobs: int, repl: int) -> float:
    """The same batches of 100 from Conveyor's own client (`Client.add_jobs`), which packs
    a batch's commands by hand instead of through redis-py's pipeline (conveyor/client/
    _batch.py): what a Python producer of Conveyor gets on one connection."""
    client = Client(f"127.0.0.1:{port}")
    bodies = [BODY] * 100
    try:
        started = time.perf_counter()
        for _ in range(jobs // 100):
            client.add_jobs("p", bodies, replicate=repl, timeout_ms=5000)
        return jobs / (time.perf_counter() - started)
    finally:
        client.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/<pid>/stat utime, stime)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


Columns = dict[str, tuple[int, Callable[[], float]]]


def columns_for(nodes: list[Node], repl: int, quick: bool) -> Columns:
    """Each column's job count and the load that runs it on `nodes`."""
    port = nodes[0].port
    n = 20_000 if quick else 100_000
    add = [b"ADDJOB", b"q", BODY.encode(), b"5000", b"REPLICATE", str(repl).encode()]
    return {
        # Half the others' count, not a quarter: a run under a second moved its round's
        # ratio by ±20 % (0.70-1.15 in one run of 2026-11-29), the start of redis-benchmark's
        # 50 connections counted in it.
        "sync -P 1": (n // 2, lambda: redis_benchmark(port, n // 2, 1, *add)),
        "sync -P 16": (n, lambda: redis_benchmark(port, n, 16, *add)),
        "async -P 16": (n, lambda: redis_benchmark(port, n, 16, *add, b"ASYNC")),
        "1 conn pipelined": (n // 10, lambda: pipelined_one_connection(port, n // 10, repl)),
        "1 conn -P 100": (n // 10, lambda: redis_benchmark(port, n // 10, 100, *add, clients=1)),
        "1 conn add_jobs": (n // 10, lambda: add_jobs_one_connection(port, n // 10, repl)),
    }


def first_load(nodes: list[Node]) -> None:
    """A cluster's first connections and first allocations, before anything is measured."""
    redis_benchmark(nodes[0].port, 2_000, 16, b"ADDJOB", b"w", b"x", b"5000")


def flush_all(nodes: list[Node]) -> None:
    """Every node drops its jobs and queues (DEBUG FLUSHALL)."""
    for node in nodes:
        node.client().execute_command("DEBUG", "FLUSHALL")


def measure(nodes: list[Node], run: Callable[[], float], flush: bool) -> tuple[float, float]:
    """One load: its jobs/s, and the CPU seconds all the nodes spent in it. `flush`: the
    nodes drop the jobs of the runs before (DEBUG FLUSHALL), so that every run starts
    from the same state whatever ran before it (no consumer ever takes the jobs)."""
    if flush:
        flush_all(nodes)
    pids = [node.process.pid for node in nodes if node.process is not None]
    before = sum(map(cpu_seconds, pids))
    rate = run()
    time.sleep(0.3)  # the replicas' last copies
    return rate, sum(map(cpu_seconds, pids)) - before


def throughput_row(
    nodes: list[Node], repl: int, quick: bool
) -> tuple[dict[str, float], dict[str, float]]:
    """Jobs/s of each column, and the CPU µs per job the nodes spent in it, all summed.
    The second is the steadier figure on a shared VM: when the machine is saturated,
    jobs/s is two cores divided by it."""
    rates, cpu = {}, {}
    for name, (jobs, run) in columns_for(nodes, repl, quick).items():
        rates[name], seconds = measure(nodes, run, flush=False)
        cpu[name] = seconds * 1e6 / jobs
    return rates, cpu


class Paired:
    """Rounds of one column on two clusters kept up together, alternating: each pair of
    runs shares the VM's phase of the moment, which moves either figure by 20 % or more
    between runs a minute apart (docs/performance.md)."""

    def __init__(self) -> None:
        self.rates: dict[str, dict[str, list[float]]] = {}
        self.cpu: dict[str, dict[str, list[float]]] = {}  # [CPU seconds, jobs]

    def add(self, kind: str, column: str, rate: float, seconds: float, jobs: int) -> None:
        self.rates.setdefault(kind, {}).setdefault(column, []).append(rate)
        spent = self.cpu.setdefault(kind, {}).setdefault(column, [0.0, 0.0])
        spent[0] += seconds
        spent[1] += jobs

    def medians(self, kind: str) -> dict[str, float]:
        return {column: statistics.median(runs) for column, runs in self.rates[kind].items()}

    def cpu_per_job(self, kind: str) -> dict[str, float]:
        return {column: s * 1e6 / jobs for column, (s, jobs) in self.cpu[kind].items()}

    def ratios(self, ours: str, theirs: str, column: str) -> list[float]:
        """Each round's ratio: runs a few seconds apart, not the medians of each side."""
        return [
            mine / other
            for mine, other in zip(
                self.rates[ours][column], self.rates[theirs][column], strict=True
            )
        ]


def paired_rounds(quick: bool, rounds: int) -> tuple[Paired, list[str]]:
    """`rounds` rounds of every column on 3 Conveyor nodes and, with DISQUE_SERVER set,
    on 3 C Disque nodes, both clusters up, alternating run by run."""
    paired = Paired()
    kinds: list[tuple[str, Callable[[int, Path], list[str]]]] = [(OURS, conveyor_command)]
    if os.environ.get("DISQUE_SERVER"):
        kinds.append((THEIRS, disque_command))
    with ExitStack() as stack:
        clusters = {name: stack.enter_context(cluster(kind, 3)) for name, kind in kinds}
        columns = {name: columns_for(nodes, 3, quick) for name, nodes in clusters.items()}
        for nodes in clusters.values():
            first_load(nodes)
        for round_number in range(rounds):
            # Who runs first alternates round by round: the second run of a pair starts
            # on a machine the first has just warmed or loaded.
            order = list(clusters.items())[:: 1 if round_number % 2 == 0 else -1]
            for column in columns[OURS]:
                for name, nodes in order:
                    jobs, run = columns[name][column]
                    rate, seconds = measure(nodes, run, flush=True)
                    paired.add(name, column, rate, seconds, jobs)
    return paired, [name for name, _ in kinds]


def print_compiled(node: Node) -> None:
    """Which compiled modules the nodes load (INFO compiled_modules). A module whose .py is
    newer than its build loads as pure Python: a run straight from `python -m
    bench.cluster_bench` after an edit, without `make compile`, measures that instead."""
    info = node.client().info()
    status = str(info.get("compiled_modules", "?"))
    print(f"compiled modules: {status}")
    if " " in status or status == "?":
        print("WARNING: not every compiled module loads compiled; `make compile` first")


def phase_throughput(quick: bool, rounds: int) -> None:
    rows: dict[str, dict[str, float]] = {}
    cpu: dict[str, dict[str, float]] = {}
    name = "Conveyor, 1 node, REPLICATE 1"
    with cluster(conveyor_command, 1) as nodes:
        print_compiled(nodes[0])
        rows[name], cpu[name] = throughput_row(nodes, 1, quick)
    paired, kinds = paired_rounds(quick, rounds)
    for kind in kinds:
        rows[kind], cpu[kind] = paired.medians(kind), paired.cpu_per_job(kind)
    with floor_cluster() as nodes:
        rows[FLOOR], cpu[FLOOR] = throughput_row(nodes, 3, quick)
    columns = list(next(iter(rows.values())))
    print(f"\n3-node rows: the median of {rounds} rounds, Conveyor and C Disque alternating")
    print(f"{'jobs/s':34}" + "".join(f"{c:>18}" for c in columns))
    for name, row in rows.items():
        print(f"{name:34}" + "".join(f"{row[c]:>18,.0f}" for c in columns))
    ours = rows[OURS]
    print(f"{'Conveyor / Python floor':34}" + "".join(
        f"{ours[c] / rows[FLOOR][c]:>17.2f}x" for c in columns))  # fmt: skip
    if THEIRS in rows:
        ratios = {c: paired.ratios(OURS, THEIRS, c) for c in columns}
        medians = "".join(f"{statistics.median(ratios[c]):>17.2f}x" for c in columns)
        print(f"{'Conveyor / C Disque, median round':34}" + medians)
        spans = "".join(f"{f'{min(ratios[c]):.2f}-{max(ratios[c]):.2f}':>18}" for c in columns)
        print(f"{'  rounds from-to':34}" + spans)
    print(f"\n{'CPU µs per job, all nodes':34}" + "".join(f"{c:>18}" for c in columns))
    for name, row in cpu.items():
        print(f"{name:34}" + "".join(f"{row[c]:>18.1f}" for c in columns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="throughput,crash,cycle")
    parser.add_argument("--crash-seconds", type=float, default=60.0)
    parser.add_argument("--cycle-seconds", type=float, default=30.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds, 3-node rows")
    args = parser.parse_args()
    phases = args.only.split(",")
    if "throughput" in phases:
        phase_throughput(args.quick, max(args.rounds, 1))
    if "crash" in phases:
        from bench.cluster_crash import phase_crash  # it imports this module's cluster

        phase_crash(args.crash_seconds)
    if "cycle" in phases:
        from bench.cluster_cycle import phase_cycle

        phase_cycle(args.cycle_seconds)


if __name__ == "__main__":
    main()
