"""Instruction counts of a node: the callgrind figure per ADDJOB and the event-log cost.

- `addjob-instr`: user-space instructions per ADDJOB at -P 1 and -P 16 under valgrind's
  callgrind (for VMs whose perf has no hardware counters); with `DISQUE_SERVER`, C Disque's
  beside Conveyor's, measured the same way in the same rounds.
- `eventlog`: ADDJOB -P 1 and -P 16 with the job-event log off and on, alternating fresh
  nodes, with perf's instruction counts when the VM has them.

Run through `python -m bench.node_bench --only addjob-instr` / `--only eventlog`.
"""

from __future__ import annotations

import collections
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.node_common import (
    BODY,
    conveyor_node,
    free_port,
    free_port_pair,
    redis_benchmark,
    wait_for_ping,
)

EVENT_LOG_TARGET = 0.90


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
def callgrind_node(workdir: Path, disque: str | None = None) -> Iterator[tuple[int, int, Path]]:
    """A node (or C Disque, given its binary) under callgrind, instrumentation off until asked."""
    port = free_port_pair() if disque else free_port()  # Disque's bus port is port + 10000
    data = workdir / f"node-{port}"
    data.mkdir(parents=True)
    out_dir = workdir / f"callgrind-{port}"
    out_dir.mkdir()
    server = (
        [disque, "--bind", "127.0.0.1"]
        if disque
        else [sys.executable, "-m", "conveyor.cli", "server"]
    )
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
               f"--callgrind-out-file={out_dir}/cg.%p.out",
               *server, "--port", str(port), "--dir", str(data)]  # fmt: skip
    cwd = data if disque else None  # a Conveyor node runs from here, as in the other phases
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd
    )
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
    workdir: Path,
    results: dict[str, object],
    rounds: int,
    requests: int,
    disque: str | None = None,
) -> None:
    """Node instructions per ADDJOB (100 B, 50 clients) at -P 1 and -P 16, under callgrind.

    perf stat counts nothing on VMs without a virtual PMU ("<not supported>"); callgrind
    counts every user-space instruction the node runs, steady from run to run. Kernel
    instructions are not counted, and under valgrind the node is ~10x slower, so each read
    carries more pipelined commands than at full speed: compare these figures between
    trees (or with C Disque's, measured the same way), not with perf's user + kernel counts.
    """
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("addjob-instr: valgrind is missing (apt-get install valgrind)", flush=True)
        return
    add = (b"ADDJOB", b"q", BODY, b"0")
    kinds: list[tuple[str, str | None]] = [("", None)]  # (results prefix, Disque binary)
    if disque:
        kinds.append(("disque_", disque))
    figures: dict[str, list[float]] = collections.defaultdict(list)
    for round_number in range(rounds):
        line = []
        for prefix, binary in kinds:
            with callgrind_node(workdir, binary) as (port, pid, out_dir):
                redis_benchmark(port, requests, 16, b"ADDJOB", b"warm-up", BODY, b"0")
                for pipeline in (1, 16):
                    with callgrind_window(pid, out_dir) as counts:
                        redis_benchmark(port, requests, pipeline, *add)
                    per_add = counts["Ir"] / requests
                    figures[f"{prefix}p{pipeline}"].append(per_add)
                    name = "C Disque" if binary else "Conveyor"
                    line.append(f"{name} P{pipeline} {per_add:,.0f}")
        print(
            f"addjob-instr round {round_number + 1}: instructions per ADDJOB "
            f"(callgrind, user space, {requests:,} ADDJOBs): " + ", ".join(line),
            flush=True,
        )
    for prefix, _ in kinds:
        for pipeline in (1, 16):
            values = figures[f"{prefix}p{pipeline}"]
            key = f"{prefix}addjob_p{pipeline}_instructions_callgrind"
            results[key] = statistics.median(values)
            results[f"{key}_runs"] = [round(v) for v in values]


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
    written = 0
    for round_number in range(rounds):
        # Which goes first alternates, so a drift of the machine within a round does
        # not always favour the same side.
        for label in ("off", "on") if round_number % 2 == 0 else ("on", "off"):
            events_dir = workdir / f"events-{round_number}"
            extra = ("--event-log", str(events_dir)) if label == "on" else ()
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
            if label == "on":
                # Every round starts from the same page cache: the last round's ~400 MB
                # of dirty pages would otherwise be written back during this one.
                written += sum(path.stat().st_size for path in events_dir.glob("*.jsonl"))
                shutil.rmtree(events_dir)
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
