"""One scheduler for everything time-driven in the core.

Jobs are filed in buckets of `resolution_ms` (a list entry of 8 bytes a job, and the
bucket's key is the one int object every job in it shares), because at a million jobs a
heap tuple per job would cost more than the job. Other deadlines (blocked clients,
queue GC) are few and go on a plain heap. Nothing here runs by itself: the driver asks
`next_deadline()` and calls back when it is due, so an idle node sleeps.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

from conveyor.core.job import Job


class Timers:
    __slots__ = (
        "_bucket_heap",
        "_buckets",
        "_last",
        "_last_when",
        "_misc",
        "_seq",
        "resolution_ms",
    )

    def __init__(self, resolution_ms: int = 10) -> None:
        self.resolution_ms = resolution_ms
        # key -> (the canonical key object, the jobs filed there)
        self._buckets: dict[int, tuple[int, list[Job]]] = {}
        self._bucket_heap: list[int] = []
        self._misc: list[tuple[int, int, Callable[[Any, int], None], Any]] = []
        self._seq = itertools.count()
        # The bucket filed into last; key -1 never matches. A popped bucket must not stay
        # here, or jobs would be filed into a list nobody will look at again.
        self._last: tuple[int, list[Job]] = (-1, [])
        self._last_when = -1  # the deadline that was last filed into _last

    # -- jobs -------------------------------------------------------------------------
    def file_job(self, job: Job, when_ms: int, now_ms: int) -> None:
        """(Re)file a job to be looked at no earlier than when_ms (rounded up)."""
        if when_ms == self._last_when:
            # Jobs of a burst share a deadline: skip the (multi-digit int) arithmetic.
            entry = self._last
        else:
            # A deadline a minute or more away (TTLs, long RETRYs) needs no 10 ms
            # precision; a coarse bucket is shared by every job of a burst.
            resolution = 1000 if when_ms - now_ms > 60_000 else self.resolution_ms
            key = -(-when_ms // resolution) * resolution
            entry = self._last
            if entry[0] != key:
                found = self._buckets.get(key)
                if found is None:
                    found = self._buckets[key] = (key, [])
                    heapq.heappush(self._bucket_heap, key)
                self._last = entry = found
            self._last_when = when_ms
        key = entry[0]
        if job.awake == key:
            return
        # Share one key object per bucket, so a million jobs do not hold a million ints.
        job.awake = key
        entry[1].append(job)

    def due_jobs(self, now_ms: int) -> list[Job]:
        """Pop every job filed in a bucket that is due; stale entries are filtered."""
        heap = self._bucket_heap
        due: list[Job] = []
        while heap and heap[0] <= now_ms:
            key = heapq.heappop(heap)
            if self._last[0] == key:
                self._last = (-1, [])
                self._last_when = -1
            for job in self._buckets.pop(key)[1]:
                if job.awake == key:
                    job.awake = 0
                    due.append(job)
        return due

    # -- other deadlines ----------------------------------------------------------------
    def call_at(self, when_ms: int, callback: Callable[[Any, int], None], arg: Any) -> None:
        heapq.heappush(self._misc, (when_ms, next(self._seq), callback, arg))

    def due_calls(self, now_ms: int) -> list[tuple[Callable[[Any, int], None], Any]]:
        misc = self._misc
        due = []
        while misc and misc[0][0] <= now_ms:
            _, _, callback, arg = heapq.heappop(misc)
            due.append((callback, arg))
        return due

    def next_deadline(self) -> int | None:
        candidates = []
        if self._bucket_heap:
            candidates.append(self._bucket_heap[0])
        if self._misc:
            candidates.append(self._misc[0][0])
        return min(candidates) if candidates else None

    def clear(self) -> None:
        self._buckets.clear()
        self._bucket_heap.clear()
        self._misc.clear()
        self._last = (-1, [])
        self._last_when = -1
