"""A worker that has run a few hundred messages holds nothing for them: what it keeps per
message (its run, its lock claim, its acknowledgement, its webhook delivery, the script's
pipes) goes once the message is settled. A real worker, node and HTTP endpoint."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conveyor.client import Client
from conveyor.worker import claims
from conveyor.worker.envelope import Envelope
from conveyor.worker.queuedir import QueueConfig
from conveyor.worker.registry import WORKERS_DIR, worker_id
from conveyor.worker.service import add_message
from tests.worker.conftest import WorkerProcess, make_queue, wait_for, write_script
from tests.worker.test_webhooks import Recorder

MESSAGES = 300
QUICK = '#!/bin/bash\necho "done $RQ_PARAM1" >&$RQ_WRITE\n'
LOCKS = 5  # distinct param1 values: slots contend for the same blocking-params locks


def worker_record(queue_dir: Path, worker: WorkerProcess) -> dict[str, Any] | None:
    path = queue_dir / WORKERS_DIR / f"{worker_id(pid=worker.process.pid)}.json"
    try:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    except (FileNotFoundError, json.JSONDecodeError):  # not written yet, or being replaced
        return None


def run_files(worker: WorkerProcess) -> list[str]:
    """The worker's open files a script's run uses: its pipes, its pidfd, its stdio.log."""
    folder = f"/proc/{worker.process.pid}/fd"
    found = []
    for fd in os.listdir(folder):
        try:
            target = os.readlink(f"{folder}/{fd}")
        except FileNotFoundError:  # closed while listed
            continue
        if target.startswith(("pipe:", "anon_inode:[pidfd]")) or "stdio.log" in target:
            found.append(target)
    return found


def test_a_worker_that_ran_hundreds_of_messages_holds_nothing_for_them(
    client: Client, tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    hook = Recorder([200])
    script = write_script(tmp_path / "quick.sh", QUICK)
    queue_dir = make_queue(
        tmp_path, "many", script, exec_prefix="", num_workers=4, blocking_params=[1]
    )
    config = QueueConfig.load(queue_dir)
    worker = start_worker(str(queue_dir))
    try:
        wait_for(lambda: worker_record(queue_dir, worker), 30, "the worker's record")
        for number in range(MESSAGES):
            webhook = f"{hook.url}/hook" if number % 2 else ""
            add_message(client, config, Envelope({"param1": str(number % LOCKS)}, webhook=webhook))
        record = wait_for(lambda: _settled(queue_dir, worker, MESSAGES), 120, "all settled")
        # The scripts' pipes, pidfds and logs were all closed (none is open between runs).
        assert wait_for(lambda: not run_files(worker), 10, "no run's file left open")
    finally:
        hook.close()
    [queue] = record["queues"]
    assert queue["outcomes"] == {"done": MESSAGES} and queue["running"] == []
    assert record["held"] == {"webhooks_pending": 0, "schedule_ticks": 0}
    assert len(hook.posts) == MESSAGES // 2
    # Every lock claim was released: none is left on the node to block a later message.
    for value in range(LOCKS):
        assert client.qlen(claims.claim_queue("lock", "many", str(value))) == 0


def _settled(queue_dir: Path, worker: WorkerProcess, count: int) -> dict[str, Any] | None:
    """The worker's record once `count` messages are done and nothing is held for them."""
    record = worker_record(queue_dir, worker)
    if record is None or not record.get("held"):
        return None
    [queue] = record["queues"]
    idle = queue["busy"] == 0 and queue["acks_pending"] == 0
    done = queue["outcomes"].get("done", 0) == count
    return record if idle and done and record["held"]["webhooks_pending"] == 0 else None
