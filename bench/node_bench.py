"""Node benchmark: Conveyor beside C Disque (`DISQUE_SERVER`) or redis-server, in one run.

With `DISQUE_SERVER=/path/to/disque-server` (an executable; never commit one), issue 15's
table, Conveyor and C Disque on fresh servers, `--rounds` interleaved rounds (3), medians,
ratios and verdicts (>= 1.0x; p99 <= 0.2 ms), every round's raw figures (`bench.disque_compare`):
ADDJOB -P 1 and -P 16, GETJOB NOHANG -P 16 (redis-benchmark, 50 clients, 100-byte bodies),
end to end (batches of 100, GETJOB COUNT 100 + ACKJOB), add-to-receive p99 at 2,000 jobs/s
with the consumer blocked in GETJOB, resident bytes per queued job at 1,000,000 jobs (RSS
growth by psutil for both) and idle CPU; then a py-spy profile of the node's ADDJOB and GETJOB.

Without it, as before, side by side with redis-server:
- ADDJOB ops/s at pipeline 1 and 16, against redis LPUSH (redis-benchmark, 50 clients,
  100-byte bodies), and GETJOB NOHANG at pipeline 16 against RPOP, with C Disque's ratios
  to redis measured on this machine kind as the targets;
- end-to-end jobs/s: one producer and one consumer process, batches of 100, ACKJOB;
- p50/p99 add-to-receive latency at 2,000 jobs/s;
- resident bytes per queued 100-byte job at 1,000,000 jobs;
- idle CPU of a node holding one job;
- a py-spy profile (self time by function) of the node during ADDJOB and GETJOB.

Either way, and with phases outside the default run:
- `blocked-cycle` (default run): node RSS while one client stays blocked in
  `GETJOB TIMEOUT 0 FROM q` and 200 others loop `GETJOB TIMEOUT 20 FROM q` on the same empty
  queue (60 s by default), with GETJOBs/s and a flatness verdict (`bench.blocked_cycle`);
- `--only eventlog`: ADDJOB -P 1 and -P 16 with the job-event log off and on, alternating
  fresh nodes for several rounds, and the on/off ratio (target >= 0.90) (`bench.node_instr`);
- `--only addjob-instr`: user-space instructions per ADDJOB at -P 1 and -P 16, counted by
  valgrind's callgrind (for VMs whose perf has no hardware counters), N rounds; C Disque's
  beside them when `DISQUE_SERVER` is set (`bench.node_instr`).

The machine is shared and noisy: compare ratios measured in the same run, not absolute
figures across runs. Every phase is bounded in count and time; only 127.0.0.1 is used.
Usage: python -m bench.node_bench [--quick] [--json FILE] [--only PHASES] [--rounds N]
       [--e2e-producer client|redis-py] [--cycle-seconds S] [--cycle-clients N]
       [--cycle-timeout-ms MS]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

# Other benches import the shared helpers from here, as before they moved out.
from bench.blocked_cycle import (
    _blocked_cycle_load,
    _CycleClient,
    _CycleState,
    _resp_command,
    run_blocked_cycle,
)
from bench.disque_compare import (
    COMPARED_PHASES,
    Sizes,
    add_instructions,
    compare,
    print_comparison,
)
from bench.job_cycle import run_job_cycle
from bench.node_common import (
    _RPS,
    BENCH_CLIENTS,
    BODY,
    bytes_per_job,
    conveyor_node,
    disque_binary,
    disque_node,
    free_port,
    free_port_pair,
    idle_cpu_percent,
    profile_ops,
    redis_benchmark,
    redis_server,
    rss_of,
    start_profile,
    summarize_profile,
    wait_for_ping,
)
from bench.node_flows import PRODUCERS, end_to_end, latency_at_rate
from bench.node_instr import (
    EVENT_LOG_TARGET,
    callgrind_node,
    callgrind_window,
    counting_instructions,
    run_addjob_instructions,
    run_event_log,
)

__all__ = [
    "BENCH_CLIENTS",
    "BODY",
    "EVENT_LOG_TARGET",
    "_RPS",
    "_CycleClient",
    "_CycleState",
    "_blocked_cycle_load",
    "_resp_command",
    "bytes_per_job",
    "callgrind_node",
    "callgrind_window",
    "conveyor_node",
    "counting_instructions",
    "disque_node",
    "end_to_end",
    "free_port",
    "free_port_pair",
    "idle_cpu_percent",
    "latency_at_rate",
    "main",
    "redis_benchmark",
    "redis_server",
    "rss_of",
    "run_addjob_instructions",
    "run_blocked_cycle",
    "run_event_log",
    "run_ops",
    "start_profile",
    "summarize_profile",
    "wait_for_ping",
]

# C Disque on this machine kind, as ratios to redis in the same run (performance-anchors.md).
DISQUE_RATIOS = {"addjob_p1": 0.82, "addjob_p16": 0.31, "getjob_p16": 0.20}
TARGETS = {
    "end_to_end_jobs_per_s": 77_000,
    "latency_p99_ms": 1.5,
    "bytes_per_job": 600,
    "idle_cpu_percent": 0.5,
}
PHASES = ("ops", "e2e", "latency", "memory", "blocked-cycle", "job-cycle")
# Not part of the default run: compare the node with itself (and, for addjob-instr, with
# C Disque under the same instrumentation).
EXTRA_PHASES = ("eventlog", "addjob-instr")


def run_ops(workdir: Path, results: dict[str, object], requests_p1: int, requests_p16: int) -> None:
    """redis-benchmark against redis-server, then the same against a node, with py-spy."""
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
        results["addjob_p1_ops"] = redis_benchmark(
            port, requests_p1, 1, b"ADDJOB", b"q", BODY, b"0"
        )
        # The -P 16 figures are taken under py-spy, as they always were in this mode.
        results.update(profile_ops(workdir, process.pid, port, requests_p16))
    for key in ("addjob_p1", "addjob_p16", "getjob_p16"):  # the "ratio to redis" figures
        results[f"{key}_ratio"] = results[f"{key}_ops"] / results[f"{key}_redis_ops"]  # type: ignore[operator]


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
    print_blocked_cycle(console, results)
    print_profiles(console, results)


def print_blocked_cycle(console: Any, results: dict[str, object]) -> None:
    from rich.table import Table

    if "blocked_cycle_verdict" not in results:
        return
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


def print_profiles(console: Any, results: dict[str, object]) -> None:
    from rich.table import Table

    for phase in ("addjob", "getjob"):
        profile = results.get(f"profile_{phase}") or []
        if not profile:
            console.print(f"(no py-spy profile for {phase})")
            continue
        table = Table(title=f"py-spy: node self time during {phase.upper()} -P 16")
        table.add_column("function (file)")
        table.add_column("% samples", justify="right")
        for name, share in profile:  # type: ignore[attr-defined]
            table.add_row(name, f"{share:.1f}")
        console.print(table)


def print_plain(results: dict[str, object]) -> None:
    """One line per scalar figure: for runs of some phases only."""
    for key, value in results.items():
        if key.startswith("profile_") or key.endswith("_trace_mb") or key == "disque_compare":
            continue
        print(f"{key}: {value:,.2f}" if isinstance(value, float) else f"{key}: {value}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--only",
        help=f"comma-separated phases of {PHASES + EXTRA_PHASES} (default: {','.join(PHASES)}"
        ", and addjob-instr too with DISQUE_SERVER)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="with DISQUE_SERVER: interleaved rounds per figure; eventlog: off/on node pairs; "
        "addjob-instr: fresh nodes (default 3)",
    )
    parser.add_argument(
        "--e2e-producer",
        choices=PRODUCERS,
        default="client",
        help="end to end: conveyor.client's add_jobs (default) or a plain redis-py pipeline",
    )
    parser.add_argument(
        "--cycle-seconds",
        type=float,
        help="blocked-cycle and job-cycle: seconds of load (default 60 and 30, a tenth "
        "with --quick)",
    )
    parser.add_argument(
        "--cycle-clients", type=int, default=200, help="blocked-cycle: looping clients (200)"
    )
    parser.add_argument(
        "--cycle-timeout-ms", type=int, default=20, help="blocked-cycle: GETJOB TIMEOUT (20)"
    )
    options = parser.parse_args()
    disque = disque_binary()
    if options.only:
        phases = set(options.only.split(","))
    else:
        # Beside C Disque the default run also counts instructions per ADDJOB for both
        # (~25 s a round): issue 15 wants them printed by `make bench`.
        phases = set(PHASES) | ({"addjob-instr"} if disque else set())
    unknown = phases - set(PHASES) - set(EXTRA_PHASES)
    if unknown:
        parser.error(f"unknown phases: {', '.join(sorted(unknown))}")
    if not 1 <= options.rounds <= 20:
        parser.error("--rounds takes 1 to 20")
    if os.environ.get("DISQUE_SERVER") and disque is None:
        print(
            f"DISQUE_SERVER={os.environ['DISQUE_SERVER']!r} is not an executable file: "
            "measuring beside redis-server instead",
            file=sys.stderr,
            flush=True,
        )
    scale = 10 if options.quick else 1
    requests_p1 = 100_000 // scale
    requests_p16 = 400_000 // scale
    memory_jobs = 1_000_000 // scale
    results: dict[str, object] = {"memory_jobs": memory_jobs}

    with tempfile.TemporaryDirectory(prefix="conveyor-bench-") as tmp:
        workdir = Path(tmp)
        if disque:
            sizes = Sizes(
                requests_p1=requests_p1,
                requests_p16=requests_p16,
                e2e_jobs=300_000 // scale,
                latency_jobs=10_000 // scale,
                memory_jobs=memory_jobs,
                idle_seconds=10.0 / scale,
            )
            compared = phases & set(COMPARED_PHASES)
            results.update(
                compare(workdir, disque, compared, options.rounds, sizes, options.e2e_producer)
            )
        if "ops" in phases and not disque:
            run_ops(workdir, results, requests_p1, requests_p16)
        if "e2e" in phases and not disque:
            with conveyor_node(workdir) as (port, _):
                results["end_to_end_jobs_per_s"] = end_to_end(
                    port, 300_000 // scale, producer=options.e2e_producer
                )
        if "latency" in phases and not disque:
            with conveyor_node(workdir) as (port, _):
                p50, p99 = latency_at_rate(port, 2000, 10_000 // scale)
                results["latency_p50_ms"], results["latency_p99_ms"] = p50, p99
        if "addjob-instr" in phases:
            run_addjob_instructions(workdir, results, options.rounds, 20_000 // scale, disque)
        if "eventlog" in phases:
            run_event_log(workdir, results, requests_p1, requests_p16, options.rounds)
        if "memory" in phases and not disque:
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
        if "job-cycle" in phases:
            run_job_cycle(workdir, results, options.cycle_seconds or (30.0 / scale), 8)

    if disque:
        from rich.console import Console

        add_instructions(results)
        print_comparison(results, options.rounds, options.e2e_producer)
        console = Console()
        print_blocked_cycle(console, results)
        if "ops" in phases:
            print_profiles(console, results)
        # What the tables above do not show: eventlog figures, mostly.
        shown = ("blocked_cycle_", "memory_jobs", "addjob_p", "disque_addjob_p", "job_cycle_")
        print_plain({k: v for k, v in results.items() if not k.startswith(shown)})
    elif phases == set(PHASES):
        print_report(results)
    else:
        print_plain(results)
    if options.json:
        options.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
