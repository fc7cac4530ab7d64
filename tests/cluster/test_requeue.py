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
    return watch(nodes, seconds)[0]


# Two holders can queue the same job at once (both RETRY timers firing while their
# WILLQUEUEs cross, or are slow under load); QUEUED's node-ID tie-break then dequeues one
# within a round trip. What must never be is a second copy that stays queued.
MAX_DOUBLE_S = 0.5


def watch(nodes: list[NodeProcess], seconds: float) -> tuple[int, float]:
    """(most copies queued at once, longest time more than one stayed queued)."""
    most, longest, since = 0, 0.0, None
    deadline = time.monotonic() + seconds
    while (now := time.monotonic()) < deadline:
        copies = queued_copies(nodes)
        most = max(most, copies)
        if copies > 1:
            since = now if since is None else since
            longest = max(longest, now - since)
        else:
            since = None
        time.sleep(0.02)
    return most, longest


def requeued_once(nodes: list[NodeProcess], seconds: float) -> None:
    """Over `seconds`: the job stays queued, and a second queued copy never lasts."""
    most, longest = watch(nodes, seconds)
    print(f"most copies queued at once: {most}; a second one lasted {longest:.2f} s at most")
    assert most >= 1 and longest < MAX_DOUBLE_S
    wait_for(lambda: queued_copies(nodes) == 1, "one queued copy", deadline_s=MAX_DOUBLE_S * 2)


def test_consumed_but_unacked_is_requeued_once(tmp_path: Path, cluster: list[NodeProcess]) -> None:
    form(tmp_path, cluster, 3)
    client = cluster[0].client()
    job_id = client.execute_command("ADDJOB", "q", "x", "5000", "REPLICATE", "3", "RETRY", "1")
    assert client.execute_command("GETJOB", "FROM", "q")[0][1] == job_id
    wait_for(lambda: queued_copies(cluster) == 1, "requeued after RETRY 1")
    # Three RETRY periods later still one queued copy in the whole cluster.
    requeued_once(cluster, 3.0)
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
    requeued_once(survivors, 2.5)  # one of the two, not both
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
