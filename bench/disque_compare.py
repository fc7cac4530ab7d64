"""A Conveyor node beside C Disque (`DISQUE_SERVER`): issue 15's table, measured in one run.

Figures (redis-benchmark: 50 clients, 100-byte bodies):
- ADDJOB -P 1, ADDJOB -P 16 and GETJOB NOHANG -P 16 (on the jobs the ADDJOBs queued), ops/s;
- end to end: one producer process adding batches of 100 and one consumer process doing
  GETJOB COUNT 100 + one ACKJOB per batch, jobs/s from the first ADDJOB to the last ACKJOB;
- add-to-receive latency p99 (and p50) at 2,000 jobs/s, the consumer blocked in GETJOB;
- resident bytes per queued 100-byte job at 1,000,000 jobs: RSS growth read by psutil from
  /proc, the same way for both servers (INFO used_memory growth is kept beside it), and the
  idle CPU of each server holding one job.

Each figure is measured in `rounds` interleaved rounds on fresh servers, the two servers
back to back within a round and in alternating order (Conveyor first in odd rounds, C Disque
first in even ones), so that the machine's drift between minutes falls on both; the table
gives medians. Memory takes one round (filling 1,000,000 jobs is slow). The py-spy profile
runs on a Conveyor node of its own after the ops rounds: py-spy takes CPU from a 2-core
machine, so no median is measured under it.
"""

from __future__ import annotations

import shutil
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import redis

from bench.node_common import (
    BODY,
    bytes_per_job,
    conveyor_node,
    disque_node,
    idle_cpu_percent,
    profile_ops,
    redis_benchmark,
)
from bench.node_flows import end_to_end, latency_at_rate

CONVEYOR, DISQUE = "Conveyor", "C Disque"
COMPARED_PHASES = ("ops", "e2e", "latency", "memory")
LATENCY_RATE = 2000
LATENCY_P99_TARGET_MS = 0.2


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    judged: bool = True  # False: printed for context, no verdict
    target: float | None = None  # an absolute bound besides the ratio (p99 <= 0.2 ms)


FIGURES = (
    Figure("addjob_p1", "ADDJOB -P 1", "ops/s", True),
    Figure("addjob_p16", "ADDJOB -P 16", "ops/s", True),
    Figure("getjob_p16", "GETJOB NOHANG -P 16", "ops/s", True),
    Figure("end_to_end", "end to end: ADDJOB x100 / GETJOB COUNT 100 + ACKJOB", "jobs/s", True),
    Figure(
        "latency_p99",
        f"add-to-receive p99 at {LATENCY_RATE:,}/s, consumer blocked in GETJOB",
        "ms",
        False,
        target=LATENCY_P99_TARGET_MS,
    ),
    Figure("latency_p50", "  p50 of the same (context)", "ms", False, judged=False),
    Figure("bytes_per_job", "resident bytes per queued 100-byte job", "B (RSS)", False),
    Figure("used_memory_per_job", "  INFO used_memory per job (context)", "B", False, False),
    Figure("idle_cpu_percent", "idle CPU holding 1 job (context)", "%", False, judged=False),
    # From the addjob-instr phase (bench.node_instr), when it ran: why the rates differ.
    Figure("addjob_p1_instr", "instructions per ADDJOB -P 1 (callgrind)", "instr.", False, False),
    Figure("addjob_p16_instr", "instructions per ADDJOB -P 16 (callgrind)", "instr.", False, False),
)


@dataclass(frozen=True)
class Sizes:
    requests_p1: int
    requests_p16: int
    e2e_jobs: int
    latency_jobs: int
    memory_jobs: int
    idle_seconds: float


@contextmanager
def _server(name: str, workdir: Path, binary: str) -> Iterator[tuple[int, int]]:
    """(port, pid) of a fresh server of that name."""
    if name == CONVEYOR:
        with conveyor_node(workdir) as (port, process):
            yield port, process.pid
    else:
        with disque_node(workdir, binary) as (port, process):
            yield port, process.pid


def _order(round_number: int) -> tuple[str, str]:
    return (CONVEYOR, DISQUE) if round_number % 2 == 0 else (DISQUE, CONVEYOR)


def _used_memory(port: int) -> int:
    client = redis.Redis(port=port, protocol=2, socket_timeout=10)
    try:
        return int(client.info("memory")["used_memory"])
    finally:
        client.close()


def compare(
    workdir: Path, binary: str, phases: set[str], rounds: int, sizes: Sizes, producer: str
) -> dict[str, object]:
    """Every figure of FIGURES the phases cover, for both servers; see `summarize`."""
    raw: dict[str, dict[str, list[float]]] = {
        figure.key: {CONVEYOR: [], DISQUE: []} for figure in FIGURES
    }
    results: dict[str, object] = {}

    def note(phase: str, round_number: int, line: dict[str, str]) -> None:
        text = "; ".join(f"{name} {value}" for name, value in line.items())
        print(f"disque-compare {phase} round {round_number + 1}/{rounds}: {text}", flush=True)

    if "ops" in phases:
        add = (b"ADDJOB", b"q", BODY, b"0")
        for round_number in range(rounds):
            line = {}
            for name in _order(round_number):
                with _server(name, workdir, binary) as (port, _):
                    # A short warm-up on another queue: first connections and allocations.
                    redis_benchmark(port, sizes.requests_p16 // 20, 16, b"ADDJOB", b"w", BODY, b"0")
                    p1 = redis_benchmark(port, sizes.requests_p1, 1, *add)
                    p16 = redis_benchmark(port, sizes.requests_p16, 16, *add)
                    get = redis_benchmark(
                        port, sizes.requests_p16, 16, b"GETJOB", b"NOHANG", b"FROM", b"q"
                    )
                for key, value in (("addjob_p1", p1), ("addjob_p16", p16), ("getjob_p16", get)):
                    raw[key][name].append(value)
                line[name] = f"ADDJOB P1 {p1:,.0f}, P16 {p16:,.0f}, GETJOB P16 {get:,.0f}"
            note("ops", round_number, line)
        with conveyor_node(workdir) as (port, process):
            profiled = profile_ops(workdir, process.pid, port, sizes.requests_p16)
        results["profile_addjob"] = profiled["profile_addjob"]
        results["profile_getjob"] = profiled["profile_getjob"]
    if "e2e" in phases:
        for round_number in range(rounds):
            line = {}
            for name in _order(round_number):
                with _server(name, workdir, binary) as (port, _):
                    rate = end_to_end(port, sizes.e2e_jobs, producer=producer)
                raw["end_to_end"][name].append(rate)
                line[name] = f"{rate:,.0f} jobs/s"
            note("e2e", round_number, line)
    if "latency" in phases:
        for round_number in range(rounds):
            line = {}
            for name in _order(round_number):
                with _server(name, workdir, binary) as (port, _):
                    p50, p99 = latency_at_rate(port, LATENCY_RATE, sizes.latency_jobs)
                raw["latency_p50"][name].append(p50)
                raw["latency_p99"][name].append(p99)
                line[name] = f"p50 {p50:.3f} ms, p99 {p99:.3f} ms"
            note("latency", round_number, line)
    if "memory" in phases:
        line = {}
        for name in (CONVEYOR, DISQUE):  # one round each: a fill of 1,000,000 jobs is slow
            with _server(name, workdir, binary) as (port, pid):
                idle = idle_cpu_percent(port, pid, sizes.idle_seconds)
                used_before = _used_memory(port)
                per_job, _ = bytes_per_job(port, pid, sizes.memory_jobs)
                used_per_job = (_used_memory(port) - used_before) / sizes.memory_jobs
            raw["idle_cpu_percent"][name].append(idle)
            raw["bytes_per_job"][name].append(per_job)
            raw["used_memory_per_job"][name].append(used_per_job)
            line[name] = (
                f"{per_job:,.0f} B/job RSS, {used_per_job:,.0f} used_memory, idle {idle:.2f}%"
            )
        print(f"disque-compare memory (1 round): {'; '.join(f'{k} {v}' for k, v in line.items())}")
    results["disque_compare"] = summarize(raw)
    return results


def summarize(raw: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, object]]:
    """Medians, the ratio (>= 1.0: Conveyor as good or better) and the verdict per figure.

    The ratio is Conveyor ÷ C Disque for rates and C Disque ÷ Conveyor where lower is better
    (latency, bytes, CPU), so that one reading rule holds for the whole table.
    """
    summary: dict[str, dict[str, object]] = {}
    for figure in FIGURES:
        ours = raw.get(figure.key, {}).get(CONVEYOR, [])
        theirs = raw.get(figure.key, {}).get(DISQUE, [])
        if not ours or not theirs:
            continue
        ours_median, theirs_median = statistics.median(ours), statistics.median(theirs)
        # None where the divisor is 0 (idle CPU): no ratio, and valid JSON.
        if figure.higher_is_better:
            top, bottom = ours_median, theirs_median
        else:
            top, bottom = theirs_median, ours_median
        ratio = top / bottom if bottom else None
        verdict = ""
        if figure.judged and ratio is not None:
            verdict = f">= 1.0x {'met' if ratio >= 1.0 else 'MISSED'}"
            if figure.target is not None:
                met = ours_median <= figure.target
                verdict += f"; <= {figure.target:g} {figure.unit} {'met' if met else 'MISSED'}"
        summary[figure.key] = {
            "label": figure.label,
            "unit": figure.unit,
            "conveyor": ours,
            "disque": theirs,
            "conveyor_median": ours_median,
            "disque_median": theirs_median,
            "ratio": ratio,
            "ratio_is": "conveyor/disque" if figure.higher_is_better else "disque/conveyor",
            "verdict": verdict,
        }
    return summary


def add_instructions(results: dict[str, object]) -> None:
    """The addjob-instr phase's callgrind counts as rows of the comparison, if it ran."""
    raw: dict[str, dict[str, list[float]]] = {}
    for pipeline in (1, 16):
        key = f"addjob_p{pipeline}_instructions_callgrind_runs"
        ours, theirs = results.get(key), results.get(f"disque_{key}")
        if isinstance(ours, list) and isinstance(theirs, list):
            raw[f"addjob_p{pipeline}_instr"] = {CONVEYOR: ours, DISQUE: theirs}
    if raw:
        summary = cast(dict[str, object], results.setdefault("disque_compare", {}))
        summary.update(summarize(raw))


def _number(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def print_comparison(results: dict[str, object], rounds: int, producer: str) -> None:
    from rich.console import Console
    from rich.table import Table

    summary = cast(dict[str, dict[str, Any]], results.get("disque_compare") or {})
    if not summary:
        return
    table = Table(
        title=f"Conveyor beside C Disque, one run: medians of {rounds} interleaved "
        f"round{'s' if rounds > 1 else ''} (memory: 1), redis-benchmark -c 50, 100-byte bodies",
        caption="ratio = Conveyor ÷ C Disque; where lower is better (ms, bytes, CPU) it is "
        "C Disque ÷ Conveyor, so >= 1.00x always means Conveyor as good or better."
        + (f" End-to-end producer: {producer}." if "end_to_end" in summary else "")
        + (
            f" Memory: {results.get('memory_jobs', 0):,} jobs, one round each, RSS growth"
            " read by psutil for both."
            if "bytes_per_job" in summary
            else ""
        ),
    )
    for column in ("figure", "unit", "Conveyor", "C Disque", "ratio", "verdict"):
        table.add_column(column)
    table.add_column("rounds: Conveyor")
    table.add_column("rounds: C Disque")
    for row in summary.values():
        lower = row["ratio_is"] == "disque/conveyor"
        ratio = row["ratio"]
        table.add_row(
            row["label"],
            f"{row['unit']}{', lower better' if lower else ''}",
            _number(row["conveyor_median"]),
            _number(row["disque_median"]),
            "-" if ratio is None else f"{ratio:.2f}x",
            row["verdict"] or "-",
            " ".join(_number(v) for v in row["conveyor"]),
            " ".join(_number(v) for v in row["disque"]),
            style=None if row["verdict"] else "dim",
        )
    # Wide enough for the raw rounds even when piped (rich falls back to 80 columns then).
    Console(width=max(180, shutil.get_terminal_size().columns)).print(table)
