"""A rewrite whose new file cannot be written fails alone, as in Redis: the old AOF keeps
every record and writes go on being accepted (no MISCONF), INFO says the rewrite failed,
and a later rewrite succeeds.

The disk is full for the new file only: RLIMIT_FSIZE on the node (write() past it fails
with EFBIG), with the old AOF emptied first so that it stays below the limit.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

from conveyor.persistence.reader import read_records
from tests.persistence.helpers import held_ids, wait_for
from tests.servers import NodeProcess

ARGS = ("--appendonly", "yes", "--auto-aof-rewrite-percentage", "0")
# Ten slices of the rewrite (an event-loop round each): the big job comes while the
# first ones are written, and it is its record that the new file cannot take.
JOBS = 10_000
BODY = b"x" * 10
BIG = b"y" * (1024 * 1024)
FILE_LIMIT = len(BIG) + 100 * 1024  # the old file takes it, the new one not on top of a slice


def test_a_rewrite_that_cannot_write_its_file_fails_alone(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path, *ARGS)
    try:
        client = node.client()
        fill = client.pipeline(transaction=False)
        for _ in range(JOBS):
            fill.execute_command("ADDJOB", "q", BODY, 0)
        fill.execute()
        aof = node.data_dir / "disque.aof"
        os.truncate(aof, 0)  # appended to from 0: the old file stays below the limit
        limit = (FILE_LIMIT, resource.RLIM_INFINITY)
        resource.prlimit(node.process.pid, resource.RLIMIT_FSIZE, limit)
        client.execute_command("BGREWRITEAOF")
        big_id = client.execute_command("ADDJOB", "q", BIG, 0)
        after = client.execute_command("ADDJOB", "q", BODY, 0)  # no MISCONF
        assert wait_for(lambda: client.info("persistence")["aof_rewrite_in_progress"] == 0)
        info = client.info("persistence")
        assert info["aof_last_bgrewrite_status"] == "err"
        assert info["aof_last_write_status"] == "ok"
        assert not list(node.data_dir.glob("temp-rewriteaof-*"))
        assert big_id in aof.read_bytes() and after in aof.read_bytes()  # the old file

        unlimited = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        resource.prlimit(node.process.pid, resource.RLIMIT_FSIZE, unlimited)
        client.execute_command("BGREWRITEAOF")
        assert wait_for(
            lambda: (
                client.info("persistence")["aof_last_bgrewrite_status"] == "ok"
                and client.info("persistence")["aof_rewrite_in_progress"] == 0
            )
        )
        held = held_ids(client)
        written = {record.argument for record in read_records(aof.read_bytes())}
        assert len(written) == len(held) == JOBS + 2  # one LOADJOB per job held
        node.stop()
        node = NodeProcess(tmp_path, *ARGS)
        assert held_ids(node.client()) == held
    finally:
        node.stop()
