"""Throughput of pressure queues against raw LPUSH/BRPOP on the same Redis.

Run as `python -m bench.pressure_bench [--messages N] [--size BYTES] [--time-limit S]`.
Starts its own redis-server on a free 127.0.0.1 port; one producer process and one consumer
process per scenario, released together; every loop stops at the message count or the
scenario's time limit, whichever comes first (a cut-short run is marked in the table).
The "x raw" column is each scenario's slower side over raw LPUSH/BRPOP's slower side.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import platform
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from typing import Any

import redis

from conveyor.pressure import PressureQueue, QueueEmpty, QueueFull

PREFIX = "__pressure_bench__"


@dataclass(frozen=True)
class Scenario:
    label: str
    kind: str  # "pressure" or "raw"
    bound: int = 0


RAW_LABEL = "raw LPUSH/BRPOP"
SCENARIOS = (
    Scenario("pressure bound=0", "pressure", 0),
    Scenario("pressure bound=100", "pressure", 100),
    Scenario(RAW_LABEL, "raw"),
)


@dataclass(frozen=True)
class Side:
    count: int
    elapsed: float


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_redis(directory: str) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    port = _free_port()
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            directory,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    probe = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)
    deadline = time.monotonic() + 10
    try:
        while True:
            try:
                probe.ping()
                return process, port
            except redis.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    process.kill()
                    raise SystemExit("redis-server did not start") from None
                time.sleep(0.05)
    finally:
        probe.close()


def _producer(
    scenario: Scenario,
    url: str,
    messages: int,
    size: int,
    stop_at: float,
    start: Event,
    results: Any,
) -> None:
    payload = b"x" * size
    done = 0
    if scenario.kind == "pressure":
        queue = PressureQueue("bench", redis_url=url, prefix=PREFIX)
        start.wait()
        began = time.perf_counter()
        while done < messages and time.time() < stop_at:
            try:
                queue.put(payload, timeout=max(0.0, stop_at - time.time()))
            except QueueFull:
                break
            done += 1
        queue.disconnect()
    else:
        client = redis.Redis.from_url(url)
        start.wait()
        began = time.perf_counter()
        while done < messages and time.time() < stop_at:
            client.lpush("raw:bench", payload)
            done += 1
        client.close()
    results.put(("put", Side(done, time.perf_counter() - began)))


def _consumer(
    scenario: Scenario, url: str, messages: int, stop_at: float, start: Event, results: Any
) -> None:
    done = 0
    if scenario.kind == "pressure":
        queue = PressureQueue("bench", redis_url=url, prefix=PREFIX)
        start.wait()
        began = time.perf_counter()
        while done < messages and time.time() < stop_at:
            try:
                queue.get(timeout=max(0.0, stop_at - time.time()))
            except QueueEmpty:
                break
            done += 1
        queue.disconnect()
    else:
        client = redis.Redis.from_url(url, socket_timeout=None)
        start.wait()
        began = time.perf_counter()
        while done < messages and time.time() < stop_at:
            wait = max(0.01, min(1.0, stop_at - time.time()))
            if client.brpop(["raw:bench"], timeout=wait) is not None:
                done += 1
        client.close()
    results.put(("get", Side(done, time.perf_counter() - began)))


def run_scenario(
    scenario: Scenario, url: str, messages: int, size: int, time_limit: float
) -> dict[str, Side]:
    admin = redis.Redis.from_url(url)
    admin.flushdb()
    if scenario.kind == "pressure":
        PressureQueue("bench", redis_url=url, prefix=PREFIX, client=admin).create(scenario.bound)
    ctx = mp.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    # Spawned interpreters take a moment to import; the clock starts when both are ready.
    stop_at = time.time() + time_limit + 10
    workers = [
        ctx.Process(
            target=_producer, args=(scenario, url, messages, size, stop_at, start, results)
        ),
        ctx.Process(target=_consumer, args=(scenario, url, messages, stop_at, start, results)),
    ]
    for worker in workers:
        worker.start()
    time.sleep(2.0)
    start.set()
    sides: dict[str, Side] = {}
    for _ in workers:
        role, side = results.get(timeout=time_limit + 60)
        sides[role] = side
    for worker in workers:
        worker.join(timeout=30)
        if worker.is_alive():
            worker.kill()
    if scenario.kind == "pressure":
        PressureQueue("bench", redis_url=url, prefix=PREFIX, client=admin).delete(timeout=10)
    admin.close()
    return sides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument(
        "--time-limit", type=float, default=300.0, help="seconds per scenario before the loops stop"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="pressure-bench-") as directory:
        server, port = _start_redis(directory)
        url = f"redis://127.0.0.1:{port}/0"
        try:
            version = redis.Redis.from_url(url).info("server")["redis_version"]
            print(
                f"pressure bench: {args.messages} messages of {args.size} B, one producer and "
                f"one consumer process; redis-server {version} on 127.0.0.1:{port}; "
                f"Python {platform.python_version()}, redis-py {redis.__version__}"
            )
            rows = []
            for scenario in SCENARIOS:
                sides = run_scenario(scenario, url, args.messages, args.size, args.time_limit)
                rows.append((scenario.label, sides["put"], sides["get"]))
        finally:
            server.terminate()
            server.wait(timeout=10)

    # "x raw": the slower side's rate over raw's slower side, both from this run, so load
    # from elsewhere on the machine cancels out as far as it can.
    raw_put, raw_get = next((put, get) for label, put, get in rows if label == RAW_LABEL)
    raw_rate = min(_rate(raw_put), _rate(raw_get))
    header = (
        f"{'scenario':<20} {'put msg/s':>11} {'get msg/s':>11} {'x raw':>6} {'put n':>8} "
        f"{'get n':>8}"
    )
    print(header)
    print("-" * len(header))
    for label, put, get in rows:
        cut = "" if put.count == get.count == args.messages else "  (cut short)"
        ratio = min(_rate(put), _rate(get)) / raw_rate if raw_rate else 0.0
        print(
            f"{label:<20} {_rate(put):>11,.0f} {_rate(get):>11,.0f} {ratio:>6.2f} "
            f"{put.count:>8} {get.count:>8}{cut}"
        )


def _rate(side: Side) -> float:
    return side.count / side.elapsed if side.elapsed > 0 else 0.0


if __name__ == "__main__":
    main()
