"""Abuse benchmark: the probes of issue 9 replayed against fresh nodes, bounded in count and time.

Each probe runs on its own fresh node (`--maxmemory 1gb` unless the probe needs otherwise,
log written to a file) while a separate monitor process watches it:
- a canary client sends PING every 5 ms and records the longest wait for its reply (the
  longest stall any other client saw), from the probe's start until 2 s after its
  connections closed;
- the node's RSS is sampled every 10 ms from /proc (peak during the probe), and INFO
  `used_memory` / `used_memory_rss` every 250 ms, to compare what the node says it holds
  with what it really holds;
- the same PINGs go to a redis-server started for the run: the longest wait there is the
  machine's noise (a shared 2-core VM), to read the node's figure against;
- above `--rss-cap-mb` (default 4096) the monitor kills the node, so a runaway node cannot
  take the machine down; the probe then reports it.

Probes (`--only` takes their names or numbers, comma-separated):
1. counts: `*2147483647\\r\\n`, `*1073741824\\r\\n`, `*268435456\\r\\n`, `*4294967295\\r\\n`,
   unauthenticated, each on its own connection: reply, time to reply, stall per count.
2. bulks (`--proto-max-bulk-len 1mb`): a request announcing a 1 GB bulk; a 5 MB bulk behind
   a 70 KB one in the same request: refused or accepted.
3. half-sent: 200 connections each send the header of a 1 MiB bulk and all of it but 8 bytes,
   then idle 5 s: whether and when the node cuts them, RSS during and after.
4. slow-reader: one client pipelines 200,000 `QPEEK q 10` (10 jobs of 1 KB queued) and never
   reads: cut off or not (TCP state of its socket, the node's log), RSS peak, used_memory.
5. idle: 2,000 connections opened, held 5 s, closed.
6. blocked-cycle: 1 client in `GETJOB TIMEOUT 0`, 200 clients cycling `GETJOB TIMEOUT 20`
   on the same queue for 20 s: RSS at 0, 10, 20 s and after.
7. auth-burst (`--requirepass`): 20,000 wrong AUTHs pipelined on one connection: replies,
   time, cut or slowed, INFO's auth-failure counters.
8. held-output: 15,000 pipelined `QPEEK q 10` never read (~150 MB of replies, under the hard
   output-buffer limit), held 3 s: does INFO used_memory count them.

Per probe it prints the canary's longest stall, RSS before / peak / after (2 s after the
probe's connections closed), INFO used_memory at the RSS peak and its ratio to RSS growth, the
probe's own outcomes, and three verdicts: `stall < 50 ms`, `RSS back within 10% of start`,
`used_memory within 20% of RSS growth` (only where RSS grew by 32 MB or more). No assertion:
figures only, comparable run to run (`--json FILE` saves them, `--baseline FILE` prints a
saved run beside this one).
Usage: python -m bench.abuse_bench [--only PROBES] [--quick] [--json FILE] [--baseline FILE]
       [--rss-cap-mb MB]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hiredis

from bench.node_bench import _CycleClient, _CycleState, _resp_command, free_port, rss_of

MB = 2**20
STALL_LIMIT_MS = 50.0
RSS_BACK_WITHIN = 0.10
USED_MEMORY_WITHIN = 0.20
RSS_GROWTH_MEANINGFUL = 32 * MB
AFTER_S = 2.0
PASSWORD = "abuse-bench-secret"
PING = b"*1\r\n$4\r\nPING\r\n"
INFO_MEMORY = b"*2\r\n$4\r\nINFO\r\n$6\r\nmemory\r\n"
TCP_ESTABLISHED = 1
AUTH_SLOW_PER_S = 5_000


def _now() -> float:
    return time.monotonic()


# -- a small blocking RESP client (setup, INFO, the monitor) -----------------------------------
class RawConn:
    def __init__(self, port: int, timeout: float, password: str = "") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader()
        if password:
            self.call(b"AUTH", password.encode())

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self) -> Any:
        while True:
            reply = self.reader.gets()
            if reply is not False:
                return reply
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("closed by the node")
            self.reader.feed(data)

    def call(self, *parts: bytes) -> Any:
        self.send(_resp_command(*parts))
        return self.read()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def parse_info(text: bytes | str) -> dict[str, str]:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith("#"):
            fields[key.strip()] = value.strip()
    return fields


def info(port: int, password: str, section: bytes = b"memory", timeout: float = 10.0) -> dict:
    conn = RawConn(port, timeout, password)
    try:
        return parse_info(conn.call(b"INFO", section))
    finally:
        conn.close()


# -- the node ---------------------------------------------------------------------------------
class Node:
    """A fresh node in its own data dir, logging to a file; stopped (then killed) by PID."""

    def __init__(self, workdir: Path, extra: tuple[str, ...], password: str = "") -> None:
        self.port = free_port()
        self.password = password
        self.dir = workdir / f"node-{self.port}"
        self.dir.mkdir(parents=True)
        self.log = self.dir / "node.log"
        self.output = self.dir / "stdout.txt"
        command = [sys.executable, "-m", "conveyor.cli", "server", "--port", str(self.port),
                   "--dir", str(self.dir), "--logfile", str(self.log)]  # fmt: skip
        if "--maxmemory" not in extra:
            command += ["--maxmemory", "1gb"]
        if password:
            command += ["--requirepass", password]
        command += list(extra)
        with open(self.output, "wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        self.pid = self.process.pid

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        deadline = _now() + timeout_s
        while _now() < deadline:
            if self.process.poll() is not None:
                break
            try:
                conn = RawConn(self.port, 2.0, self.password)
                conn.call(b"PING")
                conn.close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"the node on port {self.port} did not start: {self.tail()}")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.process.wait(10)

    def log_lines(self, pattern: str) -> list[str]:
        found = []
        for path in (self.log, self.output):
            if path.exists():
                text = path.read_text(errors="replace")
                found += [line for line in text.splitlines() if re.search(pattern, line, re.I)]
        return found

    def tail(self) -> str:
        return self.output.read_text(errors="replace")[-500:] if self.output.exists() else ""


# -- the monitor: canary, RSS and INFO samplers, in a process of its own -----------------------
def _monitor_main(
    port: int, pid: int, password: str, pipe: Any, rss_cap: int, control_port: int
) -> None:
    lock = threading.Lock()
    stop = threading.Event()
    phase = ["before"]
    stall: dict[str, float] = {}
    pings: dict[str, int] = Counter()
    latencies: dict[str, list[float]] = {}
    worst_at: dict[str, float] = {}  # when the longest wait of a phase began, into the phase
    phase_started: dict[str, float] = {"before": _now()}
    rss_peak: dict[str, int] = {}
    samples: list[tuple[str, float, int, int]] = []  # phase, t, used_memory, used_memory_rss
    errors: list[str] = []
    window = [0.0]
    inflight: list[float | None] = [None]
    killed: list[str] = []
    started = _now()

    def record(latency: float, sent: float) -> None:
        with lock:
            name = phase[0]
            if latency > stall.get(name, 0.0):
                stall[name] = latency
                worst_at[name] = sent - phase_started.get(name, started)
            pings[name] += 1
            kept = latencies.setdefault(name, [])
            if len(kept) < 200_000:
                kept.append(latency)
            window[0] = max(window[0], latency)

    def canary() -> None:
        conn = None
        next_send = _now()
        while not stop.is_set():
            try:
                if conn is None:
                    conn = RawConn(port, 60.0, password)
                sent = _now()
                inflight[0] = sent
                conn.send(PING)
                conn.read()
                inflight[0] = None
                record(_now() - sent, sent)
            except (OSError, ConnectionError) as exc:
                if inflight[0] is not None:
                    record(_now() - inflight[0], inflight[0])
                inflight[0] = None
                with lock:
                    if len(errors) < 20:
                        errors.append(f"{_now() - started:.1f}s canary: {exc!r}")
                if conn is not None:
                    conn.close()
                conn = None
                stop.wait(0.2)
            next_send += 0.005
            delay = next_send - _now()
            if delay > 0:
                stop.wait(delay)
            else:
                next_send = _now()

    control: dict[str, float] = {}

    def control_canary() -> None:
        """The same PINGs to a redis-server: what the machine, not the node, makes us wait."""
        conn = None
        while not stop.is_set():
            try:
                if conn is None:
                    conn = RawConn(control_port, 60.0)
                sent = _now()
                conn.send(PING)
                conn.read()
                latency = _now() - sent
                with lock:
                    control[phase[0]] = max(control.get(phase[0], 0.0), latency)
            except (OSError, ConnectionError):
                if conn is not None:
                    conn.close()
                conn = None
                stop.wait(0.2)
            stop.wait(0.005)

    def rss_sampler() -> None:
        while not stop.is_set():
            try:
                rss = rss_of(pid)
            except (OSError, IndexError):
                return
            with lock:
                name = phase[0]
                rss_peak[name] = max(rss_peak.get(name, 0), rss)
            if rss > rss_cap and not killed:
                killed.append(f"RSS {rss / MB:,.0f} MB > cap {rss_cap / MB:,.0f} MB")
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            stop.wait(0.01)

    def info_sampler() -> None:
        conn = None
        while not stop.is_set():
            try:
                if conn is None:
                    conn = RawConn(port, 60.0, password)
                conn.send(INFO_MEMORY)
                fields = parse_info(conn.read())
                with lock:
                    samples.append((
                        phase[0], _now() - started,
                        int(fields.get("used_memory", 0)), int(fields.get("used_memory_rss", 0)),
                    ))  # fmt: skip
            except (OSError, ConnectionError, ValueError):
                if conn is not None:
                    conn.close()
                conn = None
            stop.wait(0.25)

    loops = [canary, rss_sampler, info_sampler] + ([control_canary] if control_port else [])
    threads = [threading.Thread(target=f, daemon=True) for f in loops]
    for thread in threads:
        thread.start()
    pipe.send("ready")
    while True:
        if not pipe.poll(600):
            break
        message = pipe.recv()
        if message[0] == "phase":
            with lock:
                phase[0] = message[1]
                phase_started[message[1]] = _now()
            pipe.send("ok")
        elif message[0] == "window":
            # A PING still in flight belongs to this window: wait for it (bounded), so that a
            # stall is not split between two windows.
            waited = _now()
            while inflight[0] is not None and _now() - waited < 60 and not stop.is_set():
                time.sleep(0.001)
            with lock:
                value = window[0]
                if inflight[0] is not None:
                    value = max(value, _now() - inflight[0])
                window[0] = 0.0
            pipe.send(value)
        elif message[0] == "stop":
            stop.set()
            with lock:
                if inflight[0] is not None:  # a PING still unanswered counts as stalled
                    name = phase[0]
                    stall[name] = max(stall.get(name, 0.0), _now() - inflight[0])
                p99 = {name: sorted(values)[int(len(values) * 0.99)]
                       for name, values in latencies.items() if values}  # fmt: skip
                pipe.send({
                    "stall_s": dict(stall), "pings": dict(pings), "rss_peak": dict(rss_peak),
                    "p99_s": p99, "worst_at_s": dict(worst_at), "control_s": dict(control),
                    "info_samples": list(samples), "errors": list(errors), "killed": list(killed),
                })  # fmt: skip
            break


class Monitor:
    def __init__(self, node: Node, rss_cap: int, control_port: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.pipe, child = ctx.Pipe()
        self.process = ctx.Process(
            target=_monitor_main,
            args=(node.port, node.pid, node.password, child, rss_cap, control_port),
        )
        self.process.daemon = True
        self.process.start()
        if not self.pipe.poll(30):
            raise RuntimeError("the monitor did not start")
        self.pipe.recv()

    def _ask(self, message: tuple[Any, ...]) -> Any:
        self.pipe.send(message)
        if not self.pipe.poll(30):
            raise RuntimeError(f"the monitor did not answer {message[0]}")
        return self.pipe.recv()

    def phase(self, name: str) -> None:
        self._ask(("phase", name))

    def window(self) -> float:
        """Longest canary wait since the last call (seconds)."""
        return float(self._ask(("window",)))

    def stop(self) -> dict[str, Any]:
        try:
            return dict(self._ask(("stop",)))
        finally:
            self.process.join(10)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(5)


# -- raw asyncio socket helpers ------------------------------------------------------------------
async def connect(port: int, rcvbuf: int = 0, sndbuf: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    if sndbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    try:
        await asyncio.wait_for(
            asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port)), 10
        )
    except BaseException:
        sock.close()
        raise
    return sock


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def send_bounded(sock: socket.socket, data: bytes, deadline: float) -> tuple[int, str]:
    """Send what the node takes before the deadline: (bytes sent, "" or why it stopped)."""
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    sent = 0
    while sent < len(view):
        try:
            sent += sock.send(view[sent : sent + (1 << 18)])
            continue
        except BlockingIOError:
            pass
        except OSError as exc:
            return sent, type(exc).__name__
        remaining = deadline - _now()
        if remaining <= 0:
            return sent, "timeout"
        ready = loop.create_future()
        loop.add_writer(sock.fileno(), _resolve, ready)
        try:
            await asyncio.wait_for(ready, remaining)
        except TimeoutError:
            return sent, "timeout"
        finally:
            # Cancelled once the probe is over, this runs after the probe closed the socket.
            if sock.fileno() >= 0:
                loop.remove_writer(sock.fileno())
    return sent, ""


@dataclass
class Reply:
    text: bytes = b""  # the first 300 bytes the node sent
    reply_s: float | None = None  # seconds to the first complete line
    closed: str = ""  # "", "eof" or the error closing it
    closed_s: float | None = None

    def summary(self) -> str:
        text = self.text.split(b"\r\n")[0][:120].decode(errors="replace") or "(no reply)"
        when = f" after {self.reply_s * 1000:,.0f} ms" if self.reply_s is not None else ""
        closed = f", closed ({self.closed}" if self.closed else ", left open"
        if self.closed and self.closed_s is not None:
            closed += f" after {self.closed_s * 1000:,.0f} ms"
        return f"{text!r}{when}{closed}{')' if self.closed else ''}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "reply": self.text[:300].decode(errors="replace"),
            "reply_ms": None if self.reply_s is None else self.reply_s * 1000,
            "closed": self.closed,
            "closed_ms": None if self.closed_s is None else self.closed_s * 1000,
        }


async def read_reply(
    sock: socket.socket, started: float, timeout: float, linger: float = 0.3
) -> Reply:
    """What the node answers until it closes, `timeout` passes, or `linger` after a line."""
    loop = asyncio.get_running_loop()
    reply = Reply()
    buffer = bytearray()
    deadline = started + timeout
    while True:
        limit = deadline
        if reply.reply_s is not None:
            limit = min(limit, started + reply.reply_s + linger)
        remaining = limit - _now()
        if remaining <= 0:
            break
        try:
            data = await asyncio.wait_for(loop.sock_recv(sock, 1 << 16), remaining)
        except TimeoutError:
            break
        except OSError as exc:
            reply.closed, reply.closed_s = type(exc).__name__, _now() - started
            break
        if not data:
            reply.closed, reply.closed_s = "eof", _now() - started
            break
        if len(buffer) < 300:
            buffer += data[: 300 - len(buffer)]
        if reply.reply_s is None and b"\r\n" in buffer:
            reply.reply_s = _now() - started
    reply.text = bytes(buffer)
    return reply


def tcp_state(sock: socket.socket) -> int:
    """The kernel's TCP state of a socket (1 = established): no read needed."""
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]
    except OSError:
        return 0


def close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.close()


# -- the probes ----------------------------------------------------------------------------------
@dataclass
class Ctx:
    node: Node
    monitor: Monitor
    quick: bool
    rss_before: int
    outcome: dict[str, Any] = field(default_factory=dict)

    def verdict(self, name: str, value: bool) -> None:
        self.outcome.setdefault("verdicts", {})[name] = value

    def note(self, text: str) -> None:
        self.outcome.setdefault("lines", []).append(text)
        print(f"    {text}", flush=True)


async def probe_counts(ctx: Ctx) -> None:
    cases = []
    for count in (2147483647, 1073741824, 268435456, 4294967295):
        ctx.monitor.window()
        sock = await connect(ctx.node.port)
        started = _now()
        try:
            await send_bounded(sock, b"*%d\r\n" % count, started + 5)
            reply = await read_reply(sock, started, timeout=20.0, linger=10.0)
        finally:
            sock.close()
        await asyncio.sleep(0.3)
        stall = ctx.monitor.window() * 1000
        case = {"count": count, "stall_ms": stall, **reply.as_dict()}
        cases.append(case)
        ctx.note(f"*{count}: {reply.summary()}; canary stall {stall:,.1f} ms")
        if not ctx.node.alive():
            ctx.note("the node is gone")
            break
    ctx.outcome["cases"] = cases
    ctx.verdict(
        "every count refused with an error",
        len(cases) == 4 and all(case["reply"].startswith("-") for case in cases),
    )


async def probe_bulks(ctx: Ctx) -> None:
    cases = []
    # A 1 GB bulk announced, then 4 MiB of it offered.
    ctx.monitor.window()
    sock = await connect(ctx.node.port, sndbuf=1 << 18)
    started = _now()
    try:
        header = b"*3\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$1073741824\r\n"
        sent, why = await send_bounded(sock, header + b"x" * (4 * MB), started + 5)
        reply = await read_reply(sock, started, timeout=5.0)
    finally:
        sock.close()
    stall = ctx.monitor.window() * 1000
    cases.append({"case": "1 GB bulk announced", "sent": sent, "stall_ms": stall,
                  **reply.as_dict()})  # fmt: skip
    ctx.note(f"1 GB bulk announced ({sent:,} bytes taken{', ' + why if why else ''}): "
             f"{reply.summary()}; stall {stall:,.1f} ms")  # fmt: skip
    # A 5 MB bulk behind a 70 KB one, in one request: its header is past the first 64 KiB.
    await asyncio.sleep(0.2)
    ctx.monitor.window()
    sock = await connect(ctx.node.port, sndbuf=1 << 18)
    started = _now()
    try:
        request = _resp_command(b"ADDJOB", b"q" * 70_000, b"y" * 5_000_000, b"0")
        # The first read ends inside the 70 KB bulk, past 64 KiB: the 5 MB header comes later.
        sent, why = await send_bounded(sock, request[:68_000], started + 5)
        await asyncio.sleep(0.1)
        if not why:
            more, why = await send_bounded(sock, request[68_000:], started + 10)
            sent += more
        reply = await read_reply(sock, started, timeout=5.0)
    finally:
        sock.close()
    stall = ctx.monitor.window() * 1000
    accepted = not reply.text.startswith(b"-") and bool(reply.text)
    cases.append({"case": "5 MB bulk behind a 70 KB one", "sent": sent, "stall_ms": stall,
                  "accepted": accepted, **reply.as_dict()})  # fmt: skip
    ctx.note(f"5 MB bulk behind a 70 KB one ({sent:,} of {len(request):,} bytes taken"
             f"{', ' + why if why else ''}): {reply.summary()} -> "
             f"{'ACCEPTED past the 1 MB limit' if accepted else 'refused'}; "
             f"stall {stall:,.1f} ms")  # fmt: skip
    ctx.outcome["cases"] = cases
    ctx.verdict(
        "both refused", all(case["reply"].startswith("-ERR Protocol error") for case in cases)
    )


async def probe_half_sent(ctx: Ctx) -> None:
    count = 50 if ctx.quick else 200
    hold = 3.0 if ctx.quick else 5.0
    size = MB
    header = b"*3\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$%d\r\n" % size
    request = header + b"z" * (size - 8)  # all of the bulk but 8 bytes (and its CRLF)
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            socks.append(await connect(ctx.node.port, sndbuf=1 << 18))
        started = _now()
        results = await asyncio.gather(
            *(send_bounded(sock, request, started + 20) for sock in socks)
        )
        sent_all = _now() - started
        cut_in_send = [why for _, why in results if why and why != "timeout"]
        stuck = sum(1 for _, why in results if why == "timeout")
        ctx.note(f"{count} connections sent {sum(s for s, _ in results) / MB:,.1f} MiB in "
                 f"{sent_all:.1f} s; cut while sending: {len(cut_in_send)}; "
                 f"send stalled (node stopped reading): {stuck}")  # fmt: skip
        hold_started = _now()
        replies = await asyncio.gather(
            *(read_reply(sock, hold_started, timeout=hold, linger=hold) for sock in socks)
        )
        cut = [r for r in replies if r.closed]
        times = sorted(r.closed_s for r in cut if r.closed_s is not None)
        first = next((r for r in replies if r.text), None)
        rss_held = rss_of(ctx.node.pid) if ctx.node.alive() else 0
        ctx.outcome.update({
            "connections": count, "send_s": sent_all, "cut_while_sending": len(cut_in_send),
            "send_stalled": stuck, "cut_during_hold": len(cut),
            "cut_ms": [round(t * 1000) for t in times[:5]] + [round(t * 1000) for t in times[-1:]],
            "first_reply": first.text[:200].decode(errors="replace") if first else "",
            "rss_at_end_of_hold_mb": rss_held / MB,
        })  # fmt: skip
        held = max(0, rss_held - ctx.rss_before)
        ctx.verdict(
            "cut, or held < 25% of what they sent",
            len(cut) + len(cut_in_send) == count or held < 0.25 * sum(s for s, _ in results),
        )
        when = ""
        if times:
            when = (f" (first {times[0] * 1000:,.0f} ms, median "
                    f"{statistics.median(times) * 1000:,.0f} ms, last {times[-1] * 1000:,.0f} ms"
                    " into the hold)")  # fmt: skip
        ctx.note(f"cut by the node during the {hold:g} s hold: {len(cut)} of {count}{when}; "
                 f"reply: {first.summary() if first else '(none)'}; "
                 f"RSS at the end of the hold {rss_held / MB:,.1f} MB")  # fmt: skip
    finally:
        close_all(socks)


def _setup_slow_reader(node: Node) -> None:
    conn = RawConn(node.port, 10.0, node.password)
    for _ in range(10):
        conn.call(b"ADDJOB", b"q", b"j" * 1024, b"0")
    conn.close()


async def probe_slow_reader(ctx: Ctx) -> None:
    total = 50_000 if ctx.quick else 200_000
    watch = 12.0 if ctx.quick else 25.0
    conn = RawConn(ctx.node.port, 10.0)
    obl = conn.call(b"CONFIG", b"GET", b"client-output-buffer-limit")
    commands_before = int(
        parse_info(conn.call(b"INFO", b"stats")).get("total_commands_processed", 0)
    )
    conn.close()
    ctx.outcome["client_output_buffer_limit"] = [x.decode() for x in obl] if obl else []
    ctx.note(f"client-output-buffer-limit: {ctx.outcome['client_output_buffer_limit']}")
    request = _resp_command(b"QPEEK", b"q", b"10") * total
    sock = await connect(ctx.node.port, rcvbuf=1 << 17)
    started = _now()
    try:
        send = asyncio.ensure_future(send_bounded(sock, request, started + watch))
        cut_s = None
        stable_since, last_rss = _now(), 0
        while _now() - started < watch:
            await asyncio.sleep(0.1)
            if tcp_state(sock) != TCP_ESTABLISHED:
                cut_s = _now() - started
                break
            if not ctx.node.alive():
                break
            rss = rss_of(ctx.node.pid)
            if abs(rss - last_rss) > MB:
                stable_since, last_rss = _now(), rss
            elif send.done() and _now() - stable_since > 3.0:
                break  # everything sent and the node's RSS has settled: it is not cutting
        sent, why = -1, "still sending"
        if send.done():
            sent, why = send.result()
        else:
            send.cancel()
        commands = -1
        with contextlib.suppress(OSError, ConnectionError, ValueError):
            stats = info(ctx.node.port, "", b"stats")
            commands = int(stats.get("total_commands_processed", 0)) - commands_before
        rss_end = rss_of(ctx.node.pid) if ctx.node.alive() else 0
    finally:
        sock.close()
    logged = ctx.node.log_lines(r"output.buffer|overcom|buffer limit")
    ctx.outcome.update({
        "pipelined": total, "sent": sent, "send_stop": why, "cut_s": cut_s,
        "commands_processed": commands, "log_lines": logged[:3], "rss_at_end_mb": rss_end / MB,
    })  # fmt: skip
    cut_text = f"CUT after {cut_s:.2f} s" if cut_s is not None else "NOT cut"
    ctx.note(f"{total:,} QPEEK q 10 pipelined ({len(request) / MB:.1f} MiB), "
             f"{sent:,} bytes taken{', ' + why if why else ''}; {cut_text} "
             f"(watched up to {watch:g} s); ~{commands:,} commands processed; "
             f"RSS at the end {rss_end / MB:,.1f} MB")  # fmt: skip
    ctx.verdict("cut off and logged", cut_s is not None and bool(logged))
    shown = ""
    if logged:
        line = logged[0]
        shown = f"; first: {line[:60]} ... {line[-110:]}" if len(line) > 180 else f"; {line}"
    ctx.note(f"output-buffer log lines: {len(logged)}{shown}")


async def probe_held_output(ctx: Ctx) -> None:
    """Replies held below the hard limit: does INFO used_memory count them?"""
    total = 15_000  # ~150 MB of replies: over the soft limit, under the hard one
    hold = 3.0
    request = _resp_command(b"QPEEK", b"q", b"10") * total
    sock = await connect(ctx.node.port, rcvbuf=1 << 17)
    started = _now()
    try:
        sent, why = await send_bounded(sock, request, started + 15)
        settled_since, last_rss = _now(), 0
        while _now() - started < 20 and _now() - settled_since < 1.0:
            await asyncio.sleep(0.1)
            rss = rss_of(ctx.node.pid) if ctx.node.alive() else 0
            if abs(rss - last_rss) > MB:
                settled_since, last_rss = _now(), rss
        await asyncio.sleep(hold)
        fields: dict[str, str] = {}
        with contextlib.suppress(OSError, ConnectionError, ValueError):
            fields = info(ctx.node.port, "", b"memory")
        state = tcp_state(sock)
    finally:
        sock.close()
    used = int(fields.get("used_memory", 0))
    rss = int(fields.get("used_memory_rss", 0))
    clients = {k: v for k, v in fields.items() if "client" in k}
    ctx.outcome.update({
        "pipelined": total, "sent": sent, "send_stop": why, "cut": state != TCP_ESTABLISHED,
        "used_memory_mb": used / MB, "used_memory_rss_mb": rss / MB, "client_fields": clients,
    })  # fmt: skip
    ctx.note(f"{total:,} QPEEK q 10 pipelined, never read, held {hold:g} s "
             f"({'cut by the node' if state != TCP_ESTABLISHED else 'still connected'}); "
             f"INFO then: used_memory {used / MB:,.1f} MB, used_memory_rss {rss / MB:,.1f} MB; "
             f"{clients or 'no client memory fields'}")  # fmt: skip


async def _idle_cycle(port: int, count: int, hold: float) -> dict[str, Any]:
    """Open `count` connections, hold them `hold` seconds without a byte, close them."""
    socks: list[socket.socket] = []
    failures: Counter[str] = Counter()
    started = _now()
    try:
        for offset in range(0, count, 200):
            batch = await asyncio.gather(
                *(connect(port) for _ in range(min(200, count - offset))),
                return_exceptions=True,
            )
            for item in batch:
                if isinstance(item, BaseException):
                    failures[type(item).__name__] += 1
                else:
                    socks.append(item)
        opened = _now() - started
        await asyncio.sleep(min(1.0, hold))
        connected = -1
        with contextlib.suppress(OSError, ConnectionError, ValueError):
            connected = int(info(port, "", b"clients").get("connected_clients", -1))
        await asyncio.sleep(max(0.0, hold - 1.0))
        closed = sum(1 for sock in socks if tcp_state(sock) != TCP_ESTABLISHED)
    finally:
        close_all(socks)
    return {"opened": len(socks), "open_s": opened, "failures": dict(failures),
            "connected_clients": connected, "closed_by_node": closed, "hold_s": hold}  # fmt: skip


async def probe_idle(ctx: Ctx) -> None:
    count = 2000
    hold = 2.0 if ctx.quick else 5.0
    first = await _idle_cycle(ctx.node.port, count, hold)
    ctx.note(f"{first['opened']:,} of {count:,} connections opened in {first['open_s']:.2f} s "
             f"(failures {first['failures'] or 0}); INFO connected_clients "
             f"{first['connected_clients']:,}; closed by the node during the {hold:g} s hold: "
             f"{first['closed_by_node']}")  # fmt: skip
    # A second, shorter round tells allocator high-water marks (RSS stays, does not grow)
    # from a leak (RSS grows again).
    await asyncio.sleep(AFTER_S)
    rss_between = rss_of(ctx.node.pid)
    second = await _idle_cycle(ctx.node.port, count, 1.0)
    await asyncio.sleep(AFTER_S)
    rss_second = rss_of(ctx.node.pid)
    ctx.outcome.update({**first, "second_round_opened": second["opened"],
                        "rss_after_first_round_mb": rss_between / MB,
                        "rss_after_second_round_mb": rss_second / MB})  # fmt: skip
    ctx.verdict("all held", first["opened"] == count and first["closed_by_node"] == 0)
    ctx.note(f"RSS {AFTER_S:g} s after closing them {rss_between / MB:,.1f} MB; after a second "
             f"round of {second['opened']:,} held 1 s: {rss_second / MB:,.1f} MB")  # fmt: skip


async def probe_blocked_cycle(ctx: Ctx) -> None:
    clients, timeout_ms = 200, 20
    seconds = 6.0 if ctx.quick else 20.0
    loop = asyncio.get_running_loop()
    state = _CycleState()
    pid, port = ctx.node.pid, ctx.node.port
    blocked = _CycleClient(_resp_command(b"GETJOB", b"TIMEOUT", b"0", b"FROM", b"q"), state)
    cyclers: list[_CycleClient] = []
    try:
        await loop.create_connection(lambda: blocked, "127.0.0.1", port)
        blocked.send()
        await asyncio.sleep(0.2)
        request = _resp_command(b"GETJOB", b"TIMEOUT", str(timeout_ms).encode(), b"FROM", b"q")
        for _ in range(clients):
            client = _CycleClient(request, state)
            await loop.create_connection(lambda client=client: client, "127.0.0.1", port)
            cyclers.append(client)
        await asyncio.sleep(0.2)
        samples = [("0 s", rss_of(pid))]
        started = _now()
        for client in cyclers:
            client.send()
        for mark in (seconds / 2, seconds):
            await asyncio.sleep(max(0.0, started + mark - _now()))
            samples.append((f"{mark:g} s", rss_of(pid)))
        elapsed = _now() - started
        completed = state.completed
        state.running = False
        await asyncio.wait([c.idle for c in cyclers], timeout=timeout_ms / 1000 + 5)
    finally:
        for client in [*cyclers, blocked]:
            if client.transport is not None:
                client.transport.close()
    await asyncio.sleep(0.05)
    values = [rss for _, rss in samples]
    ctx.outcome.update({
        "clients": clients, "seconds": seconds, "getjob_per_s": completed / elapsed,
        "unexpected": state.unexpected, "lost": state.lost,
        "rss_samples_mb": [(label, round(rss / MB, 1)) for label, rss in samples],
        "rss_max_over_min": max(values) / min(values),
    })  # fmt: skip
    ctx.verdict("RSS flat within 5% under load", max(values) / min(values) <= 1.05)
    ctx.note(f"{clients} clients cycling GETJOB TIMEOUT {timeout_ms} for {seconds:g} s behind "
             f"one in TIMEOUT 0: {completed / elapsed:,.0f} GETJOB/s; RSS "
             + ", ".join(f"{label} {rss / MB:.1f} MB" for label, rss in samples)
             + f" (max/min {max(values) / min(values):.2f}); unexpected replies "
             f"{state.unexpected}, connections lost {state.lost}")  # fmt: skip


async def probe_auth_burst(ctx: Ctx) -> None:
    total = 5_000 if ctx.quick else 20_000
    loop = asyncio.get_running_loop()
    request = b"".join(_resp_command(b"AUTH", b"wrong-%d" % i) for i in range(total))
    sock = await connect(ctx.node.port)
    started = _now()
    replies = 0
    kinds: Counter[str] = Counter()
    marks: dict[int, float] = {}
    closed = ""
    pending = b""
    try:
        send = asyncio.ensure_future(send_bounded(sock, request, started + 20))
        deadline = started + 20
        while replies < total:
            remaining = deadline - _now()
            if remaining <= 0:
                closed = "timeout"
                break
            try:
                data = await asyncio.wait_for(loop.sock_recv(sock, 1 << 16), remaining)
            except TimeoutError:
                closed = "timeout"
                break
            except OSError as exc:
                closed = type(exc).__name__
                break
            if not data:
                closed = "eof"
                break
            lines = (pending + data).split(b"\r\n")
            pending = lines.pop()
            for line in lines:
                replies += 1
                if len(kinds) < 10 or line[:40].decode(errors="replace") in kinds:
                    kinds[line[:40].decode(errors="replace")] += 1
                if replies in (1000, total // 2) or replies == total:
                    marks[replies] = _now() - started
        elapsed = _now() - started
        send.cancel()
        with contextlib.suppress(BaseException):
            await send
    finally:
        sock.close()
    counters = {}
    with contextlib.suppress(OSError, ConnectionError, ValueError):
        fields = info(ctx.node.port, ctx.node.password, b"all")
        counters = {k: v for k, v in fields.items() if "auth" in k.lower()}
    ctx.outcome.update({
        "sent": total, "answered": replies, "elapsed_s": elapsed, "closed": closed,
        "reply_kinds": dict(kinds), "marks_s": marks, "info_auth_fields": counters,
    })  # fmt: skip
    pace = ", ".join(f"reply {n:,} at {t * 1000:,.0f} ms" for n, t in sorted(marks.items()))
    ctx.note(f"{total:,} wrong AUTHs pipelined: {replies:,} answered in {elapsed * 1000:,.0f} ms"
             f"{f' ({pace})' if pace else ''}; connection {closed or 'left open'}")  # fmt: skip
    ctx.note(f"replies: {dict(kinds.most_common(4))}")
    ctx.note(f"INFO auth fields: {counters or '(none)'}")
    cut = bool(closed) and closed != "timeout"
    slowed = replies < total or (elapsed > 0 and replies / elapsed < AUTH_SLOW_PER_S)
    ctx.verdict(f"cut or slowed below {AUTH_SLOW_PER_S:,}/s", cut or slowed)
    ctx.verdict(
        "failures counted in INFO",
        any(re.search("fail|denied|reject", key, re.I) for key in counters),
    )


@dataclass
class Probe:
    number: int
    name: str
    title: str
    run: Callable[[Ctx], Awaitable[None]]
    deadline_s: float
    node_args: tuple[str, ...] = ()
    password: str = ""
    setup: Callable[[Node], None] | None = None


PROBES = [
    Probe(1, "counts", "huge multibulk counts, unauthenticated, one connection each",
          probe_counts, 120),
    Probe(2, "bulks", "giant bulks with proto-max-bulk-len 1mb", probe_bulks, 60,
          ("--proto-max-bulk-len", "1mb")),
    Probe(3, "half-sent", "half-sent 1 MiB bulks, 200 connections, then idle",
          probe_half_sent, 90),
    Probe(4, "slow-reader", "200,000 pipelined QPEEK q 10 (10 jobs of 1 KB), never read",
          probe_slow_reader, 90, setup=_setup_slow_reader),
    Probe(5, "idle", "2,000 idle connections, held, closed", probe_idle, 60),
    Probe(6, "blocked-cycle", "1 GETJOB TIMEOUT 0 + 200 clients cycling GETJOB TIMEOUT 20",
          probe_blocked_cycle, 90),
    Probe(7, "auth-burst", "20,000 wrong passwords pipelined (--requirepass)",
          probe_auth_burst, 60, password=PASSWORD),
    Probe(8, "held-output", "15,000 pipelined QPEEK q 10 never read, held under the hard limit",
          probe_held_output, 60, setup=_setup_slow_reader),
]  # fmt: skip


@contextlib.contextmanager
def control_server(workdir: Path) -> Iterator[int]:
    """A redis-server the monitor PINGs beside the node (0 when redis-server is missing)."""
    if shutil.which("redis-server") is None:
        yield 0
        return
    port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = _now() + 10
        while _now() < deadline:
            try:
                RawConn(port, 1.0).close()
                break
            except OSError:
                time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def _runner() -> Callable[[Awaitable[Any]], Any]:
    try:
        import uvloop

        return uvloop.run  # type: ignore[no-any-return]
    except ImportError:  # pragma: no cover - uvloop is a dependency of the node
        return asyncio.run


def run_probe(
    probe: Probe, workdir: Path, quick: bool, rss_cap: int, control_port: int
) -> dict[str, Any]:
    print(f"\n== {probe.number} {probe.name}: {probe.title}", flush=True)
    node = Node(workdir, probe.node_args, probe.password)
    result: dict[str, Any] = {"probe": probe.name, "number": probe.number}
    monitor = None
    try:
        node.wait_ready()
        if probe.setup:
            probe.setup(node)
        time.sleep(0.5)
        before = info(node.port, node.password)
        rss_before = rss_of(node.pid)
        monitor = Monitor(node, rss_cap, control_port)
        time.sleep(1.0)  # the canary on an idle node: how noisy the machine is right now
        result["load_average_1m"] = os.getloadavg()[0]
        monitor.phase("during")
        ctx = Ctx(node, monitor, quick, rss_before)
        started = _now()
        try:
            _runner()(asyncio.wait_for(probe.run(ctx), timeout=probe.deadline_s))
        except TimeoutError:
            ctx.note(f"probe stopped at its {probe.deadline_s:g} s deadline")
            ctx.outcome["deadline_hit"] = True
        except Exception as exc:  # the node may be gone, or cut the probe: report it
            ctx.note(f"probe ended with {exc!r}")
            ctx.outcome["error"] = repr(exc)
        result["probe_s"] = _now() - started
        monitor.phase("after")
        time.sleep(AFTER_S)
        rss_after = rss_of(node.pid) if node.alive() else 0
        result["node_died"] = node.process.poll()
        watched = monitor.stop()
        monitor = None
        result["outcome"] = ctx.outcome
    finally:
        if monitor is not None:
            with contextlib.suppress(Exception):
                monitor.stop()
        node.stop()
    result["node_exit"] = node.process.returncode
    result["tracebacks"] = len(node.log_lines(r"^Traceback|MemoryError"))
    stall_s = watched["stall_s"]
    result["stall_ms"] = max(stall_s.get("during", 0), stall_s.get("after", 0)) * 1000
    result["stall_during_ms"] = stall_s.get("during", 0) * 1000
    result["stall_after_ms"] = stall_s.get("after", 0) * 1000
    result["canary_pings"] = watched["pings"]
    result["stall_idle_node_ms"] = stall_s.get("before", 0) * 1000
    control = watched["control_s"]
    if control_port:
        result["control_stall_ms"] = max(control.get("during", 0), control.get("after", 0)) * 1000
    worst_phase = "during" if stall_s.get("during", 0) >= stall_s.get("after", 0) else "after"
    result["stall_began"] = f"{worst_phase} +{watched['worst_at_s'].get(worst_phase, 0):.2f} s"
    result["canary_p99_during_ms"] = watched["p99_s"].get("during", 0) * 1000
    result["canary_errors"] = watched["errors"]
    result["killed_by_bench"] = watched["killed"]
    peak = max(watched["rss_peak"].get("during", 0), watched["rss_peak"].get("after", 0))
    result["rss_before_mb"] = rss_before / MB
    result["rss_peak_mb"] = max(peak, rss_before) / MB
    result["rss_after_mb"] = rss_after / MB
    used_before = int(before.get("used_memory", 0))
    rss_info_before = int(before.get("used_memory_rss", rss_before))
    during = [s for s in watched["info_samples"] if s[0] == "during"]
    if during:
        _, _, used, rss_info = max(during, key=lambda s: s[3])
        result["info_at_peak"] = {"used_memory_mb": used / MB, "used_memory_rss_mb": rss_info / MB}
        result["used_over_rss"] = used / rss_info if rss_info else None
        growth = rss_info - rss_info_before
        result["rss_growth_mb"] = growth / MB
        result["used_growth_mb"] = (used - used_before) / MB
        if growth >= RSS_GROWTH_MEANINGFUL:
            result["used_growth_over_rss_growth"] = (used - used_before) / growth
        _, _, used, rss_info = max(during, key=lambda s: s[2])
        result["info_at_max_used"] = {
            "used_memory_mb": used / MB,
            "used_memory_rss_mb": rss_info / MB,
        }
        result["info_samples_during"] = len(during)
    verdicts = {
        "stall < 50 ms": result["stall_ms"] < STALL_LIMIT_MS,
        "RSS back within 10% of start": 0 < rss_after <= rss_before * (1 + RSS_BACK_WITHIN),
    }
    ratio = result.get("used_growth_over_rss_growth")
    if ratio is not None:
        verdicts["used_memory within 20% of RSS growth"] = abs(ratio - 1) <= USED_MEMORY_WITHIN
    verdicts.update(result["outcome"].get("verdicts", {}))
    result["verdicts"] = verdicts
    print_probe(result)
    return result


def _yes(value: bool) -> str:
    return "yes" if value else "NO"


def print_probe(result: dict[str, Any]) -> None:
    print(f"  canary: longest stall {result['stall_ms']:,.1f} ms, began {result['stall_began']}"
          f" (during the probe "
          f"{result['stall_during_ms']:,.1f} ms, in the {AFTER_S:g} s after "
          f"{result['stall_after_ms']:,.1f} ms; p99 during "
          f"{result['canary_p99_during_ms']:,.1f} ms; pings "
          f"{sum(result['canary_pings'].values()):,}); machine noise: longest wait on the idle "
          f"node in the 1 s before {result['stall_idle_node_ms']:,.1f} ms, load average "
          f"{result['load_average_1m']:.1f}", flush=True)  # fmt: skip
    if "control_stall_ms" in result:
        print(f"  control: the same PINGs to a redis-server meanwhile waited at most "
              f"{result['control_stall_ms']:,.1f} ms (machine noise)")  # fmt: skip
    print(f"  RSS: before {result['rss_before_mb']:,.1f} MB, peak {result['rss_peak_mb']:,.1f} MB,"
          f" after {result['rss_after_mb']:,.1f} MB ({AFTER_S:g} s after the probe's connections"
          f" closed); probe ran {result['probe_s']:.1f} s")  # fmt: skip
    at_peak = result.get("info_at_peak")
    if at_peak:
        ratio = result.get("used_growth_over_rss_growth")
        growth = (f"used_memory growth / RSS growth {ratio:.2f}" if ratio is not None else
                  f"RSS grew {result['rss_growth_mb']:,.1f} MB: ratio not meaningful")  # fmt: skip
        print(f"  INFO at the highest-RSS sample: used_memory {at_peak['used_memory_mb']:,.1f} MB,"
              f" used_memory_rss {at_peak['used_memory_rss_mb']:,.1f} MB (used/RSS "
              f"{result['used_over_rss']:.2f}); {growth}")  # fmt: skip
        top = result["info_at_max_used"]
        print(f"  INFO, highest used_memory of {result['info_samples_during']} samples: "
              f"{top['used_memory_mb']:,.1f} MB (used_memory_rss then "
              f"{top['used_memory_rss_mb']:,.1f} MB)")  # fmt: skip
    else:
        print("  INFO: no sample answered during the probe")
    if result.get("node_died") is not None:
        print(f"  THE NODE DIED during the probe (exit code {result['node_died']})")
    if result["killed_by_bench"]:
        print(f"  NODE KILLED by the bench: {result['killed_by_bench'][0]}")
    if result["tracebacks"]:
        print(f"  node log/output: {result['tracebacks']} Traceback/MemoryError lines")
    if result["canary_errors"]:
        print(f"  canary errors: {result['canary_errors'][:3]}")
    print("  verdict: " + " | ".join(f"{k}: {_yes(v)}" for k, v in result["verdicts"].items()),
          flush=True)  # fmt: skip


def print_summary(results: list[dict[str, Any]], baseline: list[dict[str, Any]] | None) -> None:
    old = {r["probe"]: r for r in baseline or []}
    print("\n== summary" + (" (baseline -> this run)" if old else ""))
    header = (f"{'probe':<14} {'stall ms':>18} {'control ms':>12} "
              f"{'RSS before/peak/after MB':>36}  verdicts")  # fmt: skip
    print(header)

    def fig(result: dict[str, Any]) -> tuple[str, str]:
        rss = (f"{result['rss_before_mb']:.0f}/{result['rss_peak_mb']:.0f}/"
               f"{result['rss_after_mb']:.0f}")  # fmt: skip
        control = result.get("control_stall_ms")
        return f"{result['stall_ms']:,.0f}", rss, "-" if control is None else f"{control:,.0f}"

    for result in results:
        stall, rss, control = fig(result)
        if result["probe"] in old:
            old_stall, old_rss, old_control = fig(old[result["probe"]])
            stall, rss = f"{old_stall} -> {stall}", f"{old_rss} -> {rss}"
            control = f"{old_control} -> {control}"
        failed = [key for key, value in result["verdicts"].items() if not value]
        verdicts = f"{len(result['verdicts']) - len(failed)}/{len(result['verdicts'])} yes"
        if failed:
            verdicts += "; NO: " + ", ".join(failed)
        print(f"{result['number']} {result['probe']:<12} {stall:>18} {control:>12} {rss:>36}  "
              f"{verdicts}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = [p.name for p in PROBES]
    parser.add_argument(
        "--only",
        default=",".join(names),
        help=f"comma-separated probes, by name or number: {', '.join(names)}",
    )
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--baseline", type=Path, help="a --json file to print beside this run")
    parser.add_argument("--rss-cap-mb", type=int, default=4096,
                        help="kill a node whose RSS passes this (default 4096)")  # fmt: skip
    options = parser.parse_args()
    chosen = []
    for word in options.only.split(","):
        word = word.strip()
        match = [p for p in PROBES if word in (p.name, str(p.number))]
        if not match:
            parser.error(f"unknown probe {word!r}: {', '.join(names)}")
        chosen += [p for p in match if p not in chosen]
    baseline = None
    if options.baseline:
        baseline = json.loads(options.baseline.read_text())["probes"]
    results = []
    started = _now()
    with (
        tempfile.TemporaryDirectory(prefix="conveyor-abuse-") as tmp,
        control_server(Path(tmp)) as control_port,
    ):
        for probe in sorted(chosen, key=lambda p: p.number):
            try:
                results.append(
                    run_probe(
                        probe, Path(tmp), options.quick, options.rss_cap_mb * MB, control_port
                    )
                )
            except Exception as exc:  # one broken probe does not hide the others' figures
                print(f"  probe {probe.name} failed: {exc!r}", flush=True)
    print_summary(results, baseline)
    print(f"(total {_now() - started:.0f} s)")
    if options.json:
        document = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "quick": options.quick, "probes": results}  # fmt: skip
        options.json.write_text(json.dumps(document, indent=2, default=str))


if __name__ == "__main__":
    main()
