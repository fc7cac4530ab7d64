"""The append-only file in the running node: feeding, group commit, errors, rewrites.

The core's job events become AOF records (persistence/records.py) as the server drains
them; they are buffered and written once per event-loop round (`_flush`, scheduled with
call_soon when the first record of a round arrives), so every client served in a round
shares one write. Then, by `appendfsync`:

- `always`: every reply is held (`Connection.write` hands it to `hold`) until an
  fdatasync that started after the records before it were written has finished. The
  fsync runs in a worker thread while the loop goes on serving; replies of the rounds
  served meanwhile wait for the next fsync, which then covers all of them (group commit);
- `everysec`: the cron starts an fdatasync in the thread at most once a second;
- `no`: the kernel decides.

A failed write to the AOF is a state, as in Disque: records stay buffered, INFO says `err`, write
commands (and PING) get `-MISCONF`, the write is retried every 100 ms and the node goes
back to normal by itself once it succeeds. With `always`, replies that may depend on
the failed records wait for the retry; other clients' replies do not. A failed fsync
under `everysec` refuses writes the same way until an fsync (the cron's, each second)
succeeds; under `always` the node exits, as Redis does (`_exit_for_fsync_error` says why).

Holding and releasing the replies is in node/aof_replies.py, loading at start and
rewrites in node/aof_load.py and node/aof_rewrite.py.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from conveyor.core.effects import JobEvent
from conveyor.node.aof_replies import HeldReplies
from conveyor.node.aof_rewrite import RewriteMixin
from conveyor.node.directives import ConfigError
from conveyor.persistence.appendfile import AppendFile, SyncThread
from conveyor.persistence.loader import LoadStats
from conveyor.persistence.records import RecordEncoder
from conveyor.protocol.resp import error

if TYPE_CHECKING:
    from conveyor.node.server import Server

log = logging.getLogger("conveyor.node")

CRON_S = 1.0
DEFAULT_SWITCH_INTERVAL_S = sys.getswitchinterval()
FSYNC_SWITCH_INTERVAL_S = 0.00005
RETRY_S = 0.1
LOADING_ERROR = error("LOADING Disque is loading the dataset in memory")


class AofDriver(HeldReplies, RewriteMixin):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.encoder = RecordEncoder(server.node_id.encode())
        self.live: AppendFile | None = None
        # Started by the first fsync: a node without the AOF runs no thread for it.
        self._sync_thread: SyncThread | None = None
        self._flush_scheduled = False
        self._cron: object | None = None  # asyncio.TimerHandle
        self._init_held()
        self.sync_inflight = False
        # Files replaced or closed while an fsync may still use them: closed after it.
        self._retired: list[AppendFile] = []
        self.failed = False  # the last write or fsync failed (MISCONF)
        # everysec: the last fsync failed; writes are refused until one succeeds (Redis).
        self._fsync_error: OSError | None = None
        self.delayed_fsync = 0
        self.loading = False
        self.load_stats: LoadStats | None = None
        self.loading_start_s = 0
        self._init_rewrite()

    # -- configuration ----------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self.server.data_dir / str(self.server.config["appendfilename"])

    @property
    def wants_events(self) -> bool:
        return self.live is not None or self.rewrite is not None

    def open_live(self) -> None:
        """Start appending to the AOF (after the load, or once a first rewrite is in)."""
        self.live = AppendFile(self.path)
        self.base_size = self.live.size
        self._policy_changed()
        self.server.refresh_event_recording()

    @property
    def always(self) -> bool:
        return bool(self.server.config["appendfsync"] == "always")

    def _policy_changed(self) -> None:
        gated = self.live is not None
        # The fsync thread needs the GIL back for a moment after every fdatasync before
        # the replies it covers can go; CPython makes a waiting thread wait up to the
        # switch interval (5 ms) for a busy main thread to let go, and meanwhile every
        # client with a held reply idles. Short only while a thread syncs that often.
        fast_switch = gated and self.always
        sys.setswitchinterval(FSYNC_SWITCH_INTERVAL_S if fast_switch else DEFAULT_SWITCH_INTERVAL_S)
        self.held_across_fsyncs = fast_switch
        self.server.reply_gate = self.waiting if gated else None
        no_fsyncs = not gated or self.server.config["appendfsync"] == "no"
        if self._fsync_error is not None and no_fsyncs:
            self._fsync_solved()  # nothing is promised on fsyncs any more
        if not gated:
            # Nothing may stay held once replies are not gated any more (appendonly no,
            # the usual answer to MISCONF), not even what a failing disk held back.
            self.release_all()
        self._arm_cron()

    def config_changed(self, name: str) -> None:
        if name == "appendonly":
            if self.server.config["appendonly"]:
                self.enable()
            else:
                self.disable()
        elif name == "appendfsync":
            self._policy_changed()

    def enable(self) -> None:
        """CONFIG SET appendonly yes: write a fresh file from memory first (a rewrite),
        which then becomes the live file; until then records go to it alone."""
        if self.live is None and self.rewrite is None:
            try:
                self.start_rewrite()
            except OSError as exc:
                # As Redis' "Unable to turn on AOF", with the reason: CONFIG SET undoes it.
                reason = f"Can't start the AOF rewrite: {exc.strerror or exc}"
                log.warning("appendonly yes refused: %s", reason)
                raise ConfigError(reason) from None
        elif self.rewrite is not None:
            self.rewrite_becomes_live = True

    def disable(self) -> None:
        # No first file is waited for any more, nor tried again (AOF_WAIT_REWRITE ends).
        self.rewrite_becomes_live = False
        self.rewrite_scheduled = False
        if self.rewrite is not None and self.live is None:
            self.cancel_rewrite()
        self._close_live()
        self._policy_changed()
        self.server.refresh_event_recording()

    def _close_live(self) -> None:
        """Write what is buffered, fsync, let the file go (appendonly no, shutdown)."""
        live = self.live
        if live is None:
            return
        self._flush_now()
        try:
            live.sync()
        except OSError as exc:
            log.warning("fsync of the AOF before closing it: %s", exc)
        self.retire(live)
        self.live = None

    def retire(self, file: AppendFile) -> None:
        """Close `file` once no fsync uses it: closed under a running fdatasync, its
        descriptor would fail it, or be reused by another file and sync that one."""
        if self.sync_inflight:
            self._retired.append(file)
        else:
            self._close_off_loop(file)

    def _close_off_loop(self, file: AppendFile) -> None:
        # A file renamed over is unlinked: its last close frees all its blocks, tens of
        # ms for a large one. Not in the event loop (Disque closes it in a bio thread).
        try:
            self._rewrite_executor.submit(file.close)
        except RuntimeError:  # shut down: the node is stopping, nothing else uses it
            file.close()

    # -- records in --------------------------------------------------------------------------
    def feed(self, events: list[JobEvent]) -> None:
        records = self.encoder.from_events(events)
        if not records:
            return
        if self.live is not None:
            self.live.extend(records)
        if self.rewrite is not None:
            self.rewrite.append(records)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop = self.server.loop
            if loop is not None:
                loop.call_soon(self._flush)

    # -- the end of a round --------------------------------------------------------------
    def _flush(self) -> None:
        self._flush_scheduled = False
        ok = self._flush_now()
        if self.server.reply_gate is None:
            return
        if not ok:
            if self.always:
                self._hold_back_for_failure()
            else:
                # As Disque and Redis: answered; the records stay buffered, retried, and
                # further writes get -MISCONF until the disk takes them again.
                self.release(self.waiting)
            return
        if not self.always:
            self.release(self.waiting)  # written: in the kernel, safe from a crash of ours
        elif self.sync_inflight:
            return  # the held replies go with the next fsync, started when this one ends
        elif self._needs_sync():
            self._start_sync(carry_replies=True)
        else:
            self.release(self.waiting)

    def _flush_now(self) -> bool:
        ok = True
        if self.live is not None and not self.live.flush():
            ok = False
        rewrite = self.rewrite
        if rewrite is not None and not rewrite.flush():
            if rewrite.renamed:
                ok = False  # the new file is the AOF: its write errors are the AOF's
            elif not self.rewrite_finishing:
                # As Redis: the rewrite fails alone; the old file has every record.
                assert rewrite.doomed is not None
                self._rewrite_failed(rewrite.doomed)
            # else its thread will refuse the rename, and fail it (_rewrite_committed)
        self._set_failed(not ok or self._fsync_error is not None)
        return ok

    def _needs_sync(self) -> bool:
        if self.rewriting and self.server.config["no-appendfsync-on-rewrite"]:
            return False
        live = self.live
        return live is not None and live.written_since_sync

    def _start_sync(self, carry_replies: bool) -> None:
        """fdatasync in the worker thread; with `carry_replies` (always) the replies held
        now are sent when it is done."""
        live = self.live
        assert live is not None and self.server.loop is not None
        live.written_since_sync = False
        self.sync_inflight = True
        if carry_replies:
            self._inflight, self.waiting[:] = list(self.waiting), []
        files = [live]
        if self.rewrite is not None and self.rewrite_finishing:
            # The new file replaces this one any moment now: what a released reply
            # answers must be durable in it too.
            files.append(self.rewrite.file)

        if self._sync_thread is None:
            self._sync_thread = SyncThread(self._sync_finished)
        self._sync_thread.submit(files, live)

    def _sync_finished(self, token: object, exc: BaseException | None) -> None:
        # In the fsync thread: hand the result to the event loop.
        loop = self.server.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._sync_done, token, exc)

    def _sync_done(self, synced: object, exc: BaseException | None) -> None:
        self.sync_inflight = False
        retired, self._retired = self._retired, []
        for file in retired:
            self._close_off_loop(file)
        live = self.live
        if exc is None or live is None:
            # Synced; or closed meanwhile (appendonly no, shutdown), after an fsync of its
            # own: nothing gates these replies any more.
            self.release(self._inflight)
            if exc is None and synced is live and self._fsync_error is not None:
                log.warning("AOF fsync error looks solved, Conveyor can write again.")
                self._fsync_solved()
        elif synced is live:
            self._sync_failed(live, exc)
            return
        else:
            # A rewrite replaced the file meanwhile. The new one holds these replies'
            # records too: they wait for its next fsync.
            log.warning("fsync of the AOF replaced by a rewrite failed: %s", exc)
            self.waiting[:0] = self._inflight
            live.written_since_sync = True
        self._inflight = []
        # With the round's write still queued (this callback came from the fsync thread
        # between a command and its _flush), some held replies answer records not yet
        # written: _flush writes them, then syncs or releases.
        if self._flush_scheduled:
            return
        if self.waiting and self.server.reply_gate is not None and not self.failed:
            if self.always and self._needs_sync():
                self._start_sync(carry_replies=True)
            else:
                self.release(self.waiting)

    def _sync_failed(self, live: AppendFile, exc: BaseException) -> None:
        if self.always or self._inflight:
            self._exit_for_fsync_error(exc)
        # everysec: nothing was promised on this fsync; -MISCONF until one succeeds (the
        # cron tries again each second): a write that succeeds proves nothing about it.
        log.warning("fsync of the AOF failed: %s", exc)
        live.written_since_sync = True
        if not isinstance(exc, OSError):
            exc = OSError(errno.EIO, str(exc))
        self._fsync_error = live.last_error = exc
        self._set_failed(True)

    def _fsync_solved(self) -> None:
        error, self._fsync_error = self._fsync_error, None
        live = self.live
        if live is not None and live.last_error is error:
            live.last_error = None
        self._set_failed(live is not None and live.last_error is not None)

    def _exit_for_fsync_error(self, exc: BaseException) -> NoReturn:
        # As Redis. On Linux a failed fsync may leave the pages it could not write marked
        # clean: a later fsync that succeeds proves nothing, and the replies waiting for
        # this one would acknowledge jobs that may be lost. They are never sent.
        log.warning(
            "Can't persist AOF for fsync error when the AOF fsync policy is 'always': %s. "
            "Exiting...",
            exc,
        )
        logging.shutdown()
        os._exit(1)

    # -- errors ----------------------------------------------------------------------------
    def _set_failed(self, failed: bool) -> None:
        if failed == self.failed:
            return
        self.failed = failed
        self.server.refresh_command_table()
        if failed:
            self._arm_retry()
        if not failed and self._stuck:
            if self.server.reply_gate is None:
                self.release(self._unstick())
            else:
                # Written again: what was stuck goes with the next fsync, in order.
                self.waiting[:0] = self._unstick()
                self._schedule_flush()

    def misconf_error(self) -> bytes:
        reason = self.last_error_text() or "unknown error"
        return error(f"MISCONF Errors writing to the AOF file: {reason}")

    def last_error_text(self) -> str:
        for file in (self.live, self.rewrite.file if self.rewrite else None):
            if file is not None and file.last_error is not None:
                exc = file.last_error
                return exc.strerror or str(exc)
        return ""

    def _arm_retry(self) -> None:
        loop = self.server.loop
        if loop is not None and not self._retry_armed:
            self._retry_armed = True
            loop.call_later(RETRY_S, self._retry)

    def _retry(self) -> None:
        self._retry_armed = False
        if self.failed:
            self._flush()  # on success it sends (or syncs) what was held back
        if self.failed:
            # Still failing: again in 100 ms, whether or not a client writes meanwhile
            # (everysec and no answered every held reply, so nothing else would flush).
            self._arm_retry()

    # -- once a second ---------------------------------------------------------------------
    def _arm_cron(self) -> None:
        loop = self.server.loop
        # Kept armed while a first file is to be tried again (rewrite_scheduled).
        active = self.live is not None or self.rewrite is not None or self.rewrite_scheduled
        if self._cron is None and loop is not None and active:
            self._cron = loop.call_later(CRON_S, self._on_cron)

    def _on_cron(self) -> None:
        self._cron = None
        live = self.live
        config = self.server.config
        # A failed fsync is tried again whatever the policy: writes wait for it (MISCONF).
        wants_sync = config["appendfsync"] == "everysec" or self._fsync_error is not None
        if live is not None and wants_sync and self._needs_sync():
            if self.sync_inflight:
                self.delayed_fsync += 1
            else:
                self._start_sync(carry_replies=False)
        self.maybe_auto_rewrite()
        self._arm_cron()

    # -- shutdown ----------------------------------------------------------------------------
    def close(self) -> None:
        """At shutdown: everything buffered written and synced, the file closed."""
        # The fsync thread first (it finishes the fsync it runs): then no file closed
        # below is still in use.
        if self._sync_thread is not None:
            self._sync_thread.stop()
            self._sync_thread = None
        self.cancel_rewrite()
        self._close_live()
        self.release_all()
        for file in self._retired:
            file.close()
        self._retired = []
        self._rewrite_executor.shutdown(wait=True)
