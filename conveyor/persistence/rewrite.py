"""AOF rewrite: a compact file of the held jobs, built a slice at a time beside the live one.

Disque forks and lets the child write the snapshot. A Python process cannot do that
cheaply: every object the child reads has its reference count written, so copy-on-write
copies the whole heap, and fork itself stalls for the page tables of a large one.
Instead the driver calls `step` between event-loop rounds, each call encoding a bounded
slice of the job IDs taken when the rewrite started, and appends every record the node
writes meanwhile to both files (`append`). The order inside the new file is then always
right for a load:

- a job freed before its slice is reached is skipped by the slice (it is no longer held)
  and its DELJOB is in the file already, after nothing;
- a job freed after its slice has its snapshot LOADJOB first and its DELJOB later;
- a job added after the start is not in the ID list: its LOADJOB comes from the live
  stream, once.

Until `sync_and_rename` renames it over the AOF, the old file keeps receiving every
record, so a crash at any moment leaves a complete file at the AOF's path: the old one,
or the new. A write that fails on the new file before the rename fails the rewrite
alone (`doomed`), as in Redis: the rename then never happens, so the new file can never
become the AOF without a record the old one has. After the rename the new file is the
AOF, and its write errors are the AOF's.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from conveyor.core.job import Job
from conveyor.persistence.appendfile import AppendFile, fsync_directory

log = logging.getLogger("conveyor.persistence")

# Jobs encoded per slice: about 1-2 ms of event-loop time with 100-byte bodies.
SLICE_JOBS = 1000


def temp_path(directory: Path) -> Path:
    return directory / f"temp-rewriteaof-bg-{os.getpid()}.aof"


class Rewrite:
    """One rewrite in progress into `file` (a temp file next to `target`)."""

    def __init__(self, target: Path, job_ids: list[bytes]) -> None:
        self.target = target
        self.file = AppendFile(temp_path(target.parent), truncate=True)
        self.job_ids = job_ids
        self.position = 0
        self.jobs_written = 0
        # Why this rewrite cannot be put in place (a write to its file failed), if so.
        self.doomed: OSError | None = None
        self.renamed = False  # the file is the AOF now
        # Makes "a write failed" and "renamed" exclusive: the rename runs in a thread.
        self._switch_lock = threading.Lock()

    @property
    def snapshot_done(self) -> bool:
        return self.position >= len(self.job_ids)

    def step(
        self,
        jobs: dict[bytes, Job],
        encode: Callable[[Job], bytes | None],
        slice_jobs: int = SLICE_JOBS,
    ) -> bool:
        """Encode and write the next slice; True once every ID has been looked at.

        A write error dooms the rewrite (`doomed`).
        """
        end = min(self.position + slice_jobs, len(self.job_ids))
        records = []
        get = jobs.get
        for job_id in self.job_ids[self.position : end]:
            job = get(job_id)
            if job is not None:
                record = encode(job)
                if record is not None:
                    records.append(record)
        self.file.extend(records)
        self.jobs_written += len(records)
        self.position = end
        self.flush()
        if self.snapshot_done:
            self.job_ids = []  # the list is the rewrite's biggest allocation
        return self.snapshot_done

    def append(self, records: list[bytes]) -> None:
        self.file.extend(records)

    def flush(self) -> bool:
        """Write what is buffered; False when it could not be. Before the rename a failure
        sets `doomed` (what it buffers then is dropped: the file will not be used); after
        it, the records stay buffered for a retry, as the AOF's do."""
        with self._switch_lock:
            if self.doomed is not None:
                self.file.pending = []
                self.file.pending_bytes = 0
                return False
            if self.file.flush():
                return True
            if not self.renamed:
                self.doomed = self.file.last_error
            return False

    def sync_and_rename(self) -> None:
        """Make the new file durable and put it in place: runs in a worker thread.

        Records appended while this runs land in the same (renamed) file, and the live
        file still gets them too; the lock makes the rename wait for a write under way
        and refuse once one failed, so the file renamed holds every record.
        """
        self.file.sync()
        with self._switch_lock:
            if self.doomed is not None:
                raise self.doomed
            os.replace(self.file.path, self.target)
            self.renamed = True
        try:
            fsync_directory(self.target.parent)
        except OSError as exc:
            # Renamed: the new file is the AOF whatever this says, and must be switched
            # to (failing the rewrite now would keep appending to the unlinked old file).
            log.warning("fsync of the AOF's directory after the rewrite's rename: %s", exc)

    def abandon(self, *, keep_open: bool = False) -> None:
        """Remove the new file; with `keep_open` its caller closes it later (an fsync in
        another thread may still be using it)."""
        if not keep_open:
            self.file.close()
        try:
            os.unlink(self.file.path)
        except FileNotFoundError:
            pass


def rewrite_now(
    target: Path, jobs: dict[bytes, Job], encode: Callable[[Job], bytes | None]
) -> AppendFile:
    """A synchronous rewrite (SHUTDOWN REWRITE-AOF): returns the new file, open, synced."""
    rewrite = Rewrite(target, list(jobs))
    try:
        while not rewrite.step(jobs, encode, slice_jobs=50_000):
            pass
        rewrite.flush()
        if rewrite.doomed is not None:
            raise rewrite.doomed
        rewrite.sync_and_rename()
    except BaseException:
        rewrite.abandon()
        raise
    rewrite.file.path = target
    return rewrite.file
