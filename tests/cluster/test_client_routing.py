"""`conveyor.client` in a cluster of real processes (conveyor/client/_routing.py): job
commands go to the job's maker, -LEAVING and HELLO priorities move the client, consumers
follow their jobs, and an ADDJOB without a reply is reported as maybe added."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from conveyor.client import AsyncClient, Client, TimeoutError
from tests.cluster.test_cluster_nodes import form, wait_for
from tests.cluster.test_replication import show
from tests.servers import NodeProcess


def where(node: NodeProcess) -> str:
    return f"127.0.0.1:{node.port}"


def test_acks_and_shows_go_to_the_node_that_made_the_job(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 3)
    maker, other = cluster[0], cluster[1]
    job_id = maker.client().execute_command("ADDJOB", "q", "x", "0", "REPLICATE", "1").decode()
    with Client([where(other)]) as client:
        client.connect()
        assert client.address == where(other)
        assert client.show(job_id)["queue"] == "q"  # only the maker knows it
        # Known there: 1. Sent where the client is, it would be a dummy ack (0).
        assert client.ack(job_id) == 1
        assert show(maker, job_id) is None
        assert client.address == where(other)  # the client stays where it was


async def test_the_async_client_routes_the_same_way(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 2)
    job_id = cluster[0].client().execute_command("ADDJOB", "q", "x", "0", "REPLICATE", "1")
    async with AsyncClient([where(cluster[1])]) as client:
        await client.connect()
        assert await client.working(job_id.decode()) > 0
        assert await client.nack(job_id.decode()) == 1
        assert await client.ack(job_id.decode()) == 1
    assert show(cluster[0], job_id.decode()) is None


def test_a_leaving_node_is_left_and_the_getjob_sent_elsewhere(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 2)
    leaving, other = cluster
    with Client([where(leaving)]) as client:
        client.connect()
        assert client.address == where(leaving)
        leaving.client().execute_command("CLUSTER", "LEAVING", "yes")
        job_id = other.client().execute_command("ADDJOB", "q", "x", "0", "REPLICATE", "1")
        [job] = client.get_jobs("q", timeout_ms=5000)  # -LEAVING there, then the other node
        assert job.id == job_id.decode()
        assert client.address == where(other)
    # A client whose first contact is leaving moves to a node HELLO ranks better.
    wait_for(lambda: b"leaving" in other.client().execute_command("CLUSTER", "NODES"),
             "the flag known")  # fmt: skip
    with Client([where(leaving)]) as client:
        client.connect()
        assert client.address == where(other)


def test_a_consumer_moves_to_the_node_its_jobs_come_from(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 3)
    producer, consumer_node = cluster[0], cluster[1]
    stop = threading.Event()

    def produce() -> None:
        client = producer.client()
        for n in range(300):
            if stop.is_set():
                return
            client.execute_command("ADDJOB", "q", f"j{n}", "0", "REPLICATE", "1")
            time.sleep(0.001)

    thread = threading.Thread(target=produce)
    thread.start()
    got = 0
    try:
        with Client([where(consumer_node)]) as client:
            client.connect()
            deadline = time.monotonic() + 30
            while got < 300 and time.monotonic() < deadline:
                jobs = client.get_jobs("q", count=10, timeout_ms=500)
                if jobs:
                    client.ack(*jobs)
                got += len(jobs)
            assert got == 300
            # Its jobs were made on the producer's node: it moved there.
            assert client.address == where(producer)
        with Client([where(consumer_node)], follow_jobs=False) as client:
            producer.client().execute_command("ADDJOB", "q", "one more", "0", "REPLICATE", "1")
            for _ in range(3):
                client.get_jobs("q", count=10, timeout_ms=200)
            assert client.address == where(consumer_node)
    finally:
        stop.set()
        thread.join()


def test_an_addjob_without_its_reply_is_reported_maybe_added(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 1)
    node = cluster[0]
    with Client([where(node)], socket_timeout=0.3) as client:
        client.connect()
        sleeper = threading.Thread(
            target=lambda: node.client().execute_command("DEBUG", "SLEEP", "1")
        )
        sleeper.start()
        time.sleep(0.1)
        with pytest.raises(TimeoutError, match="may or may not have been added") as caught:
            client.add_job("q", b"late")
        assert caught.value.address == where(node)
        sleeper.join()
    assert node.client().execute_command("QLEN", "q") == 1  # it was: never sent twice
