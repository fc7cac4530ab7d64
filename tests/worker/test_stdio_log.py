"""A message's stdio.log is bounded: rotated past `log_max_bytes`, `log_backups` kept."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor.client import Client
from conveyor.worker.envelope import Envelope
from conveyor.worker.queuedir import QueueConfig, QueueConfigError, dir_name
from conveyor.worker.script import ScriptHooks, run_script
from conveyor.worker.service import add_message
from conveyor.worker.stdiolog import DEFAULT_BACKUPS, DEFAULT_MAX_BYTES, LogLimits
from tests.worker.conftest import WorkerProcess, make_queue, wait_state, write_script

QUIET_HOOKS = ScriptHooks(lambda text: None, lambda text: "fail", lambda: None, 60.0)
# 20,000 numbered lines, about 190 KB, then `done`.
PRINTER = 'for i in $(seq 1 20000); do echo "line $i"; done\necho "done printed" >&$RQ_WRITE\n'


def _run(directory: Path, text: str, limits: LogLimits) -> str:
    result = run_script(
        ["bash", "-c", text], directory, directory / "stdio.log", dict(os.environ), 60.0,
        QUIET_HOOKS, None, limits,
    )  # fmt: skip
    return result.state


def _logs(directory: Path) -> list[Path]:
    return sorted(directory.glob("stdio.log*"))


def _numbers(text: str) -> list[int]:
    """The numbers of the whole `line N` lines of `text` (its first may be cut)."""
    return [int(line[5:]) for line in text.splitlines() if line.startswith("line ")]


def test_a_script_printing_past_the_limit_leaves_rotated_bounded_logs(tmp_path: Path) -> None:
    limits = LogLimits(max_bytes=65536, backups=2)
    assert _run(tmp_path, PRINTER, limits) == "done"
    names = [path.name for path in _logs(tmp_path)]
    assert names == ["stdio.log", "stdio.log.1", "stdio.log.2"]
    assert all(path.stat().st_size <= 65536 for path in _logs(tmp_path))
    newest = (tmp_path / "stdio.log").read_text()
    assert newest.endswith("line 20000\n")
    # Oldest to newest, the kept files are one unbroken stretch of the output.
    kept = "".join((tmp_path / n).read_text() for n in ("stdio.log.2", "stdio.log.1", "stdio.log"))
    numbers = _numbers(kept)
    assert numbers == list(range(numbers[0], 20001))
    assert len(kept) >= 2 * 65536


def test_without_backups_the_log_starts_over_and_a_resend_stays_bounded(
    tmp_path: Path,
) -> None:
    limits = LogLimits(max_bytes=4096, backups=0)
    for _run_number in range(2):  # a resend appends to the same message's log
        assert _run(tmp_path, PRINTER, limits) == "done"
    assert [path.name for path in _logs(tmp_path)] == ["stdio.log"]
    assert (tmp_path / "stdio.log").stat().st_size <= 4096
    assert (tmp_path / "stdio.log").read_text().endswith("line 19999\nline 20000\n")


def test_a_background_process_holding_the_output_does_not_hold_up_the_run(
    tmp_path: Path,
) -> None:
    text = 'echo before; sleep 60 & echo $! > bg.pid; echo "done left one" >&$RQ_WRITE\n'
    assert _run(tmp_path, text, LogLimits()) == "done"
    background = int((tmp_path / "bg.pid").read_text())
    try:  # the run ended while its background process still held the pipe open
        assert Path(f"/proc/{background}").exists()
    finally:
        os.kill(background, signal.SIGKILL)
    assert (tmp_path / "stdio.log").read_text() == "before\n"


def test_config_json_sets_the_limits_and_refuses_bad_ones(tmp_path: Path) -> None:
    default = QueueConfig.load(make_queue(tmp_path, "plain", "/bin/true"))
    assert default.log_limits == LogLimits(DEFAULT_MAX_BYTES, DEFAULT_BACKUPS)
    assert DEFAULT_MAX_BYTES == 10 * 1024 * 1024
    set_ = make_queue(tmp_path, "set", "/bin/true", log_max_bytes=5000, log_backups=0)
    assert QueueConfig.load(set_).log_limits == LogLimits(5000, 0)
    for bad in ({"log_max_bytes": 10}, {"log_max_bytes": 1e7}, {"log_backups": -1},
                {"log_backups": "3"}, {"log_max_bytes": True}):  # fmt: skip
        directory = tmp_path / "bad"
        (directory / "config.json").unlink(missing_ok=True)
        directory.mkdir(exist_ok=True)
        (directory / "config.json").write_text(json.dumps({"name": "bad", "script": "/x", **bad}))
        with pytest.raises(QueueConfigError, match=next(iter(bad))):
            QueueConfig.load(directory)


def test_a_worker_rotates_a_message_log_by_its_config_json(
    client: Client, tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    script = write_script(tmp_path / "printer.sh", "#!/bin/bash\n" + PRINTER)
    queue_dir = make_queue(
        tmp_path / "queues", "printer", script, exec_prefix="", log_max_bytes=8192, log_backups=1
    )
    job_id = add_message(client, QueueConfig.load(queue_dir), Envelope())
    start_worker(str(queue_dir))
    assert wait_state(queue_dir, job_id, ("done", "err"), timeout=30)["state"] == "done"
    message = queue_dir / "done" / dir_name(job_id)
    assert [path.name for path in _logs(message)] == ["stdio.log", "stdio.log.1"]
    assert all(path.stat().st_size <= 8192 for path in _logs(message))
    assert (message / "stdio.log").read_text().endswith("line 20000\n")
