"""Requeue across holders on real processes: once, not everywhere; never for RETRY 0; by a
holder when the queueing node is gone; never while WORKING; NACK counted everywhere."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from tests.cluster.test_cluster_nodes import form, wait_for
from tests.cluster.test_replication import kill, show
from tests.servers import NodeProcess


def queued_copies(nodes: list[NodeProcess], queue: str = "q") -> int:
    return sum(n.client().execute_command("QLEN", queue) for n in nodes if n.alive())


def watch_queued(nodes: list[NodeProcess], seconds: float) -> int:
    """The most copies queued at once, sampled over `seconds`."""
    most = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        most = max(most, queued_copies(nodes))
        time.sleep(0.02)
    return most


def test_consumed_but_unacked_is_requeued_once(tmp_path: Path, cluster: list[NodeProcess]) -> None:
    form(tmp_path, cluster, 3)
    client = cluster[0].client()
    job_id = client.execute_command("ADDJOB", "q", "x", "5000", "REPLICATE", "3", "RETRY", "1")
    assert client.execute_command("GETJOB", "FROM", "q")[0][1] == job_id
    wait_for(lambda: queued_copies(cluster) == 1, "requeued after RETRY 1")
    # Three RETRY periods later still one queued copy in the whole cluster.
    assert watch_queued(cluster, 3.0) == 1
    counters = [show(node, job_id)[b"additional-deliveries"] for node in cluster]  # type: ignore[index]
    print("additional-deliveries per node:", counters)
    assert max(counters) >= 1


def test_retry_0_is_never_requeued(tmp_path: Path, cluster: list[NodeProcess]) -> None:
    form(tmp_path, cluster, 3)
    client = cluster[0].client()
    with pytest.raises(redis.ResponseError, match="With RETRY set to 0"):
        client.execute_command("ADDJOB", "q", "x", "0", "REPLICATE", "3", "RETRY", "0")
    job_id = client.execute_command("ADDJOB", "q", "x", "0", "REPLICATE", "1", "RETRY", "0")
    assert client.execute_command("GETJOB", "FROM", "q")[0][1] == job_id
    assert watch_queued(cluster, 2.5) == 0


def test_a_holder_requeues_when_the_queueing_node_is_gone(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 3)
    job_id = (
        cluster[0]
        .client()
        .execute_command("ADDJOB", "q", "x", "5000", "REPLICATE", "3", "RETRY", "1")
    )
    kill(cluster[0])
    survivors = cluster[1:]
    wait_for(lambda: queued_copies(survivors) >= 1, "a surviving holder queued it")
    assert watch_queued(survivors, 2.5) == 1  # one of the two, not both
    holder = next(n for n in survivors if n.client().execute_command("QLEN", "q"))
    assert holder.client().execute_command("GETJOB", "FROM", "q")[0][1] == job_id


def test_working_prevents_requeue(tmp_path: Path, cluster: list[NodeProcess]) -> None:
    form(tmp_path, cluster, 3)
    client = cluster[0].client()
    job_id = client.execute_command("ADDJOB", "q", "x", "5000", "REPLICATE", "3", "RETRY", "2")
    assert client.execute_command("GETJOB", "FROM", "q")[0][1] == job_id
    most = 0
    for _ in range(5):  # 5 s of work, 2.5 RETRY periods, WORKING every second
        assert client.execute_command("WORKING", job_id) == 2
        most = max(most, watch_queued(cluster, 1.0))
    assert most == 0
    assert client.execute_command("ACKJOB", job_id) == 1


def test_nack_requeues_at_once_with_the_counters(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 3)
    client = cluster[0].client()
    job_id = client.execute_command("ADDJOB", "q", "x", "5000", "REPLICATE", "3", "RETRY", "60")
    assert client.execute_command("GETJOB", "FROM", "q")[0][1] == job_id
    assert client.execute_command("NACK", job_id) == 1
    assert client.execute_command("QLEN", "q") == 1  # at once, not after RETRY

    def counted_everywhere() -> bool:
        return all(show(node, job_id)[b"nacks"] == 1 for node in cluster)  # type: ignore[index]

    wait_for(counted_everywhere, "nacks = 1 on all three holders")
    assert queued_copies(cluster) == 1
