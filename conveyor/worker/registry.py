"""What a `conveyor worker` process tells the console, and how the console talks back, through
the queue directories both already share.

Every second the worker writes `QUEUE_DIR/workers/<host>-<pid>.json` into each queue
directory it serves: its host and pid, its state (running, quiet, stopping), per queue the
slots and how many are busy, the messages it runs now, counts of outcomes, and a histogram
of add-to-deliver latency (from a message's `due_at` to the moment a slot took it). The
console reads those files for its workers page and /metrics.

The console asks a worker to go quiet (fetch no more messages, finish the running ones,
stay alive) or to stop (as on TERM) by putting `quiet` or `stop` into
`workers/<host>-<pid>.control`; the worker takes it on its next tick. Both sides only ever
rename that file (the console a whole file into place, the worker the file out of the way),
so no request is read half-written or lost. A worker that exits removes its files; one killed
outright leaves a file whose `updated` stops moving, which the console shows as lost.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from conveyor.worker.queuedir import write_whole

WORKERS_DIR = "workers"
# Seconds: add-to-deliver latency buckets, from a local node's milliseconds to a backlog's
# minutes.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
CONTROLS = ("quiet", "stop")


def worker_id(host: str | None = None, pid: int | None = None) -> str:
    return f"{host or socket.gethostname()}-{pid or os.getpid()}"


class Latency:
    """A cumulative histogram, Prometheus-style: counts per upper bound, sum and count."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one is +Inf
        self.total = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        with self._lock:
            self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
            self.total += seconds
            self.count += 1

    def doc(self) -> dict[str, Any]:
        with self._lock:
            return {
                "buckets": list(LATENCY_BUCKETS),
                "counts": list(self.counts),
                "sum": self.total,
                "count": self.count,
            }


class Registry:
    """This worker process's record in each queue directory it serves."""

    def __init__(self, directories: list[Path]) -> None:
        self.id = worker_id()
        self.started = time.time()
        self.state = "running"
        self._dirs = [d / WORKERS_DIR for d in directories]
        for folder in self._dirs:
            folder.mkdir(exist_ok=True)
            _remove_dead(folder)
            # Left for a dead worker of the same identity (a container's fixed hostname and
            # pid): not meant for this one.
            for name in (f"{self.id}.control", f".{self.id}.control.taken"):
                with contextlib.suppress(OSError):
                    (folder / name).unlink()

    def write(
        self, queues: list[dict[str, Any]], latency: dict[str, Any],
        held: dict[str, int] | None = None,
    ) -> None:  # fmt: skip
        doc = {
            "id": self.id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": self.started,
            "updated": time.time(),
            "state": self.state,
            "queues": queues,
            "latency": latency,
            # What the process holds beyond the running messages, which must go back to
            # nothing once they are settled: a look at it tells a leak at once.
            "held": held or {},
        }
        text = json.dumps(doc)
        for folder in self._dirs:
            tmp = folder / f".{self.id}.json.tmp"
            with contextlib.suppress(OSError):
                tmp.write_text(text)
                os.replace(tmp, folder / f"{self.id}.json")

    def control(self) -> str | None:
        """A `quiet` or `stop` request from the console, consumed; None if there is none."""
        found = None
        for folder in self._dirs:
            word = _take(folder / f"{self.id}.control", folder / f".{self.id}.control.taken")
            if word in CONTROLS and found != "stop":  # stop outranks quiet
                found = word
        return found

    def remove(self) -> None:
        for folder in self._dirs:
            for name in (f"{self.id}.json", f"{self.id}.control", f".{self.id}.control.taken"):
                with contextlib.suppress(OSError):
                    (folder / name).unlink()


def _take(path: Path, taken: Path) -> str | None:
    """The word in `path`, which is removed. Renamed away before it is read: a request the
    console puts in place meanwhile is a new file, left for the next tick."""
    try:
        os.rename(path, taken)
    except OSError:
        return None
    try:
        return taken.read_text().strip()
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            taken.unlink()


def _remove_dead(folder: Path) -> None:
    """Records of this host's workers whose process is gone (killed outright)."""
    host = socket.gethostname()
    for path in folder.glob(f"{host}-*.json"):
        pid_text = path.stem.rsplit("-", 1)[-1]
        if pid_text.isdigit() and not _alive(int(pid_text)):
            with contextlib.suppress(OSError):
                path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def request(queue_dir: Path, wid: str, word: str) -> bool:
    """The console's side: ask worker `wid` to go quiet or stop; False if it has no record
    in that queue directory."""
    if word not in CONTROLS:
        raise ValueError(f"control must be one of {', '.join(CONTROLS)}")
    folder = queue_dir / WORKERS_DIR
    if "/" in wid or wid.startswith(".") or not (folder / f"{wid}.json").is_file():
        return False
    # Written whole: the worker never sees it empty (it would take it, and this write
    # would land in a removed file).
    write_whole(folder / f"{wid}.control", word)
    return True


def read_all(queue_dir: Path) -> list[dict[str, Any]]:
    folder = queue_dir / WORKERS_DIR
    records = []
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError:
        return []
    for path in paths[:1000]:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("id"), str):
            records.append(doc)
    return records
