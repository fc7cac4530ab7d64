"""Cursors for QSCAN and JSCAN over collections that change between calls.

A scan starting at cursor 0 takes a snapshot of the keys (a C-speed list copy, 8 bytes
a key). Later calls walk that snapshot, skipping keys that are gone, so every element
present for the whole iteration is returned, as Redis' SCAN promises. A cursor packs
the snapshot number with the position; a cursor whose snapshot was dropped takes a new
snapshot and resumes at the same position (best effort, like a rehash in Redis).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable

_POSITION_BITS = 40
_MAX_SNAPSHOTS = 16


class ScanCursors:
    __slots__ = ("_next_snapshot", "_snapshots")

    def __init__(self) -> None:
        self._snapshots: OrderedDict[int, list[bytes]] = OrderedDict()
        self._next_snapshot = 1

    def scan(
        self,
        cursor: int,
        keys: Callable[[], Iterable[bytes]],
        accept: Callable[[bytes], bool],
        count: int,
        max_steps: int | None,
    ) -> tuple[int, list[bytes]]:
        """Return (next cursor, accepted keys); next cursor 0 means the scan is over."""
        snapshot_no, position = divmod(cursor, 1 << _POSITION_BITS)
        snapshot = self._snapshots.get(snapshot_no) if cursor else None
        if snapshot is None:
            snapshot_no = self._next_snapshot
            self._next_snapshot += 1
            snapshot = list(keys())
            self._snapshots[snapshot_no] = snapshot
            while len(self._snapshots) > _MAX_SNAPSHOTS:
                self._snapshots.popitem(last=False)
        else:
            self._snapshots.move_to_end(snapshot_no)
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

    def clear(self) -> None:
        self._snapshots.clear()
