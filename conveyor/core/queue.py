"""A named queue: jobs ordered by creation time, plus the clients blocked on it.

Removal from the middle (ACK, WORKING, DEQUEUE, expiry) is lazy: the job's state says
whether an entry is live, and entries are compacted when the stale ones outnumber the
live ones. This keeps every queue operation O(1) for the common FIFO case at 8 bytes
an entry, where a heap of tuples would cost ~64.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

from conveyor.core.imports import ImportStats
from conveyor.core.job import QUEUED, Job

if TYPE_CHECKING:
    from conveyor.core.waiters import Waiter

PAUSE_NONE = 0
PAUSE_IN = 1
PAUSE_OUT = 2
PAUSE_ALL = PAUSE_IN | PAUSE_OUT
PAUSE_NAMES = {PAUSE_NONE: b"none", PAUSE_IN: b"in", PAUSE_OUT: b"out", PAUSE_ALL: b"all"}

# Below this many entries compaction is not worth the bother.
_COMPACT_SLACK = 32


def _ctime_of(job: Job) -> int:
    return job.ctime


class JobQueue:
    __slots__ = (
        "atime_ms",
        "blocked",
        "count",
        "ctime_ms",
        "entries",
        "gc_armed",
        "imports",
        "jobs_in",
        "jobs_out",
        "name",
        "pause",
        "waiters",
    )

    def __init__(self, name: bytes, now_ms: int) -> None:
        self.name = name
        self.entries: deque[Job] = deque()
        self.count = 0  # live (queued) jobs; entries may also hold stale references
        self.ctime_ms = now_ms
        self.atime_ms = now_ms
        self.jobs_in = 0
        self.jobs_out = 0
        self.pause = PAUSE_NONE
        self.waiters: deque[Waiter] = deque()
        self.blocked = 0  # live waiters in `waiters`
        self.gc_armed = False
        self.imports: ImportStats | None = None  # once it needed jobs from other nodes

    def _is_live(self, job: Job) -> bool:
        return job.state == QUEUED and job.queue == self.name

    def admit(self, job: Job, now_ms: int) -> None:
        """The one way into a queue: the job becomes QUEUED and is filed in creation-time
        order (the engine then files its expiry timer)."""
        job.state = QUEUED
        job.qtime = 0
        self.atime_ms = now_ms
        entries = self.entries
        ctime = job.ctime
        if not entries or entries[-1].ctime <= ctime:
            entries.append(job)
        elif entries[0].ctime >= ctime:
            # Re-queued jobs are usually the oldest, so this is the common out-of-order case.
            entries.appendleft(job)
        else:
            entries.insert(bisect.bisect_right(entries, ctime, key=_ctime_of), job)
        self.count += 1
        self.jobs_in += 1

    def admit_new(self, jobs: list[Job], now_ms: int) -> None:
        """admit for new jobs in creation-time order (a run of ADDJOBs), QUEUED already."""
        entries = self.entries
        if entries and entries[-1].ctime > jobs[0].ctime:
            for job in jobs:  # an older job requeued meanwhile: each finds its place
                self.admit(job, now_ms)
            return
        entries.extend(jobs)
        self.atime_ms = now_ms
        self.count += len(jobs)
        self.jobs_in += len(jobs)

    def pop(self) -> Job | None:
        """Take the oldest live job out of the queue entries (the caller changes its state)."""
        entries = self.entries
        while entries:
            job = entries.popleft()
            if job.state == QUEUED and job.queue == self.name:
                self.count -= 1
                self.jobs_out += 1
                return job
        return None

    def forget(self) -> None:
        """A live job was taken out of this queue by some means other than pop()."""
        self.count -= 1
        if len(self.entries) > 2 * self.count + _COMPACT_SLACK:
            self._compact()

    def _compact(self) -> None:
        seen: set[int] = set()
        live: deque[Job] = deque()
        for job in self.entries:
            if self._is_live(job) and id(job) not in seen:
                seen.add(id(job))
                live.append(job)
        self.entries = live

    def live_jobs(self, newest_first: bool = False) -> Iterator[Job]:
        """The queued jobs in delivery order (or reversed), each once."""
        seen: set[int] = set()
        source = reversed(self.entries) if newest_first else iter(self.entries)
        for job in source:
            if self._is_live(job) and id(job) not in seen:
                seen.add(id(job))
                yield job

    def is_collectable(self) -> bool:
        return self.count == 0 and self.blocked == 0 and self.pause == PAUSE_NONE
