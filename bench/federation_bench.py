"""Federation benchmark: jobs added on node A, consumed on node B of 3 local nodes.

- `latency`: one job at a time (REPLICATE 1): a consumer blocked in GETJOB on B, a
  producer on A adds the next job once the last was received; add-to-receive p50/p99
  over `--jobs` jobs (warm). Then the cold case: the consumer blocked, nothing added for
  `--cold-idle` seconds (60 by default), then one job; repeated `--cold-samples` times.
- `throughput`: a producer on A pipelining ADDJOB REPLICATE 1 by 100 and a consumer on B
  doing GETJOB COUNT 100 + ACKJOB for `--seconds`; jobs/s received on B.

With DISQUE_SERVER set, the same on a 3-node C Disque cluster, printed side by side.
Figures are printed, never asserted; only 127.0.0.1; every loop is bounded in count and
time. Usage: python -m bench.federation_bench [--only PHASES] [--quick] [--cold-idle S]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis

from bench.cluster_bench import BODY, cluster, conveyor_command, disque_command

Kind = Callable[[int, Path], list[str]]


def _client(port: int) -> redis.Redis:
    return redis.Redis(port=port, protocol=2, socket_timeout=120)


def _one(
    producer: redis.Redis, consumer: redis.Redis, timeout_ms: int, idle_s: float = 0.0
) -> float | None:
    """Add one job on A while B's consumer waits for it (after `idle_s` of it waiting):
    seconds from add to receipt."""
    received: list[float] = []

    def consume() -> None:
        reply = consumer.execute_command("GETJOB", "TIMEOUT", str(timeout_ms), "FROM", "fed")
        if reply:
            received.append(time.perf_counter())
            consumer.execute_command("ACKJOB", reply[0][1])

    thread = threading.Thread(target=consume)
    thread.start()
    _wait_blocked(consumer)
    time.sleep(idle_s)
    added = time.perf_counter()
    producer.execute_command("ADDJOB", "fed", BODY, "0", "REPLICATE", "1")
    thread.join(timeout_ms / 1000 + 10)
    return received[0] - added if received else None


def _wait_blocked(consumer: redis.Redis, deadline_s: float = 10.0) -> None:
    stop = time.monotonic() + deadline_s
    while time.monotonic() < stop:
        reply = consumer.execute_command("QSTAT", "fed")
        if reply and dict(zip(reply[::2], reply[1::2], strict=True))[b"blocked"]:
            return
        time.sleep(0.002)


def latency(kind: Kind, jobs: int, cold_idle: float, cold_samples: int) -> dict[str, float]:
    with cluster(kind, 3) as nodes:
        producer, consumer = _client(nodes[0].port), _client(nodes[1].port)
        warm = [t for t in (_one(producer, consumer, 10_000) for _ in range(jobs)) if t]
        timeout_ms = int(cold_idle * 1000) + 60_000
        colds = [_one(producer, consumer, timeout_ms, cold_idle) for _ in range(cold_samples)]
    warm_ms = sorted(t * 1000 for t in warm)
    return {
        "warm p50 ms": statistics.median(warm_ms),
        "warm p99 ms": warm_ms[int(len(warm_ms) * 0.99) - 1],
        "cold max ms": max(t or float("nan") for t in colds) * 1000 if colds else float("nan"),
        "received": len(warm),
    }


def throughput(kind: Kind, seconds: float) -> float:
    with cluster(kind, 3) as nodes:
        stop = threading.Event()
        counts = {"got": 0}

        def produce() -> None:
            client = _client(nodes[0].port)
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not stop.is_set():
                pipe = client.pipeline(transaction=False)
                for _ in range(100):
                    pipe.execute_command("ADDJOB", "tput", BODY, "0", "REPLICATE", "1")
                pipe.execute()

        def consume() -> None:
            client = _client(nodes[1].port)
            while not stop.is_set():
                reply = client.execute_command(
                    "GETJOB", "TIMEOUT", "200", "COUNT", "100", "FROM", "tput"
                )
                if reply:
                    client.execute_command("ACKJOB", *(job[1] for job in reply))
                    counts["got"] += len(reply)

        threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
        for thread in threads:
            thread.start()
        time.sleep(1.0)  # warm-up: the flow A -> B established
        first, started = counts["got"], time.perf_counter()
        time.sleep(seconds - 2.0)
        got, elapsed = counts["got"] - first, time.perf_counter() - started
        stop.set()
        for thread in threads:
            thread.join(30)
    return got / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="latency,throughput")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cold-idle", type=float, default=60.0)
    parser.add_argument("--cold-samples", type=int, default=1)
    args = parser.parse_args()
    kinds: dict[str, Kind] = {"Conveyor": conveyor_command}
    if os.environ.get("DISQUE_SERVER"):
        kinds["C Disque"] = disque_command
    jobs = 200 if args.quick else 1000
    cold_idle = 5.0 if args.quick else args.cold_idle
    for name, kind in kinds.items():
        if "latency" in args.only:
            figures = latency(kind, jobs, cold_idle, args.cold_samples)
            print(f"{name:10} add on A -> receive on B, 1 job at a time: "
                  f"warm p50 {figures['warm p50 ms']:.2f} ms, p99 {figures['warm p99 ms']:.2f} ms "
                  f"({figures['received']:.0f} jobs); cold (after {cold_idle:g} s idle) "
                  f"{figures['cold max ms']:.1f} ms", flush=True)  # fmt: skip
        if "throughput" in args.only:
            rate = throughput(kind, 6.0 if args.quick else 15.0)
            print(f"{name:10} produce on A, consume on B: {rate:,.0f} jobs/s", flush=True)


if __name__ == "__main__":
    main()
