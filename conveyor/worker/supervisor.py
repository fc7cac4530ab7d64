"""`--processes N`: N single-process task workers as children, restarted if they die, and
signals passed on (a second TERM/INT passes on as a second one: exit at once)."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from types import FrameType

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
    children = [subprocess.Popen(command) for _ in range(processes)]
    signals_seen: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        signals_seen.append(signum)
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    restarts: list[float] = []
    while not signals_seen:
        time.sleep(0.2)
        for index, child in enumerate(children):
            if child.poll() is None or signals_seen:
                continue
            restarts = [t for t in restarts if t > time.monotonic() - 60] + [time.monotonic()]
            if len(restarts) > _MAX_RESTARTS_PER_MINUTE:
                log.error("workers keep dying; giving up")
                forward(signal.SIGTERM, None)
                break
            log.warning("worker %d exited with %s; restarting", child.pid, child.returncode)
            children[index] = subprocess.Popen(command)
    codes = [child.wait() for child in children]
    return max(codes, default=0)
