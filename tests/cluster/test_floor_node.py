"""The Python floor of `make bench-cluster` (bench/floor_node.py), on real processes: it
must do the round trip it stands for, or its figures mean nothing. A synchronous ADDJOB
is answered only once both replicas confirmed its copy, in request order; ASYNC at once."""

from __future__ import annotations

import select
import socket

from bench.cluster_bench import floor_cluster


def test_the_floor_answers_a_pipeline_in_order_with_distinct_ids() -> None:
    with floor_cluster() as nodes:
        client = nodes[0].client()
        pipe = client.pipeline(transaction=False)
        for _ in range(50):
            pipe.execute_command("ADDJOB", "q", "body", "0", "REPLICATE", "3")
        pipe.execute_command("ADDJOB", "q", "body", "0", "ASYNC")
        ids = pipe.execute()
        assert len(set(ids)) == 51
        assert all(len(job_id) == 40 and job_id.startswith(b"D-") for job_id in ids)
        # Made in request order: the counter part of the IDs grows with it.
        assert ids == sorted(ids)


def test_a_synchronous_addjob_waits_for_both_replicas() -> None:
    with floor_cluster() as nodes:
        nodes[2].kill()  # its copies are never confirmed
        # A raw socket: redis-py would send the command again after its timeout.
        with socket.create_connection(("127.0.0.1", nodes[0].port), timeout=5) as conn:
            conn.sendall(b"*5\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$1\r\nx\r\n$1\r\n0\r\n$5\r\nASYNC\r\n")
            assert conn.recv(100).startswith(b"+D-")
            conn.sendall(b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$1\r\nx\r\n$1\r\n0\r\n")
            readable, _, _ = select.select([conn], [], [], 1.0)
            assert readable == []  # one confirmation of two: no answer


def test_conveyors_client_adds_a_batch_to_the_floor() -> None:
    # The `1 conn add_jobs` column: conveyor.client asks HELLO 3, then HELLO (the floor
    # answers both as a lone Disque node), and add_jobs gets one ID per body, in order.
    from conveyor.client import Client

    with floor_cluster() as nodes:
        client = Client(f"127.0.0.1:{nodes[0].port}")
        try:
            ids = client.add_jobs("q", ["body"] * 20, replicate=3, timeout_ms=5000)
            assert client.node_id == "f" * 40  # the floor's HELLO was read
        finally:
            client.close()
        assert len(set(ids)) == 20
        assert ids == sorted(ids)
