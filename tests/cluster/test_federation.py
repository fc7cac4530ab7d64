"""Federation on real processes: jobs added on one node reach consumers blocked on another
(NEEDJOBS/YOURJOBS), with the import counters of QSTAT and QSCAN IMPORTRATE.

Times are printed, not asserted (bench/cluster_bench.py measures them); a GETJOB's own
TIMEOUT bounds each wait.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import redis

from tests.cluster.test_cluster_nodes import form, wait_for
from tests.cluster.test_replication import show
from tests.servers import NodeProcess


class BlockedGet:
    """A GETJOB blocked on `node` in a thread; `result` once answered."""

    def __init__(self, node: NodeProcess, *args: str) -> None:
        self.client = redis.Redis(port=node.port, protocol=2, socket_timeout=30)
        self.result: Any = None
        self.answered_at = 0.0
        self.thread = threading.Thread(target=self._run, args=args, daemon=True)
        self.thread.start()

    def _run(self, *args: str) -> None:
        self.result = self.client.execute_command("GETJOB", *args)
        self.answered_at = time.monotonic()

    def wait(self) -> Any:
        self.thread.join(30)
        assert not self.thread.is_alive()
        return self.result


def blocked_on(node: NodeProcess, queue: str) -> bool:
    reply = node.client().execute_command("QSTAT", queue)
    return reply is not None and dict(zip(reply[::2], reply[1::2], strict=True))[b"blocked"] > 0


def qstat(node: NodeProcess, queue: str) -> dict[bytes, Any]:
    reply = node.client().execute_command("QSTAT", queue)
    return dict(zip(reply[::2], reply[1::2], strict=True))


def myid(node: NodeProcess) -> bytes:
    return node.client().execute_command("CLUSTER", "MYID")


def test_a_job_added_on_one_node_reaches_a_consumer_blocked_on_another(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 3)
    producer, consumer = cluster[0], cluster[1]
    for round_ in range(3):  # cold (a broadcast finds the source), then warm
        get = BlockedGet(consumer, "TIMEOUT", "10000", "FROM", "q")
        wait_for(lambda: blocked_on(consumer, "q"), "the consumer blocked")
        if round_ == 0:
            time.sleep(2.5)  # past the first broadcast: the producer's node remembers
        added = time.monotonic()
        job_id = producer.client().execute_command(
            "ADDJOB", "q", f"r{round_}", "0", "REPLICATE", "1"
        )
        [[queue, got_id, body]] = get.wait()
        assert (queue, got_id, body) == (b"q", job_id, f"r{round_}".encode())
        print(f"round {round_}: added on A, received on B after "
              f"{(get.answered_at - added) * 1000:.1f} ms")  # fmt: skip
    stats = qstat(consumer, "q")
    assert stats[b"import-from"] == [myid(producer)]
    assert stats[b"import-rate"] >= 1
    scan = consumer.client().execute_command("QSCAN", "IMPORTRATE", "1")
    assert scan[1] == [b"q"]
    assert producer.client().execute_command("QSCAN", "IMPORTRATE", "1")[1] == []


def test_jobs_queued_before_the_consumer_came_are_moved_half_at_most(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 2)
    producer, consumer = cluster
    ids = [producer.client().execute_command("ADDJOB", "q", f"j{n}", "0", "REPLICATE", "1")
           for n in range(10)]  # fmt: skip
    [[_, got_id, _]] = BlockedGet(consumer, "TIMEOUT", "10000", "FROM", "q").wait()
    assert got_id in ids
    # The cluster-wide NEEDJOBS asks for one job: one moved, nine stay.
    assert producer.client().execute_command("QLEN", "q") == 9
    moved = show(producer, got_id)
    assert moved is not None and moved[b"state"] == b"active"  # a copy that may requeue
    # Acked on the consumer's node: gone from the producer's too (it is a holder).
    assert consumer.client().execute_command("ACKJOB", got_id) == 1
    wait_for(lambda: show(producer, got_id) is None, "the ack reached the producer's node")


def test_at_most_once_jobs_leave_no_copy_behind(tmp_path: Path, cluster: list[NodeProcess]) -> None:
    form(tmp_path, cluster, 2)
    producer, consumer = cluster
    get = BlockedGet(consumer, "TIMEOUT", "10000", "FROM", "q")
    wait_for(lambda: blocked_on(consumer, "q"), "the consumer blocked")
    job_id = producer.client().execute_command(
        "ADDJOB", "q", "x", "0", "REPLICATE", "1", "RETRY", "0"
    )
    assert get.wait()[0][1] == job_id
    assert show(producer, job_id) is None


def test_a_queue_paused_for_output_gives_nothing(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 2)
    producer, consumer = cluster
    producer.client().execute_command("PAUSE", "q", "out")
    first = producer.client().execute_command("ADDJOB", "q", "x", "0", "REPLICATE", "1")
    assert BlockedGet(consumer, "TIMEOUT", "2500", "FROM", "q").wait() is None
    assert producer.client().execute_command("QLEN", "q") == 1
    # Paused while the consumer waits, then resumed: the next job goes to it.
    get = BlockedGet(consumer, "TIMEOUT", "10000", "FROM", "q")
    wait_for(lambda: blocked_on(consumer, "q"), "the consumer blocked")
    producer.client().execute_command("PAUSE", "q", "none")
    producer.client().execute_command("ADDJOB", "q", "y", "0", "REPLICATE", "1")
    assert get.wait()[0][1] == first  # the older job first, as the queue orders them


def test_jobs_added_on_several_nodes_are_all_fetched_from_one(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 3)
    added = {
        node.client().execute_command("ADDJOB", "q", f"from {i}-{n}", "0", "REPLICATE", "1")
        for i, node in enumerate(cluster)
        for n in range(5)
    }
    consumer = cluster[0].client()
    got: set[bytes] = set()
    deadline = time.monotonic() + 30
    while got != added and time.monotonic() < deadline:
        jobs = consumer.execute_command("GETJOB", "TIMEOUT", "500", "COUNT", "15", "FROM", "q")
        for _, job_id, _ in jobs or []:
            got.add(job_id)
            consumer.execute_command("ACKJOB", job_id)
    assert got == added  # the 10 made on the two other nodes came to this one


def test_an_at_most_once_job_federates_once_only(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 3)
    producer, consumers = cluster[0], cluster[1:]
    gets = [BlockedGet(node, "TIMEOUT", "3000", "FROM", "q") for node in consumers]
    for node in consumers:
        wait_for(lambda: blocked_on(node, "q"), "both consumers blocked")  # noqa: B023
    job_id = producer.client().execute_command(
        "ADDJOB", "q", "once", "0", "REPLICATE", "1", "RETRY", "0"
    )
    results = [get.wait() for get in gets]
    received = [r for r in results if r]
    assert received == [[[b"q", job_id, b"once"]]]  # one consumer, once
    assert show(producer, job_id) is None  # no copy left behind to come back
