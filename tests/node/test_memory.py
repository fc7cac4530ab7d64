"""maxmemory: big jobs, -OOM for deny-oom commands, eviction of delivered at-most-once jobs."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
import redis

from tests.node.helpers import debug_jobs, error_of, info, strict_client
from tests.servers import NodeProcess, running_node

OOM = "OOM command not allowed when used memory > 'maxmemory'."
BIG = 100 * 1024 * 1024


@pytest.fixture
def limits(r: redis.Redis) -> Iterator[None]:
    """Restores maxmemory and its policy after the test."""
    yield
    r.execute_command("CONFIG", "SET", "maxmemory", "1gb")
    r.execute_command("CONFIG", "SET", "maxmemory-policy", "acks")


def used_memory(r: redis.Redis) -> int:
    return int(info(r, "memory")["used_memory"])


def set_headroom(r: redis.Redis, headroom: int) -> None:
    """maxmemory = what is used now + headroom."""
    limit = used_memory(r) + headroom
    assert r.execute_command("CONFIG", "SET", "maxmemory", str(limit)) == b"OK"


def test_100mb_job_with_the_default_maxmemory(node: NodeProcess, r: redis.Redis) -> None:
    assert r.execute_command("CONFIG", "GET", "maxmemory") == [b"maxmemory", b"1073741824"]
    body = hashlib.sha256(b"seed").digest() * (BIG // 32)
    client = strict_client(node, socket_timeout=60)
    try:
        job_id = client.execute_command("ADDJOB", "big", body, "0")
        assert int(info(r, "memory")["used_memory_jobs"]) >= BIG
        reply = client.execute_command("GETJOB", "FROM", "big")
        assert reply[0][1] == job_id
        assert len(reply[0][2]) == BIG
        assert reply[0][2] == body
        assert client.execute_command("ACKJOB", job_id) == 1
    finally:
        client.close()
    assert int(info(r, "memory")["used_memory_jobs"]) < 1024 * 1024
    assert r.execute_command(b"PING") == b"PONG"


def test_100mb_job_refused_under_a_small_maxmemory(
    node: NodeProcess, r: redis.Redis, limits: None
) -> None:
    r.execute_command("ADDJOB", "q", "small", "0")
    assert r.execute_command("CONFIG", "SET", "maxmemory", "20mb") == b"OK"
    client = strict_client(node, socket_timeout=60)
    try:
        assert error_of(client, "ADDJOB", "big", b"x" * BIG, "0") == OOM
    finally:
        client.close()
    assert debug_jobs(r) == [1, 1]
    assert r.execute_command("QLEN", "big") == 0


def test_deny_oom_commands_under_maxmemory(r: redis.Redis, limits: None) -> None:
    queued = r.execute_command("ADDJOB", "q", "queued", "0")
    active = r.execute_command("ADDJOB", "q", "active", "0")
    r.execute_command("DEQUEUE", active)
    # below what the node itself takes: every growing command is refused
    assert r.execute_command("CONFIG", "SET", "maxmemory", "20mb") == b"OK"
    assert error_of(r, "ADDJOB", "q", "x", "0") == OOM
    assert error_of(r, "NACK", active) == OOM
    assert error_of(r, "ENQUEUE", active) == OOM
    assert debug_jobs(r) == [2, 1]
    # commands that do not grow memory still work
    assert r.execute_command(b"PING") == b"PONG"
    assert r.execute_command("QLEN", "q") == 1
    assert r.execute_command("GETJOB", "FROM", "q")[0][1] == queued
    assert r.execute_command("ACKJOB", queued) == 1
    assert r.execute_command("DEQUEUE", active) == 0
    assert r.execute_command("DELJOB", active) == 1
    r.execute_command("CONFIG", "SET", "maxmemory", "1gb")
    r.execute_command("ADDJOB", "q", "x", "0")


def test_maxmemory_zero_means_no_limit(r: redis.Redis, limits: None) -> None:
    assert r.execute_command("CONFIG", "SET", "maxmemory", "0") == b"OK"
    r.execute_command("ADDJOB", "q", "x", "0")
    assert r.execute_command("QLEN", "q") == 1


def test_filling_up_then_freeing(r: redis.Redis, limits: None) -> None:
    r.execute_command("CONFIG", "SET", "maxmemory-policy", "noeviction")
    set_headroom(r, 4 * 1024 * 1024)
    body = b"z" * (256 * 1024)
    ids: list[bytes] = []
    refused = False
    for _ in range(100):
        try:
            ids.append(r.execute_command("ADDJOB", "q", body, "0"))
        except redis.ResponseError as exc:
            assert f"OOM {exc}" == OOM
            refused = True
            break
    assert refused
    assert 5 <= len(ids) <= 16
    assert r.execute_command("QLEN", "q") == len(ids)
    assert r.execute_command("ACKJOB", *ids) == len(ids)
    r.execute_command("ADDJOB", "q", body, "0")
    assert r.execute_command("QLEN", "q") == 1


def test_delivered_at_most_once_jobs_are_evicted(r: redis.Redis, limits: None) -> None:
    set_headroom(r, 3 * 1024 * 1024)
    evicted_before = int(info(r, "jobs")["evicted_jobs"])
    body = b"e" * (256 * 1024)
    ids = []
    for _ in range(30):  # 7.5 MB in all, more than twice the headroom
        job_id = r.execute_command("ADDJOB", "q", body, "0", "RETRY", "0")
        assert r.execute_command("GETJOB", "FROM", "q")[0][1] == job_id
        ids.append(job_id)
    assert int(info(r, "jobs")["evicted_jobs"]) > evicted_before
    remaining = debug_jobs(r)[0]
    assert remaining < 30
    # the oldest went first
    assert r.execute_command("SHOW", ids[0]) is None
    assert r.execute_command("SHOW", ids[-1]) is not None


def test_queued_and_retryable_jobs_are_never_evicted(r: redis.Redis, limits: None) -> None:
    set_headroom(r, 2 * 1024 * 1024)
    evicted_before = int(info(r, "jobs")["evicted_jobs"])
    body = b"k" * (256 * 1024)
    kept = []
    for _ in range(30):
        try:
            kept.append(r.execute_command("ADDJOB", "q", body, "0"))
        except redis.ResponseError as exc:
            assert f"OOM {exc}" == OOM
            break
    assert len(kept) < 30
    assert r.execute_command("QLEN", "q") == len(kept)
    assert int(info(r, "jobs")["evicted_jobs"]) == evicted_before
    assert all(r.execute_command("SHOW", job_id) is not None for job_id in kept)


def test_noeviction_policy_refuses_instead(r: redis.Redis, limits: None) -> None:
    r.execute_command("CONFIG", "SET", "maxmemory-policy", "noeviction")
    set_headroom(r, 2 * 1024 * 1024)
    evicted_before = int(info(r, "jobs")["evicted_jobs"])
    body = b"n" * (256 * 1024)
    refused = False
    for _ in range(30):
        try:
            r.execute_command("ADDJOB", "q", body, "0", "RETRY", "0")
        except redis.ResponseError:
            refused = True
            break
        r.execute_command("GETJOB", "FROM", "q")
    assert refused
    assert int(info(r, "jobs")["evicted_jobs"]) == evicted_before


def test_maxmemory_from_the_command_line(tmp_path_factory: pytest.TempPathFactory) -> None:
    with running_node(tmp_path_factory.mktemp("small"), "--maxmemory", "20mb") as node:
        client = strict_client(node)
        try:
            assert client.execute_command("CONFIG", "GET", "maxmemory") == [
                b"maxmemory",
                b"20971520",
            ]
            assert info(client, "memory")["maxmemory"] == "20971520"
            # The node alone uses more than 20 MB, so every ADDJOB is refused.
            assert error_of(client, "ADDJOB", "q", "x", "0") == OOM
            assert debug_jobs(client) == [0, 0]
            assert client.execute_command(b"PING") == b"PONG"
        finally:
            client.close()
