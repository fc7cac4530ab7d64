"""SHOW of a dummy ack, on real `conveyor server` processes, as C Disque shows one.

An ACKJOB of an ID the node never held (odd TTL digits: not at-most-once) leaves a dummy
ack while some node has not answered its SETACK. C Disque keeps it as an acked job with
no queue, body or holders, and SHOW shows it (reference: disque-commands.md, ACKJOB).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.cluster.test_cluster_nodes import form, wait_for
from tests.cluster.test_replication import show
from tests.servers import NodeProcess

UNKNOWN = b"D-dcb833cf-8YL1NT17e9+wsA/09NqxscQI-05a1"  # TTL digits 05a1: odd, 1441 minutes


def test_show_of_a_dummy_ack_while_a_node_is_unreachable(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 3)
    paused = cluster[2].process.pid
    os.kill(paused, signal.SIGSTOP)  # its SETACK goes unanswered: the dummy stays
    try:
        assert cluster[0].client().execute_command("ACKJOB", UNKNOWN) == 0
        fields = show(cluster[0], UNKNOWN)
        assert fields is not None, "SHOW of a dummy ack answered nil"
        assert fields[b"state"] == b"acked"
        assert fields[b"queue"] is None and fields[b"body"] is None
        assert fields[b"nodes-delivered"] == [] and fields[b"repl"] == 0
        assert 1440 * 60 <= fields[b"ttl"] <= 1441 * 60
        assert show(cluster[1], UNKNOWN) is None  # only where the ACKJOB was sent
    finally:
        os.kill(paused, signal.SIGCONT)
    # Every node answered: nobody holds the job, the dummy goes (as in C Disque).
    wait_for(lambda: show(cluster[0], UNKNOWN) is None, "the dummy ack collected")
