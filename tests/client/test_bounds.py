"""What a client keeps per node, per job or per call stays bounded over thousands of calls
on a real three-node cluster: peer connections, peer health, the job-source counts a
consumer keeps to follow its jobs, retired clients, pooled connections, open files."""

from __future__ import annotations

import gc
import os

import redis

from conveyor.client import ConnectionError
from conveyor.client._routing import MOVE_AFTER
from tests.client.twins import Twin, where
from tests.servers import NodeProcess

ROUNDS = 3
JOBS_PER_ROUND = 600  # acked one by one, each routed to its maker: 1800 routed calls


def open_files() -> int:
    return len(os.listdir(f"/proc/{os.getpid()}/fd"))


def kept(twin: Twin) -> dict[str, int]:
    client = twin.client
    pools = [client._redis, *client._peers.values()]
    connections = 0
    for pooled in pools:
        if pooled is not None:
            pool = pooled.connection_pool
            connections += len(pool._available_connections) + len(pool._in_use_connections)
    return {
        "peers": len(client._peers),
        "peer health": len(client._peer_health),
        "job sources": len(client._sources.prefixes),
        "jobs counted": client._sources.seen,
        "retired clients": len(client._retired),
        "avoided nodes": len(client._avoid),
        "known nodes": len(client.nodes),
        "connections": connections,
    }


def add_everywhere(raws: list[redis.Redis], queue: str, count: int) -> list[str]:
    """`count` jobs made by the three nodes in turn, so their IDs name all three."""
    ids = []
    for index in range(count):
        reply = raws[index % 3].execute_command("ADDJOB", queue, b"x", 0, "REPLICATE", 1, "ASYNC")
        ids.append(reply.decode())
    return ids


def test_what_a_client_keeps_stays_bounded_over_thousands_of_calls(
    trio: list[NodeProcess], twin: Twin
) -> None:
    raws = [node.client() for node in trio]
    twin.connect()
    files_after_first_round = 0
    for round_index in range(ROUNDS):
        # Routed calls: SHOW and ACKJOB go to each job's maker.
        for index, job_id in enumerate(add_everywhere(raws, "acked", JOBS_PER_ROUND)):
            if index % 2:
                twin.ack(job_id)
            else:
                twin.show(job_id)
        # A consumer counting where its jobs come from.
        add_everywhere(raws, "consumed", JOBS_PER_ROUND)
        for _ in range(JOBS_PER_ROUND):
            jobs = twin.get_jobs("consumed", nohang=True)
            if jobs:
                twin.fast_ack(*jobs)
        # A few failovers: each drops a client for a new one.
        for _ in range(20):
            raws[trio.index(next(n for n in trio if where(n) == twin.address))].execute_command(
                "CLIENT", "KILL", "TYPE", "normal"
            )
            try:
                twin.ping()
            except ConnectionError:
                pass  # the killed connection, seen by this call or not
        twin.add_jobs("batched", [b"x"] * JOBS_PER_ROUND, replicate=1, asynchronous=True)
        gc.collect()
        sizes = kept(twin)
        assert sizes["peers"] <= 2 and sizes["peer health"] <= 3, sizes
        assert sizes["job sources"] <= MOVE_AFTER and sizes["jobs counted"] < MOVE_AFTER, sizes
        assert sizes["retired clients"] <= 3 and sizes["avoided nodes"] == 0, sizes
        assert sizes["known nodes"] == 3 and sizes["connections"] <= 3, sizes
        if round_index == 0:
            files_after_first_round = open_files()
    assert open_files() <= files_after_first_round + 2
