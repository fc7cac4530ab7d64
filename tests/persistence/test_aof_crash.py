"""Crash safety with `appendfsync always`: a producer adds jobs as fast as it can and
logs every ID it was given; the node is killed with SIGKILL at a random moment, 20
times; after each restart every logged ID must be held (an acknowledged job is on disk).
"""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.persistence.helpers import held_ids
from tests.servers import NodeProcess

KILLS = 20
PIPELINE = 16


def produce(port: int, given: list[bytes], stop: threading.Event) -> None:
    # No retries: redis-py would reconnect to the next node for seconds after the kill.
    client = redis.Redis(
        host="127.0.0.1", port=port, protocol=2, socket_timeout=10, retry=Retry(NoBackoff(), 0)
    )
    for round_number in range(100_000):  # bounded: the kill ends it long before
        if stop.is_set():
            return
        pipe = client.pipeline(transaction=False)
        for n in range(PIPELINE):
            pipe.execute_command("ADDJOB", "q", f"job {round_number}.{n}", 0)
        try:
            replies = pipe.execute()
        except (redis.ConnectionError, redis.TimeoutError):
            return  # killed mid-pipeline: the replies not received were never given
        given.extend(replies)


def test_no_acknowledged_job_is_lost_across_20_kills(tmp_path: Path) -> None:
    rand = random.Random(2026)
    args = ["--appendonly", "yes", "--appendfsync", "always"]
    given: list[bytes] = []
    for kill in range(KILLS):
        node = NodeProcess(tmp_path, *args)
        client = node.client()
        present = held_ids(client)
        missing = [job_id for job_id in given if job_id not in present]
        assert not missing, f"after kill {kill}: {len(missing)} of {len(given)} lost"
        stop = threading.Event()
        producer = threading.Thread(target=produce, args=(node.port, given, stop))
        producer.start()
        stop.wait(rand.uniform(0.05, 0.5))
        node.process.send_signal(signal.SIGKILL)
        node.process.wait(10)
        stop.set()
        producer.join(30)
        client.close()
        node.stop()
    node = NodeProcess(tmp_path, *args)
    try:
        present = held_ids(node.client())
        assert len(given) > KILLS * PIPELINE
        assert not [job_id for job_id in given if job_id not in present]
    finally:
        node.stop()


def wait_for_rewrite_progress(data_dir: Path, fraction: float) -> None:
    """Until the rewrite's temp file holds `fraction` of the live file's size."""
    target = (data_dir / "disque.aof").stat().st_size * fraction
    for _ in range(20_000):
        temp = list(data_dir.glob("temp-rewriteaof-*.aof"))
        try:
            if temp and temp[0].stat().st_size >= target:
                return
        except FileNotFoundError:  # renamed in place: the rewrite is over
            return
        time.sleep(0.0005)


def test_a_kill_during_a_rewrite_leaves_a_loadable_file(tmp_path: Path) -> None:
    rand = random.Random(11)
    args = ["--appendonly", "yes", "--appendfsync", "always"]
    node = NodeProcess(tmp_path, *args)
    try:
        pipe = node.client().pipeline(transaction=False)
        for n in range(100_000):
            pipe.execute_command("ADDJOB", "q", f"job {n}", 0)
        ids = set(pipe.execute())
    finally:
        node.stop()
    interrupted = 0
    for _ in range(5):
        node = NodeProcess(tmp_path, *args)
        client = node.client()
        assert held_ids(client) == ids
        client.execute_command("BGREWRITEAOF")
        # At a random point of the rewrite, whatever the machine's speed.
        wait_for_rewrite_progress(tmp_path, rand.uniform(0.05, 0.95))
        node.process.send_signal(signal.SIGKILL)
        node.process.wait(10)
        # A rewrite was cut short: its temp file is there, for the next start to remove.
        interrupted += bool(list(tmp_path.glob("temp-rewriteaof-*.aof")))
        client.close()
        node.stop()
    node = NodeProcess(tmp_path, *args)
    try:
        assert held_ids(node.client()) == ids
    finally:
        node.stop()
    assert interrupted >= 3, interrupted  # the kills did land inside rewrites
    assert not list(tmp_path.glob("temp-rewriteaof-*.aof"))
