"""Where a 3-node cluster's time goes, process by process (`make bench-cluster-split`).

`bench/cluster_bench.py` gives the cluster's jobs/s and the CPU all its nodes spent; this
splits that CPU by process for each of its columns (sync -P 1, sync -P 16, async -P 16,
one pipelined connection from redis-py and from redis-benchmark), on Conveyor and, with
DISQUE_SERVER set, on C Disque:

- user and system CPU µs a job (/proc/<pid>/stat);
- `run` and `wait`: µs a job on a CPU and waiting for one (/proc/<pid>/schedstat, the
  scheduler's own clock): at -P 1 the origin is never idle, and run + wait of the origin
  is the time a job takes;
- `wakes`: how often a job the process got a CPU (schedstat's timeslices): a process
  woken often pays the wake-up each time (on a VM, a send to a sleeping peer costs the
  sender 20-100 µs: docs/performance.md, fifteenth look);
- `reads`, `writes`: system calls a job (/proc/<pid>/io);
- the client: redis-benchmark (a child process) or, for the pipelined column, redis-py
  in this process.

Figures are printed, never asserted; only 127.0.0.1; every load is bounded. Usage:
    python -m bench.cluster_split [--quick]
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from collections.abc import Callable
from pathlib import Path

from bench.cluster_bench import (
    OURS,
    THEIRS,
    Node,
    cluster,
    columns_for,
    conveyor_command,
    disque_command,
    first_load,
    flush_all,
    print_compiled,
)

TICK_S = 1 / os.sysconf("SC_CLK_TCK")
# One process's counters: user s, system s, run ns, wait ns, timeslices, reads, writes.
Counters = tuple[float, float, int, int, int, int, int]


def counters(pid: int) -> Counters:
    stat = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    run, wait, slices = map(int, Path(f"/proc/{pid}/schedstat").read_text().split())
    io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return (
        int(stat[11]) * TICK_S,
        int(stat[12]) * TICK_S,
        run,
        wait,
        slices,
        int(io["syscr"]),
        int(io["syscw"]),
    )


def client_seconds() -> float:
    """CPU seconds of this process and of its children that ended (redis-benchmark)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def split_column(nodes: list[Node], jobs: int, run: Callable[[], float]) -> list[str]:
    """One run of a column: a line for each node (the origin first) and the client."""
    flush_all(nodes)
    pids = [node.process.pid for node in nodes if node.process is not None]
    before = [counters(pid) for pid in pids]
    client_before = client_seconds()
    rate = run()
    client_spent = client_seconds() - client_before
    time.sleep(0.3)  # the replicas' last copies
    lines = [f"  {rate:>9,.0f} jobs/s"]
    for index, (pid, first) in enumerate(zip(pids, before, strict=True)):
        d = [b - a for a, b in zip(first, counters(pid), strict=True)]
        role = "origin" if index == 0 else f"replica {index}"
        lines.append(
            f"  {role:10} user {d[0] * 1e6 / jobs:5.1f}  sys {d[1] * 1e6 / jobs:5.1f}  "
            f"run {d[2] / 1e3 / jobs:5.1f}  wait {d[3] / 1e3 / jobs:5.1f}  "
            f"wakes {d[4] / jobs:6.3f}  reads {d[5] / jobs:6.3f}  writes {d[6] / jobs:6.3f}"
        )
    lines.append(f"  {'client':10} cpu  {client_spent * 1e6 / jobs:5.1f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    kinds: list[tuple[str, Callable[[int, Path], list[str]]]] = [(OURS, conveyor_command)]
    if os.environ.get("DISQUE_SERVER"):
        kinds.append((THEIRS, disque_command))
    print("µs a job unless said; wakes, reads, writes: a job")
    for name, kind in kinds:
        with cluster(kind, 3) as nodes:
            if kind is conveyor_command:
                print_compiled(nodes[0])
            first_load(nodes)
            for column, (jobs, run) in columns_for(nodes, 3, args.quick).items():
                print(f"{name}, {column}")
                print("\n".join(split_column(nodes, jobs, run)))


if __name__ == "__main__":
    main()
