"""AOF rewrites in the running node: BGREWRITEAOF, automatic ones, CONFIG SET appendonly
yes, and SHUTDOWN REWRITE-AOF (persistence/rewrite.py says how a rewrite stays correct
without a fork).

A background rewrite encodes one slice of jobs per event-loop round (`_rewrite_step`,
queued with call_soon so clients are served between slices), then fsyncs and renames
the new file in a worker thread of its own (so `always` fsyncs do not queue behind it)
and makes it the live file.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from conveyor.persistence.appendfile import AppendFile
from conveyor.persistence.records import RecordEncoder
from conveyor.persistence.rewrite import Rewrite, rewrite_now
from conveyor.protocol.resp import error

if TYPE_CHECKING:
    from conveyor.node.server import Server

log = logging.getLogger("conveyor.node")

STARTED = b"+Background append only file rewriting started\r\n"
INCREMENTAL_FSYNC_BYTES = 32 * 1024 * 1024
IN_PROGRESS = error("ERR Background append only file rewriting already in progress")


class RewriteMixin:
    server: Server
    live: AppendFile | None
    encoder: RecordEncoder
    loading: bool

    def _init_rewrite(self) -> None:
        self.rewrite: Rewrite | None = None
        self.rewrite_becomes_live = False  # CONFIG SET appendonly yes: AOF_WAIT_REWRITE
        self.rewrite_scheduled = False
        self.rewrite_started_s = 0
        self.last_rewrite_time_s = -1
        self.last_bgrewrite_ok = True
        self.rewrite_finishing = False
        self._incremental_sync_running = False
        self._incremental_synced = 0
        self.rewrite_longest_ms = 0.0  # the longest slice (or start) of the rewrite
        self.rewrite_start_ms = 0.0
        self.base_size = 0
        self._retry_armed = False
        self._commit: Future[None] | None = None  # the finished rewrite's fsync and rename
        self._start_error: str | None = None  # why the cron's last rewrite could not start
        self._rewrite_executor = ThreadPoolExecutor(1, thread_name_prefix="aof-rewrite")

    @property
    def rewriting(self) -> bool:
        return self.rewrite is not None

    def bgrewrite(self) -> bytes:
        if self.rewrite is not None:
            return IN_PROGRESS
        try:
            self.start_rewrite()
        except OSError as exc:
            log.warning("Can't start the AOF rewrite: %s", exc.strerror or exc)
            self.last_bgrewrite_ok = False
            return error(f"ERR Can't start the AOF rewrite: {exc.strerror or exc}")
        return STARTED

    def _start_from_cron(self) -> None:
        """A rewrite the cron starts: one that cannot create its file (its directory
        gone, the disk full) is tried again next second, and logged once per reason."""
        try:
            self.start_rewrite()
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if reason != self._start_error:
                log.warning("Can't start the AOF rewrite: %s", reason)
            self._start_error = reason
            self.last_bgrewrite_ok = False
        else:
            self._start_error = None

    def start_rewrite(self) -> None:
        server = self.server
        # Records of what happened before the ID list is taken go to the old file only.
        server.drain_job_events()
        started = time.perf_counter()
        self.rewrite = Rewrite(self.path, list(server.core.jobs))
        self._incremental_synced = 0
        self.rewrite_longest_ms = (time.perf_counter() - started) * 1000
        self.rewrite_start_ms = self.rewrite_longest_ms
        # Any rewrite ends the wait of appendonly yes for a first file (AOF_WAIT_REWRITE),
        # BGREWRITEAOF's and a retry's too: none would otherwise be made live.
        self.rewrite_becomes_live = self.live is None and bool(server.config["appendonly"])
        self.rewrite_scheduled = False
        self.rewrite_started_s = int(time.time())
        log.info("Background append only file rewriting started")
        server.refresh_event_recording()
        assert server.loop is not None
        server.loop.call_soon(self._rewrite_step, self.rewrite)
        self._arm_cron()

    def _rewrite_step(self, rewrite: Rewrite) -> None:
        # A step of a rewrite cancelled since must not go on with the next one: each
        # would add a slice per round to it (appendonly no/yes in a loop).
        if rewrite is not self.rewrite or self.rewrite_finishing:
            return
        started = time.perf_counter()
        done = rewrite.step(self.server.core.jobs, self.encoder.snapshot_record)
        self.rewrite_longest_ms = max(
            self.rewrite_longest_ms, (time.perf_counter() - started) * 1000
        )
        if rewrite.doomed is not None:
            self._rewrite_failed(rewrite.doomed)
        elif not done:
            assert self.server.loop is not None
            self._incremental_fsync(rewrite)
            self.server.loop.call_soon(self._rewrite_step, rewrite)
        else:
            self.rewrite_finishing = True
            assert self.server.loop is not None
            self._commit = self._rewrite_executor.submit(rewrite.sync_and_rename)
            asyncio.wrap_future(self._commit, loop=self.server.loop).add_done_callback(
                lambda done: self._rewrite_committed(rewrite, done.exception())
            )

    def _incremental_fsync(self, rewrite: Rewrite) -> None:
        # aof-rewrite-incremental-fsync (Disque: every 32 MB): hundreds of MB of dirty
        # pages flushed at once make the kernel throttle every write of the process,
        # the live AOF's in the event loop included.
        if (
            self.server.config["aof-rewrite-incremental-fsync"]
            and not self._incremental_sync_running
            and rewrite.file.size - self._incremental_synced >= INCREMENTAL_FSYNC_BYTES
        ):
            assert self.server.loop is not None
            self._incremental_sync_running = True
            self._incremental_synced = rewrite.file.size
            future = self.server.loop.run_in_executor(self._rewrite_executor, rewrite.file.sync)
            future.add_done_callback(self._incremental_fsync_done)

    def _incremental_fsync_done(self, future: object) -> None:
        self._incremental_sync_running = False

    def _rewrite_failed(self, exc: BaseException) -> None:
        log.warning("Background AOF rewrite failed: %s", exc)
        if self.rewrite is not None:
            self._drop_rewrite_file(self.rewrite)
        self.rewrite = None
        self.rewrite_finishing = False
        self.last_bgrewrite_ok = False
        if self.rewrite_becomes_live:
            # CONFIG SET appendonly yes could not write its first file: try again later.
            self.rewrite_scheduled = True
        self.server.refresh_event_recording()

    def _rewrite_committed(self, rewrite: Rewrite, exc: BaseException | None) -> None:
        if rewrite is not self.rewrite:
            # Cancelled meanwhile (appendonly no, shutdown), or put in place by
            # cancel_rewrite: the rewrite running now, if any, is another one.
            return
        if exc is not None:
            self._rewrite_failed(exc)
            return
        self._switch_to(rewrite)
        if self.rewrite_scheduled:
            self._start_from_cron()

    def _switch_to(self, rewrite: Rewrite) -> None:
        """The new file, renamed over the AOF, becomes the live one (or is closed)."""
        started = time.perf_counter()
        new_file = rewrite.file
        new_file.path = self.path
        # Records written to it after its fsync started are not durable yet.
        new_file.written_since_sync = True
        old = self.live
        self.rewrite = None
        self.rewrite_finishing = False
        self.last_bgrewrite_ok = True
        self.last_rewrite_time_s = int(time.time()) - self.rewrite_started_s
        if old is not None or self.rewrite_becomes_live:
            if old is not None:
                old.flush()
                self.retire(old)
            self.live = new_file
            self.base_size = new_file.size
            # The AOF is this file now: what it could not take yet (a write error since
            # the rename) is retried, with MISCONF meanwhile, as any AOF write error;
            # and an error of the old file's writes is over, this one has its records.
            self._flush_now()
            if self.rewrite_becomes_live:
                self.rewrite_becomes_live = False
                log.info("AOF rewrite: the new file is live (appendonly yes)")
            self._policy_changed()
        else:
            self.retire(new_file)
        log.info(
            "Background AOF rewrite finished successfully: %d jobs; the event loop was held "
            "%.1f ms at most (ID list %.1f ms, switch %.1f ms)",
            rewrite.jobs_written,
            self.rewrite_longest_ms,
            self.rewrite_start_ms,
            (time.perf_counter() - started) * 1000,
        )
        self.server.refresh_event_recording()

    def _drop_rewrite_file(self, rewrite: Rewrite) -> None:
        # Removed now (a next rewrite reuses the name), closed once no fsync uses it.
        rewrite.abandon(keep_open=True)
        self.retire(rewrite.file)

    def cancel_rewrite(self) -> None:
        rewrite = self.rewrite
        if rewrite is not None and self.rewrite_finishing and self._renamed_into_place():
            # Too late to cancel: the new file is the AOF now.
            self._switch_to(rewrite)
        elif rewrite is not None:
            log.info("AOF rewrite cancelled")
            self._drop_rewrite_file(rewrite)
            self.rewrite = None
            self.rewrite_finishing = False
            self.rewrite_becomes_live = False
            self.server.refresh_event_recording()

    def _renamed_into_place(self) -> bool:
        """Whether the finished rewrite's fsync and rename, in the rewrite's thread,
        succeeded: waited for, since removing its file meanwhile could not stop the rename,
        and a next rewrite reuses the file's name (its partial file would be renamed)."""
        assert self._commit is not None
        exc = self._commit.exception()
        if exc is not None:
            log.warning("Background AOF rewrite failed: %s", exc)
        return exc is None

    def maybe_auto_rewrite(self) -> None:
        """auto-aof-rewrite-percentage / -min-size, checked by the cron as Disque does."""
        config = self.server.config
        live = self.live
        if self.rewrite is not None:
            return
        if self.rewrite_scheduled:  # appendonly yes whose first file failed: live is None
            self._start_from_cron()
            return
        if live is None:
            return
        percentage = config["auto-aof-rewrite-percentage"]
        if not percentage or live.size <= config["auto-aof-rewrite-min-size"]:
            return
        growth = live.size * 100 // max(self.base_size, 1) - 100
        if growth >= percentage:
            if self._start_error is None:
                log.info("Starting automatic rewriting of AOF on %d%% growth", growth)
            self._start_from_cron()

    def rewrite_for_shutdown(self) -> str | None:
        """SHUTDOWN REWRITE-AOF: a synchronous rewrite; the error text, or None."""
        self.server.drain_job_events()
        self.cancel_rewrite()
        if self.live is not None:
            self.live.flush()
        try:
            new_file = rewrite_now(self.path, self.server.core.jobs, self.encoder.snapshot_record)
        except OSError as exc:
            log.warning("Write error writing append only file on disk: %s", exc)
            return str(exc.strerror or exc)
        if self.live is not None:
            self.retire(self.live)
            self.live = new_file
            self.base_size = new_file.size
        else:
            new_file.close()
        log.info("SYNC append only file rewrite performed")
        return None

    @property
    def path(self) -> Path:
        raise NotImplementedError

    def _arm_cron(self) -> None:
        raise NotImplementedError

    def retire(self, file: AppendFile) -> None:
        raise NotImplementedError

    def _policy_changed(self) -> None:
        raise NotImplementedError

    def _flush_now(self) -> bool:
        raise NotImplementedError
