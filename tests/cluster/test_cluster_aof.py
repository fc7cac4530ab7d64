"""With AOF, jobs replicated to N nodes are delivered after every node restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.test_cluster_nodes import all_healthy, form, start, wait_for
from tests.servers import NodeProcess

JOBS = 30


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_replicated_jobs_survive_a_restart_of_every_node(
    tmp_path: Path, cluster: list[NodeProcess], how: str
) -> None:
    extra = ("--appendonly", "yes", "--appendfsync", "always")
    form(tmp_path, cluster, 3, *extra)
    added = set()
    for index in range(JOBS):
        origin = cluster[index % 3].client()
        added.add(origin.execute_command("ADDJOB", "q", f"job{index}", "5000",
                                         "REPLICATE", "3", "RETRY", "1"))  # fmt: skip
    ports = [node.port for node in cluster]
    for node in cluster:
        if how == "sigkill":
            node.process.kill()
        node.stop()
    cluster[:] = [start(tmp_path, index, port, *extra) for index, port in enumerate(ports)]
    wait_for(lambda: all_healthy(cluster), "the three nodes rejoined from nodes.conf")
    delivered: list[bytes] = []

    def drain() -> bool:
        for node in cluster:
            reply = node.client().execute_command("GETJOB", "NOHANG", "COUNT", "100", "FROM", "q")
            for _, job_id, _ in reply or ():
                delivered.append(job_id)
                node.client().execute_command("ACKJOB", job_id)
        return added <= set(delivered)

    wait_for(drain, f"all {JOBS} jobs delivered after the restart ({how})")
    duplicates = len(delivered) - len(set(delivered))
    print(f"{how}: {len(set(delivered))} of {JOBS} delivered, {duplicates} delivered twice")
    assert set(delivered) == added
