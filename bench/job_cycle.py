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
from pathlib import Path

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


async def _sampled_load(port: int, pid: int, clients: int, seconds: float) -> dict[str, object]:
    started = time.monotonic()
    stop_at = started + seconds
    loops = asyncio.gather(*(_client_loop(port, stop_at, n) for n in range(clients)))
    samples: list[tuple[float, int]] = []
    while not loops.done() and time.monotonic() < stop_at + 30:
        samples.append((time.monotonic() - started, rss_of(pid)))
        await asyncio.sleep(1.0)
    counts = await loops
    return {"cycles": sum(counts), "elapsed": time.monotonic() - started, "samples": samples}


def run_job_cycle(workdir: Path, results: dict[str, object], seconds: float, clients: int) -> None:
    """RSS of a fresh node while jobs of 10 KB are added, taken and ended in a loop."""
    print(
        f"job-cycle: {clients} clients looping ADDJOB (10 KB, default TTL) / GETJOB NOHANG / "
        f"ACKJOB, FASTACK or DELJOB for {seconds:g} s",
        flush=True,
    )
    with conveyor_node(workdir) as (port, process):
        out = asyncio.run(
            asyncio.wait_for(_sampled_load(port, process.pid, clients, seconds), seconds + 60)
        )
        probe = redis.Redis(port=port, protocol=2)
        try:
            resources = probe.execute_command("DEBUG", "RESOURCES")
        finally:
            probe.close()
    samples: list[tuple[float, int]] = out["samples"]  # type: ignore[assignment]
    cycles: int = out["cycles"]  # type: ignore[assignment]
    half = [rss for at, rss in samples if at >= seconds / 2]
    spread = max(half) / min(half) if half else float("nan")
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
