"""The spool of the streaming reader's partition files (option exchange=file, local mode).

Owns `Spool`: where the driver writes each partition's rows for the executors to read,
and when those files go. A file is only needed while Spark runs its batch (task retries
included): once Spark commits the batch, it never reads it again, and a replay after a
restart comes from the journal (or the driver's memory), not from here. So files go at
commit, whether or not the batch's acks have succeeded yet (a node that is down must not
keep them), and a query started again on the same run removes the files its predecessor
left behind (Spark does not reliably call `stop()` on a query that failed).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def _batch_of(path: Path) -> int | None:
    """The batch number in `batch-<seq>-<index>.arrow` (or `.tmp`), else None."""
    parts = path.stem.split("-")
    if len(parts) != 3 or parts[0] != "batch":
        return None
    try:
        return int(parts[1])
    except ValueError:
        return None


class Spool:
    """The partition files of one query run, under one directory made on first use."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.directory: Path | None = None

    def _root(self) -> Path:
        # Spark's own scratch space for this application (removed when it stops), else
        # the system's temporary directory.
        roots = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")
        return Path(roots[0] if roots[0] else tempfile.gettempdir())

    def _open(self) -> Path:
        root = self._root()
        # Left by an earlier driver process of this run (a query that failed and was
        # started again): its batches were committed or are re-spooled from the journal.
        for stale in root.glob(f"conveyor-{self.run}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        self.directory = Path(tempfile.mkdtemp(prefix=f"conveyor-{self.run}-", dir=root))
        return self.directory

    def write(self, seq: int, index: int, payload: bytes) -> str:
        """Write partition `index` of batch `seq`; the path the executors will read."""
        directory = self.directory or self._open()
        path = directory / f"batch-{seq:012d}-{index:04d}.arrow"
        temporary = path.with_suffix(".tmp")
        temporary.write_bytes(payload)
        os.replace(temporary, path)
        return str(path)

    def drop_through(self, seq: int) -> None:
        """Delete the files of every batch up to `seq` (Spark committed them)."""
        if self.directory is None:
            return
        try:
            entries = list(self.directory.iterdir())
        except FileNotFoundError:
            return
        for path in entries:
            batch = _batch_of(path)
            if batch is not None and batch <= seq:
                path.unlink(missing_ok=True)

    def batches(self) -> set[int]:
        """Batch numbers that still have files (for tests)."""
        if self.directory is None or not self.directory.is_dir():
            return set()
        found = {_batch_of(path) for path in self.directory.iterdir()}
        return {seq for seq in found if seq is not None}

    def remove(self) -> None:
        """Delete the directory and whatever is left in it (the query stops)."""
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
