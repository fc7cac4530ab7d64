"""One scheduler for everything time-driven in the core.

Jobs are filed in buckets of `resolution_ms` (a list entry of 8 bytes a job, and the
bucket's key is the one int object every job in it shares), because at a million jobs a
heap tuple per job would cost more than the job. A job refiled elsewhere (delivered:
its requeue time replaces its expiry) or let go (`unfile`, when it is acked) leaves a
stale entry behind; a bucket is compacted once its stale entries outnumber its live
ones, so an acked job's body is not kept until its TTL (a day by default) in a bucket
nobody will look at before then. Other deadlines (blocked clients, queue GC) are few
and go on a plain heap. Nothing here runs by itself: the driver asks
`next_deadline()` and calls back when it is due, so an idle node sleeps.

A call can be cancelled (a blocked GETJOB answered long before its TIMEOUT): the entry
drops its callback and argument at once, so nothing it pointed to is kept alive, and
the heap is rebuilt when cancelled entries outnumber live ones, so a client cycling
short GETJOBs cannot grow it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

from conveyor.core.job import Job

# A pending call: [when_ms, seq, callback, arg]; callback None once cancelled.
TimerEntry = list[Any]
_COMPACT_SLACK = 64
# A deadline this far away or more (TTLs, long RETRYs) needs no finer bucket than this.
_COARSE_AFTER_MS = 60_000
_COARSE_MS = 1000


class Timers:
    __slots__ = (
        "_bucket_heap",
        "_buckets",
        "_cancelled",
        "_last",
        "_last_when",
        "_misc",
        "_seq",
        "_stale",
        "resolution_ms",
    )

    def __init__(self, resolution_ms: int = 10) -> None:
        self.resolution_ms = resolution_ms
        # key -> (the canonical key object, the jobs filed there)
        self._buckets: dict[int, tuple[int, list[Job]]] = {}
        self._bucket_heap: list[int] = []
        self._stale: dict[int, int] = {}  # key -> entries there whose job moved or left
        self._misc: list[TimerEntry] = []
        self._cancelled = 0  # cancelled entries still in _misc
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
            resolution = _COARSE_MS if when_ms - now_ms > _COARSE_AFTER_MS else self.resolution_ms
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
        filed = job.awake
        if filed == key:
            return
        # Share one key object per bucket, so a million jobs do not hold a million ints.
        job.awake = key
        entry[1].append(job)
        if filed:
            self._went_stale(filed)

    def unfile(self, job: Job) -> None:
        """The job is let go: its entry must not keep it (and its body) until it is due."""
        filed = job.awake
        if filed:
            job.awake = 0
            self._went_stale(filed)

    def _went_stale(self, key: int) -> None:
        """One more entry of bucket `key` no longer files its job: compact the bucket
        once such entries outnumber the live ones: a compaction costs at most twice the
        entries that went stale since the last, and a bucket of a job a second (a quiet
        queue) keeps none of them until it is due."""
        stale = self._stale.get(key, 0) + 1
        found = self._buckets.get(key)
        if found is None:
            return
        jobs = found[1]
        if stale * 2 > len(jobs):
            # In place: _last and callers holding the list keep filing into it. Once per
            # job: one that left and came back has two entries, which would both count
            # as live from now on (and both stay once it leaves again). The first is
            # kept, where due_jobs would have taken it.
            jobs[:] = dict.fromkeys(job for job in jobs if job.awake == key)
            self._stale.pop(key, None)
        else:
            self._stale[key] = stale

    def job_entries(self) -> int:
        """Entries held for jobs, stale ones included: what the buckets cost."""
        return sum(len(found[1]) for found in self._buckets.values())

    def file_new_jobs(self, jobs: list[Job], when_ms: int, now_ms: int) -> None:
        """file_job for jobs never filed yet, all due at `when_ms` (a run of ADDJOBs)."""
        if not jobs:
            return
        self.file_job(jobs[0], when_ms, now_ms)
        key, bucket = self._last  # where the first went: the others join it
        for job in jobs[1:]:
            job.awake = key
        bucket.extend(jobs[1:])

    def file_new_at(self, jobs: list[Job], whens: list[int], now_ms: int) -> None:
        """file_job(job, when, now_ms) for each of `jobs`, never filed yet, and its `when`
        (a REPLJOB's copies: their deadlines differ by their jitter, and most fall in one
        bucket, which is found once instead of with file_job's arithmetic on every job)."""
        far = now_ms + _COARSE_AFTER_MS  # past it, file_job's buckets are coarse
        low = high = 0  # the bucket filed into last holds the deadlines in (low, high]
        coarse = False
        key, bucket = self._last
        for job, when_ms in zip(jobs, whens, strict=True):
            if low < when_ms <= high and (when_ms > far) is coarse:
                job.awake = key
                bucket.append(job)
                continue
            self.file_job(job, when_ms, now_ms)
            key, bucket = self._last
            coarse = when_ms > far
            low, high = key - (_COARSE_MS if coarse else self.resolution_ms), key
        if jobs:
            self._last_when = whens[-1]  # in the bucket filed into last, as file_job leaves it

    def file_at_etime(self, jobs: list[Job], now_ms: int) -> None:
        """file_job(job, job.etime, now_ms) for each of `jobs` (a batch of confirmed
        copies: their etimes are mostly the same, and most are filed there already)."""
        for job in jobs:
            if job.etime != self._last_when:
                self.file_job(job, job.etime, now_ms)
                continue
            key, bucket = self._last  # file_job's first case, without its call
            filed = job.awake
            if filed != key:
                job.awake = key
                bucket.append(job)
                if filed:
                    self._went_stale(filed)

    def due_jobs(self, now_ms: int) -> list[Job]:
        """Pop every job filed in a bucket that is due; stale entries are filtered."""
        heap = self._bucket_heap
        due: list[Job] = []
        while heap and heap[0] <= now_ms:
            key = heapq.heappop(heap)
            if self._last[0] == key:
                self._last = (-1, [])
                self._last_when = -1
            self._stale.pop(key, None)
            for job in self._buckets.pop(key)[1]:
                if job.awake == key:
                    job.awake = 0
                    due.append(job)
        return due

    # -- other deadlines ----------------------------------------------------------------
    def call_at(self, when_ms: int, callback: Callable[[Any, int], None], arg: Any) -> TimerEntry:
        """Run callback(arg, now_ms) once when_ms is due; returns a handle for cancel()."""
        entry: TimerEntry = [when_ms, next(self._seq), callback, arg]
        heapq.heappush(self._misc, entry)
        return entry

    def cancel(self, entry: TimerEntry) -> None:
        if entry[2] is None:
            return
        entry[2] = entry[3] = None
        self._cancelled += 1
        misc = self._misc
        if self._cancelled > _COMPACT_SLACK and self._cancelled * 2 > len(misc):
            self._misc = [live for live in misc if live[2] is not None]
            heapq.heapify(self._misc)
            self._cancelled = 0

    def due_calls(self, now_ms: int) -> list[tuple[Callable[[Any, int], None], Any]]:
        misc = self._misc
        due = []
        while misc and misc[0][0] <= now_ms:
            _, _, callback, arg = heapq.heappop(misc)
            if callback is None:
                self._cancelled -= 1
            else:
                due.append((callback, arg))
        return due

    def pending_calls(self) -> list[tuple[int, Callable[[Any, int], None], Any]]:
        """(when, callback, arg) of every call not yet run nor cancelled."""
        return [(entry[0], entry[2], entry[3]) for entry in self._misc if entry[2] is not None]

    def call_entries(self) -> int:
        """Entries held for calls, cancelled ones included: what the heap costs."""
        return len(self._misc)

    def next_deadline(self) -> int | None:
        misc = self._misc
        while misc and misc[0][2] is None:  # no wake-up for a cancelled call
            heapq.heappop(misc)
            self._cancelled -= 1
        buckets = self._bucket_heap
        if buckets:
            return min(buckets[0], misc[0][0]) if misc else buckets[0]
        return misc[0][0] if misc else None

    def clear(self) -> None:
        self._buckets.clear()
        self._bucket_heap.clear()
        self._stale.clear()
        self._misc.clear()
        self._cancelled = 0
        self._last = (-1, [])
        self._last_when = -1
