"""Unit tests of worker parts whose races a real worker hits only now and then: each one
forces the interleaving that used to go wrong."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conveyor.client import Client, Job
from conveyor.web import workdirs
from conveyor.worker import supervisor
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


def test_worker_and_console_writing_one_status_both_land_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker sets a message's status while the console notes a re-run on it: both have
    written their temporary file before either renames it into place."""
    config = QueueConfig.load(make_queue(tmp_path, "statuses", "/bin/true"))
    store = MessageStore(config.directory)
    path = store.move(store.enter_run("J1", {}), "err", "boom")
    real_replace = os.replace
    both_written = threading.Barrier(2, timeout=5)

    def replace_when_both_wrote(src: Any, dst: Any) -> None:
        if Path(dst).name == "status.json":
            both_written.wait()
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_when_both_wrote)
    failures: list[BaseException] = []

    def run(write: Any) -> None:
        try:
            write()
        except BaseException as exc:
            failures.append(exc)

    writers = [
        threading.Thread(target=run, args=(lambda: store.set_status(path, "err", "boom"),)),
        threading.Thread(target=run, args=(lambda: workdirs.note_rerun(config, "J1", "J2"),)),
    ]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    assert failures == []
    status = json.loads((path / "status.json").read_text())
    assert status["status"] in ("boom", "boom (re-run as J2)")
    assert sorted(p.name for p in path.iterdir()) == ["job", "msg.json", "status.json"]


def test_a_crashed_writers_leftover_goes_with_its_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = QueueConfig.load(make_queue(tmp_path, "leftover", "/bin/true"))
    store = MessageStore(config.directory)
    path = store.move(store.enter_run("J1", {"id": "J1"}), "done", "all good")

    def crash(src: Any, dst: Any) -> None:
        raise KeyboardInterrupt  # the writer dies between its write and its rename

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        store.set_status(path, "done", "all good again")
    monkeypatch.undo()
    assert len(list(path.iterdir())) == 4  # job, msg.json, status.json and the leftover
    assert workdirs.counts(config)["done"] == 1
    assert workdirs.message(config, "J1")["status"] == "all good"
    assert store.clean(0, now=time.time() + 1) == 1
    assert not path.exists()


def test_a_term_that_comes_while_a_child_restarts_reaches_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A unit test: real children cannot be made to start at the moment a TERM comes. The
    first child has died; TERM comes while its replacement is being started; the
    supervisor must pass it on to that one once it exists, not wait for it for ever."""
    handlers: dict[int, Any] = {}
    monkeypatch.setattr(supervisor.signal, "signal", lambda sig, h: handlers.__setitem__(sig, h))
    started: list[FakeChild] = []

    def popen(command: list[str]) -> FakeChild:
        child = FakeChild(exited=not started)
        if len(started) == 1:
            handlers[signal.SIGTERM](signal.SIGTERM, None)  # TERM, during the start
        started.append(child)
        return child

    monkeypatch.setattr(supervisor.subprocess, "Popen", popen)
    assert supervisor.supervise("app:app", ["127.0.0.1:7711"], 1, 1, 1.0, 1) == 0
    assert len(started) == 2 and started[1].signals == [signal.SIGTERM]


class FakeChild:
    """A child that has exited (code 1) or runs until it is sent a signal (then code 0)."""

    def __init__(self, exited: bool) -> None:
        self.pid = 4242
        self.returncode: int | None = 1 if exited else None
        self.signals: list[int] = []

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, signum: int) -> None:
        self.signals.append(signum)
        self.returncode = 0

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            raise AssertionError("waited for a child never told to stop: a hang")
        return self.returncode
