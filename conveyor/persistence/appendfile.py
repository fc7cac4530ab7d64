"""One open append-only file: buffered appends, write errors kept (not raised), fsync.

`AppendFile` is plain file I/O with no event loop: the node's driver (node/aof.py)
decides when to `flush` (once per event-loop round) and when to `sync` (in a thread:
`sync` only calls fdatasync on a descriptor, which releases the GIL).

A failing write is not an exception for the caller but a state, as in Disque: the
records stay buffered, `last_error` tells why, the next flush retries, and a partial
write is cut back (ftruncate) so the file never ends inside a record that a retry
would write again.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("conveyor.persistence")


def fsync_directory(path: Path) -> None:
    """Make a rename or a new file in `path` durable (the directory entry itself)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AppendFile:
    """An AOF open for appending; `size` is its length as far as writes succeeded."""

    def __init__(self, path: Path, *, truncate: bool = False) -> None:
        self.path = path
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        if truncate:
            flags |= os.O_TRUNC
        self.fd = os.open(path, flags, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.last_error: OSError | None = None
        self.written_since_sync = False

    def append(self, record: bytes) -> None:
        self.pending.append(record)
        self.pending_bytes += len(record)

    def extend(self, records: list[bytes]) -> None:
        self.pending.extend(records)
        self.pending_bytes += sum(map(len, records))

    def flush(self) -> bool:
        """Write what is buffered; True when all of it is in the file (not yet synced)."""
        if not self.pending:
            return True
        data = self.pending[0] if len(self.pending) == 1 else b"".join(self.pending)
        written = 0
        try:
            while written < len(data):
                written += os.write(self.fd, data[written:] if written else data)
        except OSError as exc:
            return self._failed(data, written, exc)
        self.size += written
        self.pending = []
        self.pending_bytes = 0
        self.written_since_sync = True
        if self.last_error is not None:
            log.warning("AOF write error looks solved, Conveyor can write again.")
            self.last_error = None
        return True

    def _failed(self, data: bytes, written: int, exc: OSError) -> bool:
        if self.last_error is None or self.last_error.errno != exc.errno:
            log.warning("Error writing to the AOF file: %s", exc.strerror or exc)
        self.last_error = exc
        if written:
            # A record cut in the middle: take it back, so the retry starts clean.
            try:
                os.ftruncate(self.fd, self.size)
            except OSError as trunc_exc:
                # The bytes stay in the file: drop them from the buffer instead.
                log.warning("Could not remove short write from the AOF: %s", trunc_exc)
                self.size += written
                self.written_since_sync = True
                data = data[written:]
        self.pending = [data]
        self.pending_bytes = len(data)
        return False

    def sync(self) -> None:
        """fdatasync: called from a worker thread (releases the GIL while it waits)."""
        if self.fd < 0:  # os.fdatasync(-1) raises ValueError, which says nothing of why
            raise OSError(errno.EBADF, f"{self.path} was closed before its fsync")
        os.fdatasync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError as exc:
                if exc.errno != errno.EBADF:
                    raise
            self.fd = -1


class SyncThread:
    """One thread that fdatasyncs files on request, one request at a time.

    Cheaper per fsync than an executor (no futures, no wrapping): with `appendfsync
    always` there is an fsync every few hundred microseconds under load. `done(token,
    error)` is called in the thread when a request is finished; the caller hands it to
    its event loop. Whatever a request raises is its error: the thread never dies, since
    every reply waiting for the disk would then wait for ever.
    """

    def __init__(self, done: Callable[[object, BaseException | None], None]) -> None:
        self._done = done
        self._cond = threading.Condition()
        self._request: tuple[list[AppendFile], object] | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="aof-fsync", daemon=True)
        self._thread.start()

    def submit(self, files: list[AppendFile], token: object) -> None:
        with self._cond:
            if self._request is not None:
                raise RuntimeError("an fsync is already in flight")
            self._request = (files, token)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._request is None and not self._stopping:
                    self._cond.wait()
                if self._request is None:
                    return
                files, token = self._request
            error: BaseException | None = None
            try:
                for file in files:
                    file.sync()
            except Exception as exc:
                error = exc
            with self._cond:
                self._request = None
            try:
                self._done(token, error)
            except Exception:  # the event loop is closed: the node is stopping
                log.exception("AOF fsync: the result could not be reported")

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout=30)
