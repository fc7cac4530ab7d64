"""Operating a cluster, on real processes: graceful leave (a leaving node hands its queued
jobs over), `conveyor cluster drain` / `status`, and PAUSE ... BCAST."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.cluster.test_cluster_nodes import form, start, view, wait_for
from tests.servers import NodeProcess


def qlen(node: NodeProcess, queue: str = "q") -> int:
    return int(node.client().execute_command("QLEN", queue))


def conveyor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conveyor.cli", *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_a_leaving_node_hands_its_queued_jobs_to_the_others(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 3)
    leaving = cluster[0]
    client = leaving.client()
    ids = [client.execute_command("ADDJOB", "q", f"j{n}", "0", "REPLICATE", "1", "RETRY", "60")
           for n in range(250)]  # fmt: skip
    assert qlen(leaving) == 250
    assert client.execute_command("CLUSTER", "LEAVING", "yes") == b"OK"
    wait_for(lambda: qlen(leaving) == 0 and qlen(cluster[1]) + qlen(cluster[2]) == 250,
             "250 queued jobs moved to the two other nodes")  # fmt: skip
    # Nothing to give, and no blocking there (as Disque): consumers must move.
    with pytest.raises(redis.ResponseError, match=r"^LEAVING"):
        client.execute_command("GETJOB", "TIMEOUT", "100", "FROM", "q")
    # Consumed and acked elsewhere, they leave the leaving node too (it kept a copy).
    for node in cluster[1:]:
        consumer = node.client()
        jobs = consumer.execute_command("GETJOB", "NOHANG", "COUNT", "300", "FROM", "q") or []
        if jobs:
            consumer.execute_command("ACKJOB", *(job[1] for job in jobs))
    wait_for(lambda: client.execute_command("JSCAN", "COUNT", "1000")[1] == [],
             "the leaving node holds no job once they are acked")  # fmt: skip
    assert len(set(ids)) == 250
    # Every other node sees it leaving (gossip, header flags).
    wait_for(lambda: view(cluster[1])[leaving.port] == "leaving", "the flag propagated")
    _, _, *nodes = cluster[1].client().execute_command("HELLO")
    priorities = {int(port): int(priority) for _, _, port, priority in nodes}
    assert priorities[leaving.port] == 100 and priorities[cluster[2].port] == 1


def test_a_node_restarted_while_leaving_is_still_leaving(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    """As in Disque, the flag is in nodes.conf: a node restarted mid-drain goes on."""
    form(tmp_path, cluster, 3)
    leaving = cluster[2]
    assert leaving.client().execute_command("CLUSTER", "LEAVING", "yes") == b"OK"
    port = leaving.port
    leaving.stop()
    cluster[2] = leaving = start(tmp_path, 2, port)
    client = leaving.client()
    assert client.execute_command("CLUSTER", "LEAVING") == b"yes"
    assert "myself,leaving" in client.execute_command("CLUSTER", "NODES").decode()
    with pytest.raises(redis.ResponseError, match=r"^LEAVING"):
        client.execute_command("GETJOB", "TIMEOUT", "100", "FROM", "q")
    # New jobs go to the other nodes (external replication), none stays here.
    job_id = client.execute_command("ADDJOB", "q", "x", "0", "REPLICATE", "1")
    assert client.execute_command("SHOW", job_id) is None
    wait_for(lambda: view(cluster[0])[port].startswith("leaving"), "the others see it leaving")
    assert client.execute_command("CLUSTER", "LEAVING", "no") == b"OK"
    leaving.stop()
    cluster[2] = start(tmp_path, 2, port)
    assert cluster[2].client().execute_command("CLUSTER", "LEAVING") == b"no"


def test_drain_waits_until_no_queued_job_is_left(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 2)
    for n in range(20):
        cluster[0].client().execute_command("ADDJOB", "q", f"j{n}", "0", "REPLICATE", "1")
    drained = conveyor("cluster", "drain", f"127.0.0.1:{cluster[0].port}", "--timeout", "60")
    print(drained.stdout)
    assert drained.returncode == 0, drained.stderr
    assert "holds no queued job" in drained.stdout
    assert qlen(cluster[0]) == 0 and qlen(cluster[1]) == 20
    status = conveyor("cluster", "status", f"127.0.0.1:{cluster[1].port}")
    print(status.stdout)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert len(lines) == 3  # the header and both nodes
    assert any("leaving" in line and f":{cluster[0].port}" in line for line in lines)
    bad = conveyor("cluster", "drain", "127.0.0.1:1", "--timeout", "1")
    assert bad.returncode == 1 and "127.0.0.1:1" in bad.stderr


def pause_state(node: NodeProcess, queue: str = "q") -> bytes:
    return node.client().execute_command("PAUSE", queue, "state")


def test_pause_bcast_reaches_every_node(tmp_path: Path, cluster: list[NodeProcess]) -> None:
    form(tmp_path, cluster, 3)
    assert cluster[0].client().execute_command("PAUSE", "q", "in", "bcast") == b"in"
    wait_for(lambda: [pause_state(n) for n in cluster] == [b"in"] * 3, "paused in everywhere")
    with pytest.raises(redis.ResponseError, match=r"^PAUSED"):
        cluster[2].client().execute_command("ADDJOB", "q", "x", "0", "REPLICATE", "1")
    # Without BCAST only the node asked changes.
    assert cluster[1].client().execute_command("PAUSE", "q", "all") == b"all"
    assert [pause_state(n) for n in cluster] == [b"in", b"all", b"in"]
    assert cluster[1].client().execute_command("PAUSE", "q", "none", "bcast") == b"none"
    wait_for(lambda: [pause_state(n) for n in cluster] == [b"none"] * 3, "resumed everywhere")
    # Clearing flags does not make the queue on nodes that never had it (as Disque).
    cluster[0].client().execute_command("PAUSE", "other", "none", "bcast")
    cluster[0].client().execute_command("PAUSE", "q", "out", "bcast")  # arrives after it
    wait_for(lambda: pause_state(cluster[2]) == b"out", "the second broadcast arrived")
    assert cluster[2].client().execute_command("QSCAN", "BUSYLOOP")[1] == [b"q"]
