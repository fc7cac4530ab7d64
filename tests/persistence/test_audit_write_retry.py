"""After a failed write the node retries every 100 ms by itself, with no client traffic
to prompt it, until the disk takes the buffered records (RLIMIT_FSIZE on the node: past
it write() fails with EFBIG; prlimit from the test gives the space back)."""

from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest
import redis

from tests.persistence.helpers import wait_for
from tests.servers import NodeProcess

FILE_LIMIT = 64 * 1024
BODY = b"x" * 2000
RETRY_S = 0.1  # the node's write retry period (node/aof.py)


def limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, resource.RLIM_INFINITY))


@pytest.mark.parametrize("policy", ["everysec", "no"])
def test_buffered_records_are_written_once_the_disk_takes_them(tmp_path: Path, policy: str) -> None:
    args = ["--appendonly", "yes", "--appendfsync", policy]
    node = NodeProcess(tmp_path, *args, preexec_fn=limit_file_size)
    try:
        client = node.client()
        acknowledged = 0
        with pytest.raises(redis.ResponseError, match="MISCONF"):
            for _ in range(2 * FILE_LIMIT // len(BODY)):
                client.execute_command("ADDJOB", "q", BODY, 0)
                acknowledged += 1
        time.sleep(3 * RETRY_S)  # past the first retries: the disk is still full then
        unlimited = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        resource.prlimit(node.process.pid, resource.RLIMIT_FSIZE, unlimited)
        # No command from now on: the node's own retry writes what it holds.
        aof = tmp_path / "disque.aof"
        assert wait_for(lambda: aof.read_bytes().count(BODY) == acknowledged)
        assert "AOF write error looks solved" in node.log_path.read_text()
        assert client.info("persistence")["aof_last_write_status"] == "ok"
    finally:
        node.stop()
