"""The console's cost to the node: 100 queues under load, with and without 10 clients
streaming the overview page.

Everything runs on 127.0.0.1: a fresh node, `conveyor web` beside it, one producer process
adding jobs to 100 queues at a target rate (pipelined ADDJOB, paced per 10 ms), and one
consumer process taking them (GETJOB NOHANG COUNT 200 from all 100 queues) and acknowledging
them (FASTACK). Two measured phases of PHASE_S seconds each:

1. the console runs but nobody watches it;
2. 10 clients stream /events/overview (the overview page's live updates, exactly what an
   open browser tab receives);
3. 10 real browsers: headless Debian chromium (`/usr/bin/chromium`, driven by Playwright),
   one browser context each, with the overview page open and live. On this 2-core machine
   the browsers take CPU from everything else, so phase 2 isolates the console's cost to
   the node, and phase 3 shows it with the pages actually rendering. Skipped when chromium
   or Playwright is missing (`--browsers 0` skips it too).

Printed per phase: jobs/s achieved (acknowledged), the node's CPU% (user+system over the
phase, 100% = one core), the node's CPU µs per job (comparable when the browsers slow the
producer down), the console's CPU%, and the stream events received. No assertion:
figures only. Bounded: about 15 + 3 * PHASE_S seconds, then everything is stopped.
Usage: python -m bench.web_bench [--rate 5000] [--seconds 15] [--queues 100] [--clients 10]
                                 [--browsers 10]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil
import redis

from bench.node_bench import free_port

BODY = b"x" * 100
CHROMIUM = Path(os.environ.get("CONVEYOR_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]


def _wait_port(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{what} exited early")
        try:
            redis.Redis(port=port, socket_timeout=1).execute_command("PING")
            return
        except redis.RedisError:
            time.sleep(0.1)
    raise SystemExit(f"{what} did not start")


def producer(port: int, queues: list[str], rate: int, stop: float, counter: object) -> None:
    client = redis.Redis(port=port, protocol=2)
    tick, started, sent = 0.01, time.monotonic(), 0
    per_tick = max(1, int(rate * tick))
    index = 0
    while time.monotonic() < stop:
        pipe = client.pipeline(transaction=False)
        for _ in range(per_tick):
            pipe.execute_command("ADDJOB", queues[index % len(queues)], BODY, 0)
            index += 1
        pipe.execute()
        sent += per_tick
        counter.value = sent  # type: ignore[attr-defined]
        # Paced: never ahead of rate x elapsed; behind it, catch up as fast as it can.
        ahead = sent / rate - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)


def consumer(port: int, queues: list[str], stop: float, counter: object) -> None:
    client = redis.Redis(port=port, protocol=2)
    done = 0
    while time.monotonic() < stop + 1:
        jobs = client.execute_command("GETJOB", "NOHANG", "COUNT", 200, "FROM", *queues)
        if not jobs:
            time.sleep(0.002)
            continue
        client.execute_command("FASTACK", *[job[1] for job in jobs])
        done += len(jobs)
        counter.value = done  # type: ignore[attr-defined]


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


class Streamer(threading.Thread):
    """One live overview page: reads the event stream, counts `fragments` events."""

    def __init__(self, url: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.url, self.stop, self.events = url, stop, 0

    def run(self) -> None:
        with (
            httpx.Client(timeout=10) as client,
            client.stream("GET", self.url) as response,
        ):
            for line in response.iter_lines():
                if line.startswith("event: fragments"):
                    self.events += 1
                if self.stop.is_set():
                    return


def _phase(
    seconds: float, node: psutil.Process, web: psutil.Process, done: object
) -> dict[str, float]:
    cpu_node, cpu_web = _cpu_seconds(node), _cpu_seconds(web)
    jobs, started = done.value, time.monotonic()  # type: ignore[attr-defined]
    time.sleep(seconds)
    wall = time.monotonic() - started
    return {
        "rate": (done.value - jobs) / wall,  # type: ignore[attr-defined]
        "node_cpu": 100 * (_cpu_seconds(node) - cpu_node) / wall,
        "web_cpu": 100 * (_cpu_seconds(web) - cpu_web) / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=5000, help="target jobs/s")
    parser.add_argument("--seconds", type=float, default=15.0, help="seconds per phase")
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--clients", type=int, default=10, help="streaming overview pages")
    parser.add_argument("--browsers", type=int, default=10, help="chromium overview pages")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="conveyor-web-bench-"))
    node_port, web_port = free_port(), free_port()
    node_cmd = [sys.executable, "-m", "conveyor.cli", "server", "--port", str(node_port)]
    node_cmd += ["--dir", str(workdir)]
    web_cmd = [sys.executable, "-m", "conveyor.web.cli", "--nodes", f"127.0.0.1:{node_port}"]
    web_cmd += ["--port", str(web_port)]
    node_proc = subprocess.Popen(node_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    web_proc = subprocess.Popen(web_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    children: list[multiprocessing.Process] = []
    try:
        _wait_port(node_port, node_proc, "the node")
        base = f"http://127.0.0.1:{web_port}"
        _wait_http(f"{base}/static/console.css", web_proc)
        run(args, node_port, base, node_proc.pid, web_proc.pid, children)
    finally:
        for child in children:
            child.terminate()
            child.join(5)
        for proc in (web_proc, node_proc):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _wait_http(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and process.poll() is None:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit("the console did not start")


def run(
    args: argparse.Namespace, port: int, base: str, node_pid: int, web_pid: int,
    children: list[multiprocessing.Process],
) -> None:  # fmt: skip
    queues = [f"bench{i:03d}" for i in range(args.queues)]
    stop_at = time.monotonic() + 10 + 3 * args.seconds + 2
    sent, done = multiprocessing.Value("q", 0), multiprocessing.Value("q", 0)
    children += [
        multiprocessing.Process(target=producer, args=(port, queues, args.rate, stop_at, sent)),
        multiprocessing.Process(target=consumer, args=(port, queues, stop_at, done)),
    ]
    for child in children:
        child.start()
    node, web = psutil.Process(node_pid), psutil.Process(web_pid)
    time.sleep(3)  # warm-up: queues created, rates settled
    quiet = _phase(args.seconds, node, web, done)
    stop = threading.Event()
    streams = [Streamer(f"{base}/events/overview", stop) for _ in range(args.clients)]
    for stream in streams:
        stream.start()
    time.sleep(1)
    watched = _phase(args.seconds, node, web, done)
    stop.set()
    events = sum(s.events for s in streams)
    browsed = _browser_phase(args, base, node, web, done)
    listed = httpx.get(f"{base}/api/v1/queues", timeout=10).json()["total"]
    cpus = os.cpu_count()
    print(f"web bench: {args.queues} queues ({listed} listed by the console), target "
          f"{args.rate} jobs/s, {args.seconds:g} s per phase, {cpus} cores (shared)")  # fmt: skip
    print(f"{'phase':<28}{'jobs/s':>10}{'node CPU%':>11}{'µs/job':>8}{'console CPU%':>14}")
    phases = [("no console clients", quiet), (f"{args.clients} SSE overview", watched)]
    if browsed is not None:
        phases.append((f"{args.browsers} chromium overview", browsed))
    for label, figures in phases:
        rate, node_cpu, web_cpu = figures["rate"], figures["node_cpu"], figures["web_cpu"]
        per_job = 1e4 * node_cpu / max(rate, 1)  # node CPU µs per job acknowledged
        print(f"{label:<28}{rate:>10.0f}{node_cpu:>11.1f}{per_job:>8.1f}{web_cpu:>14.1f}")
    delta = watched["node_cpu"] - quiet["node_cpu"]
    per_client = events / max(1, args.clients)
    print(
        f"node CPU added by {args.clients} streaming clients: {delta:+.1f} points "
        f"({events} fragment events received, ~{per_client:.0f} per client)"
    )
    if browsed is not None:
        delta = browsed["node_cpu"] - quiet["node_cpu"]
        print(f"node CPU added by {args.browsers} chromium pages: {delta:+.1f} points")


def _browser_phase(
    args: argparse.Namespace, base: str, node: psutil.Process, web: psutil.Process, done: object
) -> dict[str, float] | None:
    """Phase 3: real browsers on the live overview page; None when they cannot run here."""
    if args.browsers <= 0 or not CHROMIUM.exists():
        return None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            for _ in range(args.browsers):
                page = browser.new_context().new_page()
                page.goto(f"{base}/", wait_until="domcontentloaded")
                # The page is live once its event source opened (the toggle says so).
                page.wait_for_selector("#live-toggle[data-state=live]", timeout=20_000)
            time.sleep(1)
            return _phase(args.seconds, node, web, done)
        finally:
            browser.close()


if __name__ == "__main__":
    main()
