"""What a job or a scan leaves behind on a real node, through DEBUG RESOURCES.

A node runs for months: a job acked, deleted or fast-acked must leave no entry in the
timer buckets (each entry keeps the job, body and all, until its bucket falls due: a day
at the default TTL), and a scan that ends keeps no snapshot.
"""

from __future__ import annotations

from tests.servers import NodeProcess

TIMER_JOB_ENTRIES, SCAN_SNAPSHOTS = 5, 6  # in DEBUG RESOURCES' reply


def test_jobs_done_every_way_leave_no_timer_entry(fresh_node: NodeProcess) -> None:
    client = fresh_node.client()
    try:
        for n in range(100):
            client.execute_command("ADDJOB", "q", b"x" * 1000, "0")
            ((_, job_id, _),) = client.execute_command("GETJOB", "FROM", "q")
            verb = ("ACKJOB", "FASTACK", "DELJOB")[n % 3]
            assert client.execute_command(verb, job_id) == 1
        for _ in range(20):  # queued, never delivered
            job_id = client.execute_command("ADDJOB", "q", b"y", "0")
            assert client.execute_command("FASTACK", job_id) == 1
        resources = client.execute_command("DEBUG", "RESOURCES")
        assert resources[4] == 0  # no job left
        assert resources[TIMER_JOB_ENTRIES] == 0
    finally:
        client.close()


def test_a_scan_that_ends_keeps_no_snapshot(fresh_node: NodeProcess) -> None:
    client = fresh_node.client()
    try:
        for _ in range(30):
            client.execute_command("ADDJOB", "q", "x", "0")
        cursor, _ = client.execute_command("JSCAN", "0", "COUNT", "10")
        assert cursor != b"0"
        assert client.execute_command("DEBUG", "RESOURCES")[SCAN_SNAPSHOTS] == 1
        while cursor != b"0":
            cursor, _ = client.execute_command("JSCAN", cursor, "COUNT", "10")
        assert client.execute_command("DEBUG", "RESOURCES")[SCAN_SNAPSHOTS] == 0
    finally:
        client.close()
