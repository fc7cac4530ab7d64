"""A queue script's stdio.log, bounded by size-based rotation.

Owns: writing what a run prints (stdout and stderr, which the worker reads from a pipe) to
the message's `stdio.log`, and rotating it as logrotate's `rotate N` / Python's
RotatingFileHandler do: once the file would pass `max_bytes` it becomes `stdio.log.1`
(`.1` becomes `.2`, ... up to `backups`; the oldest is removed) and a new `stdio.log`
starts. A message's logs so never take more than (backups + 1) x max_bytes, whatever a
script prints or however often it is resent, and the newest output is always at the end
of `stdio.log`.

The worker, not the script, holds the file: a script given the file itself could be
bounded only by copying and truncating behind its back, which loses lines and lets a
fast writer overshoot between two looks.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("conveyor.worker")

DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_BACKUPS = 2
MIN_MAX_BYTES = 1024  # below this a log holds too little of one run to be worth reading
MAX_BACKUPS = 100


@dataclass(frozen=True)
class LogLimits:
    """How large one stdio.log may grow, and how many rotated ones are kept."""

    max_bytes: int = DEFAULT_MAX_BYTES
    backups: int = DEFAULT_BACKUPS


class StdioLog:
    """One run's writer of `path`, appending to what earlier runs of the message left."""

    def __init__(self, path: Path, limits: LogLimits) -> None:
        self.path = path
        self.limits = limits
        self._file = open(path, "ab")  # noqa: SIM115 - closed in close()
        self.size = os.fstat(self._file.fileno()).st_size
        self._failed = False

    def write(self, data: bytes) -> None:
        """Append `data`, rotating first whenever it would pass the limit. A write that
        fails (a full disk) drops the output, never the run: the status lines still settle
        the message."""
        if self._failed:
            return
        try:
            while data:
                room = self.limits.max_bytes - self.size
                if room <= 0:
                    self._rotate()
                    continue
                piece, data = data[:room], data[room:]
                self._file.write(piece)
                self.size += len(piece)
            self._file.flush()  # readers (the console's live log) see output as it comes
        except OSError as exc:
            self._failed = True
            log.warning("%s: output not logged from here on: %s", self.path, exc)

    def _rotate(self) -> None:
        self._file.close()
        base = str(self.path)
        # stdio.log.N-1 -> .N, ..., stdio.log -> .1; the one past `backups` is replaced.
        for number in range(self.limits.backups, 0, -1):
            older = f"{base}.{number - 1}" if number > 1 else base
            with contextlib.suppress(FileNotFoundError):
                os.replace(older, f"{base}.{number}")
        # With no backups the file is started over.
        self._file = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        self.size = 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
