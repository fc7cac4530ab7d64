"""Replication and acks in clusters mixing Conveyor and C Disque nodes (needs env
DISQUE_SERVER): a job added on either kind is copied to both, delivered, and once acked
on the other kind it leaves every node."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.disque import DisqueProcess, needs_disque
from tests.cluster.test_cluster_nodes import NODE_TIMEOUT_MS, all_healthy, start, wait_for
from tests.servers import NodeProcess

pytestmark = needs_disque
Node = NodeProcess | DisqueProcess


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[Node]]:
    started: list[Node] = []
    yield started
    for node in started:
        node.stop()


def mixed(tmp_path: Path, nodes: list[Node], kinds: str) -> None:
    for index, kind in enumerate(kinds):
        if kind == "C":
            nodes.append(start(tmp_path, index))
        else:
            nodes.append(DisqueProcess(tmp_path / f"disque{index}", "--cluster-node-timeout",
                                       str(NODE_TIMEOUT_MS)))  # fmt: skip
    for node in nodes[1:]:
        node.client().execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[0].port)
    wait_for(lambda: all_healthy(nodes), f"{kinds} formed")  # type: ignore[arg-type]

    def reachable_everywhere() -> bool:  # Disque counts reachable nodes in its cron
        infos = [node.client().execute_command("CLUSTER", "INFO").decode() for node in nodes]
        return all(f"cluster_reachable_nodes:{len(kinds) - 1}\r\n" in info for info in infos)

    wait_for(reachable_everywhere, "every node reaches the others")


def states(nodes: list[Node], job_id: bytes) -> list[bytes | None]:
    result: list[bytes | None] = []
    for node in nodes:
        reply = node.client().execute_command("SHOW", job_id)
        result.append(
            None if reply is None else dict(zip(reply[::2], reply[1::2], strict=True))[b"state"]
        )
    return result


@pytest.mark.parametrize("kinds", ["CCD", "CDD"])
def test_jobs_added_on_either_kind_replicate_deliver_and_ack(
    tmp_path: Path, nodes: list[Node], kinds: str
) -> None:
    mixed(tmp_path, nodes, kinds)
    conveyor = kinds.index("C")
    disque = kinds.index("D")
    for origin, acker in ((conveyor, disque), (disque, conveyor)):
        client = nodes[origin].client()
        job_id = client.execute_command("ADDJOB", "q", f"from {origin}", "5000", "REPLICATE", "3")
        held = states(nodes, job_id)
        assert held[origin] == b"queued"
        assert sorted(s for i, s in enumerate(held) if i != origin) == [b"active", b"active"]  # type: ignore[type-var]
        [[_, got, body]] = client.execute_command("GETJOB", "NOHANG", "FROM", "q")
        assert (got, body) == (job_id, f"from {origin}".encode())
        assert nodes[acker].client().execute_command("ACKJOB", job_id) == 1
        wait_for(lambda: states(nodes, job_id) == [None] * 3,  # noqa: B023
                 f"acked on {kinds[acker]}: gone from all three")  # fmt: skip


def test_async_and_fastack_across_kinds(tmp_path: Path, nodes: list[Node]) -> None:
    mixed(tmp_path, nodes, "CDC")
    job_id = nodes[1].client().execute_command("ADDJOB", "q", "x", "0", "REPLICATE", "3", "ASYNC")
    wait_for(lambda: None not in states(nodes, job_id), "Disque's async copies on both Conveyors")
    assert nodes[0].client().execute_command("FASTACK", job_id) == 1
    wait_for(lambda: states(nodes, job_id) == [None] * 3, "FASTACK on Conveyor reached Disque")


@pytest.mark.parametrize("kinds", ["CDD", "DCC"])
def test_external_replication_across_kinds(tmp_path: Path, nodes: list[Node], kinds: str) -> None:
    """The first node, above 75 % of its maxmemory, keeps no copy: the two of the other
    kind hold it, and its ENQUEUE has one of them queue it."""
    mixed(tmp_path, nodes, kinds)
    origin = nodes[0].client()
    used = int(origin.info("memory")["used_memory"])
    origin.config_set("maxmemory", str(used * 100 // 85))
    job_id = origin.execute_command("ADDJOB", "q", "x", "5000", "REPLICATE", "2")
    wait_for(lambda: sorted(map(str, states(nodes, job_id))) == ["None", "b'active'", "b'queued'"],
             f"held by the two {kinds[1]} nodes, queued on one")  # fmt: skip
    assert states(nodes, job_id)[0] is None


@pytest.mark.parametrize("kinds", ["CD", "DC"])
def test_federation_across_kinds(tmp_path: Path, nodes: list[Node], kinds: str) -> None:
    """A consumer blocked on the second node gets jobs added on the first, of the other
    kind (NEEDJOBS/YOURJOBS); C Disque asks from its cron, so this takes up to seconds."""
    from tests.cluster.test_federation import BlockedGet

    mixed(tmp_path, nodes, kinds)
    get = BlockedGet(nodes[1], "TIMEOUT", "20000", "FROM", "q")  # type: ignore[arg-type]
    time.sleep(0.5)
    job_id = nodes[0].client().execute_command("ADDJOB", "q", "x", "0", "REPLICATE", "1")
    assert get.wait() == [[b"q", job_id, b"x"]]


@pytest.mark.parametrize("kinds", ["CD", "DC"])
def test_pause_bcast_across_kinds(tmp_path: Path, nodes: list[Node], kinds: str) -> None:
    mixed(tmp_path, nodes, kinds)
    nodes[0].client().execute_command("PAUSE", "q", "all", "bcast")
    wait_for(lambda: nodes[1].client().execute_command("PAUSE", "q", "state") == b"all",
             f"{kinds[0]}'s PAUSE BCAST reached {kinds[1]}")  # fmt: skip
