"""External replication: a node above 75 % of maxmemory (or leaving) keeps no copy of the
jobs added to it, and takes no copy from others (Disque's memory warning level 1).

The warning is brought about by setting `maxmemory` so that what the node uses now is
85 % of it: between the 75 % warning and the 95 % where eviction and OOM begin.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from tests.cluster.test_cluster_nodes import form, wait_for
from tests.cluster.test_replication import holders, show
from tests.servers import NodeProcess


def warn(node: NodeProcess) -> None:
    client = node.client()
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", str(used * 100 // 85))


def queued_on(nodes: list[NodeProcess], job_id: bytes) -> list[int]:
    return [
        i for i, node in enumerate(nodes) if (show(node, job_id) or {}).get(b"state") == b"queued"
    ]


def test_a_node_under_memory_warning_keeps_no_copy(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 3)
    warn(cluster[0])
    client = cluster[0].client()
    job_id = client.execute_command("ADDJOB", "q", "body", "5000", "REPLICATE", "2")
    assert show(cluster[0], job_id) is None
    assert client.execute_command("QLEN", "q") == 0
    # Two copies elsewhere, and exactly one holder was told to queue it (ENQUEUE).
    assert holders(cluster, job_id) == 2
    wait_for(lambda: len(queued_on(cluster, job_id)) == 1, "the job queued on one holder")
    [queued_at] = queued_on(cluster, job_id)
    assert queued_at in (1, 2)
    consumer = cluster[queued_at].client()
    [[queue, got_id, body]] = consumer.execute_command("GETJOB", "FROM", "q")
    assert (queue, got_id, body) == (b"q", job_id, b"body")
    # Its nodes are the two holders only.
    names = {node.client().execute_command("CLUSTER", "MYID") for node in cluster[1:]}
    assert set(show(cluster[queued_at], job_id)[b"nodes-delivered"]) == names  # type: ignore[index]


def test_async_external_replication_hands_the_job_over(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 3)
    warn(cluster[0])
    job_id = (
        cluster[0].client().execute_command("ADDJOB", "q", "body", "0", "REPLICATE", "2", "ASYNC")
    )
    assert show(cluster[0], job_id) is None
    wait_for(lambda: holders(cluster, job_id) == 2, "two copies on the other nodes")
    wait_for(lambda: len(queued_on(cluster, job_id)) == 1, "the job queued on one holder")


def test_delay_travels_with_the_enqueue(tmp_path: Path, cluster: list[NodeProcess]) -> None:
    form(tmp_path, cluster, 3)
    warn(cluster[0])
    job_id = (
        cluster[0]
        .client()
        .execute_command(
            "ADDJOB", "q", "body", "5000", "REPLICATE", "2", "DELAY", "1", "RETRY", "30"
        )
    )
    assert holders(cluster, job_id) == 2
    # Not queued anywhere before its DELAY, then queued on exactly one holder.
    assert queued_on(cluster, job_id) == []
    wait_for(lambda: len(queued_on(cluster, job_id)) == 1, "queued after its DELAY")


def test_norepl_says_the_node_is_out_of_memory(tmp_path: Path, cluster: list[NodeProcess]) -> None:
    form(tmp_path, cluster, 3)
    warn(cluster[0])
    client = cluster[0].client()
    with pytest.raises(redis.ResponseError) as raised:
        client.execute_command("ADDJOB", "q", "x", "0", "REPLICATE", "3")
    assert str(raised.value) == (
        "NOREPL Not enough reachable nodes for the requested replication level, since I'm "
        "unable to hold a copy of the message for the following reason: I'm out of memory"
    )
    with pytest.raises(redis.ResponseError) as raised:
        client.execute_command("ADDJOB", "q", "x", "0", "REPLICATE", "4")
    assert str(raised.value) == (
        "NOREPL Not enough reachable nodes for the requested replication level"
    )
    assert client.execute_command("JSCAN", "COUNT", "100")[1] == []


def test_a_node_under_memory_warning_takes_no_copies(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 3)
    warn(cluster[2])
    client = cluster[0].client()
    # Three copies need the warned node too: it stays silent, the timeout ends it.
    with pytest.raises(redis.ResponseError, match="NOREPL Timeout reached"):
        client.execute_command("ADDJOB", "q", "x", "300", "REPLICATE", "3")
    assert cluster[2].client().execute_command("JSCAN", "COUNT", "100")[1] == []
    # Two copies do without it.
    job_id = client.execute_command("ADDJOB", "q", "y", "5000", "REPLICATE", "2")
    assert show(cluster[2], job_id) is None
    assert holders(cluster, job_id) == 2
    # Back under the warning level, it takes copies again.
    cluster[2].client().config_set("maxmemory", "0")
    job_id = client.execute_command("ADDJOB", "q", "z", "5000", "REPLICATE", "3")
    assert holders(cluster, job_id) == 3


def test_a_leaving_node_replicates_externally(tmp_path: Path, cluster: list[NodeProcess]) -> None:
    form(tmp_path, cluster, 3)
    client = cluster[0].client()
    assert client.execute_command("CLUSTER", "LEAVING", "yes") == b"OK"
    job_id = client.execute_command("ADDJOB", "q", "body", "5000", "REPLICATE", "2")
    assert show(cluster[0], job_id) is None
    assert holders(cluster, job_id) == 2
    wait_for(lambda: len(queued_on(cluster, job_id)) == 1, "the job queued on one holder")
    with pytest.raises(redis.ResponseError, match=r"^NOREPL .*I'm leaving the cluster$"):
        client.execute_command("ADDJOB", "q", "x", "0", "REPLICATE", "3")
