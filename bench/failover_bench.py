"""Client failover: a producer and a consumer on `conveyor.client` over 3 local nodes; the
node each is attached to is killed (SIGKILL) while they run, and started again, empty,
3 s later.

The producer adds jobs with REPLICATE 3, RETRY 2 and counts those answered OK; an ADDJOB
that got no reply ("may or may not have been added") is counted apart and not sent again.
The consumer GETs, records and ACKs. After `--seconds` both stop, the survivors are
drained, and the bench prints jobs answered OK but never delivered (LOST, target 0), jobs
delivered more than once, and the errors each client saw and carried on from.

Figures are printed, never asserted; only 127.0.0.1; every loop is bounded in count and
time. Usage: python -m bench.failover_bench [--seconds S]
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter

from bench.cluster_bench import Node, cluster, conveyor_command
from conveyor.client import Client, ConnectionError, ReplyError
from conveyor.cluster.federation import BCAST_MAX_MS


class Run:
    def __init__(self, nodes: list[Node]) -> None:
        self.addresses = [f"127.0.0.1:{node.port}" for node in nodes]
        self.stop = threading.Event()
        self.answered: set[str] = set()
        self.maybe = 0
        self.deliveries: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.attached: dict[str, str | None] = {"producer": None, "consumer": None}

    def produce(self) -> None:
        with Client(self.addresses, socket_timeout=2) as client:
            n = 0
            while not self.stop.is_set() and n < 1_000_000:
                n += 1
                try:
                    self.answered.add(client.add_job("fo", f"job {n}", replicate=3, retry=2,
                                                     timeout_ms=1000))  # fmt: skip
                    self.attached["producer"] = client.address
                except ConnectionError as exc:
                    self.maybe += "may or may not" in str(exc)
                    self.errors[f"producer {type(exc).__name__}"] += 1
                    time.sleep(0.05)
                except ReplyError as exc:  # NOREPL while a node is being found down
                    self.errors[f"producer {exc.code}"] += 1
                    time.sleep(0.05)

    def consume(self, until: threading.Event) -> None:
        with Client(self.addresses, socket_timeout=2) as client:
            while not until.is_set():
                try:
                    jobs = client.get_jobs("fo", count=50, timeout_ms=200)
                    self.attached["consumer"] = client.address
                    if jobs:
                        self.deliveries.update(job.id for job in jobs)
                        client.ack(*jobs)
                except (ConnectionError, ReplyError) as exc:
                    self.errors[f"consumer {type(exc).__name__}"] += 1
                    time.sleep(0.05)


def kill_attached(nodes: list[Node], address: str | None, who: str, down_s: float) -> None:
    """SIGKILL the node `who` is attached to; start it again `down_s` later, empty (no
    AOF), so the cluster can hold REPLICATE 3 again for what follows."""
    for node in nodes:
        if address == f"127.0.0.1:{node.port}":
            print(f"  t+{time.monotonic() - START:.1f} s: SIGKILL {address} ({who} attached)")
            node.kill()
            time.sleep(down_s)
            node.start()
            print(f"  t+{time.monotonic() - START:.1f} s: {address} started again, empty")
            return
    print(f"  {who} attached to {address}: no such node")


START = time.monotonic()
DOWN_S = 3.0  # a killed node stays down this long (the node timeout is 2 s)
QUIET_S = BCAST_MAX_MS / 1000 + 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    global START
    with cluster(conveyor_command, 3) as nodes:
        run = Run(nodes)
        consuming = threading.Event()
        threads = [threading.Thread(target=run.produce),
                   threading.Thread(target=run.consume, args=(consuming,))]  # fmt: skip
        START = time.monotonic()
        for thread in threads:
            thread.start()
        time.sleep(args.seconds / 4)
        kill_attached(nodes, run.attached["producer"], "producer", DOWN_S)
        time.sleep(max(0.0, args.seconds / 4 - DOWN_S))
        kill_attached(nodes, run.attached["consumer"], "consumer", DOWN_S)
        time.sleep(max(0.0, args.seconds / 2 - DOWN_S))
        run.stop.set()
        threads[0].join(30)
        # Drain: the consumer goes on until nothing came for longer than RETRY 2 requeues
        # and federation's slowest cluster-wide ask (30 s apart): a job queued on a node
        # the consumer left is found by the next ask, not lost.
        quiet_since, deadline = time.monotonic(), time.monotonic() + 120
        while time.monotonic() - quiet_since < QUIET_S and time.monotonic() < deadline:
            before = sum(run.deliveries.values())
            time.sleep(0.5)
            if sum(run.deliveries.values()) != before:
                quiet_since = time.monotonic()
        consuming.set()
        threads[1].join(30)
    lost = run.answered - set(run.deliveries)
    twice = sum(1 for count in run.deliveries.values() if count > 1)
    print(f"client failover, {args.seconds:g} s, 3 nodes, REPLICATE 3, RETRY 2, the producer's "
          f"and the consumer's nodes killed:")  # fmt: skip
    print(f"  jobs answered OK: {len(run.answered):,}; 'may or may not have been added': "
          f"{run.maybe}; delivered: {len(run.deliveries):,} unique")  # fmt: skip
    print(f"  LOST (answered OK, never delivered): {len(lost)}")
    print(f"  delivered more than once: {twice} "
          f"({100 * twice / max(1, len(run.deliveries)):.2f}%)")  # fmt: skip
    print(f"  errors the clients carried on from: {dict(run.errors)}")


if __name__ == "__main__":
    main()
