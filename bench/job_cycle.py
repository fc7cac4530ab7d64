"""job-cycle: node RSS while clients add, take and acknowledge jobs with 10 KB bodies.

Each client loops ADDJOB (the default TTL, a day), GETJOB NOHANG, then ACKJOB, FASTACK or
DELJOB in turn: every job ends within milliseconds, so the node holds a handful at any
time and its RSS must stay flat. What a done job leaves behind shows as RSS growing by
about its body a job: before 2026-11-29 an acked job stayed in the timer bucket of its
expiry until that fell due (20,000 jobs of 10 KB: +207 MB). RSS is sampled every second;
the verdict compares the second half of the run with its end, after a warm-up. DEBUG
RESOURCES at the end must show no job and no timer entry left. Run by
`python -m bench.node_bench --only job-cycle`; every loop stops by count and by time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import redis
import redis.asyncio

from bench.node_common import conveyor_node, rss_of

BODY = b"x" * 10_000
JOB_CYCLE_RSS_FLAT = 1.05
ENDINGS = (b"ACKJOB", b"FASTACK", b"DELJOB")
MAX_CYCLES_PER_CLIENT = 200_000


async def _client_loop(port: int, stop_at: float, client_no: int) -> int:
    client = redis.asyncio.Redis(port=port, protocol=2)
    cycles = 0
    try:
        while time.monotonic() < stop_at and cycles < MAX_CYCLES_PER_CLIENT:
            queue = b"cycle%d" % client_no
            await client.execute_command(b"ADDJOB", queue, BODY, 0)
            reply = await client.execute_command(b"GETJOB", b"NOHANG", b"FROM", queue)
            ((_, job_id, _),) = reply
            await client.execute_command(ENDINGS[cycles % 3], job_id)
            cycles += 1
    finally:
        await client.aclose()
    return cycles


async def sampled_load(
    loops: list[Coroutine[Any, Any, int]], pids: list[int], seconds: float
) -> dict[str, object]:
    """Run the client `loops` (each returns its cycle count) while sampling the RSS of
    every process of `pids` each second: samples are (seconds since start, [RSS...])."""
    started = time.monotonic()
    running = asyncio.gather(*loops)
    samples: list[tuple[float, list[int]]] = []
    while not running.done() and time.monotonic() < started + seconds + 30:
        samples.append((time.monotonic() - started, [rss_of(pid) for pid in pids]))
        await asyncio.sleep(1.0)
    counts = await running
    return {"cycles": sum(counts), "elapsed": time.monotonic() - started, "samples": samples}


def second_half_spread(series: list[tuple[float, int]], seconds: float) -> float:
    """Largest over smallest RSS of the run's second half, after warm-up."""
    half = [rss for at, rss in series if at >= seconds / 2]
    return max(half) / min(half) if half else float("nan")


def run_job_cycle(workdir: Path, results: dict[str, object], seconds: float, clients: int) -> None:
    """RSS of a fresh node while jobs of 10 KB are added, taken and ended in a loop."""
    print(
        f"job-cycle: {clients} clients looping ADDJOB (10 KB, default TTL) / GETJOB NOHANG / "
        f"ACKJOB, FASTACK or DELJOB for {seconds:g} s",
        flush=True,
    )
    with conveyor_node(workdir) as (port, process):
        stop_at = time.monotonic() + seconds
        loops = [_client_loop(port, stop_at, n) for n in range(clients)]
        load = sampled_load(loops, [process.pid], seconds)
        out = asyncio.run(asyncio.wait_for(load, seconds + 60))
        probe = redis.Redis(port=port, protocol=2)
        try:
            resources = probe.execute_command("DEBUG", "RESOURCES")
        finally:
            probe.close()
    sampled: list[tuple[float, list[int]]] = out["samples"]  # type: ignore[assignment]
    samples = [(at, rss[0]) for at, rss in sampled]
    cycles: int = out["cycles"]  # type: ignore[assignment]
    spread = second_half_spread(samples, seconds)
    flat = spread <= JOB_CYCLE_RSS_FLAT
    jobs_left, timer_entries = resources[4], resources[5]
    print(
        "job-cycle: RSS "
        + ", ".join(
            f"{at:.0f} s {rss / 2**20:.1f} MB" for at, rss in samples[:: max(1, len(samples) // 6)]
        )
        + f", end {samples[-1][1] / 2**20:.1f} MB",
        flush=True,
    )
    print(
        f"job-cycle: {cycles:,} jobs in {out['elapsed']:.1f} s = {cycles / out['elapsed']:,.0f}/s "  # type: ignore[operator]
        f"({cycles * len(BODY) / 2**20:,.0f} MB of bodies); at the end: jobs {jobs_left}, "
        f"timer entries {timer_entries}",
        flush=True,
    )
    nothing_left = jobs_left == timer_entries == 0
    verdict = (
        f"RSS flat within 5% over the second half: {'yes' if flat else 'no'} "
        f"(max/min = {spread:.2f}); nothing left: {'yes' if nothing_left else 'no'}"
    )
    print(verdict, flush=True)
    results["job_cycle_jobs"] = cycles
    results["job_cycle_rss_mb"] = [(round(at, 1), round(rss / 2**20, 1)) for at, rss in samples]
    results["job_cycle_rss_max_over_min"] = spread
    results["job_cycle_timer_entries_left"] = timer_entries
    results["job_cycle_verdict"] = verdict
