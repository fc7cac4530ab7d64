"""The crash test of `make bench-cluster` (`python -m bench.cluster_bench --only crash`).

Producers and consumers for `seconds` (60 by default) on 3 nodes with REPLICATE 3 and
RETRY 1 while a random node is SIGKILLed and restarted every 10 s (no AOF): then every
node is back, the rest is drained, and the bench counts jobs whose ADDJOB was answered
but were never delivered (lost, target 0) and jobs delivered more than once. Figures are
printed, never asserted; only 127.0.0.1; every loop is bounded in count and time.
(Split from bench/cluster_bench.py, which runs it after the throughput phase.)
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import redis

from bench.cluster_bench import Node, cluster, conveyor_command


class Ledger:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.added: set[bytes] = set()
        self.deliveries: Counter[bytes] = Counter()
        self.errors: Counter[str] = Counter()

    def error(self, exc: Exception) -> None:
        with self.lock:
            self.errors[type(exc).__name__ + ": " + str(exc)[:40]] += 1


def producer(nodes: list[Node], ledger: Ledger, stop: threading.Event, seed: int) -> None:
    rand = random.Random(seed)
    sequence = 0
    while not stop.is_set():
        node = rand.choice(nodes)
        try:
            job_id = node.client(2.0).execute_command(
                "ADDJOB", "q", f"{seed}-{sequence}", "2000", "REPLICATE", "3", "RETRY", "1"
            )
            with ledger.lock:
                ledger.added.add(job_id)
        except (redis.RedisError, OSError) as exc:
            ledger.error(exc)
            time.sleep(0.05)
        sequence += 1


def consumer(nodes: list[Node], ledger: Ledger, stop: threading.Event, seed: int) -> None:
    rand = random.Random(seed)
    while not stop.is_set():
        node = rand.choice(nodes)
        try:
            client = node.client(2.0)
            reply = client.execute_command("GETJOB", "TIMEOUT", "200", "COUNT", "10", "FROM", "q")
            ids = [job_id for _, job_id, _ in reply or ()]
            with ledger.lock:
                ledger.deliveries.update(ids)
            if ids:
                client.execute_command("ACKJOB", *ids)
        except (redis.RedisError, OSError) as exc:
            ledger.error(exc)
            time.sleep(0.05)


def phase_crash(seconds: float) -> None:
    ledger = Ledger()
    stop = threading.Event()
    with cluster(conveyor_command, 3) as nodes:
        threads = [
            threading.Thread(target=producer, args=(nodes, ledger, stop, i)) for i in range(2)
        ]
        threads += [
            threading.Thread(target=consumer, args=(nodes, ledger, stop, 10 + i)) for i in range(2)
        ]
        for thread in threads:
            thread.start()
        rand = random.Random(1)
        kills = 0
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            time.sleep(min(10.0, max(0.0, seconds - (time.monotonic() - started))))
            if time.monotonic() - started >= seconds:
                break
            victim = rand.choice(nodes)
            victim.kill()
            kills += 1
            time.sleep(0.5)
            victim.start()
        stop.set()
        for thread in threads:
            thread.join(30)
        drained = drain(nodes, ledger)
    lost = ledger.added - set(ledger.deliveries)
    twice = sum(1 for count in ledger.deliveries.values() if count > 1)
    print(f"\ncrash test: {seconds:g} s, {kills} SIGKILLs (restart 0.5 s later, no AOF), "
          f"3 nodes, REPLICATE 3, RETRY 1")  # fmt: skip
    print(f"  jobs added (ADDJOB answered OK): {len(ledger.added):,}")
    unique, total = len(set(ledger.deliveries)), sum(ledger.deliveries.values())
    print(f"  delivered: {unique:,} unique, {total:,} deliveries; drained afterwards: {drained:,}")
    print(f"  LOST (answered OK, never delivered): {len(lost):,}")
    print(f"  delivered more than once: {twice:,} ({twice / max(1, len(ledger.added)):.2%})")
    errors = sum(ledger.errors.values())
    print(f"  client errors (after redis-py's retries): {errors:,} {ledger.errors.most_common(3)}")


def drain(nodes: list[Node], ledger: Ledger, quiet_s: float = 6.0, limit_s: float = 60.0) -> int:
    """Deliver what is left (RETRY 1 requeues it) until nothing came for `quiet_s`."""
    drained = 0
    started = last = time.monotonic()
    while time.monotonic() - last < quiet_s and time.monotonic() - started < limit_s:
        for node in nodes:
            client = node.client()
            reply = client.execute_command("GETJOB", "NOHANG", "COUNT", "100", "FROM", "q")
            ids = [job_id for _, job_id, _ in reply or ()]
            if ids:
                last = time.monotonic()
                drained += len(ids)
                ledger.deliveries.update(ids)
                client.execute_command("ACKJOB", *ids)
        time.sleep(0.1)
    return drained
