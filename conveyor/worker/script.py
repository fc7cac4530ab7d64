"""One run of a queue script: a process, its status pipe, its timeout.

The process gets RQ's environment, a status pipe (RQ_WRITE) and a reply pipe (RQ_READ),
stdin from /dev/null and stdout+stderr on a pipe the worker copies into the message's
stdio.log, bounded by rotation (stdiolog). It runs in its own session so a timeout kills
everything it started, not just the first process.
"""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from conveyor.worker.stdiolog import LogLimits, StdioLog

# A status line is a few hundred bytes in practice; these bound what a broken script can
# make the worker buffer. Past them the script is killed and the message goes to err.
MAX_LINE_BYTES = 64 * 1024
MAX_PIPE_BYTES = 1024 * 1024
KILL_GRACE_S = 2.0
# Output still in the pipe once the script is gone is read without waiting, and only so
# much: a process it left in the background may hold the pipe open and write on and on.
MAX_DRAIN_BYTES = 4 * 1024 * 1024
_CHUNK = 65536


@dataclass
class ScriptResult:
    state: str  # done | err | resend | relayed
    text: str
    exit_code: int | None = None
    resend_delay: int = 0


@dataclass
class ScriptHooks:
    """What the worker does for status lines: `run` text, `dup` requests, heartbeats."""

    on_run: Callable[[str], None]
    on_dup: Callable[[str], str]  # returns the reply line: "ok <id>" or "fail <reason>"
    heartbeat: Callable[[], None]
    heartbeat_every: float


def build_command(exec_prefix: str, real_script: str) -> list[str]:
    # RQ execs `exec_prefix + script` as one shell string ("bash -lc /path"); the script
    # path is one argument of the prefix's last word, so it is quoted for that shell.
    if not exec_prefix.strip():
        return [real_script]
    return [*shlex.split(exec_prefix), shlex.quote(real_script)]


class _Completion:
    """The last decisive status line seen: done, err, relayed or resend."""

    def __init__(self) -> None:
        self.state: str | None = None
        self.text = ""
        self.delay = 0


def run_script(
    command: list[str], cwd: Path, log_path: Path, env: dict[str, str], timeout: float,
    hooks: ScriptHooks, on_start: Callable[[int], None] | None = None,
    log_limits: LogLimits = LogLimits(),
) -> ScriptResult:  # fmt: skip
    status_r, status_w = os.pipe()
    reply_r, reply_w = os.pipe()
    out_r, out_w = os.pipe()
    env = {**env, "RQ_WRITE": str(status_w), "RQ_PIPE": str(status_w), "RQ_READ": str(reply_r)}
    try:
        stdio = StdioLog(log_path, log_limits)
    except OSError as exc:
        for fd in (status_r, status_w, reply_r, reply_w, out_r, out_w):
            os.close(fd)
        return ScriptResult("err", f"could not start the script: {exc}")
    try:
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out_w, stderr=subprocess.STDOUT,
            cwd=cwd, env=env, pass_fds=(status_w, reply_r), start_new_session=True,
        )  # fmt: skip
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the env or command
        for fd in (status_r, status_w, reply_r, reply_w, out_r, out_w):
            os.close(fd)
        stdio.close()
        return ScriptResult("err", f"could not start the script: {exc}")
    for fd in (status_w, reply_r, out_w):
        os.close(fd)
    os.set_blocking(reply_w, False)
    output = _Output(out_r, stdio)
    try:
        if on_start is not None:
            on_start(proc.pid)  # the pid is its process group's id too (a new session)
        problem, completion = _pump(
            proc, status_r, reply_w, output, time.monotonic() + timeout, hooks
        )
    except BaseException:
        # A hook failed (a full disk, a vanished directory; on_start too): the message
        # comes back after RETRY, and this run must not go on unwatched, nor stay a zombie
        # once it ends, nor keep its pipes open in the worker.
        _kill_group(proc)
        output.close()
        raise
    finally:
        os.close(status_r)
        os.close(reply_w)
    if problem is not None:
        _kill_group(proc)
    output.close()  # after the kill: the script's last words are logged too
    if problem is not None:
        if problem == "timed out":
            problem = f"timed out after {timeout:g}s; the script was killed"
        return ScriptResult("err", problem, proc.returncode)
    return _decide(proc.returncode, completion)


class _Output:
    """The pipe of the script's stdout and stderr, copied into its stdio.log."""

    def __init__(self, fd: int, stdio: StdioLog) -> None:
        self.fd, self.stdio = fd, stdio

    def read(self) -> bool:
        """One chunk into the log; False at the end (every writer has closed the pipe)."""
        chunk = os.read(self.fd, _CHUNK)
        self.stdio.write(chunk)
        return bool(chunk)

    def close(self) -> None:
        """Log what is left in the pipe without waiting for its writers, then close it. A
        process left in the background that writes later gets EPIPE (SIGPIPE)."""
        os.set_blocking(self.fd, False)
        drained = 0
        with contextlib.suppress(BlockingIOError):
            while drained < MAX_DRAIN_BYTES and self.read():
                drained += _CHUNK
        os.close(self.fd)
        self.stdio.close()


class _Reader:
    """The status pipe's bytes, cut into lines, with the flood limits."""

    def __init__(self, completion: _Completion, reply_w: int, hooks: ScriptHooks) -> None:
        self.completion, self.reply_w, self.hooks = completion, reply_w, hooks
        self.buffer = b""
        self.total = 0

    def feed(self, chunk: bytes) -> str | None:
        """Take a chunk; a problem text when the script floods the pipe."""
        self.total += len(chunk)
        if self.total > MAX_PIPE_BYTES:
            return f"status pipe flooded: more than {MAX_PIPE_BYTES} bytes"
        *lines, self.buffer = (self.buffer + chunk).split(b"\n")
        if len(self.buffer) > MAX_LINE_BYTES:
            return f"status line longer than {MAX_LINE_BYTES} bytes"
        _feed(lines, self.completion, self.reply_w, self.hooks)
        return None

    def drain(self, status_r: int) -> str | None:
        """After the exit: what is left in the pipe (a background child may keep it open,
        so read without blocking)."""
        os.set_blocking(status_r, False)
        while True:
            try:
                chunk = os.read(status_r, 65536)
            except BlockingIOError:
                return None
            if not chunk:
                return None
            problem = self.feed(chunk)
            if problem is not None:
                return problem


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux >= 5.3: the exit is polled instead
        return None


def _pump(
    proc: subprocess.Popen[bytes], status_r: int, reply_w: int, output: _Output,
    deadline: float, hooks: ScriptHooks,
) -> tuple[str | None, _Completion]:  # fmt: skip
    """Read status lines until the script exits; a problem text if it must be killed.
    The exit is watched through a pidfd in the same poll() as the pipe: no sleeping."""
    completion = _Completion()
    reader = _Reader(completion, reply_w, hooks)
    next_beat = time.monotonic() + hooks.heartbeat_every
    poller = select.poll()  # no syscall to make one, unlike epoll; no fd limit, unlike select
    poller.register(status_r, select.POLLIN)
    poller.register(output.fd, select.POLLIN)
    pidfd = _pidfd(proc.pid)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                return "timed out", completion
            if now >= next_beat:
                hooks.heartbeat()
                next_beat = now + hooks.heartbeat_every
            wait = min(deadline, next_beat) - now
            if pidfd is None:
                wait = min(wait, 0.05)
            events = dict(poller.poll(max(1, int(wait * 1000))))
            if events.get(output.fd) and not output.read():
                poller.unregister(output.fd)  # closed by the script and all it started
            if events.get(status_r):
                chunk = os.read(status_r, _CHUNK)
                if chunk:
                    problem = reader.feed(chunk)
                    if problem is not None:
                        return problem, completion
                    continue
                poller.unregister(status_r)  # closed: only the exit is left to see
            if (pidfd is not None and events.get(pidfd)) or (
                pidfd is None and proc.poll() is not None
            ):
                proc.wait()
                return reader.drain(status_r), completion
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _feed(lines: list[bytes], completion: _Completion, reply_w: int, hooks: ScriptHooks) -> None:
    # Of a burst of `run` lines only the last is written: status.json is a snapshot.
    pending_run: str | None = None
    for raw in lines:
        line = raw.decode("utf-8", "replace")
        if line.startswith("run ") or line.strip() == "run":
            pending_run = line.strip()[4:]
            continue
        if pending_run is not None:
            hooks.on_run(pending_run)
            pending_run = None
        _handle_line(line, completion, reply_w, hooks)
    if pending_run is not None:
        hooks.on_run(pending_run)


def _handle_line(line: str, completion: _Completion, reply_w: int, hooks: ScriptHooks) -> None:
    command, _, text = line.strip().partition(" ")
    if command == "run":
        hooks.on_run(text)
    elif command in ("done", "err", "fails", "relayed"):
        completion.state = "err" if command == "fails" else command
        completion.text = text  # status.json gets it when the message changes state
    elif command == "resend":
        due, _, reason = text.partition("-")
        if due.strip().isdigit():
            completion.state, completion.text, completion.delay = "resend", reason, int(due)
        else:
            completion.state, completion.text = "err", f"bad resend line: {line[:200]!r}"
    elif command == "dup":
        reply = hooks.on_dup(text)
        with contextlib.suppress(OSError):  # a script that never reads its replies
            os.write(reply_w, (reply.replace("\n", " ") + "\n").encode())
    elif command:
        hooks.on_run(f"unknown status command {command!r}: {text}")


def _decide(exit_code: int | None, completion: _Completion) -> ScriptResult:
    """RQ's rule: a non-zero exit is err whatever was said; else the last decisive line."""
    if exit_code != 0 and completion.state != "err":
        how = (
            f"killed by signal {signal.Signals(-exit_code).name}"
            if exit_code is not None and exit_code < 0
            else f"exit status {exit_code}"
        )
        said = completion.state or "nothing"
        return ScriptResult("err", f"process exited improperly ({how}) after {said}", exit_code)
    if completion.state is None:
        return ScriptResult("err", "the script exited without reporting a status", exit_code)
    return ScriptResult(completion.state, completion.text, exit_code, completion.delay)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """TERM the script's process group, KILL what is left of it after a grace period, reap
    the script. The group is killed even when the script itself went at the TERM: a child
    that ignores TERM (or takes its time) would otherwise outlive the timeout for good."""
    signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_S
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(KILL_GRACE_S)
    # The group's id stays reserved while any member lives, so it names no stranger here.
    while time.monotonic() < deadline and signal_group(proc.pid, 0):
        time.sleep(0.05)
    signal_group(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10.0)


def signal_group(pgid: int, sig: int) -> bool:
    """Whether the process group `pgid` had a member to take `sig` (0: only look)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_stale(pgid: int | None) -> None:
    """A message re-delivered after its worker died: end the old run's process group."""
    if pgid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
