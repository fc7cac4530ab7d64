"""Clients blocked in GETJOB (the blocking half of queue.c).

Owns the waiters filed on each queue and `blocked_clients`. A waiter is live until it
is answered, times out or its client goes; at that moment it leaves every queue's list
and its timeout entry is cancelled, so neither a queue nor the timers keep a finished
waiter (or the connection it points to) alive, however many GETJOBs come and go.
"""

from __future__ import annotations

from collections import deque

from conveyor.core.effects import WokenGetJob
from conveyor.core.queue import JobQueue
from conveyor.core.state import CoreState
from conveyor.core.waiters import Waiter


class BlockingMixin(CoreState):
    def block(self, waiter: Waiter, now_ms: int) -> None:
        """Register a client that found nothing; it is answered through `replies`."""
        for name in waiter.queues:
            queue = self.queue_for(name, now_ms)
            queue.waiters.append(waiter)
            queue.blocked += 1
        self.blocked_clients += 1
        if waiter.deadline_ms:
            waiter.timer = self.timers.call_at(waiter.deadline_ms, self._waiter_timeout, waiter)

    def unblock(self, waiter: Waiter, now_ms: int) -> None:
        """The client was answered or went away: forget it everywhere."""
        if waiter.done:
            return
        waiter.done = True
        self.blocked_clients -= 1
        self._cancel_timeout(waiter)
        for name in waiter.queues:
            queue = self.queues.get(name)
            if queue is not None:
                self._leave_waiters(queue, waiter, now_ms)

    def _cancel_timeout(self, waiter: Waiter) -> None:
        if waiter.timer is not None:
            self.timers.cancel(waiter.timer)
            waiter.timer = None

    def _leave_waiters(self, queue: JobQueue, waiter: Waiter, now_ms: int) -> None:
        queue.blocked -= 1
        waiters = queue.waiters
        if waiters and waiters[0] is waiter:
            # The usual case: the oldest waiter is served or times out first. A client
            # naming a queue twice is filed twice, side by side.
            while waiters and waiters[0] is waiter:
                waiters.popleft()
        else:
            _remove_all(waiters, waiter)
        if not queue.blocked:
            self._arm_queue_gc(queue, now_ms)

    def _waiter_timeout(self, waiter: Waiter, now_ms: int) -> None:
        waiter.timer = None  # the entry has just been popped
        if not waiter.done:
            self.unblock(waiter, now_ms)
            self.replies.append(WokenGetJob(waiter, None))

    def _serve_waiters(self, queue: JobQueue, now_ms: int) -> None:
        # Arrival order: the oldest waiter on this queue is served first.
        while queue.count and queue.blocked:
            waiter = queue.waiters[0]
            self.unblock(waiter, now_ms)
            jobs = self.get_jobs(waiter.queues, waiter.count, now_ms)
            self.replies.append(WokenGetJob(waiter, jobs))


def _remove_all(waiters: deque[Waiter], waiter: Waiter) -> None:
    # A C-speed scan; only a waiter leaving out of arrival order gets here.
    while True:
        try:
            waiters.remove(waiter)
        except ValueError:
            return
