"""Membership with C Disque in the cluster: mixed clusters form, and failures are seen
both ways (needs env DISQUE_SERVER)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.disque import DisqueProcess, needs_disque
from tests.cluster.test_cluster_nodes import NODE_TIMEOUT_MS, all_healthy, start, view, wait_for
from tests.servers import NodeProcess

pytestmark = needs_disque


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[NodeProcess | DisqueProcess]]:
    started: list[NodeProcess | DisqueProcess] = []
    yield started
    for node in started:
        node.stop()


def disque(tmp_path: Path, index: int) -> DisqueProcess:
    return DisqueProcess(
        tmp_path / f"disque{index}", "--cluster-node-timeout", str(NODE_TIMEOUT_MS)
    )


@pytest.mark.parametrize("kinds", ["CCD", "CDD"])
def test_mixed_cluster_forms_by_meeting_one_node(
    tmp_path: Path, nodes: list[NodeProcess | DisqueProcess], kinds: str
) -> None:
    for index, kind in enumerate(kinds):
        nodes.append(start(tmp_path, index) if kind == "C" else disque(tmp_path, index))
    # Meet the first node from the others: a Conveyor MEETs Disque and the other way round.
    for node in nodes[1:]:
        assert node.client().execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[0].port) == b"OK"
    wait_for(lambda: all_healthy(nodes), f"{kinds}: every node knows every other")  # type: ignore[arg-type]

    def sizes_agree() -> bool:  # Disque counts reachable nodes in its 10 Hz cron
        infos = [node.client().execute_command("CLUSTER", "INFO").decode() for node in nodes]
        return all(
            "cluster_size:3\r\n" in i and "cluster_reachable_nodes:2\r\n" in i for i in infos
        )

    wait_for(sizes_agree, "CLUSTER INFO: size 3, 2 reachable, on every node")


def test_each_kind_sees_the_other_fail_and_come_back(
    tmp_path: Path, nodes: list[NodeProcess | DisqueProcess]
) -> None:
    nodes.extend([start(tmp_path, 0), disque(tmp_path, 1), start(tmp_path, 2), disque(tmp_path, 3)])
    for node in nodes[1:]:
        node.client().execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[0].port)
    wait_for(lambda: all_healthy(nodes), "2 + 2 nodes know each other")  # type: ignore[arg-type]
    # Kill one Conveyor and one Disque: 2 of 4 remain, the majority needs 3 reports, so the
    # two dead nodes stay PFAIL ("fail?") on both survivors, which is what Disque does too.
    victims = [nodes[2], nodes[3]]
    for victim in victims:
        victim.process.kill()
        victim.stop()
    ports = [victim.port for victim in victims]

    def pfail_everywhere() -> bool:
        return all(view(node)[port] in ("fail?", "fail") for node in nodes[:2] for port in ports)  # type: ignore[arg-type]

    wait_for(pfail_everywhere, "both survivors flag both dead nodes")
    nodes[2] = start(tmp_path, 2, ports[0])
    nodes[3] = DisqueProcess(
        tmp_path / "disque3", "--cluster-node-timeout", str(NODE_TIMEOUT_MS), port=ports[1]
    )
    wait_for(lambda: all_healthy(nodes), "all four healthy again")  # type: ignore[arg-type]
