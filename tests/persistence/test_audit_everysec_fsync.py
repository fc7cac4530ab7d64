"""A failed fsync under appendfsync everysec refuses writes (-MISCONF) until an fsync
succeeds again, as Redis does: on /dev/null (through a symlink) every write succeeds and
every fdatasync fails (EINVAL), so the error is never solved."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from tests.persistence.helpers import wait_for
from tests.servers import running_node

RETRY_S = 0.1  # the node's write retry period (node/aof.py)


def test_writes_stay_refused_while_the_fsync_keeps_failing(tmp_path: Path) -> None:
    (tmp_path / "disque.aof").symlink_to("/dev/null")
    with running_node(tmp_path, "--appendonly", "yes", "--appendfsync", "everysec") as node:
        client = node.client()
        client.execute_command("ADDJOB", "q", "body", 0)
        assert wait_for(lambda: client.info("persistence")["aof_last_write_status"] == "err")
        # Past the write retry: a retried write of nothing is no fsync that succeeded.
        time.sleep(3 * RETRY_S)
        assert client.info("persistence")["aof_last_write_status"] == "err"
        with pytest.raises(redis.ResponseError, match=r"MISCONF .*Invalid argument"):
            client.execute_command("ADDJOB", "q", "body", 0)
        assert client.execute_command("QLEN", "q") == 1


def test_switching_to_appendfsync_no_ends_the_fsync_error(tmp_path: Path) -> None:
    (tmp_path / "disque.aof").symlink_to("/dev/null")
    with running_node(tmp_path, "--appendonly", "yes", "--appendfsync", "everysec") as node:
        client = node.client()
        client.execute_command("ADDJOB", "q", "body", 0)
        assert wait_for(lambda: client.info("persistence")["aof_last_write_status"] == "err")
        assert client.config_set("appendfsync", "no")
        assert client.info("persistence")["aof_last_write_status"] == "ok"
        assert client.execute_command("ADDJOB", "q", "body", 0).startswith(b"D-")
