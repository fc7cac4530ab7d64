"""A rewrite whose new file cannot be created (its directory removed at run time): the
automatic rewrite keeps being tried once a second instead of ending the AOF's cron, and
CONFIG SET appendonly yes says why it is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import redis

from tests.persistence.helpers import wait_for
from tests.servers import NodeProcess

BODY = b"x" * 100


def test_the_automatic_rewrite_is_tried_again_once_the_directory_is_back(
    tmp_path: Path,
) -> None:
    aof_dir = tmp_path / "aof"
    aof_dir.mkdir()
    node = NodeProcess(
        tmp_path, "--dir", str(aof_dir), "--appendonly", "yes", "--auto-aof-rewrite-min-size", "1"
    )
    try:
        client = node.client()
        client.execute_command("ADDJOB", "q", BODY, 0)
        shutil.rmtree(aof_dir)
        # The cron's automatic rewrite cannot create its file.
        assert wait_for(lambda: "No such file or directory" in node.log_path.read_text())
        aof_dir.mkdir()
        # ... and is tried again: the file comes back with the job.
        assert wait_for((aof_dir / "disque.aof").exists), node.log_path.read_text()
        assert wait_for(lambda: client.info("persistence")["aof_rewrite_in_progress"] == 0)
        assert BODY in (aof_dir / "disque.aof").read_bytes()
        assert "Traceback" not in node.log_path.read_text()
    finally:
        node.stop()


def test_config_set_appendonly_yes_says_why_the_file_cannot_be_written(tmp_path: Path) -> None:
    aof_dir = tmp_path / "aof"
    aof_dir.mkdir()
    node = NodeProcess(tmp_path, "--dir", str(aof_dir))
    try:
        client = node.client()
        shutil.rmtree(aof_dir)
        with pytest.raises(redis.ResponseError, match="No such file or directory"):
            client.execute_command("CONFIG", "SET", "appendonly", "yes")
        assert client.execute_command("CONFIG", "GET", "appendonly") == [b"appendonly", b"no"]
        assert client.info("persistence")["aof_state"] == "off"
        assert "Traceback" not in node.log_path.read_text()
    finally:
        node.stop()
