"""No-op jobs per second through `conveyor worker` beside Dramatiq, Celery and python-rq.

Run as `python -m bench.workers_bench [--tasks N] [--scripts N]` (`make bench-workers`).
Starts a Conveyor node and a redis-server on free 127.0.0.1 ports. Every system runs the
same no-op function, in one worker process; the queue is filled first, and the rate is
counted from the first run to the last one, as the function itself records them (so
start-up is not counted; python-rq's burst workers are timed around `work()`).
Queue scripts: `/bin/true` runs (`exec_prefix ""`, `num_workers` 4) beside python-rq's
forking worker, which forks one process per job too.

This module is also the worker-side code: each worker process imports it with
BENCH_SYSTEM set, and only that system's app is built.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parents[1]
_COUNTER = itertools.count()  # next() on it is atomic under the GIL: safe in thread pools


def _tick() -> None:
    """The no-op work: count; the first and the last run note the time."""
    n = next(_COUNTER)
    total = int(os.environ["BENCH_TOTAL"])
    if n == 0 or n == total - 1:
        mark = "first" if n == 0 else "last"
        Path(os.environ["BENCH_DIR"], f"{os.environ['BENCH_SYSTEM']}.{mark}").write_text(
            repr(time.time())
        )


def noop_rq() -> None:  # python-rq imports its jobs by dotted name
    _tick()


_SYSTEM = os.environ.get("BENCH_SYSTEM", "")
if _SYSTEM == "conveyor":
    from conveyor.worker import App

    conveyor_app = App(nodes=os.environ["BENCH_NODES"], default_queue="bench")
    conveyor_noop = conveyor_app.task(_tick, name="noop")
elif _SYSTEM == "dramatiq":
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    dramatiq.set_broker(RedisBroker(url=os.environ["BENCH_REDIS"]))
    dramatiq_noop = dramatiq.actor(_tick, actor_name="noop", max_retries=0)
elif _SYSTEM == "celery":
    from celery import Celery

    celery_app = Celery("bench", broker=os.environ["BENCH_REDIS"])
    celery_app.conf.update(task_ignore_result=True, worker_prefetch_multiplier=128)
    celery_noop = celery_app.task(name="noop")(_tick)


# -- the driver --------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_port(port: int, process: subprocess.Popen[bytes]) -> None:
    for _ in range(200):
        if process.poll() is not None:
            raise RuntimeError(f"server on {port} exited early")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


def _start(command: list[str], port: int, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    _wait_port(port, process)
    return process


def _env(system: str, work: Path, total: int, **extra: str) -> dict[str, str]:
    for mark in ("first", "last"):
        (work / f"{system}.{mark}").unlink(missing_ok=True)
    return {
        **os.environ, "BENCH_SYSTEM": system, "BENCH_DIR": str(work), "BENCH_TOTAL": str(total),
        "PYTHONPATH": str(ROOT), **extra,
    }  # fmt: skip


def _run_worker(
    system: str, command: list[str], env: dict[str, str], work: Path, limit_s: float
) -> float:
    """Start a worker; the rate between its first and last run (0 if cut short)."""
    log = open(work / f"{system}.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    last = work / f"{system}.last"
    deadline = time.monotonic() + limit_s
    try:
        while not last.exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
    if not last.exists():
        return 0.0
    first = float((work / f"{system}.first").read_text())
    return (int(env["BENCH_TOTAL"]) - 1) / max(1e-9, float(last.read_text()) - first)


def bench_conveyor_tasks(node_port: int, work: Path, total: int) -> float:
    from conveyor.client import Client
    from conveyor.worker.tasks import encode_call

    body = encode_call("noop", [], {})
    with Client([f"127.0.0.1:{node_port}"]) as client:
        for start in range(0, total, 5000):
            client.add_jobs("bench", [body] * min(5000, total - start), retry=60)
    nodes = f"127.0.0.1:{node_port}"
    env = _env("conveyor", work, total, BENCH_NODES=nodes)
    command = [sys.executable, "-m", "conveyor.cli", "worker", "--nodes", nodes]
    command += ["--app", "bench.workers_bench:conveyor_app", "--batch", "500"]
    return _run_worker("conveyor", command, env, work, 120)


def bench_dramatiq(redis_url: str, work: Path, total: int) -> float:
    env = _env("dramatiq", work, total, BENCH_REDIS=redis_url)
    _fill(env, "dramatiq", total)
    command = [sys.executable, "-m", "dramatiq", "bench.workers_bench", "--processes", "1"]
    command += ["--threads", "8"]
    return _run_worker("dramatiq", command, env, work, 120)


def bench_celery(redis_url: str, work: Path, total: int) -> float:
    env = _env("celery", work, total, BENCH_REDIS=redis_url)
    _fill(env, "celery", total)
    command = [sys.executable, "-m", "celery", "-A", "bench.workers_bench:celery_app", "worker"]
    command += ["--pool", "solo", "--without-gossip", "--without-mingle", "--without-heartbeat"]
    command += ["--loglevel", "WARNING"]
    return _run_worker("celery", command, env, work, 120)


def _fill(env: dict[str, str], system: str, total: int) -> None:
    """Enqueue `total` no-op calls with the system's own client, in a child process."""
    code = (
        "import bench.workers_bench as b\n"
        f"send = b.{system}_noop.send if '{system}' == 'dramatiq' else b.{system}_noop.delay\n"
        f"for _ in range({total}): send()\n"
    )
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=ROOT, timeout=300)


def bench_rq(redis_url: str, work: Path, total: int, forking: bool) -> float:
    from rq import Queue, SimpleWorker, Worker

    connection = redis.Redis.from_url(redis_url)
    queue = Queue("bench", connection=connection)
    os.environ.update(_env("rq", work, total))
    with connection.pipeline() as pipe:
        for _ in range(total):
            queue.enqueue("bench.workers_bench.noop_rq", pipeline=pipe)
        pipe.execute()
    worker = (Worker if forking else SimpleWorker)([queue], connection=connection)
    started = time.perf_counter()
    worker.work(burst=True, logging_level="WARNING")
    return total / (time.perf_counter() - started)


def bench_scripts(node_port: int, work: Path, total: int, script: str, prefix: str) -> float:
    """Queue-script runs per second: `total` messages, one worker process, 4 slots."""
    from conveyor.client import Client
    from conveyor.worker.envelope import Envelope

    queue_dir = work / f"scripts{_free_port()}"
    name = queue_dir.name
    queue_dir.mkdir()
    config = {"name": name, "script": script, "num_workers": 4, "exec_prefix": prefix}
    (queue_dir / "config.json").write_text(json.dumps(config))
    with Client([f"127.0.0.1:{node_port}"]) as client:
        client.add_jobs(name, [Envelope().to_json()] * total, retry=60)
    command = [sys.executable, "-m", "conveyor.cli", "worker", str(queue_dir)]
    command += ["--nodes", f"127.0.0.1:{node_port}"]
    log = open(work / f"{name}.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)

    def settled() -> int:
        return sum(
            len(os.listdir(queue_dir / s)) for s in ("done", "err") if (queue_dir / s).is_dir()
        )

    try:
        first_at, first_count = _wait_until(lambda: settled() > 0, settled, 60)
        end_at, end_count = _wait_until(lambda: settled() >= total, settled, 120)
    finally:
        process.terminate()
        process.wait(15)
        log.close()
    return (end_count - first_count) / max(1e-9, end_at - first_at)


def _wait_until(
    done: Callable[[], bool], count: Callable[[], int], limit_s: float
) -> tuple[float, int]:
    deadline = time.monotonic() + limit_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.02)
    return time.monotonic(), count()


def _verdict(ratio: float) -> str:
    return f"target >= 10x: {'met' if ratio >= 10 else 'missed'}"


def _row(label: str, rate: float, note: str = "") -> None:
    print(f"| {label:<46} | {rate:>10,.0f} | {note} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000, help="no-op Conveyor tasks")
    parser.add_argument("--others", type=int, default=20_000, help="jobs for Dramatiq/Celery/rq")
    parser.add_argument("--scripts", type=int, default=2_000, help="queue-script runs")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="workers_bench."))
    node_port, redis_port = _free_port(), _free_port()
    node_command = [sys.executable, "-m", "conveyor.cli", "server", "--port", str(node_port)]
    node = _start([*node_command, "--dir", str(work / "node")], node_port, work / "node.log")
    redis_binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    redis_command = [redis_binary, "--port", str(redis_port), "--bind", "127.0.0.1"]
    redis_command += ["--save", "", "--appendonly", "no"]
    server = _start(redis_command, redis_port, work / "redis.log")
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    results: dict[str, Any] = {}
    try:
        print(f"# workers bench: {os.cpu_count()} CPUs, work dir {work}\n")
        print("| system (one worker process) | jobs/s | notes |\n|---|---:|---|")
        results["conveyor"] = bench_conveyor_tasks(node_port, work, args.tasks)
        _row(
            "conveyor worker --app (batch 500, 1 thread)",
            results["conveyor"],
            f"{args.tasks:,} tasks",
        )
        results["dramatiq"] = bench_dramatiq(redis_url, work, args.others)
        _row("Dramatiq (redis, 1 process, 8 threads)", results["dramatiq"])
        results["celery"] = bench_celery(redis_url, work, args.others)
        _row("Celery (redis, solo pool, prefetch 128)", results["celery"])
        results["rq_simple"] = bench_rq(redis_url, work, args.others // 4, forking=False)
        _row("python-rq SimpleWorker (burst)", results["rq_simple"])
        results["rq_fork"] = bench_rq(redis_url, work, min(500, args.others), forking=True)
        _row("python-rq Worker, forking (burst)", results["rq_fork"], "one fork per job")
        results["scripts_true"] = bench_scripts(node_port, work, args.scripts, "/bin/true", "")
        _row(
            "queue script /bin/true, num_workers 4",
            results["scripts_true"],
            "ends in err: no status",
        )
        sh = work / "done.sh"
        sh.write_text('echo "done ok" >&$RQ_WRITE\n')
        results["scripts_sh"] = bench_scripts(node_port, work, args.scripts, str(sh), "sh")
        _row("queue script `sh` reporting done, num_workers 4", results["scripts_sh"])
    finally:
        node.terminate()
        server.terminate()
        node.wait(15)
        server.wait(15)
    tasks_x = results["conveyor"] / max(1e-9, results["dramatiq"])
    scripts_x = results["scripts_true"] / max(1e-9, results["rq_fork"])
    print(f"\nPython tasks vs Dramatiq: {tasks_x:.1f}x ({_verdict(tasks_x)})")
    print(f"/bin/true scripts vs python-rq forking: {scripts_x:.1f}x ({_verdict(scripts_x)})")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
