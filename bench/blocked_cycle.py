"""blocked-cycle: node RSS while GETJOBs that time out cycle behind one that never does.

One client stays blocked in `GETJOB TIMEOUT 0 FROM q` and many others loop
`GETJOB TIMEOUT 20 FROM q` on the same empty queue; RSS is sampled at 0, half-time, the end
and 2 s after the load stops. A leak of timed-out waiters shows as RSS growing and staying
up. Run by `python -m bench.node_bench --only blocked-cycle`; `bench.abuse_bench` drives the
same clients (imported through `bench.node_bench`).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psutil
import redis

from bench.node_common import conveyor_node, rss_of

# -- blocked-cycle: waiters that time out behind one that never does --------------------------
CYCLE_NULL_REPLY = b"*-1\r\n"
CYCLE_RSS_FLAT = 1.05


def _resp_command(*parts: bytes) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(part), part))
    return b"".join(out)


class _CycleState:
    def __init__(self) -> None:
        self.running = True
        self.completed = 0  # null replies received, i.e. GETJOBs that timed out
        self.unexpected = 0  # anything else (a job, an error): should stay 0
        self.first_unexpected = b""
        self.lost = 0  # connections the node closed


class _CycleClient(asyncio.Protocol):
    """One connection, one GETJOB in flight: each null reply is answered with the next one.

    The request is pre-encoded and the expected reply is five fixed bytes, so a reply costs
    the driver one callback and one write: 200 of these in one event loop keep up with the
    node (the driver's own CPU is reported beside the figure).
    """

    def __init__(self, request: bytes, state: _CycleState) -> None:
        self.request = request
        self.state = state
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.idle: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self) -> None:
        assert self.transport is not None
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        state = self.state
        if buffer == CYCLE_NULL_REPLY:
            state.completed += 1
        elif len(buffer) < len(CYCLE_NULL_REPLY) and CYCLE_NULL_REPLY.startswith(buffer):
            self.buffer = buffer  # a split reply: wait for the rest
            return
        else:
            # Nothing should arrive on this queue; count it, keep a sample, go on. A reply
            # split so that it ends mid-line is treated as ended: the count is a signal only.
            state.unexpected += 1
            if not state.first_unexpected:
                state.first_unexpected = buffer[:200]
        self.buffer = b""
        if state.running:
            self.send()
        elif not self.idle.done():
            self.idle.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.state.running:
            self.state.lost += 1
        if not self.idle.done():
            self.idle.set_result(None)


async def _blocked_cycle_load(
    port: int, pid: int, clients: int, timeout_ms: int, seconds: float
) -> dict[str, object]:
    loop = asyncio.get_running_loop()
    state = _CycleState()
    queue = b"q"
    node = psutil.Process(pid)
    # The client that blocks forever: registered first, so it heads the queue's waiters.
    blocked = _CycleClient(_resp_command(b"GETJOB", b"TIMEOUT", b"0", b"FROM", queue), state)
    await loop.create_connection(lambda: blocked, "127.0.0.1", port)
    blocked.send()
    await asyncio.sleep(0.2)
    request = _resp_command(b"GETJOB", b"TIMEOUT", str(timeout_ms).encode(), b"FROM", queue)
    cyclers: list[_CycleClient] = []
    for _ in range(clients):
        client = _CycleClient(request, state)
        await loop.create_connection(lambda client=client: client, "127.0.0.1", port)
        cyclers.append(client)
    await asyncio.sleep(0.2)

    samples: list[tuple[str, float, int]] = []  # (label, seconds, rss bytes)
    trace: list[tuple[float, int, int]] = []  # (seconds, rss, completed), every second
    started = time.monotonic()
    driver_cpu0 = time.process_time()
    node_cpu0 = sum(node.cpu_times()[:2])
    samples.append(("0 s", 0.0, rss_of(pid)))
    print(f"blocked-cycle: t=0s rss={samples[0][2] / 2**20:.1f} MB", flush=True)
    for client in cyclers:
        client.send()
    checkpoints = [seconds / 2, seconds]
    next_trace = 1.0
    while True:
        now = time.monotonic() - started
        if checkpoints and now >= checkpoints[0]:
            mark = checkpoints.pop(0)
            samples.append((f"{mark:g} s", now, rss_of(pid)))
        if now >= next_trace:
            trace.append((now, rss_of(pid), state.completed))
            if int(next_trace) % 10 == 0 or not checkpoints:
                rate = (trace[-1][2] - (trace[-11][2] if len(trace) > 10 else 0)) / min(10.0, now)
                print(
                    f"blocked-cycle: t={now:.0f}s rss={trace[-1][1] / 2**20:.1f} MB "
                    f"getjob/s (last 10 s)={rate:,.0f}",
                    flush=True,
                )
            next_trace += 1.0
        if not checkpoints:
            break
        await asyncio.sleep(min(0.05, max(0.0, min(checkpoints[0], next_trace) - now)))
    elapsed = time.monotonic() - started
    completed = state.completed
    driver_cpu = time.process_time() - driver_cpu0
    node_cpu = sum(node.cpu_times()[:2]) - node_cpu0

    # Stop: each client finishes its GETJOB in flight (<= timeout_ms), then all close.
    state.running = False
    await asyncio.wait([c.idle for c in cyclers], timeout=timeout_ms / 1000 + 10)
    blocked_now = -1
    try:
        info = redis.Redis(port=port, protocol=2, socket_timeout=5).info("clients")
        blocked_now = int(info.get("blocked_clients", -1))
    except redis.RedisError:
        pass
    for client in cyclers:
        if client.transport is not None:
            client.transport.close()
    # Informational, outside the verdict: what the forever-blocked client still pins.
    await asyncio.sleep(2.0)
    held = rss_of(pid)
    if blocked.transport is not None:
        blocked.transport.close()  # releases the forever-blocked client
    await asyncio.sleep(2.0)
    samples.append(("after", time.monotonic() - started, rss_of(pid)))
    return {
        "samples": samples,
        "trace": trace,
        "elapsed": elapsed,
        "completed": completed,
        "unexpected": state.unexpected,
        "first_unexpected": state.first_unexpected,
        "lost": state.lost,
        "driver_cpu_percent": 100.0 * driver_cpu / elapsed,
        "node_cpu_percent": 100.0 * node_cpu / elapsed,
        "blocked_clients_at_stop": blocked_now,
        "rss_held": held,
    }


def run_blocked_cycle(
    workdir: Path, results: dict[str, object], seconds: float, clients: int, timeout_ms: int
) -> None:
    """RSS of a fresh node while timed-out GETJOBs cycle behind one that never times out."""
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency of the node
        runner = asyncio.run
    print(
        f"blocked-cycle: 1 client in GETJOB TIMEOUT 0 FROM q, {clients} clients looping "
        f"GETJOB TIMEOUT {timeout_ms} FROM q for {seconds:g} s "
        f"(ideal {clients * 1000 / timeout_ms:,.0f} GETJOB/s)",
        flush=True,
    )
    with conveyor_node(workdir) as (port, process):
        load = _blocked_cycle_load(port, process.pid, clients, timeout_ms, seconds)
        out = runner(asyncio.wait_for(load, timeout=seconds + 60))
    samples = out["samples"]
    rates = out["completed"] / out["elapsed"]
    rss_values = [rss for _, _, rss in samples]
    spread = max(rss_values) / min(rss_values)
    flat = spread <= CYCLE_RSS_FLAT
    print(
        "blocked-cycle: RSS "
        + ", ".join(f"{label} {rss / 2**20:.1f} MB" for label, _, rss in samples)
        + " ('after' = 2 s after the looping clients and the blocked one closed; 2 s after"
        + f" only the looping clients closed: {out['rss_held'] / 2**20:.1f} MB)",
        flush=True,
    )
    print(
        f"blocked-cycle: {out['completed']:,} GETJOBs in {out['elapsed']:.1f} s = "
        f"{rates:,.0f}/s (ideal {clients * 1000 / timeout_ms:,.0f}/s); "
        f"node CPU {out['node_cpu_percent']:.0f}%, driver CPU {out['driver_cpu_percent']:.0f}%; "
        f"unexpected replies {out['unexpected']}, connections lost {out['lost']}, "
        f"blocked_clients at stop {out['blocked_clients_at_stop']}",
        flush=True,
    )
    if out["first_unexpected"]:
        print(f"blocked-cycle: first unexpected reply {out['first_unexpected']!r}", flush=True)
    verdict = f"RSS flat within 5%: {'yes' if flat else 'no'} (max/min = {spread:.2f})"
    print(verdict, flush=True)
    results["blocked_cycle_rss_samples_mb"] = [
        (label, round(rss / 2**20, 1)) for label, _, rss in samples
    ]
    results["blocked_cycle_held_rss_mb"] = out["rss_held"] / 2**20
    results["blocked_cycle_getjob_per_s"] = rates
    results["blocked_cycle_node_cpu_percent"] = out["node_cpu_percent"]
    results["blocked_cycle_driver_cpu_percent"] = out["driver_cpu_percent"]
    results["blocked_cycle_unexpected_replies"] = out["unexpected"]
    results["blocked_cycle_rss_max_over_min"] = spread
    results["blocked_cycle_verdict"] = verdict
    results["blocked_cycle_rss_trace_mb"] = [
        (round(t, 1), round(rss / 2**20, 1)) for t, rss, _ in out["trace"]
    ]
