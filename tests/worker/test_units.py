"""Unit tests of worker parts whose races a real worker hits only now and then: each one
forces the interleaving that used to go wrong."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from conveyor.client import Client, Job
from conveyor.worker.envelope import Envelope
from conveyor.worker.queuedir import MessageStore, QueueConfig
from conveyor.worker.runner import QueueRunner, Running
from conveyor.worker.script import ScriptResult
from tests.worker.conftest import make_queue


class SlowReads(dict[str, int]):
    """Outcome counts whose reads let another thread run before the count is written back."""

    def get(self, key: str, default: Any = None) -> Any:
        value = super().get(key, default)
        time.sleep(0.002)
        return value


def test_slots_settling_at_once_lose_no_outcome_count(tmp_path: Path) -> None:
    config = QueueConfig.load(make_queue(tmp_path, "counts", "/bin/true"))
    # Settling as err only queues the ACK for the acker thread, not started here: the
    # client is never used.
    runner = QueueRunner(config, Client(["127.0.0.1:1"]), threading.Event())
    runner.outcomes = SlowReads()
    store = MessageStore(config.directory)
    slots = 8
    running = [
        Running(Job("counts", f"J{n}", b"{}"), Envelope(), store.enter_run(f"J{n}", {}))
        for n in range(slots)
    ]
    start = threading.Barrier(slots)

    def settle(one: Running) -> None:
        start.wait()
        runner._settle(one, ScriptResult("err", "boom", 1))

    threads = [threading.Thread(target=settle, args=(one,)) for one in running]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert runner.status()["outcomes"] == {"err": slots}
