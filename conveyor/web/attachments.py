"""Attachments on the console's disk, under `<data dir>/attachments`, never in a job.

An upload is streamed to `tmp/<id>.part` in chunks while its MD5 is computed, then renamed
to `<id[:2]>/<id>` beside `<id>.json` (name, size, MD5, time): a half-written file is never
served. The job carries only a reference (URL, size, MD5), and the worker that runs the
message fetches the file from `GET /attachments/<id>` (conveyor.worker.attachments). The ID
is 192 random bits: the URL is the capability, so workers need no console credentials
(like a pre-signed URL). Files older than KEEP_S are removed, at most once an hour.

The store is bounded in total size too (`max_total`, config `max_attachments_total_mb`):
every byte an upload writes is counted before it is written, together with the files
stored and the uploads in progress, so uploads at once cannot pass the bound together. One
that would pass it first removes the expired files; if that is not room enough it is
refused with 507 Insufficient Storage (the request is fine, the store is full: it may pass
later, unlike a 413) and its `.part` is removed. A `.part` file no upload has written to
for STALE_PART_S is the leftover of a console that stopped mid-upload: it is removed when
the store is opened (one warning says how many) and at each clean, so that it does not
count against the bound for KEEP_S. The age, not the mere absence of an upload of this
console, decides: a second console on the same data_dir keeps its uploads in progress.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import secrets
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from starlette.concurrency import run_in_threadpool

from conveyor.web.gateway import ApiError

# The worker's limit: what it cannot write as a file is refused here already.
from conveyor.worker.attachments import MAX_NAME_BYTES

log = logging.getLogger("conveyor.web")

CHUNK = 1024 * 1024
KEEP_S = 30 * 86400.0
STALE_PART_S = 3600.0  # a .part nothing wrote to for this long is no upload in progress
MAX_TOTAL = 10 * 1024**3  # WebConfig.max_attachments_total_bytes
_CLEAN_EVERY_S = 3600.0
ID_RE = r"[A-Za-z0-9_-]{32}"
NAME_RE = rf"[^/\x00-\x1f.][^/\x00-\x1f]{{0,{MAX_NAME_BYTES - 1}}}"


@dataclass
class Stored:
    id: str
    name: str
    md5: str
    size: int


def fits(name: str) -> str:
    """The name, if it fits in MAX_NAME_BYTES of UTF-8; ValueError says why not."""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: no file can have that name
        raise ValueError("a file name must be valid Unicode") from None
    if size > MAX_NAME_BYTES:
        raise ValueError(f"a file name is at most {MAX_NAME_BYTES} bytes in UTF-8, not {size}")
    return name


def check_name(name: str) -> str:
    if not re.fullmatch(NAME_RE, name or ""):
        raise ApiError(400, "bad_attachment", f"attachment name not allowed: {name[:80]!r}")
    try:
        return fits(name)
    except ValueError as exc:
        raise ApiError(400, "bad_attachment", f"attachment name {name[:80]!r}: {exc}") from None


class Writer:
    """One upload in progress: chunks in, MD5 and size counted; `finish` publishes it."""

    def __init__(self, store: AttachmentStore, name: str, limit: int) -> None:
        self.store, self.name, self.limit = store, check_name(name), limit
        self.id = secrets.token_urlsafe(24)
        self.part = store.root / "tmp" / f"{self.id}.part"
        self.md5 = hashlib.md5()
        self.size = 0
        self._file: IO[bytes] = open(self.part, "wb")  # noqa: SIM115 - closed in finish/abort
        store.started(self)

    def write(self, chunk: bytes) -> None:
        if self.size + len(chunk) > self.limit:
            self.abort()
            raise ApiError(413, "too_large", f"attachment {self.name!r} is over {self.limit} bytes")
        try:
            self.store.take(len(chunk))
        except ApiError:
            self.abort()
            raise
        self.size += len(chunk)  # counted in the store from here: abort() gives it back
        self.md5.update(chunk)
        self._file.write(chunk)

    def finish(self) -> Stored:
        self._file.close()
        stored = Stored(self.id, self.name, self.md5.hexdigest(), self.size)
        folder = self.store.root / self.id[:2]
        folder.mkdir(exist_ok=True)
        meta = {"name": stored.name, "md5": stored.md5, "size": stored.size, "at": time.time()}
        (folder / f"{self.id}.json").write_text(json.dumps(meta))
        self.store.published(self, folder / self.id)
        return stored

    def abort(self) -> None:
        self._file.close()
        with contextlib.suppress(OSError):
            self.part.unlink()
        self.store.aborted(self)


class AttachmentStore:
    def __init__(self, root: Path, keep_s: float = KEEP_S, max_total: int = MAX_TOTAL) -> None:
        self.root = root
        self.keep_s = keep_s
        self.max_total = max_total
        (root / "tmp").mkdir(parents=True, exist_ok=True)
        self._cleaned = 0.0
        self._lock = threading.Lock()
        # Uploads in progress, counted by what they wrote, not by their .part on disk.
        self._writers: set[Writer] = set()
        self._remove_leftovers()
        # Files stored and .part files (nothing removed: -inf), then what uploads write.
        self.used = self._sweep(-math.inf, -math.inf)[1]

    def _remove_leftovers(self) -> None:
        """Remove the .part files of uploads cut short by a console that stopped (crash,
        kill): kept, they would count against max_total until KEEP_S expired them. One
        written to within STALE_PART_S may be another console's upload in progress."""
        count = size = 0
        cutoff = time.time() - STALE_PART_S
        for part in (self.root / "tmp").glob("*.part"):
            try:
                stat = part.stat()
                if stat.st_mtime >= cutoff:
                    continue
                part.unlink()
            except OSError:
                continue  # gone meanwhile, or not ours to remove: clean() retries later
            count += 1
            size += stat.st_size
        if count:
            log.warning(
                "attachments: removed %d unfinished upload(s) (.part) of %d bytes left in %s",
                count,
                size,
                self.root / "tmp",
            )

    def room(self, size: int) -> None:
        """ApiError 507 unless `size` more bytes fit in max_total now (expired files
        removed first if need be). Counts nothing: an upload's early refusal."""
        self._fit(size, take=False)

    def take(self, size: int) -> None:
        """Count `size` bytes an upload is about to write; ApiError 507 if they do not fit."""
        self._fit(size, take=True)

    def _fit(self, size: int, take: bool) -> None:
        for clean_first in (False, True):  # expired files go before anything is refused
            if clean_first:
                self.clean()
            with self._lock:
                if self.used + size <= self.max_total:
                    self.used += size if take else 0
                    return
        raise ApiError(
            507,
            "store_full",
            f"the attachment store is full: {size} more bytes would pass its "
            f"{self.max_total} (max_attachments_total_mb; {self.used} in use); "
            f"attachments are removed {self.keep_s / 86400:g} days after their upload",
        )

    def started(self, writer: Writer) -> None:
        with self._lock:
            self._writers.add(writer)

    def published(self, writer: Writer, path: Path) -> None:
        """The upload's .part renamed to its place: its bytes stay counted, as a file."""
        with self._lock:
            os.replace(writer.part, path)  # last: a file with no meta is never served
            self._writers.discard(writer)

    def aborted(self, writer: Writer) -> None:
        with self._lock:
            if writer in self._writers:
                self._writers.discard(writer)
                self.used -= writer.size

    def writer(self, name: str, limit: int) -> Writer:
        self._maybe_clean()
        return Writer(self, name, limit)

    def save_bytes(self, name: str, data: bytes, limit: int) -> Stored:
        writer = self.writer(name, limit)
        writer.write(data)
        return writer.finish()

    def save_file(self, name: str, source: IO[bytes], limit: int) -> Stored:
        """From an open file (a form's spooled upload), in chunks."""
        writer = self.writer(name, limit)
        try:
            while chunk := source.read(CHUNK):
                writer.write(chunk)
        except ApiError:
            raise
        except BaseException:
            writer.abort()
            raise
        return writer.finish()

    def path(self, aid: str) -> Path | None:
        if not re.fullmatch(ID_RE, aid):
            return None
        path = self.root / aid[:2] / aid
        return path if path.is_file() else None

    def meta(self, aid: str) -> dict[str, Any] | None:
        path = self.path(aid)
        if path is None:
            return None
        try:
            doc = json.loads(path.with_name(f"{aid}.json").read_text())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def _maybe_clean(self) -> None:
        with self._lock:
            if time.monotonic() - self._cleaned < _CLEAN_EVERY_S:
                return
            self._cleaned = time.monotonic()
        self.clean()

    def clean(self, now: float | None = None) -> int:
        """Remove attachments (and abandoned .part files) older than keep_s, and count the
        bytes in use again (a file removed by hand is no longer counted)."""
        now = time.time() if now is None else now
        with self._lock:  # uploads wait to count their bytes (not to write them) meanwhile
            removed, kept = self._sweep(now - self.keep_s, now - STALE_PART_S)
            self.used = kept + sum(w.size for w in self._writers)
        return removed

    def _sweep(self, cutoff: float, stale: float) -> tuple[int, int]:
        """One walk of the store: files last written before `cutoff` (.part files before
        `stale`) removed, but no upload's in progress; the attachments removed, and the
        bytes of the attachments and .part files kept (meta files are not counted: a few
        hundred bytes each)."""
        live = {w.part for w in self._writers}
        removed = kept = 0
        for path in self.root.glob("*/*"):
            if path in live:
                continue
            try:
                stat = path.stat()
                if stat.st_mtime < (stale if path.suffix == ".part" else cutoff):
                    path.unlink()
                    removed += path.suffix != ".json"
                elif path.suffix != ".json":
                    kept += stat.st_size
            except OSError:
                continue
        return removed, kept


async def save_stream(
    store: AttachmentStore, name: str, chunks: AsyncIterator[bytes], limit: int
) -> Stored:
    """An upload straight from the request body, written in ~1 MB pieces off the event loop."""
    writer = await run_in_threadpool(store.writer, name, limit)
    pending: list[bytes] = []
    size = 0
    try:
        async for chunk in chunks:
            pending.append(chunk)
            size += len(chunk)
            if size >= CHUNK:
                await run_in_threadpool(writer.write, b"".join(pending))
                pending, size = [], 0
        if pending:
            await run_in_threadpool(writer.write, b"".join(pending))
    except ApiError:
        raise
    except BaseException:  # the client went away mid-upload
        writer.abort()
        raise
    return await run_in_threadpool(writer.finish)
