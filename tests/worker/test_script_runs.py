"""One run of a queue script on real processes: what a timeout kills and what is left."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conveyor.worker import script
from conveyor.worker.script import ScriptHooks, run_script
from tests.worker.conftest import wait_for

QUIET_HOOKS = ScriptHooks(lambda text: None, lambda text: "fail", lambda: None, 60.0)


def _gone(pid: int) -> bool:
    """Whether process `pid` is dead: no such process, or a zombie left to its reaper."""
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) == "Z"
    except FileNotFoundError:
        return True


def test_a_timeout_kills_a_child_that_ignores_term(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(script, "KILL_GRACE_S", 0.3)  # the 2 s wait, shortened
    # The child ignores TERM; the script itself goes at the first TERM.
    text = "(trap '' TERM; sleep 60) & echo $! > child.pid; sleep 60\n"
    result = run_script(
        ["bash", "-c", text], tmp_path, tmp_path / "stdio.log", dict(os.environ), 0.2,
        QUIET_HOOKS,
    )  # fmt: skip
    assert result.text == "timed out after 0.2s; the script was killed"
    child = int((tmp_path / "child.pid").read_text())
    try:
        wait_for(lambda: _gone(child), timeout=5, what="the child that ignored TERM killed")
    finally:
        if not _gone(child):
            os.kill(child, 9)


def test_a_hook_that_fails_ends_the_run_it_watched(tmp_path: Path) -> None:
    started: list[int] = []

    def status_not_writable(text: str) -> None:
        raise OSError(28, "No space left on device")

    hooks = ScriptHooks(status_not_writable, lambda text: "fail", lambda: None, 60.0)
    text = 'echo "run working" >&$RQ_WRITE; sleep 60\n'
    with pytest.raises(OSError, match="No space left"):
        run_script(
            ["bash", "-c", text], tmp_path, tmp_path / "stdio.log", dict(os.environ), 60.0,
            hooks, started.append,
        )  # fmt: skip
    try:  # killed and reaped (this process is its parent): not running on, not a zombie
        assert not Path(f"/proc/{started[0]}").exists()
    finally:
        if not _gone(started[0]):
            os.killpg(started[0], 9)


def test_a_failing_start_hook_ends_the_run_and_keeps_no_pipe_open(tmp_path: Path) -> None:
    started: list[int] = []

    def status_not_writable(pid: int) -> None:  # the runner writes status.json here
        started.append(pid)
        raise OSError(28, "No space left on device")

    open_before = sorted(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError, match="No space left"):
        run_script(
            ["bash", "-c", "sleep 60\n"], tmp_path, tmp_path / "stdio.log", dict(os.environ),
            60.0, QUIET_HOOKS, status_not_writable,
        )  # fmt: skip
    try:  # killed and reaped, and none of its pipes left open in the worker
        assert not Path(f"/proc/{started[0]}").exists()
        assert sorted(os.listdir("/proc/self/fd")) == open_before
    finally:
        if not _gone(started[0]):
            os.killpg(started[0], 9)
