"""QSCAN and JSCAN over the core's queues and jobs, and the timer that drops the scans
given up (their snapshots, core/scan.py, hold every key they saw). Owns no state but the
cursors' and that timer's, set up in core/state.py."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TypeVar

from conveyor.core.job import Job
from conveyor.core.queue import JobQueue
from conveyor.core.scan import SNAPSHOT_IDLE_MS
from conveyor.core.state import CoreState

V = TypeVar("V")


class ScanningMixin(CoreState):
    def scan_queues(
        self,
        cursor: int,
        count: int,
        busyloop: bool,
        accept: Callable[[JobQueue], bool],
        now_ms: int,
    ) -> tuple[int, list[bytes]]:
        return self._scan(cursor, self.queues, accept, count, busyloop, now_ms)

    def scan_jobs(
        self,
        cursor: int,
        count: int,
        busyloop: bool,
        accept: Callable[[Job], bool],
        now_ms: int,
    ) -> tuple[int, list[bytes]]:
        return self._scan(cursor, self.jobs, accept, count, busyloop, now_ms)

    def _scan(
        self,
        cursor: int,
        table: Mapping[bytes, V],
        accept: Callable[[V], bool],
        count: int,
        busyloop: bool,
        now_ms: int,
    ) -> tuple[int, list[bytes]]:
        """One call of a scan over `table`'s keys: those whose value is still there and
        `accept`ed."""

        def accept_key(key: bytes) -> bool:
            value = table.get(key)
            return value is not None and accept(value)

        limits = _scan_limits(count, busyloop)
        found = self._scans.scan(cursor, table.keys, accept_key, *limits, now_ms)
        self._arm_scan_gc(now_ms)
        return found

    def scan_snapshots(self) -> int:
        """QSCAN/JSCAN snapshots kept for scans in progress (DEBUG RESOURCES)."""
        return len(self._scans)

    def _arm_scan_gc(self, now_ms: int) -> None:
        # One timer at a time, however many scans run: it re-arms itself while snapshots
        # are left, so a scan given up frees its keys on an idle node too; and it goes
        # with the last snapshot, so a node whose scans all ended has no timer for them.
        timer = self._scan_gc_timer
        if not self._scans:
            if timer is not None:
                self.timers.cancel(timer)
                self._scan_gc_timer = None
        elif timer is None:
            self._scan_gc_timer = self.timers.call_at(
                now_ms + SNAPSHOT_IDLE_MS, self._scan_gc, None
            )

    def _scan_gc(self, _: None, now_ms: int) -> None:
        self._scan_gc_timer = None
        next_due = self._scans.drop_idle(now_ms)
        if next_due is not None:
            self._scan_gc_timer = self.timers.call_at(next_due, self._scan_gc, None)


def _scan_limits(count: int, busyloop: bool) -> tuple[int, int | None]:
    """(most elements returned, most examined) for one QSCAN/JSCAN call. BUSYLOOP scans
    to the end in one call whatever COUNT says, as in Disque."""
    if busyloop:
        return sys.maxsize, None
    return count, count * 10
