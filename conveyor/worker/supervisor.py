"""`--processes N`: N single-process task workers as children, restarted if they die, and
signals passed on (a second TERM/INT passes on as a second one: exit at once)."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time

log = logging.getLogger("conveyor.worker")
_MAX_RESTARTS_PER_MINUTE = 10


def supervise(
    reference: str, nodes: list[str], processes: int, threads: int, grace: float, batch: int
) -> int:
    command = [sys.executable, "-m", "conveyor.cli", "worker", "--app", reference]
    command += ["--nodes", ",".join(nodes), "--threads", str(threads)]
    command += ["--grace", str(grace), "--batch", str(batch)]
    if log.isEnabledFor(logging.INFO):
        command.append("-v")
    # The handler only notes a signal and the loop passes it on to the children there are
    # then: passed on from the handler, one that came while a child was being (re)started
    # missed that child, and waiting for it hung.
    pending: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: pending.append(signum))
    children = [subprocess.Popen(command) for _ in range(processes)]
    stopping = False
    restarts: list[float] = []
    while True:
        while pending:
            stopping = True
            signum = pending.pop(0)
            for child in children:
                if child.poll() is None:
                    child.send_signal(signum)
        if stopping and all(child.poll() is not None for child in children):
            return max((child.returncode for child in children), default=0)
        if not stopping and not _restart_dead(children, command, restarts, pending):
            pending.append(signal.SIGTERM)
        time.sleep(0.2)


def _restart_dead(
    children: list[subprocess.Popen[bytes]], command: list[str], restarts: list[float],
    pending: list[int],
) -> bool:  # fmt: skip
    """Start again the children that died; False when they keep dying (then stop them)."""
    for index, child in enumerate(children):
        if child.poll() is None:
            continue
        if pending:
            return True  # told to stop meanwhile: no new child
        restarts[:] = [t for t in restarts if t > time.monotonic() - 60] + [time.monotonic()]
        if len(restarts) > _MAX_RESTARTS_PER_MINUTE:
            log.error("workers keep dying; giving up")
            return False
        log.warning("worker %d exited with %s; restarting", child.pid, child.returncode)
        children[index] = subprocess.Popen(command)
    return True
