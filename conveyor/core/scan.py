"""Cursors for QSCAN and JSCAN over collections that change between calls.

A scan starting at cursor 0 takes a snapshot of the keys (a C-speed list copy, 8 bytes
a key). Later calls walk that snapshot, skipping keys that are gone, so every element
present for the whole iteration is returned, as Redis' SCAN promises. A cursor packs
the snapshot number with the position; a cursor whose snapshot was dropped takes a new
snapshot and resumes at the same position (best effort, like a rehash in Redis).

A snapshot holds its keys: a scan that is given up (a client that stops paging) would
keep every job ID it saw alive, jobs long gone included. So a snapshot left unused for
SNAPSHOT_IDLE_MS is dropped (`drop_idle`, which the core's timer calls), and its cursor
then resumes on a fresh one as above.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable

_POSITION_BITS = 40
_MAX_SNAPSHOTS = 16
SNAPSHOT_IDLE_MS = 60_000


class ScanCursors:
    __slots__ = ("_next_snapshot", "_snapshots")

    def __init__(self) -> None:
        # Least recently used first: number -> (its keys, when it was last used).
        self._snapshots: OrderedDict[int, tuple[list[bytes], int]] = OrderedDict()
        self._next_snapshot = 1

    def __len__(self) -> int:
        return len(self._snapshots)

    def scan(
        self,
        cursor: int,
        keys: Callable[[], Iterable[bytes]],
        accept: Callable[[bytes], bool],
        count: int,
        max_steps: int | None,
        now_ms: int,
    ) -> tuple[int, list[bytes]]:
        """Return (next cursor, accepted keys); next cursor 0 means the scan is over."""
        snapshot_no, position = divmod(cursor, 1 << _POSITION_BITS)
        kept = self._snapshots.pop(snapshot_no, None) if cursor else None
        if kept is None:
            snapshot_no = self._next_snapshot
            self._next_snapshot += 1
            snapshot = list(keys())
            while len(self._snapshots) >= _MAX_SNAPSHOTS:
                self._snapshots.popitem(last=False)
        else:
            snapshot = kept[0]
        self._snapshots[snapshot_no] = (snapshot, now_ms)
        found: list[bytes] = []
        steps = 0
        end = len(snapshot)
        while position < end and len(found) < count:
            if max_steps is not None and steps >= max_steps:
                break
            key = snapshot[position]
            position += 1
            steps += 1
            if accept(key):
                found.append(key)
        if position >= end:
            del self._snapshots[snapshot_no]
            return 0, found
        return (snapshot_no << _POSITION_BITS) | position, found

    def drop_idle(self, now_ms: int) -> int | None:
        """Drop the snapshots unused for SNAPSHOT_IDLE_MS; when the next one falls idle
        (None: no snapshot left)."""
        snapshots = self._snapshots
        while snapshots:
            _, last_used_ms = next(iter(snapshots.values()))
            if now_ms - last_used_ms < SNAPSHOT_IDLE_MS:
                return last_used_ms + SNAPSHOT_IDLE_MS
            snapshots.popitem(last=False)
        return None

    def clear(self) -> None:
        self._snapshots.clear()
