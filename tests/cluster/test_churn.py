"""A node that runs for months while the cluster around it changes: what peers that come
and go leave behind on it must not change how it works, nor grow without bound.

Real `conveyor server` processes on 127.0.0.1 (test_cluster_nodes' helpers).
"""

from __future__ import annotations

from pathlib import Path

from tests.cluster.test_cluster_nodes import form, start, wait_for
from tests.servers import NodeProcess


def _cluster_info(node: NodeProcess) -> dict[str, str]:
    text = node.client().execute_command("CLUSTER", "INFO").decode()
    return dict(line.split(":", 1) for line in text.split())


def test_a_peer_back_under_a_new_name_leaves_a_noaddr_entry_that_is_not_counted(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    # A peer whose nodes.conf is lost comes back at its address under a new name: its old
    # name stays known, flagged noaddr, as in Disque. Counted in the cluster's size and
    # among the reachable nodes, every such restart raised the default REPLICATE and
    # the FAIL majority for good, and sent copies to no one.
    form(tmp_path, cluster, 2)
    survivor, port = cluster[0], cluster[1].port

    def flags() -> list[str]:
        lines = survivor.client().execute_command("CLUSTER", "NODES").decode().splitlines()
        return sorted(line.split()[2] for line in lines)

    for restart in range(1, 3):
        cluster[1].stop()
        cluster[1] = start(tmp_path / f"fresh{restart}", 1, port)
        cluster[1].client().execute_command("CLUSTER", "MEET", "127.0.0.1", survivor.port)
        expected = ["myself", *["noaddr"] * restart, "noflags"]
        wait_for(lambda e=expected: flags() == e, f"{restart} old name(s) noaddr on the survivor")
    info = _cluster_info(survivor)
    assert (info["cluster_known_nodes"], info["cluster_size"]) == ("4", "2")
    assert info["cluster_reachable_nodes"] == "1"
    # The default replication level is min(3, size): 2 here, both copies made.
    client = survivor.client()
    job_id = client.execute_command("ADDJOB", "q", "body", "2000")
    show = client.execute_command("SHOW", job_id)
    assert show[show.index(b"repl") + 1] == 2


UNKNOWN = b"D-dcb833cf-8YL1NT17e9+wsA/09NqxscQI-05a1"  # odd TTL digits: a dummy ack


def test_a_noaddr_name_neither_keeps_dummy_acks_nor_is_offered_by_hello(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    # A dummy ack goes once every node said it does not know the job. A noaddr name
    # never answers: counted among those nodes, it kept every dummy ack to its TTL (a
    # day here) and its SETACK rounds going. And HELLO ranked it 5, before failing
    # nodes, though it has no address to connect to.
    form(tmp_path, cluster, 2)
    survivor, port = cluster[0], cluster[1].port
    old_name = cluster[1].client().execute_command("CLUSTER", "MYID")
    cluster[1].stop()
    cluster[1] = start(tmp_path / "fresh", 1, port)
    cluster[1].client().execute_command("CLUSTER", "MEET", "127.0.0.1", survivor.port)

    def healthy_beside_noaddr() -> bool:
        lines = survivor.client().execute_command("CLUSTER", "NODES").decode().splitlines()
        return sorted(line.split()[2] for line in lines) == ["myself", "noaddr", "noflags"]

    wait_for(healthy_beside_noaddr, "the old name noaddr, the new one up")
    client = survivor.client()
    priorities = {entry[0]: int(entry[3]) for entry in client.execute_command("HELLO")[2:]}
    assert priorities[old_name] == 100
    assert sorted(priorities.values()) == [1, 1, 100]
    assert client.execute_command("ACKJOB", UNKNOWN) == 0
    wait_for(
        lambda: client.execute_command("SHOW", UNKNOWN) is None,
        "the dummy ack gone once the live node answered",
        deadline_s=10.0,
    )
