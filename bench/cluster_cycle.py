"""cycle: the RSS of three clustered nodes while jobs are replicated, taken and ended.

The cluster's job-cycle (the single node's is bench/job_cycle.py). Clients, spread over
the three nodes, loop a synchronous ADDJOB REPLICATE 3 of 10 KB, GETJOB NOHANG from the
same node, then ACKJOB or FASTACK in turn. Each job thus crosses the whole life of a
clustered job: REPLJOB/GOTJOB to the two other nodes, then SETACK/GOTACK/DELJOB (ACKJOB's
garbage collection) or FASTACK's best-effort DELJOB. (DELJOB is left out: it deletes the
job on one node only, and the copies elsewhere stay until their TTL, as in Disque.) A few
jobs live at any time, so RSS must stay flat on every node: per-job state that the
replication, ack or requeue paths forget shows as RSS growing with the jobs done.

RSS of every node is sampled every second; the verdict compares the second half of the
run, after warm-up. Then the load stops, and once no node holds a job (bounded wait, for
the ack GC's last rounds) every node's DEBUG RESOURCES must show no job and no job entry
in its timer buckets. Run by `python -m bench.cluster_bench --only cycle`; every loop
stops by count and by time.
"""

from __future__ import annotations

import asyncio
import time

import redis
import redis.asyncio

from bench.job_cycle import sampled_load, second_half_spread

BODY = b"x" * 10_000
RSS_FLAT = 1.05
# ACKJOB and FASTACK free the job on every node; DELJOB only on the node it is sent to.
ENDINGS = (b"ACKJOB", b"FASTACK")
MAX_CYCLES_PER_CLIENT = 100_000
CLIENTS = 6
DRAIN_S = 30.0


async def _client_loop(port: int, stop_at: float, client_no: int) -> int:
    client = redis.asyncio.Redis(port=port, protocol=2)
    queue = b"cycle%d" % client_no
    cycles = 0
    try:
        while time.monotonic() < stop_at and cycles < MAX_CYCLES_PER_CLIENT:
            await client.execute_command(b"ADDJOB", queue, BODY, 5000, b"REPLICATE", 3)
            reply = await client.execute_command(b"GETJOB", b"NOHANG", b"FROM", queue)
            ((_, job_id, _),) = reply
            await client.execute_command(ENDINGS[cycles % len(ENDINGS)], job_id)
            cycles += 1
    finally:
        await client.aclose()
    return cycles


def _resources(port: int) -> list[int]:
    probe = redis.Redis(port=port, protocol=2)
    try:
        return list(probe.execute_command("DEBUG", "RESOURCES"))
    finally:
        probe.close()


def _drained(ports: list[int]) -> tuple[list[list[int]], float]:
    """Each node's DEBUG RESOURCES once no node holds a job (or DRAIN_S later)."""
    started = time.monotonic()
    while True:
        resources = [_resources(port) for port in ports]
        if all(r[4] == 0 for r in resources) or time.monotonic() - started > DRAIN_S:
            return resources, time.monotonic() - started
        time.sleep(0.2)


def phase_cycle(seconds: float) -> None:
    from bench.cluster_bench import cluster, conveyor_command  # this module is imported by it

    print(
        f"\ncycle: {CLIENTS} clients over 3 nodes looping ADDJOB REPLICATE 3 (10 KB) / "
        f"GETJOB NOHANG / ACKJOB or FASTACK for {seconds:g} s",
        flush=True,
    )
    with cluster(conveyor_command, 3) as nodes:
        ports = [node.port for node in nodes]
        pids = [node.process.pid for node in nodes if node.process is not None]
        stop_at = time.monotonic() + seconds
        loops = [_client_loop(ports[n % len(ports)], stop_at, n) for n in range(CLIENTS)]
        out = asyncio.run(asyncio.wait_for(sampled_load(loops, pids, seconds), seconds + 60))
        resources, drain_s = _drained(ports)
    samples: list[tuple[float, list[int]]] = out["samples"]  # type: ignore[assignment]
    cycles: int = out["cycles"]  # type: ignore[assignment]
    elapsed: float = out["elapsed"]  # type: ignore[assignment]
    print(
        f"cycle: {cycles:,} jobs in {elapsed:.1f} s = {cycles / elapsed:,.0f}/s "
        f"({cycles * len(BODY) / 2**20:,.0f} MB of bodies, each on 3 nodes)",
        flush=True,
    )
    flat_everywhere = True
    for index in range(len(pids)):
        series = [(at, rss[index]) for at, rss in samples]
        spread = second_half_spread(series, seconds)
        flat_everywhere &= spread <= RSS_FLAT
        shown = ", ".join(
            f"{at:.0f} s {rss / 2**20:.1f}" for at, rss in series[:: max(1, len(series) // 6)]
        )
        print(
            f"cycle: node {index} RSS MB {shown}, end {series[-1][1] / 2**20:.1f} "
            f"(second half max/min {spread:.2f}); at the end DEBUG RESOURCES "
            f"{resources[index]}",
            flush=True,
        )
    nothing_left = all(r[4] == 0 and r[5] == 0 for r in resources)
    print(
        f"cycle: RSS flat within 5% over the second half on every node: "
        f"{'yes' if flat_everywhere else 'no'}; no job and no timer entry left on any node "
        f"{drain_s:.1f} s after the load: {'yes' if nothing_left else 'no'}",
        flush=True,
    )
