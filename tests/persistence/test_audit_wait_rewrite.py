"""CONFIG SET appendonly yes whose first file cannot be written (RLIMIT_FSIZE on the node:
write() fails with EFBIG): the node waits for a file (wait_rewrite), tries again by itself
once the disk takes writes, and whatever rewrite finishes first becomes the live AOF."""

from __future__ import annotations

import resource
from pathlib import Path

import redis

from tests.persistence.helpers import wait_for
from tests.servers import NodeProcess

FILE_LIMIT = 64 * 1024
BODY = b"x" * 2000
JOBS = 2 * FILE_LIMIT // len(BODY)


def limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, resource.RLIM_INFINITY))


def failed_enable(tmp_path: Path) -> tuple[NodeProcess, redis.Redis]:
    """A node whose CONFIG SET appendonly yes failed to write the first file."""
    node = NodeProcess(tmp_path, preexec_fn=limit_file_size)
    client = node.client()
    for _ in range(JOBS):
        client.execute_command("ADDJOB", "q", BODY, 0)
    assert client.execute_command("CONFIG", "SET", "appendonly", "yes") == b"OK"
    assert wait_for(lambda: client.info("persistence")["aof_last_bgrewrite_status"] == "err")
    assert client.info("persistence")["aof_state"] == "wait_rewrite"
    return node, client


def lift_limit(node: NodeProcess) -> None:
    unlimited = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    resource.prlimit(node.process.pid, resource.RLIMIT_FSIZE, unlimited)


def persisted_jobs(node: NodeProcess) -> int:
    return (node.data_dir / "disque.aof").read_bytes().count(BODY)


def test_the_first_file_is_written_again_once_the_disk_takes_it(tmp_path: Path) -> None:
    node, client = failed_enable(tmp_path)
    try:
        lift_limit(node)
        assert wait_for(lambda: client.info("persistence")["aof_state"] == "on")
        assert persisted_jobs(node) == JOBS
    finally:
        node.stop()


def test_a_bgrewriteaof_meanwhile_becomes_the_live_file(tmp_path: Path) -> None:
    node, client = failed_enable(tmp_path)
    try:
        lift_limit(node)
        client.execute_command("BGREWRITEAOF")
        assert wait_for(lambda: client.info("persistence")["aof_rewrite_in_progress"] == 0)
        assert client.info("persistence")["aof_state"] == "on"
        client.execute_command("ADDJOB", "q", BODY, 0)
        assert wait_for(lambda: persisted_jobs(node) == JOBS + 1)
    finally:
        node.stop()


def test_appendonly_no_ends_the_wait(tmp_path: Path) -> None:
    node, client = failed_enable(tmp_path)
    try:
        assert client.execute_command("CONFIG", "SET", "appendonly", "no") == b"OK"
        info = client.info("persistence")
        assert (info["aof_state"], info["aof_enabled"], info["aof_rewrite_scheduled"]) == (
            "off",
            0,
            0,
        )
        lift_limit(node)
        client.execute_command("BGREWRITEAOF")
        assert wait_for(lambda: client.info("persistence")["aof_rewrite_in_progress"] == 0)
        assert client.info("persistence")["aof_state"] == "off"
    finally:
        node.stop()
