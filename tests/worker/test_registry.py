"""The worker's registry files and the console's control requests, as unit tests: the races
they guard against need an interleaving a real worker and console hit only now and then."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from conveyor.worker import registry
from conveyor.worker.registry import Registry, worker_id


def test_a_request_written_while_the_worker_ticks_is_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's tick runs right after the console opens a file to write its request:
    the worker must not take an empty request then, and the request must still arrive."""
    worker = Registry([tmp_path])
    worker.write([], {})
    folder = tmp_path / registry.WORKERS_DIR
    real_open = io.open
    ticks: list[str | None] = []

    def open_then_tick(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        opened = real_open(file, mode, *args, **kwargs)
        if "w" in mode and Path(file).parent == folder:
            ticks.append(worker.control())
        return opened

    monkeypatch.setattr(io, "open", open_then_tick)
    assert registry.request(tmp_path, worker.id, "stop")
    monkeypatch.undo()
    ticks.append(worker.control())
    assert ticks == [None, "stop"]
    assert worker.control() is None  # taken once
    assert sorted(p.name for p in folder.iterdir()) == [f"{worker.id}.json"]


def test_a_dead_namesakes_request_is_not_obeyed(tmp_path: Path) -> None:
    """A worker with this host and pid (a container with a fixed hostname) died with a
    `stop` waiting for it: a new worker of the same identity does not take it as its own."""
    folder = tmp_path / registry.WORKERS_DIR
    folder.mkdir()
    (folder / f"{worker_id()}.control").write_text("stop")
    worker = Registry([tmp_path])
    assert worker.control() is None
    worker.write([], {})
    assert registry.request(tmp_path, worker.id, "quiet")
    assert worker.control() == "quiet"
