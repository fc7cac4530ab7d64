"""ADDJOBs of many clients read in one turn of the loop run together (node/turn_adds.py),
and answer exactly as they do one at a time: on real processes.

The origin is stopped (SIGSTOP) while every client sends its one request, so that it
reads them all in one turn when it goes on. The same requests spelled "AddJob" (a
spelling clients do not use, never left for the turn) run one at a time as they are read.
"""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import hiredis
import pytest

from tests.cluster.test_addjob_runs import (
    JOB_ID,
    _addjob_calls,
    _mixed_pipeline,
    check_same_answers,
)
from tests.cluster.test_cluster_nodes import form
from tests.cluster.test_replication import show
from tests.servers import NodeProcess


def _encode(request: tuple[str, ...]) -> bytes:
    parts = [part.encode() for part in request]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


def _reply(sock: socket.socket) -> object:
    reader = hiredis.Reader()
    while True:
        reply = reader.gets()
        if reply is not False:
            return reply
        data = sock.recv(4096)
        assert data, "the node closed the connection"
        reader.feed(data)


def _in_one_turn(node: NodeProcess, requests: list[tuple[str, ...]]) -> list[object]:
    """Each request from its own client, all read by `node` in one turn: the replies."""
    socks = [socket.create_connection(("127.0.0.1", node.port), timeout=30) for _ in requests]
    try:
        for sock in socks:  # accepted and read from before the node stops
            sock.sendall(b"PING\r\n")
            assert _reply(sock) == b"PONG"
        node.process.send_signal(signal.SIGSTOP)
        try:
            for sock, request in zip(socks, requests, strict=True):
                sock.sendall(_encode(request))
            time.sleep(0.2)  # every request in the node's socket buffers
        finally:
            node.process.send_signal(signal.SIGCONT)
        return [_reply(sock) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _outcomes(replies: list[object]) -> list[object]:
    """Job IDs as "job ID", errors as their text."""
    return [
        "job ID"
        if isinstance(reply, bytes) and JOB_ID.match(reply)
        else str(reply)
        if isinstance(reply, Exception)
        else reply
        for reply in replies
    ]


@pytest.fixture
def three(tmp_path: Path, cluster: list[NodeProcess]) -> list[NodeProcess]:
    form(tmp_path, cluster, 3)
    return cluster


def _prepare(node: NodeProcess, queue: str) -> None:
    client = node.client()
    client.execute_command("PAUSE", f"{queue}-paused", "in")
    for n in range(2):
        client.execute_command("ADDJOB", f"{queue}-full", f"f{n}", "5000", "REPLICATE", "1")


def test_a_turn_of_single_addjobs_answers_as_they_do_one_at_a_time(
    three: list[NodeProcess],
) -> None:
    origin = three[0]

    def one_turn(spelling: str, queue: str) -> list[object]:
        _prepare(origin, queue)
        return _outcomes(_in_one_turn(origin, _mixed_pipeline(spelling, queue)))

    check_same_answers(origin, one_turn)


def test_jobs_added_in_one_turn_are_replicated_as_asked(three: list[NodeProcess]) -> None:
    origin = three[0]
    requests = [
        *[("ADDJOB", "q", f"three{n}", "5000", "REPLICATE", "3") for n in range(6)],
        *[("addjob", "q", f"two{n}", "5000", "REPLICATE", "2", "TTL", "600") for n in range(4)],
        *[("ADDJOB", "r", f"async{n}", "5000", "REPLICATE", "3", "ASYNC") for n in range(4)],
    ]
    calls = _addjob_calls(origin)
    ids = _in_one_turn(origin, requests)
    assert all(isinstance(job_id, bytes) and JOB_ID.match(job_id) for job_id in ids)
    assert _addjob_calls(origin) - calls == len(requests)
    for job_id, request in zip(ids, requests, strict=True):
        shown = show(origin, job_id)  # type: ignore[arg-type]
        assert shown is not None and shown[b"queue"] == request[1].encode()
        assert shown[b"repl"] == int(request[5])
        # Synchronous: answered once that many nodes held it, so no wait is needed.
        if "ASYNC" not in request:
            copies = sum(show(node, job_id) is not None for node in three)  # type: ignore[arg-type]
            assert copies == int(request[5])
    assert show(origin, ids[6])[b"ttl"] > 500  # type: ignore[index]


@pytest.mark.parametrize("mode", [(), ("ASYNC",)])
def test_a_turn_into_a_queue_that_exists_answers_every_client(
    three: list[NodeProcess], mode: tuple[str, ...]
) -> None:
    """Its jobs are added together (ClusterDriver.add_run): each client gets its own ID,
    the last one too, whose reply is the one written after the run."""
    origin = three[0]
    queue = f"exists{len(mode)}"
    origin.client().execute_command("ADDJOB", queue, "first", "5000", "REPLICATE", "3")
    requests = [("ADDJOB", queue, f"job{n}", "5000", "REPLICATE", "3", *mode) for n in range(5)]
    calls = _addjob_calls(origin)
    ids = _in_one_turn(origin, requests)
    assert all(isinstance(job_id, bytes) and JOB_ID.match(job_id) for job_id in ids)
    assert len(set(ids)) == len(requests)
    assert _addjob_calls(origin) - calls == len(requests)
    for job_id, request in zip(ids, requests, strict=True):
        shown = show(origin, job_id)  # type: ignore[arg-type]
        assert shown is not None and shown[b"body"] == request[2].encode()


def test_quit_behind_synchronous_addjobs_answers_them_first(three: list[NodeProcess]) -> None:
    """QUIT waits behind ADDJOBs whose replies wait for their copies, then closes: every
    reply comes first, in order, and what follows QUIT never runs."""
    origin = three[0]
    adds = [("ADDJOB", "quitq", f"j{n}", "5000", "REPLICATE", "3") for n in range(3)]
    after = ("ADDJOB", "quitq", "never", "0")
    reader = hiredis.Reader()
    replies: list[object] = []
    with socket.create_connection(("127.0.0.1", origin.port), timeout=30) as sock:
        sock.sendall(b"".join(_encode(request) for request in [*adds, ("QUIT",), after]))
        while data := sock.recv(4096):  # until the node closes
            reader.feed(data)
            while (reply := reader.gets()) is not False:
                replies.append(reply)
    assert len(replies) == 4 and replies[3] == b"OK"
    for job_id in replies[:3]:
        assert isinstance(job_id, bytes) and JOB_ID.match(job_id)
        assert sum(show(node, job_id) is not None for node in three) == 3
    assert origin.client().execute_command("QLEN", "quitq") == 3
