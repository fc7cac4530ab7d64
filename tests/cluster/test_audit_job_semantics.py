"""Job semantics across real nodes found by the cluster audit: acks racing replication.

Each test forms a small cluster of `conveyor server` processes on 127.0.0.1 and checks
what the nodes say (replies, SHOW, INFO). C Disque 1.0-rc1 behaves as asserted.
"""

from __future__ import annotations

import threading
from pathlib import Path

import redis

from tests.cluster.test_cluster_nodes import form, wait_for
from tests.servers import NodeProcess


def blocked_clients(node: NodeProcess) -> int:
    return int(node.client().info("clients")["blocked_clients"])


def held_copy(holder: redis.Redis) -> bytes:
    """The ID of the copy of queue q's job that `holder` (node 1) gets, once it has it."""
    copies: list[bytes] = []

    def seen() -> bool:
        copies[:] = holder.execute_command("JSCAN", "QUEUE", "q")[1]
        return bool(copies)

    wait_for(seen, "node 1 holds its copy")
    return copies[0]


def test_a_job_acked_elsewhere_while_waiting_for_copies_is_not_delivered(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    """ADDJOB on node 0 waits for its third copy (node 2's queue is paused in); a client
    acks the copy node 1 holds. Node 0 answers the producer and acks the job: the
    consumer blocked on node 0 must not get it (Disque acks before serving waiters)."""
    form(tmp_path, cluster, 3)
    origin, holder, refusing = (node.client() for node in cluster)
    assert refusing.execute_command("PAUSE", "q", "in") == b"in"  # takes no copy: no GOTJOB
    got: list[object] = []
    consumer = threading.Thread(
        target=lambda: got.append(
            cluster[0].client().execute_command("GETJOB", "TIMEOUT", "1000", "FROM", "q")
        )
    )
    consumer.start()
    wait_for(lambda: blocked_clients(cluster[0]) == 1, "the consumer blocks on node 0")
    added: list[object] = []
    producer = threading.Thread(
        target=lambda: added.append(
            cluster[0].client().execute_command("ADDJOB", "q", "body", "5000", "REPLICATE", "3")
        )
    )
    producer.start()
    copy = held_copy(holder)
    assert holder.execute_command("ACKJOB", copy) == 1
    producer.join(10)
    consumer.join(10)
    assert added == [copy]  # the producer is answered: acked counts as replicated
    assert got == [None]  # the consumer timed out: an acked job is never handed out
    shown = origin.execute_command("SHOW", copy)
    assert shown is None or shown[5] == b"acked"  # acked, or collected already
    assert origin.execute_command("QLEN", "q") == 0


def test_fastack_of_a_copy_while_its_addjob_waits_removes_the_job(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    """FASTACK on node 1 (it holds a copy) of a job whose ADDJOB on node 0 still waits for
    node 2: its DELJOB deletes the job on node 0 too and the producer gets Disque's
    NOREPL at once, rather than the job being queued later (or NOREPL at the timeout)."""
    form(tmp_path, cluster, 3)
    holder, refusing = cluster[1].client(), cluster[2].client()
    assert refusing.execute_command("PAUSE", "q", "in") == b"in"
    added: list[object] = []

    def produce() -> None:
        try:
            added.append(cluster[0].client().execute_command(
                "ADDJOB", "q", "body", "5000", "REPLICATE", "3"
            ))  # fmt: skip
        except redis.ResponseError as error:
            added.append(error)

    producer = threading.Thread(target=produce)
    producer.start()
    copy = held_copy(holder)
    assert holder.execute_command("FASTACK", copy) == 1
    producer.join(10)
    assert len(added) == 1 and "NOREPL job removed" in str(added[0])
    assert [node.client().execute_command("SHOW", copy) for node in cluster] == [None] * 3
