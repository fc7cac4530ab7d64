"""Client processes against one server: end-to-end throughput and paced add-to-receive latency.

Both run the clients in spawned processes, so that on a 2-core machine the server, the
producer and the consumer are three schedulable processes as in production, and both only
speak the Disque protocol, so they measure a Conveyor node and C Disque alike.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time

import redis

from bench.node_common import BODY
from conveyor.client import Client

PRODUCERS = ("client", "redis-py")


# -- end to end --------------------------------------------------------------------------
def _producer(
    port: int, total: int, batch: int, ready: multiprocessing.Event, kind: str = "client"
) -> None:
    if kind == "redis-py":
        # A plain redis-py pipeline of `batch` ADDJOBs: the wording, but several
        # times the client CPU per job of add_jobs, so the figure leans on the producer.
        plain = redis.Redis(port=port, protocol=2, socket_timeout=30)
        ready.wait(30)
        for offset in range(0, total, batch):
            pipe = plain.pipeline(transaction=False)
            for _ in range(min(batch, total - offset)):
                pipe.execute_command("ADDJOB", "e2e", BODY, 0)
            pipe.execute()
        plain.close()
        return
    # add_jobs packs each batch by hand: about half the client CPU of a redis-py pipeline.
    with Client([f"127.0.0.1:{port}"]) as client:
        client.connect()
        ready.wait(30)
        sent = 0
        while sent < total:
            count = min(batch, total - sent)
            client.add_jobs("e2e", [BODY] * count)
            sent += count


def _consumer(
    port: int, total: int, batch: int, ready: multiprocessing.Event, result: multiprocessing.Queue
) -> None:
    # Plain redis-py rather than Client.get_jobs + Client.ack: building Job objects and
    # decoding IDs costs the Client path about twice the client CPU per job.
    client = redis.Redis(port=port, protocol=2, socket_timeout=30)
    ready.wait(30)
    started = time.perf_counter()
    received = 0
    deadline = time.monotonic() + 120
    while received < total and time.monotonic() < deadline:
        jobs = client.execute_command("GETJOB", "TIMEOUT", 1000, "COUNT", batch, "FROM", "e2e")
        if not jobs:
            continue
        client.execute_command("ACKJOB", *[job[1] for job in jobs])
        received += len(jobs)
    result.put((received, time.perf_counter() - started))
    client.close()


def end_to_end(port: int, total: int, batch: int = 100, producer: str = "client") -> float:
    """Jobs/s from the first ADDJOB to the last ACKJOB: one producer, one consumer process."""
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    result: multiprocessing.Queue = ctx.Queue()
    consumer = ctx.Process(target=_consumer, args=(port, total, batch, ready, result))
    sender = ctx.Process(target=_producer, args=(port, total, batch, ready, producer))
    consumer.start()
    sender.start()
    time.sleep(1.0)  # both processes import and connect before the clock starts
    ready.set()
    received, elapsed = result.get(timeout=180)
    sender.join(30)
    consumer.join(30)
    if received < total:
        raise RuntimeError(f"end to end: only {received} of {total} jobs arrived")
    return total / elapsed


# -- latency at a fixed rate -------------------------------------------------------------------
def _paced_producer(port: int, rate: int, total: int, ready: multiprocessing.Event) -> None:
    client = redis.Redis(port=port, protocol=2)
    ready.wait(30)
    interval = 1.0 / rate
    next_send = time.perf_counter()
    for _ in range(total):
        now = time.perf_counter()
        if now < next_send:
            time.sleep(next_send - now)
        stamp = str(time.time_ns()).encode().ljust(100, b"-")
        client.execute_command("ADDJOB", "lat", stamp, 0)
        next_send += interval
    client.close()


def _latency_consumer(
    port: int, total: int, ready: multiprocessing.Event, result: multiprocessing.Queue
) -> None:
    client = redis.Redis(port=port, protocol=2, socket_timeout=30)
    ready.wait(30)
    latencies: list[float] = []
    deadline = time.monotonic() + 60
    while len(latencies) < total and time.monotonic() < deadline:
        jobs = client.execute_command("GETJOB", "TIMEOUT", 1000, "COUNT", 100, "FROM", "lat")
        if not jobs:
            continue
        received_ns = time.time_ns()
        for job in jobs:
            latencies.append((received_ns - int(job[2].rstrip(b"-"))) / 1e6)
        client.execute_command("ACKJOB", *[job[1] for job in jobs])
    result.put(latencies)
    client.close()


def latency_at_rate(port: int, rate: int, total: int) -> tuple[float, float]:
    """p50 and p99 ms from ADDJOB sent to the job in hand, the consumer blocked in GETJOB."""
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    result: multiprocessing.Queue = ctx.Queue()
    consumer = ctx.Process(target=_latency_consumer, args=(port, total, ready, result))
    producer = ctx.Process(target=_paced_producer, args=(port, rate, total, ready))
    consumer.start()
    producer.start()
    time.sleep(1.0)
    ready.set()
    latencies = result.get(timeout=120)
    producer.join(30)
    consumer.join(30)
    latencies.sort()
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return p50, p99
