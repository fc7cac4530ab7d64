"""Benchmark of `conveyor analyze`: events per second through the PySpark analytics job.

Writes a synthetic job-event log of a fixed, seeded shape (so runs compare), in the node's
line format and file naming (`conveyor/node/event_log.py`): three nodes, 20 queues of
skewed popularity, jobs spread over about two hours (hourly files per node, lines in time
order), each job one of these lives:
- 85% added, queued, delivered, acked;
- 8% NACKed once, requeued, delivered again, acked;
- 4% requeued by their RETRY (additional_deliveries 1), delivered again, acked;
- 2% added, queued, expired;
- 1% NACKed three times, then dead-lettered.
Then runs `analyze()` (the three Parquet tables and the HTML report) on a local Spark
session started and warmed beforehand (one untimed analysis of a 50,000-event log of the
same shape), so the figure is the job's, not the JVM's start-up or its first compilation.
Prints events/s and wall time (and each stage's), for `--runs` runs on the same log.
Bounded: the log has `--events` lines (at most 20,000,000).
Usage: python -m bench.analyze_bench [--events N] [--runs N] [--master URL] [--json FILE]
"""

from __future__ import annotations

import argparse
import base64
import bisect
import itertools
import json
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from conveyor.node.event_log import file_name

MAX_EVENTS = 20_000_000
WARM_UP_EVENTS = 50_000
SEED = 22
T0_MS = 1_763_805_600_000  # 2025-11-22 10:00 UTC: an hour boundary
SPAN_MS = 2 * 3_600_000
NODES = [f"{digit}" * 40 for digit in "abc"]
QUEUES = [f"queue-{index:02d}" for index in range(20)]
# Zipf-like: queue-00 is the busiest.
QUEUE_CUMULATIVE = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(QUEUES))))
# (life, share of jobs, events per job)
LIVES = [("acked", 85, 4), ("nacked", 8, 7), ("retried", 4, 6), ("expired", 2, 3), ("dead", 1, 11)]
EVENTS_PER_JOB = sum(share * events for _, share, events in LIVES) / 100


def life_events(life: str, rng: random.Random) -> list[tuple[int, str, int, int]]:
    """(ms after the job's ADDJOB, event, nacks, additional_deliveries) of one job."""
    wait = int(rng.expovariate(1 / 200))  # queued until a worker takes it
    work = int(rng.expovariate(1 / 800)) + 5  # a worker's run
    steps = [(0, "added", 0, 0), (0, "queued", 0, 0)]
    if life == "expired":
        return [*steps, (3_600_000, "expired", 0, 0)]
    at = wait
    steps.append((at, "delivered", 0, 0))
    if life == "nacked":
        at += work
        steps += [(at, "nacked", 1, 0), (at, "requeued", 1, 0), (at + wait, "delivered", 1, 0)]
        at += wait
    elif life == "retried":
        at += 60_000  # the job's RETRY elapsed: the node queued it again
        steps += [(at, "requeued", 0, 1), (at + wait, "delivered", 0, 1)]
        at += wait
    elif life == "dead":
        for nacks in (1, 2):
            at += work
            steps += [(at, "nacked", nacks, 0), (at, "requeued", nacks, 0)]
            at += wait
            steps.append((at, "delivered", nacks, 0))
        return [*steps, (at + work, "nacked", 3, 0), (at + work, "dead-lettered", 3, 0)]
    counters = steps[-1][2:]
    return [*steps, (at + work, "acked", *counters)]


def job_id(node: str, rng: random.Random) -> str:
    """An ID shaped like a node's: D-<node8>-<24 base64 characters>-<ttl, 4 hex>."""
    middle = base64.b64encode(rng.getrandbits(144).to_bytes(18, "big")).decode()
    return f"D-{node[:8]}-{middle}-{rng.getrandbits(16):04x}"


def generate(directory: Path, events: int) -> dict[str, int]:
    """Write about `events` lines under `directory`; how many of each life and line."""
    rng = random.Random(SEED)
    jobs = max(1, round(events / EVENTS_PER_JOB))
    lives = [life for life, share, _ in LIVES for _ in range(share)]
    lines_by_node: dict[str, list[tuple[int, str]]] = {node: [] for node in NODES}
    lived: dict[str, int] = {}
    for index in range(jobs):
        node = NODES[index % len(NODES)]
        queue = QUEUES[bisect.bisect(QUEUE_CUMULATIVE, rng.random() * QUEUE_CUMULATIVE[-1])]
        identifier = job_id(node, rng)
        added_at = T0_MS + index * SPAN_MS // jobs
        life = rng.choice(lives)
        lived[life] = lived.get(life, 0) + 1
        for offset, event, nacks, deliveries in life_events(life, rng):
            time_ms = added_at + offset
            lines_by_node[node].append(
                (
                    time_ms,
                    f'{{"time_ms":{time_ms},"node":"{node}","event":"{event}",'
                    f'"id":"{identifier}","queue":"{queue}","nacks":{nacks},'
                    f'"additional_deliveries":{deliveries}}}\n',
                )
            )
    written = 0
    for node, lines in lines_by_node.items():
        lines.sort(key=lambda line: line[0])  # stable: a job's same-ms events keep order
        written += write_hourly(directory, node, lines)
    return {"jobs": jobs, "lines": written, **lived}


def write_hourly(directory: Path, node: str, lines: list[tuple[int, str]]) -> int:
    """Append `lines` (time-ordered) to the node's hourly files, as a node would."""
    start = 0
    while start < len(lines):
        hour = lines[start][0] // 3_600_000
        end = start
        while end < len(lines) and lines[end][0] // 3_600_000 == hour:
            end += 1
        with open(directory / file_name(hour, node), "a", encoding="ascii") as handle:
            handle.writelines(text for _, text in lines[start:end])
        start = end
    return len(lines)


@contextmanager
def timed_stage(stages: dict[str, float], name: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        stages[name] = round(time.perf_counter() - started, 2)


def run_analysis(spark: Any, events_dir: Path, out_dir: Path, lines: int) -> dict[str, Any]:
    from conveyor.spark.analyze import analyze

    stages: dict[str, float] = {}
    started = time.perf_counter()
    summary = analyze(spark, events_dir, out_dir, stage=lambda name: timed_stage(stages, name))
    seconds = time.perf_counter() - started
    return {
        "seconds": round(seconds, 2),
        "events_per_s": round(lines / seconds),
        "stages": stages,
        "summary_events": summary.events,
        "summary_jobs": summary.jobs,
        "malformed_lines": summary.malformed_lines,
        "unknown_events": summary.unknown_events,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not 1 <= args.events <= MAX_EVENTS:
        parser.error(f"--events must be between 1 and {MAX_EVENTS:,}")
    results: dict[str, Any] = {"master": args.master, "runs": []}
    with tempfile.TemporaryDirectory(prefix="conveyor-analyze-bench-") as tmp:
        events_dir = Path(tmp) / "events"
        events_dir.mkdir()
        started = time.perf_counter()
        results["log"] = generate(events_dir, args.events)
        size = sum(path.stat().st_size for path in events_dir.iterdir())
        lines = results["log"]["lines"]
        print(
            f"wrote {lines:,} events ({results['log']['jobs']:,} jobs, {size / 1e6:.0f} MB, "
            f"{len(list(events_dir.iterdir()))} files) in {time.perf_counter() - started:.1f} s"
        )
        results["runs"] = analyze_runs(args.master, events_dir, Path(tmp), lines, args.runs)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def analyze_runs(
    master: str, events_dir: Path, workdir: Path, lines: int, runs: int
) -> list[dict[str, Any]]:
    from conveyor.spark.session import local_session

    conf = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}
    started = time.perf_counter()
    spark = local_session(master, app_name="conveyor-analyze-bench", conf=conf)
    # A first analysis runs 2-3x slower than the next (the JVM compiles Spark's code paths
    # as it goes): one over a small log first, so every timed run is a warm one.
    warm_up = workdir / "warm-up"
    warm_up.mkdir()
    generate(warm_up, WARM_UP_EVENTS)
    run_analysis(spark, warm_up, workdir / "warm-up-out", WARM_UP_EVENTS)
    print(f"Spark session ({master}) started and warmed in {time.perf_counter() - started:.1f} s")
    results = []
    try:
        for run in range(1, runs + 1):
            result = run_analysis(spark, events_dir, workdir / f"out-{run}", lines)
            results.append(result)
            stages = ", ".join(f"{name} {s} s" for name, s in result["stages"].items())
            print(
                f"conveyor analyze run {run} ({master}): {lines:,} events in "
                f"{result['seconds']} s = {result['events_per_s']:,} events/s ({stages})"
            )
            if result["summary_events"] != lines or result["unknown_events"]:
                # The log is meant to be read whole, every line a known event.
                print(f"  the summary counted {result['summary_events']:,} events, not {lines:,}")
    finally:
        spark.stop()
    return results


if __name__ == "__main__":
    sys.exit(main())
