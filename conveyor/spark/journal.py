"""The per-batch lease journal: which jobs a micro-batch holds, kept until they are acked.

Why: a job leased with GETJOB is only on the node's books as "delivered"; if the driver
dies between planning a batch and committing it, Spark replans the same offsets on
restart and expects the same rows. The journal keeps each batch's rows (Arrow IPC, the
same bytes the partitions carried) under `<journal>/<run>/`, written before the offset
is handed to Spark and deleted once the batch's acks have succeeded. `run` is a random
name chosen when a query starts from scratch, carried in every offset, so two queries
sharing a journal directory never read each other's batches.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from conveyor.persistence.appendfile import fsync_directory
from conveyor.spark import rows
from conveyor.spark.options import OptionError


class Journal:
    def __init__(self, root: str, run: str) -> None:
        self.directory = Path(root) / run
        # Now, before any job is leased: a directory that cannot be made (the option names
        # a file, say) would otherwise fail the first batch with the jobs already leased.
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise OptionError(f"option journal: cannot use {root!r}: {error}") from None

    def _path(self, seq: int) -> Path:
        return self.directory / f"batch-{seq:012d}.arrow"

    def write(self, seq: int, batches: list[pa.RecordBatch]) -> None:
        """Durably record batch `seq` (written aside, fsynced, then renamed)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self._path(seq)
        temporary = final.with_suffix(".tmp")
        with open(temporary, "wb") as handle:
            handle.write(rows.to_ipc(batches))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, final)
        # The rename is only on disk once the directory is: else a power cut can undo it.
        fsync_directory(self.directory)

    def load(self, seq: int) -> list[pa.RecordBatch] | None:
        try:
            payload = self._path(seq).read_bytes()
        except FileNotFoundError:
            return None
        return list(rows.from_ipc(payload))

    def delete(self, seq: int) -> None:
        try:
            self._path(seq).unlink()
        except FileNotFoundError:
            pass

    def pending(self) -> list[int]:
        """Sequence numbers of the batches still journaled, oldest first."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.glob("batch-*.arrow"):
            try:
                found.append(int(path.stem.removeprefix("batch-")))
            except ValueError:
                continue
        return sorted(found)
